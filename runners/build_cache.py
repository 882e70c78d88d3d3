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

Layout: `<dir>/<key digest>/binary` (0555) and `entry.json` (`CacheEntry`), in a directory owned by the bot's
user with mode 0700 that no sandbox ever binds. An entry is written by the bot (a copy of the binary it already
hashed out of the worktree) in a fresh `.tmp-*` directory (mkdir and O_EXCL files) and renamed into place, so a
reader sees a whole entry or none; every open is relative to the cache directory's descriptor with O_NOFOLLOW,
so a planted link is refused, never followed. A lookup re-hashes the binary against the recorded SHA-256: a
mismatch, a link or an unreadable entry is a miss that deletes the entry and is recorded in the artifact. A key
is compiled under an flock on `.locks/<key digest>`, so campaigns that need the same build at once compile it
once (`BuildCache.building`).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import io
import os
import shutil
import stat
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from pydantic import BaseModel, ConfigDict, ValidationError

from runners.config import BuildConfig
from runners.report import Arm, Artifact, BuildSettings
from runners.sandbox import SandboxKind

KEY_SCHEMA = 2
"""Bumped whenever what determines a build changes meaning, so older entries stop matching (2: the arm)."""
BUILD_CACHE_ENV = "KV_PARITY_BUILD_CACHE"
"""The cache directory a campaign uses when none is given (`--build-cache`); unset: no cache."""
UNSANDBOXED_NO_CACHE = ("build cache not used: with --sandbox none pull-request code runs as the bot and could "
                        "write it; both arms are built")
BINARY = "binary"
LOCKS = ".locks"
"""One lock file per key being compiled (`BuildCache.building`); entries are named by hex digests."""
ENTRY = "entry.json"
MAX_ENTRY_BYTES = 1 << 20
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class BuildCacheError(RuntimeError):
    """The cache directory cannot be used safely (not ours, open to others, a link) or cannot be written."""


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

    def digest(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()


def build_key(arm: Arm, tree: str, patches: dict[str, str], settings: BuildSettings, command: list[str],
              closure: list[str], config: BuildConfig) -> BuildKey:
    """The key of a build, from the same facts its `Artifact` records."""
    return BuildKey(arm=arm, tree=tree, patches=patches, settings=settings, build_command=command,
                    features=list(config.features), feature_closure=closure,
                    no_default_features=config.no_default_features, package=config.package,
                    bench_target=config.bench_target, workspace_dir=config.workspace_dir)


class CacheEntry(BaseModel):
    """`entry.json`: the key it was stored under, the artifact as its build recorded it, who built it."""

    model_config = ConfigDict(extra="forbid")

    key: BuildKey
    artifact: Artifact
    campaign_id: str
    stored_unix: float


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

    def check(self) -> None:
        """Create the directory if needed and refuse it unless it is ours alone (BuildCacheError)."""
        with self._root():
            pass

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
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def store(self, key: BuildKey, artifact: Artifact, binary: Path, campaign_id: str) -> None:
        """Add the entry atomically; one another campaign stored meanwhile is kept (the same key)."""
        name = key.digest()
        entry = CacheEntry(key=key, artifact=artifact, campaign_id=campaign_id, stored_unix=round(time.time(), 3))
        staging = f".tmp-{uuid.uuid4().hex}"
        with self._root() as root:
            try:
                os.mkdir(staging, 0o700, dir_fd=root)
                inner = os.open(staging, DIR_FLAGS, dir_fd=root)
                try:
                    with open(binary, "rb") as source:
                        digest = _write_new(inner, BINARY, source, 0o555)
                    if digest != artifact.binary_sha256:
                        raise BuildCacheError(f"{binary} changed while it was stored in the build cache "
                                              f"(SHA-256 {digest}, recorded {artifact.binary_sha256})")
                    _write_new(inner, ENTRY, io.BytesIO(entry.model_dump_json(indent=1).encode()), 0o444)
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
    """Remove `name` from the cache directory: a link itself, or a directory tree without following links."""
    try:
        info = os.stat(name, dir_fd=root, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(name, dir_fd=root)
    else:
        os.unlink(name, dir_fd=root)


@dataclass(frozen=True)
class CampaignCache:
    """One campaign's use of a cache: its id (an entry's `campaign_id`) and the patches its builds apply."""

    cache: BuildCache
    campaign_id: str
    patches: dict[str, str] = field(default_factory=dict)

    @classmethod
    def for_campaign(cls, directory: Path | None, campaign_id: str, sandbox: SandboxKind) -> CampaignCache | None:
        """None without a directory, or for an unsandboxed campaign (its pull-request code could write it)."""
        if directory is None or sandbox == "none":
            return None
        cache = BuildCache(directory)
        cache.check()
        return cls(cache, campaign_id)
