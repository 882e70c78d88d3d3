"""The one place pull-request code is started: builds, harness processes and exception regression tests.

Everything a pull request controls (`build.rs`, proc macros, the harness, its regression tests) runs inside a
bubblewrap sandbox: new pid, network, IPC, UTS and cgroup namespaces, a filesystem made only of read-only
system directories, the toolchain, and exactly the paths the caller names (read-only or writable), an
allow-listed environment, and - when the bot runs as root - the unprivileged uid 65534 with no capabilities
(`setpriv`). The pid namespace with `--die-with-parent` means nothing the code starts (a `setsid` daemon
included) outlives the process the bot waits for. Every start then gets the process and memory rlimits (cgroup
v2 is not available on every runner), no descriptor above stderr and a seccomp filter refusing new user
namespaces, so no nested namespace regains capabilities: natively (bwrap `--seccomp` from a descriptor of the
start's own, `prlimit`, only stdio inherited) for a start through `Sandbox.run` and a performance sample, and
through a short trusted exec shim (`SANDBOX_EXEC`, the system python) for the profilers attribution spawns
itself. The one networked start (the dependency fetch) gets
its own network namespace behind pasta, fenced off from the host's loopback and every private, link-local or
special-purpose IPv4 range (`Sandbox.run`). `none` runs the same argv unsandboxed, loudly and on record.

Binaries are pinned to their SHA-256 here too: every start whose argv names a pinned binary checks it first (a
hash, or the stat identity a matching hash saw), so a swapped binary stops the row instead of running.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import ipaddress
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from runners.exec.containment import UNCONTAINED, Containment, host_containment
from runners.exec.placement import pinned_argv
from runners.schema.report import Arm, SandboxRecord

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
SYSTEM_PYTHON = Path("/usr/bin/python3")
"""Runs the exec shim inside the sandbox: /usr is bound anyway, unlike the bot's own (maybe pyenv) interpreter."""
FIXED_BINARY = TOOLCHAIN_ROOT / "binary"
"""Where an exception regression test sees the binary under test, whichever arm it is (`{binary}`)."""
BLOCKED_IPV4 = ("0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16", "172.16.0.0/12", "192.0.0.0/24",
                "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
                "224.0.0.0/4", "240.0.0.0/4")
"""Unreachable from the fetch's network namespace: private, link-local (cloud metadata), shared and documentation
ranges; the host's own connected subnets are added per start. Loopback is the namespace's own."""
PASTA_ARGS = ("--config-net", "-4", "--quiet", "--no-map-gw", "-t", "none", "-u", "none", "-T", "none",
              "-U", "none")
"""pasta with no port forwarding either way (`-T none -U none`: the namespace's loopback is not the host's) and no
gateway-to-host mapping; IPv4 only, so the fence below covers everything the namespace can send."""
FETCH_NETWORK = ("own network namespace behind pasta (IPv4 only, no port forwarding, no gateway mapping); "
                 "unreachable: the host's loopback and connected subnets, " + ", ".join(BLOCKED_IPV4) +
                 " (the configured DNS resolvers excepted, as /32 routes)")
NONE_WARNING = ("WARNING: --sandbox none: pull-request code runs as this user, with this environment, network "
                "and filesystem; it can read secrets and forge results. Use only for code you trust.")


@dataclass(frozen=True)
class Limits:
    """Resource bounds of every sandboxed start, as rlimits (cgroup v2 is not usable on every runner).

    `processes` is RLIMIT_NPROC: processes and threads of the sandbox uid, counted machine-wide by the kernel,
    so it bounds a fork bomb without a cgroup; `memory_bytes` is RLIMIT_AS of each process. Builds need both
    generous (rustc maps large arenas and runs a thread per codegen unit).
    """

    processes: int = 2048
    memory_bytes: int = 16 << 30


