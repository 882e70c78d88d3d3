"""The one place pull-request code is started: builds, harness processes and exception regression tests.

Everything a pull request controls (`build.rs`, proc macros, the harness, its regression tests) runs inside a
bubblewrap sandbox: new pid, network, IPC, UTS and cgroup namespaces, a filesystem made only of read-only
system directories, the toolchain, and exactly the paths the caller names (read-only or writable), an
allow-listed environment, and - when the bot runs as root - the unprivileged uid 65534 with no capabilities
(`setpriv`). The pid namespace with `--die-with-parent` means nothing the code starts (a `setsid` daemon
included) outlives the process the bot waits for. `none` runs the same argv unsandboxed, loudly and on record.

Binaries are pinned to their SHA-256 here too: every start whose argv names a pinned binary re-hashes it first,
so a swapped binary stops the row instead of running.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from runners.report import Arm, SandboxRecord

SANDBOX_UID = 65534
"""`nobody`: owns nothing of the bot's, so only the writable binds are writable."""
SandboxKind = Literal["bwrap", "none"]
SANDBOX_KINDS: tuple[SandboxKind, ...] = ("bwrap", "none")
TOOLCHAIN_ROOT = Path("/opt/kv-parity")
"""Neutral mount point for the host toolchain (rustup proxies and RUSTUP_HOME usually live under 0700 /root)."""
SYSTEM_ETC = ("ld.so.cache", "alternatives", "passwd", "group", "nsswitch.conf", "localtime")
"""The /etc entries a build or harness needs; never all of /etc, which may hold the App key and settings."""
NETWORK_ETC = ("resolv.conf", "hosts", "ssl", "ca-certificates", "gai.conf")
"""Added only to the dependency-fetch sandbox, the one sandbox with network."""
SETPRIV_ARGS = ("--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all",
                "--no-new-privs", "--")
NONE_WARNING = ("WARNING: --sandbox none: pull-request code runs as this user, with this environment, network "
                "and filesystem; it can read secrets and forge results. Use only for code you trust.")


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create a sandbox here; the message names the fix."""


class BinaryMismatch(RuntimeError):
    """A pinned binary changed between its build and a start: the row stops, naming the arm and both digests."""

    def __init__(self, arm: Arm, path: Path, expected: str, actual: str) -> None:
        super().__init__(f"{arm} binary {path.name} changed since it was built: recorded SHA-256 {expected}, "
                         f"now {actual}; refusing to start it")
        self.arm = arm


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Toolchain:
    """Where the host's cargo lives and what must be bound for it to work inside the sandbox."""

    bin_dir: Path
    rustup_home: Path | None

    @classmethod
    def detect(cls) -> Toolchain:
        cargo = shutil.which("cargo")
        if cargo is None:
            raise SandboxUnavailable("cargo is not on PATH; install a Rust toolchain (rustup) for the bot's user")
        rustup_home = Path(os.environ.get("RUSTUP_HOME") or Path.home() / ".rustup")
        return cls(bin_dir=Path(cargo).parent, rustup_home=rustup_home if rustup_home.is_dir() else None)

    def binds(self) -> list[tuple[Path, Path]]:
        """(host path, sandbox path): /usr is bound anyway, anything else at a neutral path."""
        binds = [] if self.bin_dir.is_relative_to("/usr") else [(self.bin_dir, TOOLCHAIN_ROOT / "cargo" / "bin")]
        if self.rustup_home is not None:
            binds.append((self.rustup_home, TOOLCHAIN_ROOT / "rustup"))
        return binds

    def env(self) -> dict[str, str]:
        inside = str(TOOLCHAIN_ROOT / "cargo" / "bin") if not self.bin_dir.is_relative_to("/usr") else ""
        env = {"PATH": ":".join(p for p in (inside, "/usr/local/bin", "/usr/bin", "/bin") if p)}
        if self.rustup_home is not None:
            env["RUSTUP_HOME"] = str(TOOLCHAIN_ROOT / "rustup")
        return env


@dataclass(frozen=True)
class Run:
    """One sandboxed start: what it may read, write, see in its environment, and whether it has network."""

    argv: list[str]
    cwd: Path | None = None
    read_only: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    """Bound read-write; the caller hands them over (Sandbox.hand_over) so the sandbox user may write them."""
    env: dict[str, str] = field(default_factory=dict)
    network: bool = False
    toolchain: bool = False
    """Bind the Rust toolchain and set PATH/RUSTUP_HOME for it (builds); harness runs do not need it."""
    proc: bool = False
    """Mount a /proc of the sandbox's own pid namespace (rustc finds its sysroot through /proc/self/exe)."""
    as_pid_1: bool = False
    """The command itself is pid 1 of the namespace (one process to watch, as the perf sampler needs)."""
    info_fd: int | None = None
    """bwrap writes {"child-pid": N} here: the outer pid of the process that becomes the command."""


