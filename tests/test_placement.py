"""CPU placement on a synthetic SMT/NUMA sysfs tree and on this machine, with real pinned processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from runners.exec.placement import (
    choose_perf_core,
    correctness_cpu_sets,
    cpu_busy_ms,
    cpu_topology,
    host_facts,
    kept_off,
    parse_cpu_list,
    perf_placement,
    pinned_argv,
    read_affinity,
    stat_tick_ms,
)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="utf-8")


def fake_sys(
    root: Path, *, nodes: int = 2, cores_per_node: int = 2, smt: bool = True, cpufreq: bool = True
) -> Path:
    """A Linux-like /sys: logical cpu c and c + cores are SMT siblings (the usual x86 numbering)."""
    cores = nodes * cores_per_node
    threads = 2 if smt else 1
    total = cores * threads
    base = root / "devices/system"
    _write(base / "cpu/online", f"0-{total - 1}")
    _write(base / "cpu/smt/control", "on" if smt else "notsupported")
    for cpu in range(total):
        core = cpu % cores
        siblings = [core + t * cores for t in range(threads)]
        topo = base / f"cpu/cpu{cpu}/topology"
        _write(topo / "core_id", str(core % cores_per_node))
        _write(topo / "physical_package_id", str(core // cores_per_node))
        _write(topo / "thread_siblings_list", ",".join(str(s) for s in siblings))
        if cpufreq:
            _write(base / f"cpu/cpu{cpu}/cpufreq/scaling_governor", "performance")
            _write(base / f"cpu/cpu{cpu}/cpufreq/scaling_cur_freq", "2400000")
    for node in range(nodes):
        members = [c for c in range(total) if (c % cores) // cores_per_node == node]
        _write(base / f"node/node{node}/cpulist", ",".join(str(c) for c in members))
    if cpufreq:
        _write(base / "cpu/intel_pstate/no_turbo", "1")
        _write(root / "class/thermal/thermal_zone0/temp", "48000")
        _write(root / "class/thermal/thermal_zone1/temp", "51500")
    return root


def test_parse_cpu_list() -> None:
    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpu_list("") == []


def test_topology_groups_smt_siblings_by_node(tmp_path: Path) -> None:
    cores = cpu_topology(fake_sys(tmp_path))
    assert [(c.node, c.cpus) for c in cores] == [(0, (0, 4)), (0, (1, 5)), (1, (2, 6)), (1, (3, 7))]


def test_perf_core_is_the_highest_away_from_cpu0_with_siblings_excluded(tmp_path: Path) -> None:
    cores = cpu_topology(fake_sys(tmp_path))
    core, cpu_set, siblings = choose_perf_core(cores, set(range(8)))
    assert core.cpus == (3, 7) and core.node == 1
    assert cpu_set == [3] and siblings == [7]
    core, cpu_set, _ = choose_perf_core(cores, {0, 4, 1})
    assert core.cpus == (1, 5) and cpu_set == [1], "only allowed CPUs are used"
    core, cpu_set, siblings = choose_perf_core(cores, {0, 4})
    assert cpu_set == [0] and siblings == [4], "cpu0's core only when nothing else is allowed"


def test_correctness_sets_are_disjoint_whole_cores(tmp_path: Path) -> None:
    root = fake_sys(tmp_path, nodes=1, cores_per_node=os.cpu_count() or 1, smt=False)
    allowed = sorted(os.sched_getaffinity(0))
    sets = correctness_cpu_sets(64, root)
    assert len(sets) == len(allowed), "fewer sets than asked when cores run out"
    flat = [c for s in sets for c in s]
    assert sorted(flat) == allowed and len(set(flat)) == len(flat)
    preferred = max(allowed) if len(allowed) > 1 else allowed[0]
    assert correctness_cpu_sets(1, root) == [[preferred]], "highest core first, cpu0 last"
    assert correctness_cpu_sets(0, root) == []


def test_host_facts_read_what_is_exposed(tmp_path: Path) -> None:
    facts = host_facts(fake_sys(tmp_path), Path("/proc"))
    assert facts.logical_cpus == 8 and facts.numa_nodes == 2 and facts.smt == "on"
    assert facts.governor == "performance"
    assert facts.boost == "off (intel_pstate/no_turbo=1)"
    assert facts.temperature_c == 51.5 and facts.frequency_mhz == 2400.0


def test_host_facts_record_absence_instead_of_guessing(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    _write(root / "devices/system/cpu/online", "0-1")
    proc = tmp_path / "proc"
    _write(proc / "cpuinfo", "processor\t: 0\n")
    facts = host_facts(root, proc)
    assert facts.smt == "unavailable" and facts.cpu_model == "unavailable"
    assert facts.governor is None and facts.boost is None
    assert facts.temperature_c is None and facts.frequency_mhz is None
    assert facts.numa_nodes == 1


def test_this_machine() -> None:
    placement = perf_placement()
    facts = placement.host
    assert facts.logical_cpus == len(parse_cpu_list(Path("/sys/devices/system/cpu/online").read_text()))
    assert len(placement.cpu_set) == 1 and placement.cpu_set[0] in os.sched_getaffinity(0)
    assert not set(placement.cpu_set) & set(placement.siblings_excluded)
    if len(os.sched_getaffinity(0)) > 1:
        assert placement.cpu_set != [0]


def test_pinned_argv_pins_a_real_process() -> None:
    cpu = max(os.sched_getaffinity(0))
    argv = pinned_argv([cpu], [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"])
    assert argv[1:3] == ["-c", str(cpu)] and Path(argv[0]).name == "taskset"
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"[{cpu}]"


def test_read_affinity_of_a_running_child() -> None:
    cpu = max(os.sched_getaffinity(0))
    script = "import sys; print('ready', flush=True); sys.stdin.read()"
    child = subprocess.Popen(
        pinned_argv([cpu], [sys.executable, "-c", script]),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready", "Python runs, so taskset has pinned it"
        assert read_affinity(child.pid) == [cpu]
    finally:
        child.communicate("")


def test_cpu_busy_counts_a_pinned_process() -> None:
    cpu = max(os.sched_getaffinity(0))
    before = cpu_busy_ms(cpu)
    script = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass"
    completed = subprocess.run(pinned_argv([cpu], [sys.executable, "-c", script]), check=True)
    assert completed.returncode == 0
    assert cpu_busy_ms(cpu) - before >= 200 - 2 * stat_tick_ms()


def test_cpu_busy_of_an_unknown_cpu_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="cpu4096"):
        cpu_busy_ms(4096)


def test_kept_off_moves_the_orchestrator_and_restores_it() -> None:
    before = os.sched_getaffinity(0)
    target = max(before)
    with kept_off([target]) as used:
        if len(before) > 1:
            assert target not in os.sched_getaffinity(0) and target not in used
    assert os.sched_getaffinity(0) == before
