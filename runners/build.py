"""Stage 1.4-1.6: build one release artifact per revision, contained, and record what it is and how it was built.

Pull-request code runs during a build (`build.rs`, proc macros), so everything cargo does for a revision runs in
that revision's own sandbox (runners/exec/sandbox.py): only its worktree and its own cargo home are writable, there is
no network, and nothing it starts survives the build. Dependencies come first from `cargo fetch --locked`, the one
sandbox with network (its own namespace behind pasta, fenced off the host and private ranges), which reads nothing
the pull request chose: it runs from outside the worktree (`--manifest-path`, so no `.cargo/config*` or
`rust-toolchain*` of the PR applies) with the toolchain the bot resolved (`RUSTUP_TOOLCHAIN`) and a cargo home
whose only config is the bot's, checked unchanged after every cargo start and recorded in the settings. What
the trusted side reads of the PR's tree (cargo configs, toolchain files, the manifest) comes from git objects at
the pinned SHA, never through the worktree, so a committed symlink is never followed. The executable is located
from cargo's JSON messages (never by globbing `target/`), must lie inside the worktree, and is copied by the
trusted process into the campaign store (root-owned, mode 0555, never bound writable into a sandbox) before it is
hashed. With a build cache (runners/exec/build_cache.py) the arm's key is computed once its settings and feature
closure are known, before any fetch: a hit copies the cached binary in and no fetch or compile runs. A baseline
is stored once built; a candidate only once its size gate passed (`store_candidate`), so a pull request's
bloated binary never reaches the cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import BinaryIO

from runners.exec.build_cache import BuildKey, CampaignCache, Lookup, build_key
from runners.exec.sandbox import Run, Sandbox, SandboxUnavailable, sha256_of, toml_rustflags
from runners.exec.untrusted import UntrustedFileError, read_bytes
from runners.schema.config import BuildConfig
from runners.schema.report import Arm, Artifact, BuildCacheRecord, BuildSettings, GateVerdict, SizeGate, Toolchain
from runners.stages.revisions import RevisionError, git, git_dir_of, revision_file
from runners.stages.sizes import text_size

OUTPUT_TAIL_CHARS = 3000
CARGO_CONFIG_NAMES = (".cargo/config", ".cargo/config.toml")
TOOLCHAIN_FILE_NAMES = ("rust-toolchain", "rust-toolchain.toml")
BOT_CARGO_CONFIG = (b"# Written by kv-parity-bot: the only cargo configuration the dependency fetch reads.\n"
                    b"[net]\nretry = 2\n")
CARGO_HOME_CONFIG_KEY = "$CARGO_HOME/config.toml"
"""The bot's cargo-home config in `settings.cargo_config_sha256`, next to the worktree's own configs."""
CARGO_HOME_UNEXPECTED = ("config", "credentials", "credentials.toml")
"""Files in a cargo home that cargo would read as configuration or tokens: none may appear."""
CANDIDATE_AWAITS_SIZE_GATE = "a candidate is stored only once its size gate passed, and the gate had not run"
"""A candidate's `not_stored` from its compile until `store_candidate` says what became of it."""


class BuildError(RuntimeError):
    """A build that failed or produced no usable artifact: a one-line reason, the raw output kept apart."""

    def __init__(self, reason: str, output_tail: str = "") -> None:
        super().__init__(reason)
        self.output_tail = output_tail


class ProtocolMismatch(BuildError):
    """The revision no longer has what the protocol names: stop and update the protocol, never guess."""


def toolchain() -> Toolchain:
    """The host toolchain the bot itself sees (trusted, outside any worktree); per-arm settings are separate."""

    def version(argv: list[str]) -> str:
        completed = subprocess.run(argv, capture_output=True, text=True, check=False)
        if completed.returncode != 0:
            raise BuildError(f"{' '.join(argv)} failed (exit {completed.returncode})", completed.stderr[-500:])
        return completed.stdout.strip()

    verbose = version(["rustc", "-vV"])
    host = next((line.split(":", 1)[1].strip() for line in verbose.splitlines() if line.startswith("host:")), "")
    return Toolchain(rustc=verbose.splitlines()[0], cargo=version(["cargo", "--version"]),
                     rustflags=os.environ.get("RUSTFLAGS", ""), host=host)


@cache
def fetch_toolchain() -> str | None:
    """The rustup toolchain the bot itself resolves outside any worktree (None without rustup): the fetch runs
    with exactly this one, whatever `rust-toolchain.toml` the pull request commits."""
    if shutil.which("rustup") is None:
        return None
    completed = subprocess.run(["rustup", "show", "active-toolchain"], capture_output=True, text=True, check=False,
                               cwd="/")
    if completed.returncode != 0 or not completed.stdout.strip():
        raise BuildError("rustup show active-toolchain failed outside any worktree (exit "
                         f"{completed.returncode}); set a default toolchain", completed.stderr[-500:])
    return completed.stdout.split()[0]