_CLONE_NEWUSER, _CLONE_THREAD = 0x10000000, 0x00010000
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_ERRNO = 0x00050000
_EPERM, _ENOSYS = 1, 38
_SYSCALLS: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {"clone": 56, "unshare": 272, "clone3": 435, "fork": 57, "vfork": 58,
                            "sched_setaffinity": 203, "add_key": 248, "request_key": 249, "keyctl": 250}),
    "aarch64": (0xC00000B7, {"clone": 220, "unshare": 97, "clone3": 435, "sched_setaffinity": 122,
                             "add_key": 217, "request_key": 218, "keyctl": 219}),
}
KEYRING_SYSCALLS = ("add_key", "request_key", "keyctl")
"""Refused in every sandbox, as container runtimes' default profiles do: keyrings are not namespaced, so the sandbox
uid's keyring would carry state from a warmup into a sample, between the "fresh" determinism processes, and
between pull requests' campaigns."""
CONFINED_SYSCALLS = ("fork", "vfork", "sched_setaffinity")
"""Also refused in a pinned start where no cgroup confines it (`Containment` "seccomp"), with `clone` lacking
CLONE_THREAD: without a cgroup, a process the harness forks could move to another core and be reaped where
`wait4` never counts it. aarch64 has no fork or vfork system call (libc uses clone)."""


def seccomp_program(machine: str | None = None, *, confined: bool = False) -> bytes:
    """A classic-BPF seccomp program for a sandboxed start: new user namespaces (`unshare`/`clone` with
    CLONE_NEWUSER) and the kernel keyrings fail with EPERM; `clone3`, whose flags a filter cannot read, with ENOSYS
    so libc falls back to `clone`; any other ABI (x32, i386) gets ENOSYS. `confined` adds CONFINED_SYSCALLS and
    process creation by `clone` (threads, with CLONE_THREAD, stay allowed)."""
    machine = machine or platform.machine()
    if machine not in _SYSCALLS:
        raise SandboxUnavailable(f"no seccomp syscall table for {machine}; run on x86_64 or aarch64, or pass "
                                 "--sandbox none (unsafe)")
    arch, numbers = _SYSCALLS[machine]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    refused = [*KEYRING_SYSCALLS, *(CONFINED_SYSCALLS if confined else ())]
    # A label (str) marks the next instruction; an instruction is (opcode, jump if true, jump if false, k), a jump
    # naming a label or 0 for the next instruction.
    code: list[str | tuple[int, int | str, int | str, int]] = [
        (ld, 0, 0, 4),                                     # arch
        (jeq, 0, "enosys", arch),
        (ld, 0, 0, 0),                                     # syscall number
        (jge, "enosys", 0, 0x40000000),                    # x32 numbers
        (jeq, "enosys", 0, numbers["clone3"]),
        *[(jeq, "eperm", 0, numbers[name]) for name in refused if name in numbers],
        (jeq, "unshare", 0, numbers["unshare"]),
        (jeq, "clone", "allow", numbers["clone"]),
        "unshare", (ld, 0, 0, 16),                         # flags: the low 32 bits of args[0]
        (jset, "eperm", "allow", _CLONE_NEWUSER),
        "clone", (ld, 0, 0, 16),
        (jset, "eperm", 0 if confined else "allow", _CLONE_NEWUSER),
        *([(jset, "allow", "eperm", _CLONE_THREAD)] if confined else []),
        "allow", (ret, 0, 0, _SECCOMP_RET_ALLOW),
        "eperm", (ret, 0, 0, _SECCOMP_RET_ERRNO | _EPERM),
        "enosys", (ret, 0, 0, _SECCOMP_RET_ERRNO | _ENOSYS),
    ]
    labels: dict[str, int] = {}
    program: list[tuple[int, int | str, int | str, int]] = []
    for item in code:
        if isinstance(item, str):
            labels[item] = len(program)
        else:
            program.append(item)

    def offset(index: int, target: int | str) -> int:
        return target if isinstance(target, int) else labels[target] - index - 1

    return b"".join(struct.pack("<HBBI", op, offset(i, jt), offset(i, jf), k)
                    for i, (op, jt, jf, k) in enumerate(program))


