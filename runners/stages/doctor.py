"""Is this node fit to measure, for the CPUs a row would pin: the checks `kv-parity doctor` prints (its help,
`bot.cli.doctor`, says what they read and decide) and every campaign records beside each row. Each reads the
kernel's own files under a root (`/sys`, `/proc`; tests pass a fake tree)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runners.exec.containment import UNCONTAINED, Containment, host_containment
from runners.exec.counter import check_hardware_counter
from runners.exec.placement import (
    PROC,
    SYS,
    choose_perf_core,
    cpu_busy_ms,
    cpu_topology,
    format_cpu_list,
    kept_off,
    online_cpus,
    parse_cpu_list,
    read_affinity,
    read_fact,
)
from runners.exec.sandbox import SandboxKind, SandboxUnavailable
from runners.exec.sandbox import check as sandbox_check
from runners.schema.report import DoctorCheck, DoctorReport, DoctorStatus

PROFILERS = ("valgrind", "perf", "c++filt")
"""What regression attribution runs: callgrind instruction counts, sampled stacks, demangled symbol names."""
LOAD_WINDOW_S = 0.5
"""How long the doctor watches the pinned CPUs' /proc/stat counters (a measurement window, not a wait)."""
LOAD_WARN_FRACTION = 0.05
LOAD_FAIL_FRACTION = 0.5
"""Share of a pinned CPU other work used in the window: above WARN samples will be invalidated now and then,
above FAIL most of them would be."""
PERF_PARANOID_MAX = 2
"""`perf record --all-user` of one's own processes is allowed up to 2; Debian's 3 and 4 refuse it."""
SEVERITY = {DoctorStatus.PASS: 0, DoctorStatus.UNKNOWN: 1, DoctorStatus.WARN: 2, DoctorStatus.FAIL: 3}
CPU_DIR = "devices/system/cpu"


def _cannot(what: str) -> str:
    return f"cannot be read here: {what}"


def _cpus(cpus: Sequence[int]) -> str:
    return format_cpu_list(list(cpus))


# --- the checks --------------------------------------------------------------------------------------------


def check_sandbox(kind: SandboxKind) -> DoctorCheck:
    """A real sandboxed process, through the same `check()` every command runs before pull-request code."""
    if kind == "none":
        return DoctorCheck(name="sandbox", status=DoctorStatus.WARN,
                           detail="--sandbox none: pull-request code would run unsandboxed as this user",
                           fix="install bubblewrap and drop --sandbox none")
    try:
        sandbox = sandbox_check(kind)
    except SandboxUnavailable as exc:
        return DoctorCheck(name="sandbox", status=DoctorStatus.FAIL, detail=str(exc),
                           fix="make the sandbox work: every row fails without it")
    record = sandbox.record()
    return DoctorCheck(name="sandbox", status=DoctorStatus.PASS,
                       detail=f"bubblewrap started a sandboxed `id -u` as uid {record.uid}: {record.note}")


def check_containment(kind: SandboxKind, containment: Containment | None = None) -> DoctorCheck:
    """Which mechanism keeps a pinned harness start, and all it forks, on the row's CPUs and in the accounting."""
    if kind == "none":
        return DoctorCheck(name="containment", status=DoctorStatus.WARN, detail=UNCONTAINED.detail,
                           fix="install bubblewrap and drop --sandbox none")
    found = containment or host_containment()
    if found.uses_cgroup:
        return DoctorCheck(name="containment", status=DoctorStatus.PASS, detail=found.detail)
    return DoctorCheck(name="containment", status=DoctorStatus.WARN, detail=found.detail,
                       fix="run the bot as root where cgroup v2 offers the cpuset controller (or v1 mounts cpuset "
                           "and cpuacct): a harness that forks or moves a thread to another CPU fails its pinned "
                           "runs under the seccomp program")


def check_profilers(search_path: str | None = None) -> DoctorCheck:
    """The tools regression attribution needs; without them a performance FAIL comes without its evidence."""
    found = {tool: shutil.which(tool, path=search_path) for tool in PROFILERS}
    missing = [tool for tool, where in found.items() if where is None]
    detail = ", ".join(f"{tool} {where or 'missing'}" for tool, where in found.items())
    if missing:
        return DoctorCheck(name="profilers", status=DoctorStatus.WARN, detail=detail,
                           fix=f"install {', '.join(missing)} (packages valgrind, linux-perf or linux-tools, "
                               "binutils): regression attribution cannot run without them")
    return DoctorCheck(name="profilers", status=DoctorStatus.PASS, detail=detail)


