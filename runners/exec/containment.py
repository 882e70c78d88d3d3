"""One pinned harness start is one process tree, kept on its CPUs and fully accounted, whatever it forks.

A harness that ignores SIGCHLD (so the kernel reaps its children itself) and forks a worker that moves to another
core does part of its work where neither `wait4`'s rusage nor the pinned CPU's interference check sees it: a
slower candidate then looks faster on every clock, and the protocol's single pinned core is broken. So every
pinned harness start (performance samples, timer probes, warmups, determinism and parity processes, Stage 6
fixtures) runs in a cgroup of its own, made by the bot and joined by the start's first process before it execs the
sandbox (`StartCgroup.launcher`), whose cpuset is the row's CPUs, which the sandbox user cannot write, and whose CPU
accounting counts every task of the tree, reaped by anyone or not. cgroup v2 where the unified hierarchy offers
the cpuset controller, else v1's cpuset and cpuacct hierarchies. Where the host offers neither to this process,
the start's seccomp program refuses process creation and `sched_setaffinity` instead (threads stay allowed, and
rusage counts them); `kv-parity doctor` says which mechanism this node gives, and the report records which held.
"""

from __future__ import annotations

import errno
import itertools
import os
import secrets
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from runners.exec.placement import format_cpu_list, parse_cpu_list
from runners.schema.report import ContainmentKind

PARENT = "kv-parity"
"""The directory, in each hierarchy, under which every start's own cgroup is made."""
MOUNTS = Path("/proc/self/mounts")
OWN_CGROUPS = Path("/proc/self/cgroup")
SHELL = Path("/bin/sh")
JOIN_SCRIPT = 'while [ "$1" != -- ]; do echo 0 >"$1" || exit 125; shift; done; shift; exec "$@"'
"""Writes 0 to each cgroup file named before `--` (joining this process, before anything else runs), then becomes
the command after it."""
JOIN_FAILED = 125
DRAIN_S = 5.0
"""How long a finished start's leftover tasks get to exit after SIGKILL before the cgroup is left behind (named in
the error). A pid namespace's last task normally takes the rest with it before the start is reaped."""
_names = itertools.count()


class MeasurementFault(RuntimeError):
    """This node could not run or count a pinned start as the protocol requires (the bot's failure, never the
    harness's): the campaign stops at that row, naming why, and still writes its report."""


class ContainmentError(MeasurementFault):
    """A start's cgroup could not be made, joined, read or emptied: the start does not run (or is not counted)."""


@dataclass(frozen=True)
class Containment:
    """Which mechanism keeps a pinned start on its CPUs and counts its every task, on this node."""

    kind: ContainmentKind
    detail: str
    """What it is and where, in words for the report and the doctor."""
    cpuset: Path | None = None
    """The parent cgroup (`kv-parity`) in the hierarchy holding the cpuset controller."""
    cpuacct: Path | None = None
    """The parent cgroup in the hierarchy that accounts CPU time (the same directory under cgroup v2)."""

    @property
    def uses_cgroup(self) -> bool:
        return self.kind in ("cgroup1", "cgroup2")

    @contextmanager
    def cgroup(self, cpus: list[int]) -> Iterator[StartCgroup]:
        """A fresh cgroup confined to `cpus` for one start; emptied and removed when the block ends."""
        if self.cpuset is None or self.cpuacct is None:
            raise ContainmentError(f"{self.kind} containment has no cgroup")
        made = StartCgroup(self, cpus)
        try:
            yield made
        finally:
            made.remove()


SECCOMP_ONLY = Containment(
    kind="seccomp",
    detail="no usable cgroup: the seccomp program of every pinned start refuses fork, vfork, clone without "
           "CLONE_THREAD and sched_setaffinity (threads stay allowed; wait4's rusage counts them)",
)
UNCONTAINED = Containment(kind="none", detail="--sandbox none: pull-request code runs as the bot, uncontained")