class ArmBuild:
    """Every cargo invocation for one arm's worktree, each in a fresh sandbox of the same shape."""

    def __init__(self, tree: Path, arm: Arm, sha: str, config: BuildConfig, sandbox: Sandbox,
                 cargo_home: Path) -> None:
        self.tree = tree.resolve()
        self.arm = arm
        self.sha = sha
        self.workspace_path = Path(config.workspace_dir)
        # Read now, before the tree (and, for a plain repository, its .git) is handed to the sandbox user.
        git_dir = git_dir_of(self.tree)
        self.files = {relative: self._read_revision(git_dir, relative) for relative in self._trusted_paths()}
        self.tree_sha = git(git_dir, "rev-parse", "--verify", f"{sha}^{{tree}}")
        """The revision's git tree (before any patch): what the build cache keys on."""
        self.config = config
        self.sandbox = sandbox
        self.workspace = self.tree / config.workspace_dir
        self.cargo_home = cargo_home.resolve()
        self.rustflags = os.environ.get("RUSTFLAGS", "")

    def _run(self, argv: list[str]) -> tuple[int, str, str]:
        """An offline cargo start in the workspace (the PR's configs and toolchain file apply, and are recorded)."""
        git_file = self.tree / ".git"
        # The worktree is writable, its `.git` pointer is not (read-only binds are laid over writable ones).
        return self._start(Run(argv=argv, cwd=self.workspace, toolchain=True, proc=True, env=self._env(),
                               writable=(self.tree, self.cargo_home),
                               read_only=(git_file,) if git_file.exists() else ()))

    def _env(self) -> dict[str, str]:
        env = {"CARGO_HOME": str(self.cargo_home), "CARGO_TERM_COLOR": "never"}
        if self.rustflags:
            env["RUSTFLAGS"] = self.rustflags
        return env

    def _start(self, run: Run) -> tuple[int, str, str]:
        try:
            completed = self.sandbox.run(run, timeout=3600)
        except FileNotFoundError as exc:
            raise SandboxUnavailable(f"cannot start {run.argv[0]}: {exc}") from exc
        self._check_cargo_home(run.argv)
        return completed.returncode, completed.stdout, completed.stderr

    def _check_cargo_home(self, argv: list[str]) -> None:
        """The cargo home's only configuration is still the bot's: a config or token file a start wrote would
        silently apply to the next cargo start and never show in the recorded settings."""
        try:
            current = read_bytes(self.cargo_home / "config.toml", max_bytes=1 << 16, root=self.cargo_home)
        except (OSError, UntrustedFileError) as exc:
            current = f"unreadable ({exc})".encode()
        planted = [name for name in CARGO_HOME_UNEXPECTED if os.path.lexists(self.cargo_home / name)]
        if current != BOT_CARGO_CONFIG or planted:
            changed = ["config.toml"] if current != BOT_CARGO_CONFIG else []
            raise BuildError(f"`{' '.join(argv[:2])}` for {self.arm} changed its cargo home's configuration "
                             f"({', '.join(changed + planted)}); refusing a build whose settings would not be the "
                             "recorded ones")

    def prepare(self) -> None:
        """Hand the worktree and a fresh cargo home to the sandbox user and write the bot's cargo config."""
        self.cargo_home.mkdir(parents=True, exist_ok=True)
        self.sandbox.hand_over(self.tree, self.cargo_home)
        # Root-owned in a directory the sandbox owns: it can only replace the file, which the check catches.
        (self.cargo_home / "config.toml").write_bytes(BOT_CARGO_CONFIG)

    def fetch_locked(self) -> None:
        """Fetch what the Cargo.lock pins. Without one there is nothing pinned to fetch: the build runs offline
        and a crate with dependencies then fails with cargo's own error, never with a silently resolved set."""
        if self.revision_file(self.workspace_path / "Cargo.lock") is not None:
            self.fetch()

    def fetch(self) -> None:
        """`cargo fetch --locked` with network, reading nothing the pull request chose: cwd is the sandbox's
        private /tmp (no `.cargo/config*` or `rust-toolchain*` above it), the manifest is named by path, the
        toolchain is pinned, the worktree read-only."""
        env = self._env()
        if (pinned := fetch_toolchain()) is not None:
            env["RUSTUP_TOOLCHAIN"] = pinned
        run = Run(argv=["cargo", "fetch", "--locked", "--manifest-path", str(self.workspace / "Cargo.toml")],
                  cwd=Path("/tmp"), network=True, toolchain=True, proc=True, env=env,
                  writable=(self.cargo_home,), read_only=(self.tree,))
        code, _, err = self._start(run)
        if code != 0:
            raise BuildError(f"cargo fetch --locked failed for {self.arm} (exit {code})",
                             err.strip()[-OUTPUT_TAIL_CHARS:])

    def _trusted_paths(self) -> list[str]:
        """Every file of the tree the trusted side reads: the manifest, the lock, configs and toolchain files of
        the workspace directory and each parent inside the tree."""
        paths = [(self.workspace_path / name).as_posix() for name in ("Cargo.toml", "Cargo.lock")]
        for directory in [self.workspace_path, *self.workspace_path.parents]:
            paths += [(directory / name).as_posix() for name in (*CARGO_CONFIG_NAMES, *TOOLCHAIN_FILE_NAMES)]
        return list(dict.fromkeys(paths))

    def _read_revision(self, git_dir: Path, relative: str) -> bytes | None:
        try:
            return revision_file(git_dir, self.sha, relative)
        except RevisionError as exc:
            raise BuildError(f"cannot read {relative} of {self.arm} at {self.sha[:12]}: {exc}") from exc

    def revision_file(self, relative: Path) -> bytes | None:
        """A file of this arm's revision as git objects held it (a committed symlink reads as absent)."""
        return self.files[relative.as_posix()]

    def cargo_config_texts(self) -> list[str]:
        """Every cargo config of the workspace and its parents inside the tree, as text (for `native`)."""
        names = {(directory / name).as_posix() for directory in [self.workspace_path, *self.workspace_path.parents]
                 for name in CARGO_CONFIG_NAMES}
        return [data.decode("utf-8", "replace") for name, data in sorted(self.files.items())
                if name in names and data is not None]

    def feature_closure(self) -> list[str]:
        """Check every configured feature exists in the package manifest and expand what it enables."""
        config = self.config
        code, out, err = self._run(["cargo", "metadata", "--format-version", "1", "--no-deps", "--offline"])
        if code != 0:
            raise BuildError(f"cargo metadata failed for {self.arm} (exit {code})", err.strip()[-OUTPUT_TAIL_CHARS:])
        try:
            packages = [p for p in json.loads(out)["packages"] if p["name"] == config.package]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise BuildError(f"cargo metadata for {self.arm} printed no usable metadata: {exc}") from exc
        if not packages:
            raise ProtocolMismatch(f"package {config.package!r} not found; the protocol needs updating")
        declared: dict[str, list[str]] = packages[0]["features"]
        missing = [f for f in config.features if f not in declared]
        if missing:
            raise ProtocolMismatch(
                f"feature(s) {missing} not in {config.package}'s manifest (has {sorted(declared)}); "
                "the protocol needs updating rather than a guessed replacement"
            )
        closure: set[str] = set()
        pending = list(config.features)
        while pending:
            feature = pending.pop()
            if feature in closure:
                continue
            closure.add(feature)
            pending.extend(dep for dep in declared.get(feature, []) if dep in declared)
        return sorted(closure)

    def settings(self) -> BuildSettings:
        """What applies to this arm, asked of the toolchain inside its own worktree (rust-toolchain.toml counts)."""
        versions = []
        for argv in (["rustc", "-vV"], ["cargo", "-vV"]):
            code, out, err = self._run(argv)
            if code != 0:
                raise BuildError(f"{' '.join(argv)} failed in the {self.arm} worktree (exit {code})",
                                 err.strip()[-OUTPUT_TAIL_CHARS:])
            versions.append(out.strip())
        configs: dict[str, str] = {CARGO_HOME_CONFIG_KEY: hashlib.sha256(BOT_CARGO_CONFIG).hexdigest()}
        flags: dict[str, str] = {}
        toolchains: dict[str, str] = {}
        for directory in [self.workspace_path, *self.workspace_path.parents]:
            for name in CARGO_CONFIG_NAMES:
                relative = (directory / name).as_posix()
                if (data := self.revision_file(Path(relative))) is not None:
                    configs[relative] = hashlib.sha256(data).hexdigest()
                    if (found := toml_rustflags(data)) is not None:
                        flags[relative] = found
            for name in TOOLCHAIN_FILE_NAMES:
                relative = (directory / name).as_posix()
                if (data := self.revision_file(Path(relative))) is not None:
                    toolchains[relative] = hashlib.sha256(data).hexdigest()
        return BuildSettings(rustc=versions[0], cargo=versions[1], rustflags_env=self.rustflags,
                             config_rustflags=flags, cargo_config_sha256=configs,
                             toolchain_file_sha256=toolchains, profile_sha256=self._profile_digest())

    def _profile_digest(self) -> str | None:
        data = self.revision_file(self.workspace_path / "Cargo.toml")
        if data is None:
            raise BuildError(f"{self.arm} workspace has no Cargo.toml (a regular file) at {self.sha[:12]}")
        try:
            manifest = tomllib.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise BuildError(f"{self.arm} workspace Cargo.toml cannot be read: {exc}") from exc
        profile = manifest.get("profile")
        if profile is None:
            return None
        return hashlib.sha256(json.dumps(profile, sort_keys=True).encode()).hexdigest()

    def compile(self, command: list[str]) -> tuple[Path, float]:
        """The configured build command; returns the executable (inside the worktree) and the seconds it took."""
        started = time.monotonic()
        code, out, err = self._run(command)
        seconds = time.monotonic() - started
        if code != 0:
            raise BuildError(f"build of {self.arm} failed (exit {code}); the build output is in the artifact",
                             err.strip()[-OUTPUT_TAIL_CHARS:])
        executable = _executable_from_messages(out, self.config.bench_target).resolve()
        if not executable.is_relative_to(self.tree) or not executable.is_file():
            raise BuildError(f"cargo named {self.arm} executable {executable}, which is not a file inside the "
                             "arm's worktree; refusing it")
        return executable, seconds