def check_governor(cpus: Sequence[int], sys_root: Path = SYS) -> DoctorCheck:
    governors = {cpu: read_fact(sys_root / CPU_DIR / f"cpu{cpu}/cpufreq/scaling_governor") for cpu in cpus}
    unread = [cpu for cpu, governor in governors.items() if governor is None]
    if unread:
        return DoctorCheck(name="frequency governor", status=DoctorStatus.UNKNOWN,
                           detail=_cannot(f"no cpufreq/scaling_governor for cpu {_cpus(unread)} (a VM or a kernel "
                                          "without cpufreq: the host decides the frequency)"),
                           fix="on bare metal, enable the cpufreq driver and set the performance governor")
    detail = ", ".join(f"cpu{cpu} {governor}" for cpu, governor in governors.items())
    slow = [cpu for cpu, governor in governors.items() if governor != "performance"]
    if slow:
        return DoctorCheck(name="frequency governor", status=DoctorStatus.WARN, detail=detail,
                           fix=f"cpupower -c {_cpus(slow)} frequency-set -g performance (the frequency then does "
                               "not follow the load between samples)")
    return DoctorCheck(name="frequency governor", status=DoctorStatus.PASS, detail=detail)


def check_boost(sys_root: Path = SYS) -> DoctorCheck:
    """Turbo lets the clock follow temperature and the other cores' load, so pairs see different frequencies."""
    boost = read_fact(sys_root / CPU_DIR / "cpufreq/boost")
    if boost is not None:
        if boost == "0":
            return DoctorCheck(name="turbo/boost", status=DoctorStatus.PASS, detail="off (cpufreq/boost=0)")
        return DoctorCheck(name="turbo/boost", status=DoctorStatus.WARN, detail=f"on (cpufreq/boost={boost})",
                           fix=f"echo 0 > {SYS / CPU_DIR / 'cpufreq/boost'}")
    no_turbo = read_fact(sys_root / CPU_DIR / "intel_pstate/no_turbo")
    if no_turbo is not None:
        if no_turbo == "1":
            return DoctorCheck(name="turbo/boost", status=DoctorStatus.PASS, detail="off (intel_pstate/no_turbo=1)")
        return DoctorCheck(name="turbo/boost", status=DoctorStatus.WARN,
                           detail=f"on (intel_pstate/no_turbo={no_turbo})",
                           fix=f"echo 1 > {SYS / CPU_DIR / 'intel_pstate/no_turbo'}")
    return DoctorCheck(name="turbo/boost", status=DoctorStatus.UNKNOWN,
                       detail=_cannot("neither cpufreq/boost nor intel_pstate/no_turbo exists (a VM, or a driver "
                                      "without a boost switch)"),
                       fix="on bare metal, disable turbo in the firmware or through the cpufreq driver")


def isolated_cpus(sys_root: Path = SYS, proc_root: Path = PROC) -> tuple[set[int], list[str]] | None:
    """CPUs the scheduler keeps general work off, and where that was read; None when nothing could be read."""
    sources: list[str] = []
    isolated: set[int] = set()
    cmdline = read_fact(proc_root / "cmdline")
    if cmdline is not None:
        sources.append("/proc/cmdline")
        for word in cmdline.split():
            key, _, value = word.partition("=")
            if key in ("isolcpus", "nohz_full") and value:
                # isolcpus=[flag,...,]cpulist: the flags (nohz, domain, managed_irq) are words, the CPUs digits
                cpulist = ",".join(part for part in value.split(",") if part[:1].isdigit())
                isolated.update(parse_cpu_list(cpulist))
    for relative in (f"{CPU_DIR}/isolated", "fs/cgroup/cpuset.cpus.isolated"):
        text = read_fact(sys_root / relative)
        if text is not None:
            sources.append(f"/sys/{relative}")
            isolated.update(parse_cpu_list(text))
    return (isolated, sources) if sources else None


def check_isolation(cpus: Sequence[int], sys_root: Path = SYS, proc_root: Path = PROC) -> DoctorCheck:
    found = isolated_cpus(sys_root, proc_root)
    if found is None:
        return DoctorCheck(name="isolated CPUs", status=DoctorStatus.UNKNOWN,
                           detail=_cannot("neither /proc/cmdline nor /sys/devices/system/cpu/isolated"),
                           fix="")
    isolated, sources = found
    shared = [cpu for cpu in cpus if cpu not in isolated]
    detail = (f"isolated {_cpus(sorted(isolated)) or 'none'} (isolcpus/nohz_full/cpuset partitions, from "
              f"{', '.join(sources)})")
    if shared:
        return DoctorCheck(name="isolated CPUs", status=DoctorStatus.WARN, detail=detail,
                           fix=f"keep general work off cpu {_cpus(shared)}: boot with isolcpus={_cpus(shared)} "
                               f"nohz_full={_cpus(shared)}, or an isolated cgroup cpuset partition")
    return DoctorCheck(name="isolated CPUs", status=DoctorStatus.PASS, detail=detail)