class StartCgroup:
    """One start's cgroup: one directory in each hierarchy the mechanism uses, named by this process and a counter
    so concurrent campaigns never share one."""

    def __init__(self, containment: Containment, cpus: list[int]) -> None:
        assert containment.cpuset is not None and containment.cpuacct is not None
        name = f"{os.getpid()}-{next(_names)}-{secrets.token_hex(3)}"
        self.v2 = containment.kind == "cgroup2"
        self.dirs = list(dict.fromkeys([containment.cpuset / name, containment.cpuacct / name]))
        self.cpus = sorted(cpus)
        try:
            for directory in self.dirs:
                directory.mkdir()
            cpuset = self.dirs[0]
            _write(cpuset / "cpuset.cpus", format_cpu_list(self.cpus))
            if not self.v2:  # a v1 cpuset takes no task until its memory nodes are set; v2 inherits them
                _write(cpuset / "cpuset.mems", _read(containment.cpuset / "cpuset.mems"))
            confined = parse_cpu_list(_read(cpuset / "cpuset.effective_cpus"))
        except OSError as exc:
            self.remove()
            raise ContainmentError(f"cannot make the start's cgroup under {containment.cpuset}: {exc}") from exc
        if confined != self.cpus:
            self.remove()
            raise ContainmentError(f"the start's cgroup {cpuset} holds cpus {format_cpu_list(confined)}, not the "
                                   f"row's {format_cpu_list(self.cpus)}: the parent cgroup does not include them")

    def launcher(self) -> list[str]:
        """The argv prefix that starts a command inside the cgroup: a shell that moves itself into it (writing 0
        moves the writer, so the kernel takes no lock for another task's migration: a join by pid cost a grace
        period, 8.7 ms a sample here) and then execs the command, so everything the command starts is born inside.
        The shell's script is a constant and its arguments are the bot's own paths; the command's words are only
        handed to exec ("$@"), never read by the shell. A failed join exits JOIN_FAILED before anything runs."""
        files = [directory / ("cgroup.procs" if self.v2 else "tasks") for directory in self.dirs]
        return [str(SHELL), "-c", JOIN_SCRIPT, "kv-parity-join", *map(str, files), "--"]

    def check_joined(self, exit_code: int | None) -> None:
        """A start that exited JOIN_FAILED having spent no CPU time in the cgroup never joined it: the bot's failure,
        never the harness's (a harness that exits JOIN_FAILED has spent CPU time inside)."""
        if exit_code == JOIN_FAILED and self.cpu_ms() == 0.0:
            raise ContainmentError(f"cannot move a start into {', '.join(map(str, self.dirs))} (see its stderr)")

    def effective_cpus(self) -> list[int]:
        """The CPUs every task of the cgroup may run on (its cpuset, which the sandbox user cannot change)."""
        try:
            return parse_cpu_list(_read(self.dirs[0] / "cpuset.effective_cpus"))
        except OSError as exc:
            raise ContainmentError(f"cannot read the CPUs of {self.dirs[0]}: {exc}") from exc

    def cpu_ms(self) -> float:
        """CPU time of every task that ever ran in the cgroup, user and system (the kernel's own figure)."""
        accounting = self.dirs[-1]
        try:
            if self.v2:
                stat = dict(line.split() for line in _read(accounting / "cpu.stat").splitlines() if line.strip())
                return int(stat["usage_usec"]) / 1000.0
            return int(_read(accounting / "cpuacct.usage")) / 1e6
        except (OSError, KeyError, ValueError) as exc:
            raise ContainmentError(f"cannot read the CPU time of {accounting}: {exc}") from exc

    def tasks(self) -> list[int]:
        found: set[int] = set()
        for directory in self.dirs:
            try:
                found.update(int(pid) for pid in _read(directory / "cgroup.procs").split())
            except OSError:
                continue
        return sorted(found)

    def drain(self) -> None:
        """Kill whatever the start left running in the cgroup and wait until it is empty, so its CPU time is final
        and nothing of one start outlives it into the next."""
        deadline = time.monotonic() + DRAIN_S
        while left := self.tasks():
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
            if time.monotonic() > deadline:
                raise ContainmentError(f"tasks {left} of {self.dirs[0]} still run {DRAIN_S:g} s after SIGKILL")
            time.sleep(0.001)

    def remove(self) -> None:
        for directory in self.dirs:
            try:
                directory.rmdir()
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise
                self.drain()
                directory.rmdir()


def _read(path: Path) -> str:
    return path.read_text(encoding="ascii").strip()