@dataclass
class StartedBuild:
    """One arm after everything but its compile (start_build): what finish_build needs to compile and record."""

    build: ArmBuild
    target: Path
    closure: list[str]
    settings: BuildSettings
    command: list[str]
    cache: CampaignCache | None
    key: BuildKey | None
    discarded: str | None


def build_artifact(tree: Path, arm: Arm, sha: str, config: BuildConfig, out_dir: Path, *,
                   sandbox: Sandbox | None = None, cache: CampaignCache | None = None) -> Artifact:
    """Build `tree` once with the configured command in its own sandbox; store and describe the executable.
    With `cache`, the arm is first looked up (a hit runs no fetch or compile) and stored once built."""
    return finish_build(start_build(tree, arm, sha, config, out_dir, sandbox=sandbox, cache=cache))


def start_build(tree: Path, arm: Arm, sha: str, config: BuildConfig, out_dir: Path, *,
                sandbox: Sandbox | None = None, cache: CampaignCache | None = None) -> StartedBuild | Artifact:
    """Everything before the compile: the cargo home, the feature closure, the settings, the cache lookup (a hit
    is the finished artifact) and the fetch. Several arms may start at once: none of it is a build's measured
    time, and each arm has its own worktree, cargo home and sandboxes."""
    sandbox = sandbox or Sandbox.default()
    cargo_home = tree.resolve().parent / f".cargo-home-{tree.name}"
    try:
        build = ArmBuild(tree, arm, sha, config, sandbox, cargo_home)
    except RevisionError as exc:
        raise BuildError(f"{arm} worktree {tree} is not a git worktree: {exc}") from exc
    target = out_dir / f"{arm}-{sha[:12]}-{config.bench_target}"
    with _removed_on_error(cargo_home):
        build.prepare()
        closure = build.feature_closure()
        settings = build.settings()
        command = list(config.command)
        if not any(word.startswith("--message-format") for word in command):
            command.append("--message-format=json-render-diagnostics")
        key = None if cache is None else build_key(
            arm, build.tree_sha, cache.patches, settings, command, closure, config,
            cache.host_for(settings.rustflags_env, *build.cargo_config_texts(), config.model_dump_json()))
        discarded = None
        if cache is not None and key is not None:
            with cache.cache.lookup(key) as found:
                if (reused := _reused(found, key, sha, target)) is not None:
                    shutil.rmtree(cargo_home, ignore_errors=True)
                    return reused
                discarded = found.discarded
        build.fetch_locked()
    return StartedBuild(build=build, target=target, closure=closure, settings=settings, command=command,
                        cache=cache, key=key, discarded=discarded)