SANDBOX_EXEC = """
import ctypes, os, resource, sys
processes, memory, program = int(sys.argv[1]), int(sys.argv[2]), bytes.fromhex(sys.argv[3])
resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
os.closerange(3, os.sysconf("SC_OPEN_MAX"))
class Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
libc = ctypes.CDLL(None, use_errno=True)
prog = Program(len(program) // 8, program)
zero = ctypes.c_ulong(0)
if (libc.prctl(38, ctypes.c_ulong(1), zero, zero, zero) != 0
        or libc.prctl(22, ctypes.c_ulong(2), ctypes.byref(prog), zero, zero) != 0):
    sys.exit("kv-parity sandbox: cannot install the seccomp filter: " + os.strerror(ctypes.get_errno()))
os.execvp(sys.argv[4], sys.argv[4:])
"""
"""The last trusted step before the command: rlimits, no inherited descriptors, no new user namespaces, then exec.
A sampled start (`Run.as_pid_1`) gets the same three natively instead (`Sandbox._sampled_filter_fd`): an
interpreter's start-up is CPU time /proc/stat sees on the measured core but rusage partly misses, which reads
as competing load and invalidated samples on a loaded node. So does every start through `Sandbox.run` (builds,
preflight, determinism and parity processes, regression tests), each with a descriptor of its own
(`_filter_descriptor`): 10 ms of CPU a start instead of 23."""


def _filter_descriptor(*, confined: bool = False) -> int:
    """A fresh memfd holding the start's seccomp program at offset 0: one per start, so starts from several
    threads (the two arms' builds) never share a read offset."""
    program = os.memfd_create("kv-parity-seccomp", 0)
    os.write(program, seccomp_program(confined=confined))
    os.lseek(program, 0, os.SEEK_SET)
    return program


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
    mounts: tuple[tuple[Path, Path], ...] = ()
    """(host path, sandbox path) bound read-only at a path of the caller's choosing (FIXED_BINARY)."""
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
    block_fd: int | None = None
    """bwrap waits for a byte here before it starts the command (Sandbox.run attaches the network meanwhile)."""
    seccomp_fd: int | None = None
    """A descriptor holding the seccomp program, at offset 0, for this start alone (Sandbox.run makes one): bwrap
    loads it and `prlimit` sets the limits, natively, as for a sampled start, instead of the exec shim."""
    cpu_set: tuple[int, ...] = ()
    """A pinned harness start: `taskset` to these CPUs before the sandbox, and contained there
    (runners/exec/containment.py: its own cgroup, or the confined seccomp program)."""


PIN_RACY_NS = 1_000_000_000
"""A pinned binary whose ctime is this close to its last hash is hashed again (file timestamps are coarse)."""


