"""Build cache (issue 22): a tree built once is not built again by the next campaign that needs it as the same arm.

The rule: an entry serves only the arm that built it. A merge base (a tree the bot trusts) is looked up and
stored as the baseline; a pull request's head as the candidate, so a rerun at the same head, or another campaign
whose candidate is the very same tree, compiles nothing. The arm is part of the key, so a binary pull-request
code produced never serves a baseline, not even when its tree is later merged and becomes a base: that base is
built once more, as a baseline. A candidate reused is what that tree's own build produced in its own sandbox
(the key pins every input; the build scripts that ran are the tree's own), and it runs only in the sandbox, as
a fresh build would. A campaign run with `--sandbox none` uses no cache at all: its pull-request code runs as the
bot and could write the cache directory.

An entry is reused only for the same `BuildKey`: the arm, the git tree of the revision, the toolchain as it
applied in that arm's worktree, the build command, features and feature closure, the SHA-256 of every patch
applied, and RUSTFLAGS and every cargo config digest (all of `BuildSettings`, the facts the report records).
Commits that differ only in their metadata share a tree, so they share an entry. The binary is reused byte for
byte; paths it embeds are those of the campaign that built it, which the report names (`Artifact.build_cache`).
The build host (`HostFacts`: the machine and the CPU model and flags of /proc/cpuinfo) joins the key when the
build asks for `native` anywhere (RUSTFLAGS, a cargo config, the campaign's build config: `target-cpu=native`
builds for the CPU it compiles on), and always in a cache declared shared across nodes (`kv-parity cache
--shared`, kept in `limit.json`), so a binary built for one CPU never serves a build on another.

Layout: `<dir>/<key digest>/binary` (0555) and `entry.json` (`CacheEntry`), in a directory owned by the bot's
user with mode 0700 that no sandbox ever binds. An entry is written by the bot (a copy of the binary it already
hashed out of the worktree) in a fresh `.tmp-*` directory (mkdir and O_EXCL files) and renamed into place, so a
reader sees a whole entry or none; every open is relative to the cache directory's descriptor with O_NOFOLLOW,
so a planted link is refused, never followed. A lookup re-hashes the binary against the recorded SHA-256: a
mismatch, a link or an unreadable entry is a miss that deletes the entry and is recorded in the artifact. A key
is compiled under an flock on `.locks/<key digest>`, so campaigns that need the same build at once compile it
once (`BuildCache.building`).

The cache is bounded, as ccache is: `limit.json` in the cache holds the most its entries may take together
(`kv-parity cache --max-size`; 10 GiB when none was set). An entry larger than 1/`ENTRY_SHARE_OF_BOUND` of the
bound is not stored (the arm stays uncached, and the report says why), so one store can delete at most that
share of the cache and the cache never holds fewer than that many entries' worth. Every store then deletes
entries until the rest fit, never the entry just stored: names that are no readable entry first, then
candidates, then baselines (the merge bases every pull request on them reuses), least recently used first within
each (stored or reused longest ago: a reuse touches its entry). A candidate is stored only after its size gate
passed (`runners.stages.build.store_candidate`), so a bloated pull request never reaches the cache at all. An entry
deleted while another campaign is opening it is that campaign's miss, recorded, and its arm is built. What a
writer killed mid-store left (`.tmp-*`, an hour old) is deleted too. A cache on a file system without `flock`
stops the campaign naming the directory (`BuildCache.building`), never with a bare OSError.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import io
import os
import platform
import re
import shutil
import stat
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runners.exec.sandbox import SandboxKind
from runners.schema.config import BuildConfig
from runners.schema.report import Arm, Artifact, BuildSettings

KEY_SCHEMA = 3
"""Bumped whenever what determines a build changes meaning, so older entries stop matching (2: the arm, 3: the
build host for `native` builds and shared caches)."""
BUILD_CACHE_ENV = "KV_PARITY_BUILD_CACHE"
"""The cache directory a campaign uses when none is given (`--build-cache`); unset: no cache."""
UNSANDBOXED_NO_CACHE = ("build cache not used: with --sandbox none pull-request code runs as the bot and could "
                        "write it; both arms are built")
BINARY = "binary"
LOCKS = ".locks"
"""One lock file per key being compiled (`BuildCache.building`); entries are named by hex digests."""
ENTRY = "entry.json"
MAX_ENTRY_BYTES = 1 << 20
LIMIT = "limit.json"
"""The cache's own bound (`CacheLimit`), beside the entries; every store keeps to it."""
DEFAULT_MAX_BYTES = 10 << 30
"""The bound of a cache nobody set one for: 10 GiB, a few hundred builds of a replay benchmark."""
ENTRY_SHARE_OF_BOUND = 8
"""An entry may take at most 1/8 of the bound: one store then deletes at most an eighth of the cache, never every
baseline, and the bound always holds eight entries' worth (a merge base and a candidate for four pull requests
at once). A replay benchmark's binary is tens of MiB, so the default bound takes one of up to 1.25 GiB."""
CPUINFO = Path("/proc/cpuinfo")
NATIVE = re.compile(r"(?<![\w-])native(?![\w-])")
"""`native` as a word of its own (`target-cpu=native`, `-Ctarget-cpu=native`, `tune-cpu=native`)."""
STAGING = ".tmp-"
"""An entry (or the bound) being written: renamed into place whole, or deleted by the writer."""
STALE_STAGING_SECONDS = 3600
"""A staging name older than this was left by a writer killed mid-store (a store takes seconds): pruning deletes
it, or a killed campaign's partial binary would stay for ever."""
PRUNED_FIRST: tuple[Arm | None, ...] = (None, "candidate", "baseline")
"""The order pruning deletes in: names that are no readable entry, then candidates, then baselines."""
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class BuildCacheError(RuntimeError):
    """The cache directory cannot be used safely (not ours, open to others, a link) or cannot be written."""