def finish_build(started: StartedBuild | Artifact) -> Artifact:
    """The compile, alone (its seconds are the campaign floor's, so never beside another arm's start), then the
    executable stored, described and, with a cache, a baseline stored there (a candidate waits for its size gate:
    `store_candidate`). A start the cache answered is already the artifact. With a cache the arm compiles
    holding its key: a campaign that needs the same build meanwhile waits, then reuses what this one stored,
    instead of compiling it a second time beside it."""
    if isinstance(started, Artifact):
        return started
    if started.cache is None or started.key is None:
        return _compiled(started)
    cache, key = started.cache.cache, started.key
    with cache.building(key):
        with cache.lookup(key) as found:
            if (reused := _reused(found, key, started.build.sha, started.target)) is not None:
                shutil.rmtree(started.build.cargo_home, ignore_errors=True)
                return reused
        artifact = _compiled(started)
        not_stored = (cache.store(key, artifact, started.target, started.cache.campaign_id)
                      if key.arm == "baseline" else CANDIDATE_AWAITS_SIZE_GATE)
    artifact.build_cache = BuildCacheRecord(key_sha256=key.digest(), discarded=started.discarded or found.discarded,
                                            not_stored=not_stored, host=_host(key))
    return artifact


def store_candidate(cache: CampaignCache | None, key: BuildKey | None, artifact: Artifact, binary: Path,
                    sizes: SizeGate | None) -> None:
    """A candidate compiled under `key` enters the cache only once its size gate passed: a binary the gate
    refused never takes a place in the cache, let alone evicts the baselines. Records what happened in the
    artifact's `build_cache`. A candidate the cache served, or a campaign without a cache, has nothing to do."""
    record = artifact.build_cache
    if cache is None or key is None or record is None or record.reused_from is not None:
        return
    if sizes is None or sizes.verdict != GateVerdict.PASS:
        verdict = "did not run" if sizes is None else f"is {sizes.verdict}"
        record.not_stored = f"a candidate is stored only once its size gate passed, and the gate {verdict}"
        return
    record.not_stored = cache.cache.store(key, artifact, binary, cache.campaign_id)