def _cpuset_cpus(sys_root: Path, proc_root: Path) -> str | None:
    """This process's cpuset (cgroup v2, else v1), as `<path>: <cpus>`; None when not exposed."""
    path = read_fact(proc_root / "self/cpuset")
    if path is None:
        return None
    relative = path.lstrip("/")
    for candidate in (sys_root / "fs/cgroup" / relative / "cpuset.cpus.effective",
                      sys_root / "fs/cgroup/cpuset" / relative / "cpuset.effective_cpus"):
        text = read_fact(candidate)
        if text is not None:
            return f"cpuset {path}: cpus {text}"
    return None


def check_affinity(cpus: Sequence[int], sys_root: Path = SYS, proc_root: Path = PROC) -> DoctorCheck:
    """taskset can only pin to CPUs this process (its cpuset and affinity) allows; a row on others cannot start."""
    try:
        allowed = read_affinity(os.getpid(), proc_root)
    except (OSError, RuntimeError) as exc:
        return DoctorCheck(name="cpuset and affinity", status=DoctorStatus.UNKNOWN,
                           detail=_cannot(f"this process's Cpus_allowed_list ({exc})"), fix="")
    online = set(online_cpus(sys_root))
    cpuset = _cpuset_cpus(sys_root, proc_root)
    detail = f"allowed cpus {_cpus(allowed)}" + (f"; {cpuset}" if cpuset else "")
    outside = [cpu for cpu in cpus if cpu not in allowed or cpu not in online]
    if outside:
        return DoctorCheck(name="cpuset and affinity", status=DoctorStatus.FAIL, detail=detail,
                           fix=f"cpu {_cpus(outside)} is offline or outside this process's cpuset/affinity: pin "
                               "to an allowed CPU (--cpus) or widen the runner's cpuset")
    return DoctorCheck(name="cpuset and affinity", status=DoctorStatus.PASS, detail=detail)


def check_smt(cpus: Sequence[int], sys_root: Path = SYS, proc_root: Path = PROC) -> DoctorCheck:
    """A pinned CPU's SMT siblings share its core's pipeline and caches: work on them is competing load."""
    unread = [cpu for cpu in cpus if read_fact(sys_root / CPU_DIR / f"cpu{cpu}/topology/thread_siblings_list") is None]
    if unread:
        return DoctorCheck(name="SMT siblings", status=DoctorStatus.UNKNOWN,
                           detail=_cannot(f"no topology/thread_siblings_list for cpu {_cpus(unread)}"), fix="")
    cores = {cpu: core for core in cpu_topology(sys_root) for cpu in core.cpus}
    found = isolated_cpus(sys_root, proc_root)
    isolated = found[0] if found else set()
    siblings = sorted({s for cpu in cpus if cpu in cores for s in cores[cpu].cpus if s != cpu and s not in cpus})
    smt = read_fact(sys_root / CPU_DIR / "smt/control") or "not exposed"
    detail = (f"SMT {smt}; siblings of cpu {_cpus(cpus)}: {_cpus(siblings) or 'none'}"
              + "".join(f"; {cores[c].label()}" for c in cpus if c in cores))
    busy = [s for s in siblings if s not in isolated]
    if busy:
        return DoctorCheck(name="SMT siblings", status=DoctorStatus.WARN, detail=detail,
                           fix=f"the bot keeps sibling cpu {_cpus(busy)} idle, other work may not: isolate it too "
                               f"(isolcpus={_cpus([*cpus, *busy])}) or turn SMT off (echo off > "
                               f"{SYS / CPU_DIR / 'smt/control'})")
    return DoctorCheck(name="SMT siblings", status=DoctorStatus.PASS, detail=detail)


def busy_snapshot(cpus: Sequence[int], proc_root: Path = PROC) -> dict[int, float] | None:
    """Non-idle milliseconds since boot of each CPU (the perf gate's own /proc/stat reading); None if unread."""
    try:
        return {cpu: cpu_busy_ms(cpu, proc_root) for cpu in cpus}
    except (OSError, RuntimeError, ValueError):
        return None