def _stat_identity(path: Path) -> tuple[int, ...] | None:
    """(device, inode, size, mtime, ctime) of the file a start would execute; None if it cannot be read."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


class Sandbox:
    """Turns a `Run` into the argv and environment that start it contained (or, for `none`, as-is)."""

    def __init__(self, kind: SandboxKind = "bwrap", limits: Limits | None = None,
                 containment: Containment | None = None) -> None:
        self.kind = kind
        self.limits = limits or Limits()
        self._containment = UNCONTAINED if kind == "none" else containment
        self._filter_fd: int | None = None
        self.privileged = os.geteuid() == 0
        self._toolchain: Toolchain | None = None
        self._pins: dict[Path, tuple[Arm, str]] = {}
        self._verified: dict[Path, tuple[int, ...]] = {}
        """Each pinned binary's stat identity when a hash last matched its pin."""

    @classmethod
    def default(cls) -> Sandbox:
        return cls("bwrap")

    @property
    def containment(self) -> Containment:
        """How a pinned harness start is kept on its CPUs and counted whole (the host's, found once)."""
        if self._containment is None:
            self._containment = host_containment()
        return self._containment

    @property
    def toolchain(self) -> Toolchain:
        if self._toolchain is None:
            self._toolchain = Toolchain.detect()
        return self._toolchain

    # --- pinned binaries ----------------------------------------------------------------------------------

    def pin(self, path: Path, arm: Arm, sha256: str) -> None:
        """From now on every start naming `path` checks it against `sha256` first (verify_pins)."""
        self._pins[path.resolve()] = (arm, sha256)
        self._verified.pop(path.resolve(), None)

    def verify_pins(self, argv: list[str], bound: tuple[Path, ...] = ()) -> None:
        """Check every pinned binary the start names in its argv or binds (at its own or a fixed path): re-hashed,
        unless its stat identity is the one a matching hash saw (a real harness is tens of MB, and a row starts
        it hundreds of times). Any write or replacement changes the inode, size, mtime or ctime, and ctime cannot
        be set back; a file changed within PIN_RACY_NS of its last hash could keep them all, so it is hashed
        again until it is older, as git treats racy index entries."""
        for word in [*argv, *(str(path) for path in bound)]:
            if not word.startswith("/"):
                continue
            path = Path(word)
            pinned = self._pins.get(path)
            if pinned is None:
                continue
            seen = _stat_identity(path)
            if seen is not None and self._verified.get(path) == seen:
                continue
            hashed_at = time.time_ns()
            actual = sha256_of(path)
            if actual != pinned[1]:
                raise BinaryMismatch(pinned[0], path, pinned[1], actual)
            # seen[-1] is the ctime: only a file settled before the hash, and unchanged during it, is remembered
            if seen is not None and seen[-1] < hashed_at - PIN_RACY_NS and _stat_identity(path) == seen:
                self._verified[path] = seen

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

    def harness_run(self, argv: list[str], *, as_pid_1: bool = False, info_fd: int | None = None,
                    cpu_set: Sequence[int] = ()) -> Run:
        """A harness process: every existing absolute path in argv read-only (binary, trace), the directory of
        every path that does not exist yet writable (its outputs). Callers give each process its own output
        directory, so no process can touch another's evidence. `cpu_set` pins and contains it."""
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
                   info_fd=info_fd, cpu_set=tuple(cpu_set))

    # --- commands -----------------------------------------------------------------------------------------

    def command(self, run: Run) -> tuple[list[str], dict[str, str]]:
        """(argv, environment) that start `run`; the environment is allow-listed for both kinds."""
        self.verify_pins(run.argv, (*run.read_only, *(host for host, _ in run.mounts)))
        env = {"LANG": "C.UTF-8", **run.env}
        if self.kind == "none":
            host = {name: os.environ[name] for name in ("PATH", "HOME", "RUSTUP_HOME", "CARGO_HOME", "RUSTFLAGS")
                    if name in os.environ}
            return list(run.argv), {**host, **env}
        env.setdefault("HOME", "/tmp")
        if run.toolchain:
            env = {**self.toolchain.env(), **env}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        if run.network and run.block_fd is None:
            raise ValueError("a networked sandbox start goes through Sandbox.run, which attaches its network")
        return self._bwrap(run, env), env

    def _bwrap(self, run: Run, env: dict[str, str]) -> list[str]:
        argv = ["bwrap"]
        if self.privileged:
            argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup", "--unshare-net"]
        else:
            argv += ["--unshare-all"]
        argv += ["--die-with-parent", "--new-session", "--clearenv"]
        argv += ["--as-pid-1"] if run.as_pid_1 else []
        argv += ["--info-fd", str(run.info_fd)] if run.info_fd is not None else []
        argv += ["--block-fd", str(run.block_fd)] if run.block_fd is not None else []
        argv += _system_binds(NETWORK_ETC if run.network else ())
        # /dev made first and world-readable: a bind under it (a work directory in /dev/shm) must be reachable.
        argv += ["--dev", "/dev"] if run.toolchain else ["--perms", "0755", "--dir", "/dev", *(
            arg for dev in ("/dev/null", "/dev/zero", "/dev/urandom") for arg in ("--dev-bind", dev, dev))]
        argv += ["--proc", "/proc"] if run.proc else []
        argv += ["--perms", "1777", "--tmpfs", "/tmp"]
        binds: list[tuple[str, Path, Path]] = []
        if run.toolchain:
            binds += [("--ro-bind", host, inside) for host, inside in self.toolchain.binds()]
        binds += [("--bind", path, path) for path in run.writable]
        binds += [("--ro-bind", path, path) for path in run.read_only]
        binds += [("--ro-bind", host, inside) for host, inside in run.mounts]
        for directory in _parents([inside for _, _, inside in binds]):
            argv += ["--perms", "0755", "--dir", str(directory)]
        for flag, host, inside in binds:
            argv += [flag, str(host), str(inside)]
        for name, value in env.items():
            argv += ["--setenv", name, value]
        if run.cwd is not None:
            argv += ["--chdir", str(run.cwd)]
        if run.as_pid_1:
            argv += ["--seccomp", str(self._sampled_filter_fd())]
        elif run.seccomp_fd is not None:
            argv += ["--seccomp", str(run.seccomp_fd)]
        argv.append("--")
        if self.privileged:
            argv += ["setpriv", *SETPRIV_ARGS]
        if run.as_pid_1 or run.seccomp_fd is not None:
            limits = [f"--nproc={self.limits.processes}", f"--as={self.limits.memory_bytes}"]
            return argv + ["prlimit", *limits, "--", *run.argv]
        shim = [str(SYSTEM_PYTHON), "-I", "-S", "-c", SANDBOX_EXEC, str(self.limits.processes),
                str(self.limits.memory_bytes), seccomp_program().hex()]
        return argv + shim + run.argv

    def _sampled_filter_fd(self) -> int:
        """The seccomp program for a sampled start, on one inheritable memfd rewound for each start.

        A performance sample is one process whose whole life counts, so it gets no interpreter: bwrap loads the
        same filter (`--seccomp`) and `prlimit` sets the same limits. The sampler's spawn closes every other
        descriptor in the child (`passed_fds` names the ones a start needs), and bwrap closes this one. Samples
        start one at a time, so one offset suffices."""
        if self._filter_fd is None:
            created = _filter_descriptor(confined=self.containment.kind == "seccomp")
            # Far above the descriptors a spawn maps (the sampler dup2s its info pipe onto 3).
            self._filter_fd = fcntl.fcntl(created, fcntl.F_DUPFD, 100)
            os.close(created)
        os.set_inheritable(self._filter_fd, True)
        os.lseek(self._filter_fd, 0, os.SEEK_SET)
        return self._filter_fd

    def passed_fds(self, run: Run) -> set[int]:
        """Descriptors beyond stdio a start of `run` must inherit: the seccomp memfd bwrap loads for it."""
        if self.kind == "none":
            return set()
        if run.as_pid_1:
            return {self._sampled_filter_fd()}
        return {run.seccomp_fd} if run.seccomp_fd is not None else set()

    def run(self, run: Run, *, timeout: float | None = None, text: bool = True) -> subprocess.CompletedProcess[str]:
        """Start `run` and wait; the caller reads exit status and output (never through a shell).

        A pinned `run` (`cpu_set`) starts under `taskset` (bwrap and the command inherit the affinity) and is
        contained (runners/exec/containment.py): in a cgroup of its own, which its first process joins before it
        execs anything, or under the confined seccomp program. A networked `run` gets its own network namespace:
        bwrap blocks before the command until pasta is attached and the fence routes are in, so the command never
        sees the namespace unfenced."""
        launcher = pinned_argv(list(run.cpu_set), []) if run.cpu_set else []
        if self.kind == "none":
            argv, env = self.command(run)
            return subprocess.run([*launcher, *argv], env=env, cwd=run.cwd, capture_output=True, text=text,
                                  check=False, timeout=timeout)
        confined = bool(run.cpu_set) and self.containment.kind == "seccomp"
        program = _filter_descriptor(confined=confined) if not run.as_pid_1 else None
        start = run if program is None else replace(run, seccomp_fd=program)
        try:
            if run.network:
                return self._run_blocked(start, launcher, timeout, text, _pasta_attached(self.privileged))
            if run.cpu_set and self.containment.uses_cgroup:
                return self._run_contained(start, launcher, timeout, text)
            argv, env = self.command(start)
            return subprocess.run([*launcher, *argv], env=env, cwd=run.cwd, capture_output=True, text=text,
                                  check=False, timeout=timeout, pass_fds=tuple(self.passed_fds(start)))
        finally:
            if program is not None:
                os.close(program)

    def _run_contained(self, run: Run, launcher: list[str], timeout: float | None,
                       text: bool) -> subprocess.CompletedProcess[str]:
        """Start `run` inside a fresh cgroup of its CPUs (its first process joins, then execs the rest); once it has
        ended, or timed out, kill what it left and remove the cgroup."""
        argv, env = self.command(run)
        with self.containment.cgroup(list(run.cpu_set)) as cgroup:
            try:
                completed = subprocess.run([*cgroup.launcher(), *launcher, *argv], env=env, cwd=run.cwd,
                                           capture_output=True, text=text, check=False, timeout=timeout,
                                           pass_fds=tuple(self.passed_fds(run)))
            finally:
                cgroup.drain()
            cgroup.check_joined(completed.returncode)
        return completed

    def _run_blocked(self, run: Run, launcher: list[str], timeout: float | None, text: bool,
                     before_command: BeforeCommand) -> subprocess.CompletedProcess[str]:
        """Start `run` with bwrap blocking before the command until `before_command(outer pid, child pid)` has
        entered; it stays entered until the start has ended."""
        info_read, info_write = os.pipe()
        block_read, block_write = os.pipe()
        try:
            argv, env = self.command(replace(run, info_fd=info_write, block_fd=block_read))
            process = subprocess.Popen([*launcher, *argv], env=env, cwd=run.cwd, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=text,
                                       pass_fds=(info_write, block_read, *self.passed_fds(run)))
        finally:
            os.close(info_write)
            os.close(block_read)
        try:
            with os.fdopen(info_read, "rb") as info, os.fdopen(block_write, "wb") as release:
                child = _child_pid(info.fileno())
                with before_command(process.pid, child):
                    release.write(b"1")
                    release.close()
                    out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as expired:
            process.kill()
            expired.output, expired.stderr = process.communicate()
            raise
        except BaseException:
            process.kill()
            process.communicate()
            raise
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)

    def record(self) -> SandboxRecord:
        """What the report says about how pull-request code ran on this node."""
        if self.kind == "none":
            return SandboxRecord(kind="none", uid=os.geteuid(), user_switch=False, network=True,
                                 read_only=["/"], writable=["everything this user can write"],
                                 environment=["PATH", "HOME", "RUSTUP_HOME", "CARGO_HOME", "RUSTFLAGS", "LANG"],
                                 containment_kind="none", containment=UNCONTAINED.detail,
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
            process_limit=self.limits.processes,
            memory_limit_bytes=self.limits.memory_bytes,
            user_namespaces=False,
            inherited_fds=False,
            keyrings=False,
            containment_kind=self.containment.kind,
            containment=self.containment.detail,
            fetch_network=FETCH_NETWORK,
            note=("bubblewrap with new pid/net/ipc/uts/cgroup namespaces; setpriv to uid 65534 with no "
                  "capabilities" if self.privileged else
                  "unprivileged bubblewrap (--unshare-all) as the invoking user: isolated, but no user switch"),
        )