def _compiled(started: StartedBuild) -> Artifact:
    """Compile, store the executable in the campaign store and describe it."""
    build = started.build
    try:
        executable, seconds = build.compile(started.command)
        store_binary(executable, started.target)
    finally:
        shutil.rmtree(build.cargo_home, ignore_errors=True)
    target, config = started.target, build.config
    return Artifact(
        arm=build.arm,
        sha=build.sha,
        features=list(config.features),
        feature_closure=started.closure,
        no_default_features=config.no_default_features,
        build_command=started.command,
        binary_name=target.name,
        binary_sha256=sha256_of(target),
        binary_size=target.stat().st_size,
        text_size=text_size(target),
        build_seconds=round(seconds, 3),
        settings=started.settings,
    )


@contextlib.contextmanager
def _removed_on_error(cargo_home: Path) -> Iterator[None]:
    """A start that fails leaves no cargo home behind (finish_build removes it otherwise)."""
    try:
        yield
    except BaseException:
        shutil.rmtree(cargo_home, ignore_errors=True)
        raise


def _reused(found: Lookup, key: BuildKey, sha: str, target: Path) -> Artifact | None:
    """On a hit, the cached artifact as this campaign's: the binary copied to `target` and re-hashed, with its
    own commit and file name; None on a miss."""
    if found.entry is None or found.binary is None:
        return None
    cached = found.entry.artifact
    store_binary(found.binary, target)
    actual = sha256_of(target)
    if actual != cached.binary_sha256:
        raise BuildError(f"the binary copied from the build cache has SHA-256 {actual}, not the recorded "
                         f"{cached.binary_sha256}; refusing it")
    record = BuildCacheRecord(key_sha256=key.digest(), reused_from=found.entry.campaign_id, host=_host(key))
    return cached.model_copy(update={"sha": sha, "binary_name": target.name, "build_cache": record})


def _host(key: BuildKey) -> str | None:
    return key.host.describe() if key.host is not None else None


def store_binary(executable: Path | BinaryIO, target: Path) -> Path:
    """Copy into the campaign store: a root-owned 0555 file in a 0755 directory no sandbox can write. The
    source is a path, or a file already open (a cache entry's binary, opened without following links)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.parent.chmod(0o755)
    if target.exists():
        target.chmod(0o755)
        target.unlink()
    with contextlib.ExitStack() as stack:
        source = stack.enter_context(executable.open("rb")) if isinstance(executable, Path) else executable
        with target.open("xb") as sink:
            shutil.copyfileobj(source, sink)
    target.chmod(0o555)
    return target


def _executable_from_messages(stdout: str, bench_target: str) -> Path:
    """The `compiler-artifact` message for the bench target whose `executable` is set."""
    found: list[str] = []
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if message["target"]["name"] == bench_target and "bench" in message["target"]["kind"]:
            found.append(message["executable"])
    if len(found) != 1:
        raise BuildError(f"expected one executable for bench target {bench_target!r} in cargo's messages, "
                         f"found {len(found)}")
    return Path(found[0])