def check_load(cpus: Sequence[int], before: dict[int, float] | None, after: dict[int, float] | None,
               window_s: float, proc_root: Path = PROC) -> DoctorCheck:
    """Other work on the pinned CPUs over one window: what would invalidate samples right now."""
    loadavg = read_fact(proc_root / "loadavg")
    context = f"; load average {' '.join(loadavg.split()[:3])}" if loadavg else ""
    if before is None or after is None or window_s <= 0:
        return DoctorCheck(name="load on the pinned CPUs", status=DoctorStatus.UNKNOWN,
                           detail=_cannot(f"/proc/stat counters for cpu {_cpus(cpus)}") + context, fix="")
    shares = {cpu: max(after[cpu] - before[cpu], 0.0) / (window_s * 1000.0) for cpu in cpus}
    detail = (", ".join(f"cpu{cpu} {share:.0%} busy" for cpu, share in shares.items())
              + f" over {window_s:.2f} s{context}")
    worst = max(shares.values(), default=0.0)
    loaded = _cpus([cpu for cpu, share in shares.items() if share > LOAD_WARN_FRACTION])
    fix = f"find and stop what runs on cpu {loaded} (top -1, ps -eo pid,psr,comm), or pin the row elsewhere"
    if worst > LOAD_FAIL_FRACTION:
        return DoctorCheck(name="load on the pinned CPUs", status=DoctorStatus.FAIL, detail=detail, fix=fix)
    if worst > LOAD_WARN_FRACTION:
        return DoctorCheck(name="load on the pinned CPUs", status=DoctorStatus.WARN, detail=detail, fix=fix)
    return DoctorCheck(name="load on the pinned CPUs", status=DoctorStatus.PASS, detail=detail)


def check_numa(cpus: Sequence[int], sys_root: Path = SYS) -> DoctorCheck:
    """One row's CPUs on one node, so its memory is local (the perf placement keeps to one node)."""
    node_dir = sys_root / "devices/system/node"
    layout: dict[int, list[int]] = {}
    for entry in sorted(node_dir.glob("node[0-9]*")):
        cpulist = read_fact(entry / "cpulist")
        if cpulist is not None:
            layout[int(entry.name[4:])] = parse_cpu_list(cpulist)
    if not layout:
        return DoctorCheck(name="NUMA layout", status=DoctorStatus.UNKNOWN,
                           detail=_cannot("no /sys/devices/system/node (a kernel without NUMA: one memory node)"),
                           fix="")
    detail = "; ".join(f"node{node} cpus {_cpus(members) or 'none'}" for node, members in layout.items())
    nodes = sorted({node for node, members in layout.items() for cpu in cpus if cpu in members})
    if len(nodes) > 1:
        return DoctorCheck(name="NUMA layout", status=DoctorStatus.WARN, detail=detail,
                           fix=f"cpu {_cpus(cpus)} span nodes {_cpus(nodes)}: pin a row's CPUs within one node")
    return DoctorCheck(name="NUMA layout", status=DoctorStatus.PASS,
                       detail=f"{detail}; pinned CPUs on node {_cpus(nodes) or '?'}")


def check_aslr(proc_root: Path = PROC) -> DoctorCheck:
    """Full randomization (2), as pyperf advises: every fresh process samples a layout, so a layout that happens
    to suit one arm does not decide a pair; it is also a defence against the untrusted code."""
    value = read_fact(proc_root / "sys/kernel/randomize_va_space")
    if value is None:
        return DoctorCheck(name="ASLR", status=DoctorStatus.UNKNOWN,
                           detail=_cannot("/proc/sys/kernel/randomize_va_space"), fix="")
    if value == "2":
        return DoctorCheck(name="ASLR", status=DoctorStatus.PASS, detail="full randomization (randomize_va_space=2)")
    return DoctorCheck(name="ASLR", status=DoctorStatus.WARN, detail=f"randomize_va_space={value}",
                       fix="sysctl -w kernel.randomize_va_space=2 (full randomization)")