def _child_pid(info: int) -> int:
    """The pid bwrap reports on its info pipe; it keeps the pipe open while it waits on the block fd."""
    data = b""
    while True:
        chunk = os.read(info, 4096)
        if not chunk:
            raise SandboxUnavailable(f"bubblewrap exited before reporting its child: {data[-300:]!r}")
        data += chunk
        try:
            return int(json.loads(data)["child-pid"])
        except ValueError:
            continue


def _checked(argv: list[str], what: str) -> str:
    completed = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    if completed.returncode != 0:
        raise SandboxUnavailable(f"{what} failed (exit {completed.returncode}): {completed.stderr.strip()[-300:]}; "
                                 "the fetch needs pasta (package passt) and iproute2")
    return completed.stdout


BeforeCommand = Callable[[int, int], AbstractContextManager[None]]
"""What a blocked start does between bwrap's report of its child and the command: (outer pid, child pid)."""


def _pasta_attached(privileged: bool) -> BeforeCommand:
    """The fetch's network, attached to the child's namespace, for as long as the start runs."""

    @contextmanager
    def attached(outer: int, child: int) -> Iterator[None]:
        with tempfile.TemporaryDirectory(prefix="kvp-netns-") as holder, _pasta_network(child, Path(holder),
                                                                                        privileged):
            yield

    return attached