class Sandbox:
    """Turns a `Run` into the argv and environment that start it contained (or, for `none`, as-is)."""

    def __init__(self, kind: SandboxKind = "bwrap") -> None:
        self.kind = kind
        self.privileged = os.geteuid() == 0
        self._toolchain: Toolchain | None = None
        self._pins: dict[Path, tuple[Arm, str]] = {}

    @classmethod
    def default(cls) -> Sandbox:
        return cls("bwrap")

    @property
    def toolchain(self) -> Toolchain:
        if self._toolchain is None:
            self._toolchain = Toolchain.detect()
        return self._toolchain

    # --- pinned binaries ----------------------------------------------------------------------------------

    def pin(self, path: Path, arm: Arm, sha256: str) -> None:
        """From now on every start naming `path` re-hashes it against `sha256` first."""
        self._pins[path.resolve()] = (arm, sha256)

    def verify_pins(self, argv: list[str]) -> None:
        for word in argv:
            if not word.startswith("/"):
                continue
            pinned = self._pins.get(Path(word))
            if pinned is not None:
                actual = sha256_of(Path(word))
                if actual != pinned[1]:
                    raise BinaryMismatch(pinned[0], Path(word), pinned[1], actual)

    # --- writable paths -----------------------------------------------------------------------------------

    def hand_over(self, *paths: Path) -> None:
        """Make `paths` (recursively) writable by the sandbox user; the bot keeps read access as root."""
        if self.kind == "none" or not self.privileged:
            return
        for top in paths:
            top.mkdir(parents=True, exist_ok=True)
            os.chown(top, SANDBOX_UID, SANDBOX_UID, follow_symlinks=False)
            for root, dirs, files in os.walk(top):
                for name in (*dirs, *files):
                    os.chown(os.path.join(root, name), SANDBOX_UID, SANDBOX_UID, follow_symlinks=False)

    def harness_run(self, argv: list[str], *, as_pid_1: bool = False, info_fd: int | None = None) -> Run:
        """A harness process: every existing absolute path in argv read-only (binary, trace), the directory of
        every path that does not exist yet writable (its outputs). Callers give each process its own output
        directory, so no process can touch another's evidence."""
        read_only: list[Path] = []
        writable: list[Path] = []
        for word in argv:
            if not word.startswith("/"):
                continue
            path = Path(word)
            if path.exists():
                read_only.append(path)
            elif path.parent.is_dir() and path.parent not in writable:
                writable.append(path.parent)
        self.hand_over(*writable)
        # /proc of the sandbox's own pid namespace: harnesses read their own CPU time and RSS there.
        return Run(argv=argv, read_only=tuple(read_only), writable=tuple(writable), proc=True, as_pid_1=as_pid_1,
                   info_fd=info_fd)

    # --- commands -----------------------------------------------------------------------------------------

    def command(self, run: Run) -> tuple[list[str], dict[str, str]]:
        """(argv, environment) that start `run`; the environment is allow-listed for both kinds."""
        self.verify_pins(run.argv)
        env = {"LANG": "C.UTF-8", **run.env}
        if self.kind == "none":
            host = {name: os.environ[name] for name in ("PATH", "HOME", "RUSTUP_HOME", "CARGO_HOME", "RUSTFLAGS")
                    if name in os.environ}
            return list(run.argv), {**host, **env}
        env.setdefault("HOME", "/tmp")
        if run.toolchain:
            env = {**self.toolchain.env(), **env}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        return self._bwrap(run, env), env

    def _bwrap(self, run: Run, env: dict[str, str]) -> list[str]:
        argv = ["bwrap"]
        if self.privileged:
            argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup"]
            argv += [] if run.network else ["--unshare-net"]
        else:
            argv += ["--unshare-all", *(["--share-net"] if run.network else [])]
        argv += ["--die-with-parent", "--new-session", "--clearenv"]
        argv += ["--as-pid-1"] if run.as_pid_1 else []
        argv += ["--info-fd", str(run.info_fd)] if run.info_fd is not None else []
        argv += _system_binds(NETWORK_ETC if run.network else ())
        argv += ["--dev", "/dev"] if run.toolchain else [
            arg for dev in ("/dev/null", "/dev/zero", "/dev/urandom") for arg in ("--dev-bind", dev, dev)]
        argv += ["--proc", "/proc"] if run.proc else []
        argv += ["--perms", "1777", "--tmpfs", "/tmp"]
        binds: list[tuple[str, Path, Path]] = []
        if run.toolchain:
            binds += [("--ro-bind", host, inside) for host, inside in self.toolchain.binds()]
        binds += [("--bind", path, path) for path in run.writable]
        binds += [("--ro-bind", path, path) for path in run.read_only]
        for directory in _parents([inside for _, _, inside in binds]):
            argv += ["--perms", "0755", "--dir", str(directory)]
        for flag, host, inside in binds:
            argv += [flag, str(host), str(inside)]
        for name, value in env.items():
            argv += ["--setenv", name, value]
        if run.cwd is not None:
            argv += ["--chdir", str(run.cwd)]
        argv.append("--")
        if self.privileged:
            argv += ["setpriv", *SETPRIV_ARGS]
        return argv + run.argv

    def run(self, run: Run, *, timeout: float | None = None, text: bool = True) -> subprocess.CompletedProcess[str]:
        """Start `run` and wait; the caller reads exit status and output (never through a shell)."""
        argv, env = self.command(run)
        return subprocess.run(argv, env=env, cwd=run.cwd, capture_output=True, text=text, check=False,
                              timeout=timeout)

    def record(self) -> SandboxRecord:
        """What the report says about how pull-request code ran on this node."""
        if self.kind == "none":
            return SandboxRecord(kind="none", uid=os.geteuid(), user_switch=False, network=True,
                                 read_only=["/"], writable=["everything this user can write"],
                                 environment=["PATH", "HOME", "RUSTUP_HOME", "CARGO_HOME", "RUSTFLAGS", "LANG"],
                                 note="sandbox disabled by --sandbox none: pull-request code ran as the bot")
        return SandboxRecord(
            kind="bwrap",
            uid=SANDBOX_UID if self.privileged else os.geteuid(),
            user_switch=self.privileged,
            network=False,
            read_only=["/usr", *(f"/etc/{name}" for name in SYSTEM_ETC), "the Rust toolchain (builds)",
                       "the arm's binary and the trace slice (harness runs)"],
            writable=["the arm's own worktree and target dir (build)", "the process's own output dir (runs)"],
            environment=["PATH", "HOME", "LANG", "RUSTUP_HOME", "CARGO_HOME", "RUSTFLAGS"],
            note=("bubblewrap with new pid/net/ipc/uts/cgroup namespaces; setpriv to uid 65534 with no "
                  "capabilities" if self.privileged else
                  "unprivileged bubblewrap (--unshare-all) as the invoking user: isolated, but no user switch"),
        )