def check_perf_paranoid(proc_root: Path = PROC, euid: int | None = None) -> DoctorCheck:
    """`perf record` runs as the bot's user: above 2 the kernel refuses it (root is exempt)."""
    value = read_fact(proc_root / "sys/kernel/perf_event_paranoid")
    if value is None:
        return DoctorCheck(name="perf_event_paranoid", status=DoctorStatus.UNKNOWN,
                           detail=_cannot("/proc/sys/kernel/perf_event_paranoid (no perf events in this kernel)"),
                           fix="enable CONFIG_PERF_EVENTS for sampled stacks")
    root = (os.geteuid() if euid is None else euid) == 0
    detail = f"perf_event_paranoid={value}" + (" (running as root: not restricted)" if root else "")
    if not root and int(value) > PERF_PARANOID_MAX:
        return DoctorCheck(name="perf_event_paranoid", status=DoctorStatus.WARN, detail=detail,
                           fix=f"sysctl -w kernel.perf_event_paranoid={PERF_PARANOID_MAX} (perf record of the "
                               "bot's own processes)")
    return DoctorCheck(name="perf_event_paranoid", status=DoctorStatus.PASS, detail=detail)


# --- the doctor --------------------------------------------------------------------------------------------


def row_cpus(sys_root: Path = SYS) -> list[int]:
    """The CPU a row's performance samples would pin here: the placement's own choice, not a second rule."""
    _core, cpu_set, _siblings = choose_perf_core(cpu_topology(sys_root), os.sched_getaffinity(0))
    return cpu_set


def worst(checks: Sequence[DoctorCheck]) -> DoctorStatus:
    return max((check.status for check in checks), key=SEVERITY.__getitem__, default=DoctorStatus.PASS)


@dataclass(frozen=True)
class LoadWindow:
    """A load window opened ahead of the doctor, so trusted work kept off `cpus` meanwhile (a campaign's preflight
    and size gate) runs inside the window instead of before it; the doctor waits only for what is left."""

    cpus: tuple[int, ...]
    before: dict[int, float] | None
    opened: float
    """time.monotonic() when `before` was read."""


def open_load_window(cpus: Sequence[int], proc_root: Path = PROC) -> LoadWindow:
    """Start measuring the pinned CPUs now; the caller keeps its own work off them until run_doctor closes it."""
    pinned = sorted(set(cpus))
    return LoadWindow(cpus=tuple(pinned), before=busy_snapshot(pinned, proc_root), opened=time.monotonic())


def run_doctor(cpus: Sequence[int] | None = None, *, sandbox: SandboxKind = "bwrap", sys_root: Path = SYS,
               proc_root: Path = PROC, load_window_s: float = LOAD_WINDOW_S,
               search_path: str | None = None, window: LoadWindow | None = None) -> DoctorReport:
    """Every check for `cpus` (default: the CPU a row would pin). The load window is the only time it waits;
    `window` is one opened earlier for the same CPUs (one for other CPUs is ignored: a window starts here)."""
    started = time.monotonic()
    pinned = sorted(set(cpus)) if cpus else row_cpus(sys_root)
    affinity = check_affinity(pinned, sys_root, proc_root)  # read before kept_off narrows this process's own
    with kept_off(pinned):  # the doctor's own work (the sandbox probe included) is not load on the pinned CPUs
        if window is not None and list(window.cpus) == pinned:
            before, window_started = window.before, window.opened
        else:
            before, window_started = busy_snapshot(pinned, proc_root), time.monotonic()
        checks = [
            check_sandbox(sandbox),
            check_containment(sandbox),
            check_profilers(search_path),
            check_governor(pinned, sys_root),
            check_boost(sys_root),
            affinity,
            check_smt(pinned, sys_root, proc_root),
            check_isolation(pinned, sys_root, proc_root),
            check_numa(pinned, sys_root),
            check_aslr(proc_root),
            check_perf_paranoid(proc_root),
            check_hardware_counter(search_path),
        ]
        remaining = load_window_s - (time.monotonic() - window_started)
        if remaining > 0:
            time.sleep(remaining)  # the measurement window itself, not synchronisation
        after = busy_snapshot(pinned, proc_root)
        checks.append(check_load(pinned, before, after, time.monotonic() - window_started, proc_root))
    return DoctorReport(hostname=os.uname().nodename, cpus=pinned, checks=checks, status=worst(checks),
                        seconds=round(time.monotonic() - started, 3))


def render_text(report: DoctorReport) -> str:
    """One line per check, the fix indented under it: what an operator reads in a terminal or a job log."""
    lines = [f"kv-parity doctor on {report.hostname}, cpu {_cpus(report.cpus)}:"]
    for check in report.checks:
        lines.append(f"{check.status.value:<7} {check.name}: {check.detail}")
        if check.fix and check.status != DoctorStatus.PASS:
            lines.append(f"        -> {check.fix}")
    lines.append(f"overall {report.status.value} ({report.seconds:.2f} s)")
    return "\n".join(lines)