def _write(path: Path, text: str) -> None:
    """One write(2) of the whole value, as cgroup files require."""
    descriptor = os.open(path, os.O_WRONLY)
    try:
        os.write(descriptor, text.encode("ascii"))
    finally:
        os.close(descriptor)


def _mounts(mounts: Path) -> list[tuple[Path, str, set[str]]]:
    found = []
    for line in mounts.read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] in ("cgroup", "cgroup2"):
            found.append((Path(fields[1].replace("\\040", " ")), fields[2], set(fields[3].split(","))))
    return found


def _own_path(own: Path, controller: str | None) -> str:
    """This process's cgroup path in the v1 hierarchy of `controller` (None: the v2 hierarchy)."""
    for line in own.read_text(encoding="utf-8").splitlines():
        number, controllers, path = line.split(":", 2)
        if controller is None and number == "0" and controllers == "":
            return path
        if controller is not None and controller in controllers.split(","):
            return path
    raise ContainmentError(f"{own} names no cgroup for {controller or 'the unified hierarchy'}")


def _v2(mount: Path) -> Containment:
    """cgroup v2: the parent is made under the hierarchy's root (a cgroup holding processes cannot hand a
    controller to its children), with cpuset enabled for it and in it."""
    if "cpuset" not in _read(mount / "cgroup.controllers").split():
        raise ContainmentError(f"the unified hierarchy at {mount} does not offer the cpuset controller")
    parent = mount / PARENT
    parent.mkdir(exist_ok=True)
    for level in (mount, parent):
        if "cpuset" not in _read(level / "cgroup.subtree_control").split():
            _write(level / "cgroup.subtree_control", "+cpuset")
    return Containment(kind="cgroup2", cpuset=parent, cpuacct=parent,
                       detail=f"cgroup v2 at {parent}: cpuset.cpus locked to the row's CPUs, cpu.stat counts "
                              "every task")


def _v1(mounts: list[tuple[Path, str, set[str]]], own: Path) -> Containment:
    """cgroup v1: parents under this process's own cgroup in the cpuset and cpuacct hierarchies (so a job
    scheduler's confinement, a Slurm step's cpuset, still holds around them)."""
    roots = {}
    for controller in ("cpuset", "cpuacct"):
        mount = next((path for path, kind, options in mounts if kind == "cgroup" and controller in options), None)
        if mount is None:
            raise ContainmentError(f"no cgroup v1 {controller} hierarchy is mounted")
        roots[controller] = mount / _own_path(own, controller).lstrip("/") / PARENT
    cpuset, cpuacct = roots["cpuset"], roots["cpuacct"]
    for parent in dict.fromkeys([cpuset, cpuacct]):
        parent.mkdir(exist_ok=True)
    for name in ("cpuset.cpus", "cpuset.mems"):  # a new v1 cpuset starts empty; the parent offers all it has
        if not _read(cpuset / name):
            _write(cpuset / name, _read(cpuset.parent / f"cpuset.effective_{name.split('.')[1]}"))
    return Containment(kind="cgroup1", cpuset=cpuset, cpuacct=cpuacct,
                       detail=f"cgroup v1 at {cpuset} and {cpuacct}: cpuset.cpus locked to the row's CPUs, "
                              "cpuacct counts every task")


def detect(mounts: Path = MOUNTS, own: Path = OWN_CGROUPS) -> Containment:
    """The strongest mechanism this process can use here: cgroup v2, cgroup v1, else the seccomp program (whose
    detail says why no cgroup could be used)."""
    try:
        table = _mounts(mounts)
    except OSError as exc:
        return _fallback(f"{mounts} unreadable: {exc}")
    reasons = []
    for path, kind, _ in table:
        if kind == "cgroup2":
            try:
                return _v2(path)
            except (OSError, ContainmentError) as exc:
                reasons.append(f"v2 at {path}: {exc}")
    try:
        return _v1(table, own)
    except (OSError, ContainmentError) as exc:
        reasons.append(f"v1: {exc}")
    return _fallback("; ".join(reasons))


@cache
def host_containment() -> Containment:
    """`detect()` once per process: every sandbox of a campaign uses the same mechanism."""
    return detect()


def _fallback(why: str) -> Containment:
    return Containment(kind="seccomp", detail=f"{SECCOMP_ONLY.detail} ({why})")
