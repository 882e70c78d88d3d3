"""CPU placement and host facts: which core a row's processes run on, and what the node looked like.

Everything is read from /sys and /proc; a fact the kernel does not expose is recorded as None or
"unavailable", never guessed. Pinning goes through `taskset` (util-linux) as an argv prefix, so the pinned
command is visible verbatim in the report.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from runners.schema.report import HostFacts, Placement

SYS = Path("/sys")
PROC = Path("/proc")
UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class Core:
    """One physical core: its logical CPUs (SMT threads) and where it sits."""

    node: int
    package: int
    core_id: int
    cpus: tuple[int, ...]

    def label(self) -> str:
        threads = ",".join(str(c) for c in self.cpus)
        return f"node {self.node} package {self.package} core {self.core_id} (logical cpus {threads})"


def parse_cpu_list(text: str) -> list[int]:
    """Kernel cpulist syntax ("0-3,8,10-11") to sorted CPU numbers."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return sorted(cpus)


def format_cpu_list(cpus: list[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def read_fact(path: Path) -> str | None:
    """A /proc or /sys fact, stripped; None when this machine does not expose it."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


def online_cpus(sys_root: Path = SYS) -> list[int]:
    text = read_fact(sys_root / "devices/system/cpu/online")
    if text is None:
        count = os.cpu_count()
        if count is None:
            raise RuntimeError("cannot determine the online CPUs: no /sys cpu/online and no os.cpu_count()")
        return list(range(count))
    return parse_cpu_list(text)


def _numa_map(sys_root: Path) -> dict[int, int]:
    """cpu -> NUMA node; empty when the kernel exposes no nodes (then all memory is one node)."""
    mapping: dict[int, int] = {}
    node_dir = sys_root / "devices/system/node"
    for entry in sorted(node_dir.glob("node[0-9]*")):
        cpulist = read_fact(entry / "cpulist")
        if cpulist is not None:
            for cpu in parse_cpu_list(cpulist):
                mapping[cpu] = int(entry.name[4:])
    return mapping


def cpu_topology(sys_root: Path = SYS) -> list[Core]:
    """Physical cores of the online CPUs, grouped by the kernel's SMT sibling lists."""
    nodes = _numa_map(sys_root)
    cores: dict[tuple[int, ...], Core] = {}
    for cpu in online_cpus(sys_root):
        topo = sys_root / f"devices/system/cpu/cpu{cpu}/topology"
        siblings_text = read_fact(topo / "thread_siblings_list")
        threads = tuple(sorted({cpu, *(parse_cpu_list(siblings_text) if siblings_text else [])}))
        if threads not in cores:
            core_text = read_fact(topo / "core_id")
            cores[threads] = Core(
                node=nodes.get(cpu, 0),
                package=int(read_fact(topo / "physical_package_id") or 0),
                core_id=int(core_text) if core_text is not None else cpu,
                cpus=threads,
            )
    return sorted(cores.values(), key=lambda core: core.cpus)


def _ranked_cores(cores: list[Core], allowed: set[int]) -> list[Core]:
    """Usable cores, highest-numbered first, with cpu0's core (kernel housekeeping) last."""
    usable = [core for core in cores if allowed.intersection(core.cpus)]
    return sorted(usable, key=lambda core: (0 in core.cpus, -max(core.cpus)))


def choose_perf_core(cores: list[Core], allowed: set[int]) -> tuple[Core, list[int], list[int]]:
    """The core for a row's performance samples: (core, cpu_set of one thread, SMT siblings left idle)."""
    ranked = _ranked_cores(cores, allowed)
    if not ranked:
        raise RuntimeError(f"no online core is in this process's allowed CPUs {sorted(allowed)}")
    core = ranked[0]
    cpu = min(allowed.intersection(core.cpus))
    return core, [cpu], [c for c in core.cpus if c != cpu]


def perf_placement(sys_root: Path = SYS, proc_root: Path = PROC) -> Placement:
    """One SMT thread of one physical core on one NUMA node; its siblings are excluded from all use."""
    core, cpu_set, siblings = choose_perf_core(cpu_topology(sys_root), os.sched_getaffinity(0))
    return Placement(
        cpu_set=cpu_set,
        physical_core=core.label(),
        numa_node=core.node,
        siblings_excluded=siblings,
        host=host_facts(sys_root, proc_root),
    )


def correctness_cpu_sets(count: int, sys_root: Path = SYS) -> list[list[int]]:
    """Up to `count` disjoint CPU sets of one whole physical core each; fewer when cores run out (waves)."""
    allowed = os.sched_getaffinity(0)
    ranked = _ranked_cores(cpu_topology(sys_root), allowed)
    return [sorted(allowed.intersection(core.cpus)) for core in ranked[: max(count, 0)]]


def pinned_argv(cpu_set: list[int], argv: list[str]) -> list[str]:
    """`taskset -c <cpus> argv...`: pins the process before it executes, without a shell."""
    if not cpu_set:
        raise ValueError("cannot pin to an empty CPU set")
    taskset = shutil.which("taskset")
    if taskset is None:
        raise RuntimeError("taskset (util-linux) is required to pin processes and is not on PATH")
    return [taskset, "-c", format_cpu_list(cpu_set), *argv]


def read_affinity(pid: int, proc_root: Path = PROC) -> list[int]:
    """The CPUs a process may run on, from /proc/<pid>/status (readable while it is a zombie too)."""
    for line in (proc_root / str(pid) / "status").read_text(encoding="utf-8").splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return parse_cpu_list(line.split(":", 1)[1])
    raise RuntimeError(f"/proc/{pid}/status has no Cpus_allowed_list")


def stat_tick_ms() -> float:
    """Granularity of /proc/stat CPU times (one USER_HZ tick)."""
    return 1000.0 / os.sysconf("SC_CLK_TCK")


def cpu_busy_ms(cpu: int, proc_root: Path = PROC) -> float:
    """Non-idle time of one CPU since boot (user+nice+system+irq+softirq+steal), from /proc/stat.

    Steal counts as busy: time the hypervisor gave to someone else is competing load too.
    """
    with (proc_root / "stat").open(encoding="utf-8") as handle:
        for line in handle:
            fields = line.split()
            if fields and fields[0] == f"cpu{cpu}":
                user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
                return (user + nice + system + irq + softirq + steal) * stat_tick_ms()
    raise RuntimeError(f"cpu{cpu} is not in /proc/stat (offline?)")


def _thermal_max_c(sys_root: Path) -> float | None:
    readings = []
    for zone in sorted((sys_root / "class/thermal").glob("thermal_zone*")):
        text = read_fact(zone / "temp")
        if text is not None and text.lstrip("-").isdigit():
            readings.append(int(text) / 1000.0)
    return max(readings) if readings else None


def _scaling_mhz(cpu: int, sys_root: Path) -> float | None:
    text = read_fact(sys_root / f"devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq")
    return int(text) / 1000.0 if text is not None and text.isdigit() else None


def cpu_telemetry(cpu: int, sys_root: Path = SYS) -> dict[str, float]:
    """Cheap per-sample readings for the dependence diagnostics; keys are absent when not exposed.

    Deliberately avoids /proc/cpuinfo, whose frequency read can interrupt every CPU, the pinned one included.
    """
    readings: dict[str, float] = {}
    temperature = _thermal_max_c(sys_root)
    if temperature is not None:
        readings["temperature_c"] = temperature
    frequency = _scaling_mhz(cpu, sys_root)
    if frequency is not None:
        readings["frequency_mhz"] = frequency
    return readings


def _cpuinfo(proc_root: Path) -> tuple[str, list[float]]:
    model = UNAVAILABLE
    mhz: list[float] = []
    text = read_fact(proc_root / "cpuinfo") or ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model") and model == UNAVAILABLE:
            model = value.strip()
        elif key == "cpu MHz":
            mhz.append(float(value))
    return model, mhz


def _governor(cpus: list[int], sys_root: Path) -> str | None:
    found = {
        text
        for cpu in cpus
        if (text := read_fact(sys_root / f"devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor")) is not None
    }
    return ",".join(sorted(found)) if found else None


def _boost(sys_root: Path) -> str | None:
    boost = read_fact(sys_root / "devices/system/cpu/cpufreq/boost")
    if boost is not None:
        return f"{'on' if boost == '1' else 'off'} (cpufreq/boost={boost})"
    no_turbo = read_fact(sys_root / "devices/system/cpu/intel_pstate/no_turbo")
    if no_turbo is not None:
        return f"{'off' if no_turbo == '1' else 'on'} (intel_pstate/no_turbo={no_turbo})"
    return None


def host_facts(sys_root: Path = SYS, proc_root: Path = PROC) -> HostFacts:
    """The node characteristics the report records for every row (Campaign concurrency, Stage 8)."""
    cpus = online_cpus(sys_root)
    model, cpuinfo_mhz = _cpuinfo(proc_root)
    scaling = [reading for cpu in cpus if (reading := _scaling_mhz(cpu, sys_root)) is not None]
    mhz = scaling or cpuinfo_mhz
    uname = os.uname()
    return HostFacts(
        hostname=uname.nodename,
        kernel=f"{uname.sysname} {uname.release} {uname.version}",
        cpu_model=model,
        logical_cpus=len(cpus),
        smt=read_fact(sys_root / "devices/system/cpu/smt/control") or UNAVAILABLE,
        numa_nodes=max(len(set(_numa_map(sys_root).values())), 1),
        governor=_governor(cpus, sys_root),
        boost=_boost(sys_root),
        load_average=[round(v, 2) for v in os.getloadavg()],
        temperature_c=_thermal_max_c(sys_root),
        frequency_mhz=round(sum(mhz) / len(mhz), 1) if mhz else None,
    )


@contextmanager
def kept_off(cpus: list[int]) -> Iterator[list[int]]:
    """Run the calling thread (and the processes it spawns, until they pin themselves) off `cpus`.

    The orchestrator's own work (spawning, parsing, /proc reads) then never lands on the measured core or its
    SMT siblings. Yields the CPUs used; when no other CPU is allowed the affinity is left unchanged.
    """
    previous = os.sched_getaffinity(0)
    elsewhere = previous - set(cpus)
    if not elsewhere:
        yield sorted(previous)
        return
    os.sched_setaffinity(0, elsewhere)
    try:
        yield sorted(elsewhere)
    finally:
        os.sched_setaffinity(0, previous)