@contextmanager
def _pasta_network(child: int, holder: Path, privileged: bool) -> Iterator[None]:
    """pasta attached to the child's network namespace, then the fence: the private ranges and the host's
    connected subnets are unreachable routes, the resolvers are /32s via the gateway. pasta opens the
    namespace after dropping capabilities, so a root-owned one is bind-mounted to a file it can open."""
    proc_ns = Path(f"/proc/{child}/ns")
    if privileged:
        netns = holder / "net"
        netns.touch()
        _checked(["mount", "--bind", str(proc_ns / "net"), str(netns)], "binding the fetch's network namespace")
        pasta_user = ["--runas", "0"]
        enter = ["nsenter", f"--net={netns}", "--"]
        namespaces = [(str(netns), _CLONE_NEWNET)]
    else:
        netns = proc_ns / "net"
        pasta_user = ["--userns", str(proc_ns / "user")]
        enter = ["nsenter", f"--user={proc_ns / 'user'}", f"--net={netns}", "--preserve-credentials", "--"]
        namespaces = [(str(proc_ns / "user"), _CLONE_NEWUSER), (str(netns), _CLONE_NEWNET)]
    watchdog = subprocess.Popen([sys.executable, "-I", "-S", "-c", PASTA_WATCHDOG, str(holder),
                                 "1" if privileged else "0", ENDED.decode()], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _checked(["pasta", *PASTA_ARGS, *pasta_user, "--pid", str(holder / "pasta.pid"), "--netns", str(netns)],
                 "pasta (the fetch's network)")
        _fence(enter, namespaces)
        yield
    finally:
        watchdog.communicate(ENDED)  # the one place that ends pasta, unmounts the namespace and removes the holder


ENDED = b"ended"
"""What the bot writes to the watchdog before closing its pipe at a fetch's normal end."""
PASTA_WATCHDOG = """
import os, shutil, signal, subprocess, sys, time
holder, privileged, end_marker = sys.argv[1], sys.argv[2] == "1", sys.argv[3].encode()
ended = sys.stdin.buffer.read() == end_marker
def end_named_pastas():
    found = 0
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                words = cmdline.read().split(b"\\0")
        except (OSError, ValueError):
            continue
        if os.path.basename(words[0]) == b"pasta" and any(holder.encode() + b"/" in word for word in words):
            try:
                os.kill(int(entry), signal.SIGTERM)
                found += 1
            except (OSError, ValueError):
                pass
    return found
quiet_since = time.monotonic()
while True:
    if end_named_pastas():
        quiet_since = time.monotonic()
    if ended or time.monotonic() - quiet_since > 0.5:
        break
    time.sleep(0.01)
if privileged:  # lazy: pasta may still hold the file open for an instant after SIGTERM
    subprocess.run(["umount", "--lazy", os.path.join(holder, "net")], capture_output=True)
shutil.rmtree(holder, ignore_errors=True)
"""
"""Ends a fetch's pasta, unmounts its namespace and removes the holder when the bot's side of its pipe closes:
normally after the fetch (the bot writes `ENDED` first, and one look suffices), or when the bot is killed
(SIGKILL, scancel, a cancelled runner's process group), which would otherwise leave pasta (a daemon in its own
session) and the namespace's bind mount behind for good. A bot killed while pasta starts may die before pasta's
daemon exists or has written its pid file, so then it ends every pasta whose command line names this holder
until none has been seen for half a second. It runs in a session of its own so a group kill does not take it
first, and ends only pastas that name this holder. It starts before pasta, so no moment exists where pasta runs
unwatched."""


NETLINK_FENCE = """
import ctypes, json, os, socket, struct, sys
spec = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
for path, kind in spec["enter"]:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    if libc.setns(fd, kind) != 0:
        sys.exit("setns " + path + ": " + os.strerror(ctypes.get_errno()))
    os.close(fd)
sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
for seq, (dst, length, kind, gateway, dev) in enumerate(spec["routes"], 1):
    attrs = struct.pack("=HH4s", 8, 1, socket.inet_aton(dst))
    if gateway:
        attrs += struct.pack("=HH4s", 8, 5, socket.inet_aton(gateway))
        attrs += struct.pack("=HHI", 8, 4, socket.if_nametoindex(dev))
    body = struct.pack("=BBBBBBBBI", socket.AF_INET, length, 0, 0, 254, 4, 0, kind, 0) + attrs
    sock.send(struct.pack("=IHHII", 16 + len(body), 24, 0x1 | 0x4 | 0x200 | 0x400, seq, 0) + body)
    reply = sock.recv(65536)
    if struct.unpack("=H", reply[4:6])[0] == 2 and (error := struct.unpack("=i", reply[16:20])[0]):
        sys.exit("route " + dst + "/" + str(length) + ": " + os.strerror(-error))
"""
"""Adds the fence routes from inside the fetch's namespaces by netlink, with no exec after `setns` (an exec
would drop the capabilities a non-root owner has in its own user namespace)."""
_CLONE_NEWNET = 0x40000000
_RTN_UNICAST, _RTN_UNREACHABLE = 1, 7


def _fence(enter: list[str], namespaces: list[tuple[str, int]]) -> None:
    routes = json.loads(_checked([*enter, "ip", "-4", "-j", "route", "show"], "reading the fetch's routes") or "[]")
    gateway = next((r for r in routes if r.get("dst") == "default" and r.get("gateway")), None)
    connected = [r["dst"] for r in routes if r.get("dst") not in (None, "default") and r.get("scope") == "link"]
    fenced: list[ipaddress.IPv4Network] = []
    for prefix in dict.fromkeys((*BLOCKED_IPV4, *connected)):
        network = ipaddress.IPv4Network(prefix, strict=False)
        # Halves are more specific than any route pasta copied (a connected /24 included), so they win.
        fenced.extend(half for half in (network.subnets() if network.prefixlen < 32 else [network])
                      if half not in fenced)
    added: list[tuple[str, int, int, str | None, str | None]] = [
        (str(network.network_address), network.prefixlen, _RTN_UNREACHABLE, None, None) for network in fenced]
    if gateway is not None:
        added += [(str(resolver), 32, _RTN_UNICAST, gateway["gateway"], gateway["dev"]) for resolver in _resolvers()
                  if any(resolver in network for network in fenced)]
    spec = json.dumps({"enter": namespaces, "routes": added})
    _checked([sys.executable, "-I", "-S", "-c", NETLINK_FENCE, spec], "fencing the fetch's network")


def _resolvers() -> list[ipaddress.IPv4Address]:
    found = []
    try:
        lines = Path("/etc/resolv.conf").read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    for line in lines:
        words = line.split()
        if len(words) >= 2 and words[0] == "nameserver":
            try:
                found.append(ipaddress.IPv4Address(words[1]))
            except ValueError:
                continue
    return found


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
    if not SYSTEM_PYTHON.is_file():
        raise SandboxUnavailable(f"{SYSTEM_PYTHON} is missing: the sandbox's exec shim needs the distribution's "
                                 "python3 package, or pass --sandbox none (unsafe)")
    probe = sandbox.run(Run(argv=["id", "-u"]), timeout=30)
    expected = str(SANDBOX_UID if sandbox.privileged else os.geteuid())
    if probe.returncode != 0 or probe.stdout.strip() != expected:
        raise SandboxUnavailable(
            f"bubblewrap cannot create a sandbox here (exit {probe.returncode}, uid {probe.stdout.strip()!r}, "
            f"expected {expected}): {probe.stderr.strip()[-300:]}; enable user namespaces or run as root, "
            "or pass --sandbox none (unsafe)")
    return sandbox


def toml_rustflags(text: bytes) -> str | None:
    """`build.rustflags` of a cargo config file's bytes, as cargo would read it (list or string); None when unset."""
    try:
        data = tomllib.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
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