def _system_binds(extra_etc: tuple[str, ...]) -> list[str]:
    argv = ["--ro-bind", "/usr", "/usr"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / top
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    argv += ["--perms", "0755", "--dir", "/etc"]
    for name in (*SYSTEM_ETC, *extra_etc):
        if (Path("/etc") / name).exists():
            argv += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    return argv


def _parents(paths: list[Path]) -> list[Path]:
    """Every missing ancestor of the bind targets, shallowest first, so bwrap creates them world-readable."""
    found: set[Path] = set()
    for path in paths:
        found.update(parent for parent in path.parents if parent != Path("/"))
    return sorted((p for p in found if not any(p == Path(s) or p.is_relative_to(s) for s in ("/usr", "/etc"))),
                  key=lambda p: len(p.parts))


def check(kind: SandboxKind = "bwrap") -> Sandbox:
    """A working sandbox of `kind`, or SandboxUnavailable naming the fix. Called before any PR code runs."""
    sandbox = Sandbox(kind)
    if kind == "none":
        print(NONE_WARNING, file=sys.stderr)
        return sandbox
    if shutil.which("bwrap") is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed: install the `bubblewrap` package, or pass "
                                 "--sandbox none to run pull-request code unsandboxed (unsafe)")
    if sandbox.privileged and shutil.which("setpriv") is None:
        raise SandboxUnavailable("setpriv is not installed: install util-linux, or pass --sandbox none (unsafe)")
    probe = sandbox.run(Run(argv=["id", "-u"]), timeout=30)
    expected = str(SANDBOX_UID if sandbox.privileged else os.geteuid())
    if probe.returncode != 0 or probe.stdout.strip() != expected:
        raise SandboxUnavailable(
            f"bubblewrap cannot create a sandbox here (exit {probe.returncode}, uid {probe.stdout.strip()!r}, "
            f"expected {expected}): {probe.stderr.strip()[-300:]}; enable user namespaces or run as root, "
            "or pass --sandbox none (unsafe)")
    return sandbox


def toml_rustflags(path: Path) -> str | None:
    """`build.rustflags` of a cargo config file, as cargo would read it (list or string); None when unset."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    build = data.get("build")
    flags = build.get("rustflags") if isinstance(build, dict) else None
    if isinstance(flags, list):
        return " ".join(str(flag) for flag in flags)
    return flags if isinstance(flags, str) else None


def add_sandbox_argument(parser: argparse.ArgumentParser) -> None:
    """`--sandbox {bwrap,none}` for every command that runs pull-request code."""
    parser.add_argument("--sandbox", choices=SANDBOX_KINDS, default="bwrap",
                        help="how pull-request code runs: bwrap (default; needs the bubblewrap package) or none "
                             "(unsandboxed: it can read this machine's secrets and forge results)")