class HostFacts(BaseModel):
    """What a build for `native` depends on: the machine, and the CPU as /proc/cpuinfo describes every core (a
    hybrid CPU's kinds of core each count)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    machine: str
    """`platform.machine()`: x86_64, aarch64, ..."""
    cpu_model: str
    """Every distinct `model name` (x86) or `CPU implementer`/`CPU part` (Arm) line, sorted and joined."""
    cpu_flags_sha256: str
    """SHA-256 of every distinct `flags` (x86) or `Features` (Arm) set, each sorted: the instructions `native`
    may use."""

    def describe(self) -> str:
        return f"{self.machine}, {self.cpu_model}, CPU flags {self.cpu_flags_sha256[:12]}"


def host_facts(cpuinfo: Path | None = None) -> HostFacts:
    """This host's `HostFacts` (from `cpuinfo`, default CPUINFO). Where it cannot be read, the host's name stands
    in for the CPU, so the key matches nothing built on another host rather than any host with the same machine."""
    cpuinfo = cpuinfo or CPUINFO
    models: set[str] = set()
    flags: set[str] = set()
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        text = ""
        models.add(f"unknown ({cpuinfo}: {exc.strerror or exc}) on host {platform.node()}")
    for block in text.split("\n\n"):
        fields = [line.partition(":") for line in block.splitlines()]
        values = {name.strip().lower(): value.strip() for name, _, value in fields}
        model = values.get("model name") or " ".join(
            f"{name} {values[name]}" for name in ("cpu implementer", "cpu part", "cpu variant") if name in values)
        if model:
            models.add(model)
        found = values.get("flags", values.get("features"))
        if found is not None:
            flags.add(" ".join(sorted(found.split())))
    if not models:
        models.add(f"unknown (no model in {cpuinfo}) on host {platform.node()}")
    digest = hashlib.sha256("\n".join(sorted(flags)).encode()).hexdigest()
    return HostFacts(machine=platform.machine(), cpu_model=" | ".join(sorted(models)), cpu_flags_sha256=digest)


def asks_for_native(*texts: str) -> bool:
    """Whether any of the build's inputs (RUSTFLAGS, a cargo config's text, the build config) names `native`: such
    a build targets the CPU it compiles on. A word `native` anywhere counts, a comment included (a cache miss
    across hosts costs a build; a hit from another CPU would cost a wrong binary)."""
    return any(NATIVE.search(text) for text in texts)


class BuildKey(BaseModel):
    """Everything that determines one build's binary; equal keys build the same binary."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = KEY_SCHEMA
    arm: Arm
    """The arm that built the entry and the only one it serves: a candidate's binary never serves a baseline."""
    tree: str
    """`git rev-parse SHA^{tree}` of the revision, before the patches below are applied."""
    patches: dict[str, str]
    """SHA-256 of every patch applied to the worktree, by purpose (determinism, harness)."""
    settings: BuildSettings
    """The toolchain as it applied in the arm's worktree, RUSTFLAGS, cargo config and profile digests."""
    build_command: list[str]
    features: list[str]
    feature_closure: list[str]
    no_default_features: bool
    package: str
    bench_target: str
    workspace_dir: str
    host: HostFacts | None = None
    """The build host, when the build asks for `native` or the cache is shared across nodes (else None)."""

    def digest(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()


def build_key(arm: Arm, tree: str, patches: dict[str, str], settings: BuildSettings, command: list[str],
              closure: list[str], config: BuildConfig, host: HostFacts | None = None) -> BuildKey:
    """The key of a build, from the same facts its `Artifact` records (and the host, where it matters)."""
    return BuildKey(arm=arm, tree=tree, patches=patches, settings=settings, build_command=command,
                    features=list(config.features), feature_closure=closure,
                    no_default_features=config.no_default_features, package=config.package,
                    bench_target=config.bench_target, workspace_dir=config.workspace_dir, host=host)


class CacheEntry(BaseModel):
    """`entry.json`: the key it was stored under, the artifact as its build recorded it, who built it."""

    model_config = ConfigDict(extra="forbid")

    key: BuildKey
    artifact: Artifact
    campaign_id: str
    stored_unix: float


class CacheLimit(BaseModel):
    """`limit.json`: the most bytes the entries may hold together, and whether the cache is shared across nodes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_bytes: int | None = Field(default=None, gt=0)
    """None: DEFAULT_MAX_BYTES (a cache only declared shared)."""
    shared: bool = False
    """Declared shared across nodes (`kv-parity cache --shared`): every key then holds the build host."""

    @property
    def bound(self) -> int:
        return self.max_bytes if self.max_bytes is not None else DEFAULT_MAX_BYTES


@dataclass(frozen=True)
class EntryUsage:
    """One name in the cache as pruning sees it: its bytes, when it was last stored or reused, and the arm its
    entry serves (None for anything that is not a readable entry, which is pruned like one)."""

    name: str
    bytes: int
    used_unix: float
    arm: Arm | None


@dataclass(frozen=True)
class CacheUsage:
    """What `kv-parity cache` shows: every entry, least recently used first, and the bound."""

    directory: Path
    entries: list[EntryUsage]
    max_bytes: int
    shared: bool = False

    def summary(self) -> str:
        arms = [entry.arm for entry in self.entries]
        counts = ", ".join(f"{arms.count(arm)} {arm}" for arm in ("baseline", "candidate"))
        unreadable = len(arms) - arms.count("baseline") - arms.count("candidate")
        extra = f", {unreadable} unreadable" if unreadable else ""
        entries = f"{len(self.entries)} {'entry' if len(self.entries) == 1 else 'entries'}"
        shared = ", shared across nodes (every key holds the build host)" if self.shared else ""
        return (f"build cache {self.directory}: {entries} ({counts}{extra}), "
                f"{human_bytes(sum(entry.bytes for entry in self.entries))} of {human_bytes(self.max_bytes)}"
                f"{shared}")


SIZE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
_SIZE = re.compile(r"(\d+)\s*(?:([KMGT])(?:i?B)?|B)?", re.IGNORECASE)


def human_bytes(count: int) -> str:
    """Bytes in the largest power-of-1024 unit that keeps the number at least 1."""
    value, unit = float(count), 0
    while value >= 1024 and unit < len(SIZE_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{count} B" if unit == 0 else f"{value:.1f} {SIZE_UNITS[unit]}"


def parse_size(text: str) -> int:
    """`10G`, `512MiB`, `1000` (bytes): a positive size in powers of 1024; ValueError naming the forms."""
    match = _SIZE.fullmatch(text.strip())
    if match is None or int(match[1]) == 0:
        raise ValueError(f"size {text!r}: expected a positive whole number of bytes, or one with K, M, G or T "
                         "(powers of 1024), e.g. 10G")
    return int(match[1]) << (10 * " KMGT".index((match[2] or " ").upper()))


@dataclass
class Lookup:
    """A hit (`entry` and its verified `binary`, open at offset 0) or a miss, with why an entry was dropped."""

    entry: CacheEntry | None = None
    binary: BinaryIO | None = None
    discarded: str | None = None


def configured_dir() -> Path | None:
    """`--build-cache`'s default: $KV_PARITY_BUILD_CACHE, else no cache (a one-off run builds both arms)."""
    value = os.environ.get(BUILD_CACHE_ENV, "")
    return Path(value) if value else None


class BuildCache:
    """One cache directory; every operation opens it afresh and checks it is still ours alone."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory.absolute()

    @contextmanager
    def _root(self) -> Iterator[int]:
        try:
            self.directory.parent.mkdir(parents=True, exist_ok=True)
            with suppress(FileExistsError):
                os.mkdir(self.directory, 0o700)
            fd = os.open(self.directory, DIR_FLAGS)
        except OSError as exc:
            raise BuildCacheError(f"build cache {self.directory} cannot be opened as a directory (a link is "
                                  f"refused): {exc.strerror or exc}") from exc
        try:
            info = os.fstat(fd)
            if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o077:
                raise BuildCacheError(
                    f"build cache {self.directory} is owned by uid {info.st_uid} with mode "
                    f"{stat.S_IMODE(info.st_mode):04o}; it must be this user's ({os.geteuid()}) with mode 0700")
            yield fd
        finally:
            os.close(fd)

    def check(self) -> CacheLimit:
        """Create the directory if needed and refuse it unless it is ours alone, or its bound is unreadable
        (BuildCacheError): before a campaign builds anything, not when it stores. Returns its `limit.json`."""
        with self._root() as root:
            return self._limit(root)

    def usage(self) -> CacheUsage:
        """Every entry, least recently used first, and the bound."""
        with self._root() as root:
            limit = self._limit(root)
            return CacheUsage(self.directory, self._entries(root), limit.bound, limit.shared)

    def set_limit(self, max_bytes: int) -> list[EntryUsage]:
        """Keep `max_bytes` as the cache's bound (in the cache, as ccache keeps its max_size) and prune to it
        now; returns what was deleted."""
        with self._root() as root:
            limit = self._limit(root).model_copy(update={"max_bytes": max_bytes})
            self._write_limit(root, limit)
            return self._prune(root, limit.bound, keep=None)

    def declare_shared(self, shared: bool) -> None:
        """Keep in `limit.json` whether the cache is shared across nodes (its bound stays as it is): a shared
        cache keys every build on the host that built it."""
        with self._root() as root:
            self._write_limit(root, self._limit(root).model_copy(update={"shared": shared}))

    def _write_limit(self, root: int, limit: CacheLimit) -> None:
        staging = f"{STAGING}{uuid.uuid4().hex}"
        try:
            _write_new(root, staging, io.BytesIO(limit.model_dump_json(exclude_defaults=True).encode()), 0o444)
            os.rename(staging, LIMIT, src_dir_fd=root, dst_dir_fd=root)
        except OSError as exc:
            raise BuildCacheError(f"cannot write {LIMIT} in build cache {self.directory}: "
                                  f"{exc.strerror or exc}") from exc
        finally:
            _delete(root, staging)

    @contextmanager
    def lookup(self, key: BuildKey) -> Iterator[Lookup]:
        """The entry stored under `key` with its binary re-hashed, or a miss; a bad entry is deleted."""
        name = key.digest()
        with self._root() as root:
            discarded = None
            try:
                try:
                    found = _read_entry(root, name, key)
                except _Refused as refused:
                    found, discarded = None, str(refused)
                    _delete(root, name)
            except OSError as exc:
                raise BuildCacheError(f"cannot read {name[:12]} in build cache {self.directory}: "
                                      f"{exc.strerror or exc}") from exc
            if found is None:
                yield Lookup(discarded=discarded)
                return
            entry, binary = found
            with suppress(OSError):  # pruning keeps what was reused lately; deleted meanwhile, this hit stands
                os.utime(name, dir_fd=root, follow_symlinks=False)
            try:
                yield Lookup(entry=entry, binary=binary)
            finally:
                binary.close()

    @contextmanager
    def building(self, key: BuildKey) -> Iterator[None]:
        """Held while this process compiles `key`'s tree (an exclusive flock on `.locks/<key digest>`): a
        campaign that needs the same tree meanwhile waits here, then finds the entry stored. The lock goes with
        the descriptor, so a process that dies mid-build releases it."""
        name = key.digest()
        with self._root() as root:
            try:
                with suppress(FileExistsError):
                    os.mkdir(LOCKS, 0o700, dir_fd=root)
                locks = os.open(LOCKS, DIR_FLAGS, dir_fd=root)
                try:
                    fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=locks)
                finally:
                    os.close(locks)
            except OSError as exc:
                raise BuildCacheError(f"cannot open the lock of {name[:12]} in build cache {self.directory} (a "
                                      f"link is refused): {exc.strerror or exc}") from exc
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as exc:
                raise BuildCacheError(
                    f"build cache {self.directory} cannot be locked (flock on {LOCKS}/{name[:12]}: "
                    f"{exc.strerror or exc}): its file system does not support flock, which keeps two campaigns "
                    "from compiling the same build at once; put the cache on a file system that does (a local "
                    "disk; NFSv4, or Lustre mounted with `flock`), or run without a build cache") from exc
            yield
        finally:
            os.close(fd)

    def store(self, key: BuildKey, artifact: Artifact, binary: Path, campaign_id: str) -> str | None:
        """Add the entry atomically (one another campaign stored meanwhile is kept: the same key), then prune to
        the bound. Returns why it was not stored (larger than its share of the bound), or None once stored."""
        name = key.digest()
        entry = CacheEntry(key=key, artifact=artifact, campaign_id=campaign_id, stored_unix=round(time.time(), 3))
        entry_json = entry.model_dump_json(indent=1).encode()
        staging = f"{STAGING}{uuid.uuid4().hex}"
        with self._root() as root:
            bound = self._limit(root).bound
            size = artifact.binary_size + len(entry_json)  # the binary's own, or the digest below refuses it
            if size > bound // ENTRY_SHARE_OF_BOUND:
                return (f"the entry would take {human_bytes(size)}, more than 1/{ENTRY_SHARE_OF_BOUND} of the build "
                        f"cache's bound of {human_bytes(bound)} (storing it could delete that much of the cache); "
                        f"a bound of at least {human_bytes(size * ENTRY_SHARE_OF_BOUND)} (`kv-parity cache "
                        "--max-size`) caches it")
            try:
                os.mkdir(staging, 0o700, dir_fd=root)
                inner = os.open(staging, DIR_FLAGS, dir_fd=root)
                try:
                    with open(binary, "rb") as source:
                        digest = _write_new(inner, BINARY, source, 0o555)
                    if digest != artifact.binary_sha256:
                        raise BuildCacheError(f"{binary} changed while it was stored in the build cache "
                                              f"(SHA-256 {digest}, recorded {artifact.binary_sha256})")
                    _write_new(inner, ENTRY, io.BytesIO(entry_json), 0o444)
                    os.fsync(inner)
                finally:
                    os.close(inner)
                try:
                    os.rename(staging, name, src_dir_fd=root, dst_dir_fd=root)
                except OSError as exc:
                    if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                        raise
            except OSError as exc:
                raise BuildCacheError(f"cannot store {name[:12]} in build cache {self.directory}: "
                                      f"{exc.strerror or exc}") from exc
            finally:
                _delete(root, staging)
            self._prune(root, bound, keep=name)
        return None

    def _limit(self, root: int) -> CacheLimit:
        """What `limit.json` holds, or the defaults (DEFAULT_MAX_BYTES, not shared) without one."""
        try:
            os.stat(LIMIT, dir_fd=root, follow_symlinks=False)
        except FileNotFoundError:
            return CacheLimit()
        try:
            with _open_file(root, LIMIT) as handle:
                return CacheLimit.model_validate_json(handle.read(MAX_ENTRY_BYTES))
        except (_Refused, ValidationError, OSError) as exc:
            detail = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            raise BuildCacheError(f"build cache {self.directory}: {LIMIT} is not a bound ({detail}); set one with "
                                  "`kv-parity cache --max-size SIZE`") from exc

    def _entries(self, root: int) -> list[EntryUsage]:
        """Every name but the bound and the dot-names (locks, entries being stored), least recently used first."""
        entries = []
        for name in os.listdir(root):
            if name.startswith(".") or name == LIMIT:
                continue
            with suppress(FileNotFoundError):  # pruned or refused by another campaign meanwhile
                info = os.stat(name, dir_fd=root, follow_symlinks=False)
                size, arm = (_entry_size_and_arm(root, name) if stat.S_ISDIR(info.st_mode)
                             else (info.st_size, None))
                entries.append(EntryUsage(name, size, info.st_mtime, arm))
        return sorted(entries, key=lambda entry: (entry.used_unix, entry.name))

    def _prune(self, root: int, max_bytes: int, keep: str | None) -> list[EntryUsage]:
        """Delete stale staging names, then names until the rest fit `max_bytes`, never `keep`: what is no readable
        entry first, then candidates, then baselines, least recently used first within each."""
        for name in os.listdir(root):
            if name.startswith(STAGING):
                with suppress(FileNotFoundError):  # its writer renamed or removed it meanwhile
                    age = time.time() - os.stat(name, dir_fd=root, follow_symlinks=False).st_mtime
                    if age > STALE_STAGING_SECONDS:
                        _delete(root, name)
        entries = self._entries(root)
        total = sum(entry.bytes for entry in entries)
        deleted = []
        for entry in sorted(entries, key=lambda entry: PRUNED_FIRST.index(entry.arm)):  # stable: LRU within each
            if total <= max_bytes:
                break
            if entry.name == keep:
                continue
            try:
                _delete(root, entry.name)
            except OSError as exc:
                raise BuildCacheError(f"cannot delete {entry.name[:12]} from build cache {self.directory}: "
                                      f"{exc.strerror or exc}") from exc
            total -= entry.bytes
            deleted.append(entry)
        return deleted


class _Refused(Exception):
    """An entry that must not be used: the message says why; the caller deletes it."""


def _read_entry(root: int, name: str, key: BuildKey) -> tuple[CacheEntry, BinaryIO] | None:
    try:
        directory = os.open(name, DIR_FLAGS, dir_fd=root)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _Refused(f"cache entry {name[:12]} is not a directory of the cache (a link?): {exc.strerror}") from exc
    try:
        with _open_file(directory, ENTRY) as handle:
            raw = handle.read(MAX_ENTRY_BYTES + 1)
        if len(raw) > MAX_ENTRY_BYTES:
            raise _Refused(f"cache entry {name[:12]}: {ENTRY} is larger than {MAX_ENTRY_BYTES} bytes")
        try:
            entry = CacheEntry.model_validate_json(raw)
        except ValidationError as exc:
            raise _Refused(f"cache entry {name[:12]}: {ENTRY} is not a cache entry: {exc.errors()[0]['msg']}") from exc
        if entry.key != key:
            raise _Refused(f"cache entry {name[:12]} was stored under another key")
        binary = _open_file(directory, BINARY)
        digest = hashlib.sha256()
        for block in iter(lambda: binary.read(1 << 20), b""):
            digest.update(block)
        if digest.hexdigest() != entry.artifact.binary_sha256:
            binary.close()
            raise _Refused(f"cached binary {name[:12]} has SHA-256 {digest.hexdigest()}, its entry records "
                           f"{entry.artifact.binary_sha256} (built by campaign {entry.campaign_id})")
        binary.seek(0)
        return entry, binary
    finally:
        os.close(directory)


def _entry_size_and_arm(root: int, name: str) -> tuple[int, Arm | None]:
    """The bytes of an entry's files (never following a link) and the arm its entry.json names, if readable."""
    try:
        directory = os.open(name, DIR_FLAGS, dir_fd=root)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise  # gone meanwhile: no longer a name in the cache
        return 0, None  # not a directory this user can read: pruned like any other name
    try:
        size = sum(os.stat(inner, dir_fd=directory, follow_symlinks=False).st_size for inner in os.listdir(directory))
        try:
            with _open_file(directory, ENTRY) as handle:
                arm: Arm | None = CacheEntry.model_validate_json(handle.read(MAX_ENTRY_BYTES)).key.arm
        except (_Refused, ValidationError, OSError):
            arm = None
        return size, arm
    finally:
        os.close(directory)


def _open_file(directory: int, name: str) -> BinaryIO:
    """A regular file of ours, with no other name, opened without following a link."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
    except OSError as exc:
        raise _Refused(f"{name} cannot be opened (a link is refused): {exc.strerror}") from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_nlink != 1:
        os.close(fd)
        raise _Refused(f"{name} is not a regular file of this user's with a single name")
    return os.fdopen(fd, "rb")


def _write_new(directory: int, name: str, source: BinaryIO, mode: int) -> str:
    """Copy `source` into a new file (O_EXCL, never through a link); returns its SHA-256."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=directory)
    digest = hashlib.sha256()
    with os.fdopen(fd, "wb") as sink:
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
            sink.write(block)
        sink.flush()
        os.fchmod(sink.fileno(), mode)
        os.fsync(sink.fileno())
    return digest.hexdigest()


def _delete(root: int, name: str) -> None:
    """Remove `name` from the cache directory: a link itself, or a directory tree without following links. A name
    that is gone, or goes while it is removed (another campaign's store pruning the same entry), is removed."""
    with suppress(FileNotFoundError):
        if stat.S_ISDIR(os.stat(name, dir_fd=root, follow_symlinks=False).st_mode):
            shutil.rmtree(name, dir_fd=root)
        else:
            os.unlink(name, dir_fd=root)


@dataclass(frozen=True)
class CampaignCache:
    """One campaign's use of a cache: its id (an entry's `campaign_id`), the patches its builds apply, and
    whether the cache is declared shared across nodes (every key then holds the build host)."""

    cache: BuildCache
    campaign_id: str
    patches: dict[str, str] = field(default_factory=dict)
    shared: bool = False

    @classmethod
    def for_campaign(cls, directory: Path | None, campaign_id: str, sandbox: SandboxKind) -> CampaignCache | None:
        """None without a directory, or for an unsandboxed campaign (its pull-request code could write it)."""
        if directory is None or sandbox == "none":
            return None
        cache = BuildCache(directory)
        return cls(cache, campaign_id, shared=cache.check().shared)

    def host_for(self, *inputs: str) -> HostFacts | None:
        """The host facts a build's key holds: always in a shared cache, else when an input asks for `native`."""
        return host_facts() if self.shared or asks_for_native(*inputs) else None
