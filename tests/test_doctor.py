"""`kv-parity doctor`: every check on this machine's real /proc and /sys, and on fake kernel trees that make it
PASS, WARN, FAIL or unreadable; the command's output, JSON and exit status. What a campaign and a row job record
of it is checked on tests/test_distributed.py's campaigns."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.cli.main import main
from bot.exit_codes import EXIT_FOR_STATUS
from bot.publish import render
from bot.publish.html_report import report_html
from bot.publish.views import Links
from runners.exec.containment import PARENT, detect
from runners.exec.placement import SYS, choose_perf_core, cpu_topology, stat_tick_ms
from runners.schema.report import CampaignReport, DoctorCheck, DoctorReport, DoctorStatus
from runners.stages.doctor import (
    PROFILERS,
    LoadWindow,
    busy_snapshot,
    check_affinity,
    check_aslr,
    check_boost,
    check_containment,
    check_governor,
    check_isolation,
    check_load,
    check_numa,
    check_perf_paranoid,
    check_profilers,
    check_sandbox,
    check_smt,
    open_load_window,
    row_cpus,
    run_doctor,
    worst,
)
from tests.report_factory import make_report
from tests.test_placement import _write, fake_sys

CHECK_NAMES = ["sandbox", "containment", "profilers", "frequency governor", "turbo/boost", "cpuset and affinity",
               "SMT siblings", "isolated CPUs", "NUMA layout", "ASLR", "perf_event_paranoid",
               "hardware instruction counter", "load on the pinned CPUs"]


def fake_proc(root: Path, *, cmdline: str = "quiet", aslr: str | None = "2", paranoid: str | None = "2",
              busy_ticks: dict[int, int] | None = None, allowed: str | None = "0-7") -> Path:
    """A /proc with the files the doctor reads; cpu N has `busy_ticks[N]` user ticks since boot."""
    _write(root / "cmdline", cmdline)
    _write(root / "loadavg", "0.10 0.20 0.30 1/100 4242")
    if aslr is not None:
        _write(root / "sys/kernel/randomize_va_space", aslr)
    if paranoid is not None:
        _write(root / "sys/kernel/perf_event_paranoid", paranoid)
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
    lines += [f"cpu{cpu} {ticks} 0 0 1000 0 0 0 0 0 0" for cpu, ticks in sorted((busy_ticks or {}).items())]
    _write(root / "stat", "\n".join(lines))
    if allowed is not None:
        _write(root / str(os.getpid()) / "status", f"Name:\tpython\nCpus_allowed_list:\t{allowed}")
    return root


def ticks_for(ms: float) -> int:
    return round(ms / stat_tick_ms())


# --- this machine ------------------------------------------------------------------------------------------


def test_real_node_every_check_reports_and_unreadable_facts_say_so() -> None:
    report = run_doctor(load_window_s=0.2)
    assert [check.name for check in report.checks] == CHECK_NAMES
    assert report.cpus == row_cpus()
    assert report.status == worst(report.checks)
    for check in report.checks:
        if check.status == DoctorStatus.UNKNOWN:
            assert check.detail.startswith("cannot be read here: "), check
        if check.status in (DoctorStatus.WARN, DoctorStatus.FAIL):
            assert check.fix, check
    by_name = {check.name: check for check in report.checks}
    assert by_name["sandbox"].status == DoctorStatus.PASS  # bubblewrap is installed here: a real sandboxed `id -u`
    assert by_name["cpuset and affinity"].status == DoctorStatus.PASS  # the default CPU is the placement's choice
    governor_file = SYS / f"devices/system/cpu/cpu{report.cpus[0]}/cpufreq/scaling_governor"
    assert (by_name["frequency governor"].status == DoctorStatus.UNKNOWN) == (not governor_file.exists())


def test_default_cpus_are_the_perf_placement_choice() -> None:
    _core, cpu_set, _siblings = choose_perf_core(cpu_topology(), os.sched_getaffinity(0))
    assert row_cpus() == cpu_set


def test_cli_prints_every_check_writes_json_and_exits_by_the_worst(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "doctor.json"
    code = main(["doctor", "--json", str(out)])
    report = DoctorReport.model_validate_json(out.read_text(encoding="utf-8"))
    assert code == EXIT_FOR_STATUS[report.status]
    printed = capsys.readouterr().out
    for check in report.checks:
        assert f"{check.status.value:<7} {check.name}: " in printed
    assert printed.rstrip().endswith(f"({report.seconds:.2f} s)")
    assert f"overall {report.status.value}" in printed


def test_cli_cpus_outside_this_process_fail_and_bad_lists_are_refused(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    beyond = max(os.sched_getaffinity(0)) + 1
    out = tmp_path / "doctor.json"
    assert main(["doctor", "--cpus", str(beyond), "--sandbox", "none", "--json", str(out)]) == 2
    report = DoctorReport.model_validate_json(out.read_text(encoding="utf-8"))
    assert report.cpus == [beyond]
    assert {c.name: c.status for c in report.checks}["cpuset and affinity"] == DoctorStatus.FAIL
    capsys.readouterr()
    assert main(["doctor", "--cpus", "two"]) == 2
    assert "--cpus 'two' is not a CPU list" in capsys.readouterr().err
    assert main(["doctor", "--cpus", ","]) == 2
    assert "--cpus ',' is not a CPU list" in capsys.readouterr().err
    assert main(["doctor", "--cpus", "5-3"]) == 2
    assert "--cpus '5-3' names no CPU" in capsys.readouterr().err
    assert main(["doctor", "--cpus", "0-99999999999"]) == 2  # refused before a range that size is expanded
    assert "names cpu 99999999999; Linux numbers CPUs 0-8191" in capsys.readouterr().err
    assert main(["doctor", "--sandbox", "none", "--json", str(tmp_path / "missing" / "d.json")]) == 2
    assert "cannot write" in capsys.readouterr().err


# --- each check on a fake kernel tree ----------------------------------------------------------------------


def test_sandbox_real_probe_passes_missing_bwrap_fails_none_warns(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    assert check_sandbox("bwrap").status == DoctorStatus.PASS
    assert check_sandbox("none").status == DoctorStatus.WARN
    monkeypatch.setenv("PATH", str(tmp_path))  # a node without bubblewrap
    failed = check_sandbox("bwrap")
    assert failed.status == DoctorStatus.FAIL
    assert "bubblewrap (bwrap) is not installed" in failed.detail


def test_containment_names_the_mechanism_and_warns_without_a_cgroup(tmp_path: Path) -> None:
    """This node mounts cgroup v1's cpuset and cpuacct (the CI machines too): the doctor says so. A node without
    a cgroup hierarchy falls back to the seccomp program, which the doctor names with the reason."""
    here = check_containment("bwrap")
    assert here.status == DoctorStatus.PASS and here.detail.startswith("cgroup v"), here.detail
    mounts = tmp_path / "mounts"
    mounts.write_text("proc /proc proc rw 0 0\n", encoding="utf-8")
    fallback = check_containment("bwrap", detect(mounts=mounts))
    assert fallback.status == DoctorStatus.WARN
    assert "refuses fork" in fallback.detail and "no cgroup v1 cpuset hierarchy is mounted" in fallback.detail
    assert check_containment("none").status == DoctorStatus.WARN


def _unified_hierarchy(tmp_path: Path, controllers: str) -> tuple[Path, Path, Path]:
    """A cgroup v2 hierarchy as files (this VM mounts v1, so v2 is tested on its files): the root's controllers,
    its and the bot's parent's `cgroup.subtree_control` (the kernel makes that file when the directory is made)."""
    root = tmp_path / "unified"
    (root / PARENT).mkdir(parents=True)
    (root / "cgroup.controllers").write_text(controllers + "\n", encoding="ascii")
    for level in (root, root / PARENT):
        (level / "cgroup.subtree_control").write_text("\n", encoding="ascii")
    mounts = tmp_path / "mounts"
    mounts.write_text(f"proc /proc proc rw 0 0\ncgroup2 {root} cgroup2 rw,nosuid,nodev 0 0\n", encoding="utf-8")
    own = tmp_path / "cgroup"
    own.write_text("0::/system.slice/kv-parity.service\n", encoding="utf-8")
    return root, mounts, own


def test_cgroup_v2_is_preferred_and_hands_cpuset_down_from_the_root(tmp_path: Path) -> None:
    """Under v2 the bot's parent is made under the hierarchy's root (a cgroup holding processes, such as the
    service's own, cannot hand a controller to children), with cpuset enabled at the root and in the parent."""
    root, mounts, own = _unified_hierarchy(tmp_path, "cpuset cpu io memory pids")
    found = detect(mounts=mounts, own=own)
    assert (found.kind, found.cpuset, found.cpuacct) == ("cgroup2", root / PARENT, root / PARENT), found
    for level in (root, root / PARENT):
        assert (level / "cgroup.subtree_control").read_text(encoding="ascii") == "+cpuset"
    assert check_containment("bwrap", found).status == DoctorStatus.PASS


def test_a_unified_hierarchy_without_cpuset_falls_back_naming_why(tmp_path: Path) -> None:
    """A systemd-confined service without `Delegate=yes` sees v2 without the cpuset controller and no v1: the
    seccomp program, and the reason for each hierarchy in the doctor's detail."""
    root, mounts, own = _unified_hierarchy(tmp_path, "cpu io memory pids")
    found = detect(mounts=mounts, own=own)
    assert found.kind == "seccomp"
    assert f"v2 at {root}: the unified hierarchy at {root} does not offer the cpuset controller" in found.detail
    assert "v1: no cgroup v1 cpuset hierarchy is mounted" in found.detail
    assert (root / PARENT / "cgroup.subtree_control").read_text(encoding="ascii") == "\n", "nothing was enabled"
    assert check_containment("bwrap", found).status == DoctorStatus.WARN


def test_profilers_present_pass_missing_warn_naming_them(tmp_path: Path) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in PROFILERS:
        (tools / tool).write_text("#!/bin/sh\n", encoding="utf-8")
        (tools / tool).chmod(stat.S_IRWXU)
    assert check_profilers(str(tools)).status == DoctorStatus.PASS
    (tools / "valgrind").unlink()
    missing = check_profilers(str(tools))
    assert missing.status == DoctorStatus.WARN
    assert "valgrind missing" in missing.detail and "install valgrind" in missing.fix


def test_governor_performance_pass_powersave_warn_no_cpufreq_unknown(tmp_path: Path) -> None:
    sys_root = fake_sys(tmp_path / "sys")
    assert check_governor([3], sys_root).status == DoctorStatus.PASS
    _write(sys_root / "devices/system/cpu/cpu3/cpufreq/scaling_governor", "powersave")
    slow = check_governor([2, 3], sys_root)
    assert slow.status == DoctorStatus.WARN
    assert "cpu3 powersave" in slow.detail and "cpupower -c 3 frequency-set -g performance" in slow.fix
    vm = check_governor([3], fake_sys(tmp_path / "vm", cpufreq=False))
    assert vm.status == DoctorStatus.UNKNOWN
    assert vm.detail.startswith("cannot be read here: no cpufreq/scaling_governor for cpu 3")


def test_boost_off_pass_on_warn_for_both_drivers_absent_unknown(tmp_path: Path) -> None:
    sys_root = fake_sys(tmp_path / "sys")  # intel_pstate/no_turbo=1
    assert check_boost(sys_root).status == DoctorStatus.PASS
    _write(sys_root / "devices/system/cpu/intel_pstate/no_turbo", "0")
    turbo = check_boost(sys_root)
    assert turbo.status == DoctorStatus.WARN and "intel_pstate/no_turbo" in turbo.fix
    _write(sys_root / "devices/system/cpu/cpufreq/boost", "1")  # acpi-cpufreq/amd: the generic switch wins
    boost = check_boost(sys_root)
    assert boost.status == DoctorStatus.WARN and boost.detail == "on (cpufreq/boost=1)"
    _write(sys_root / "devices/system/cpu/cpufreq/boost", "0")
    assert check_boost(sys_root).status == DoctorStatus.PASS
    unknown = check_boost(fake_sys(tmp_path / "vm", cpufreq=False))
    assert unknown.status == DoctorStatus.UNKNOWN and unknown.detail.startswith("cannot be read here: ")


def test_smt_sibling_warns_until_isolated_or_smt_off(tmp_path: Path) -> None:
    sys_root = fake_sys(tmp_path / "sys")  # cpu c and c+4 share a core
    proc_root = fake_proc(tmp_path / "proc")
    shared = check_smt([3], sys_root, proc_root)
    assert shared.status == DoctorStatus.WARN
    assert "siblings of cpu 3: 7" in shared.detail and "isolcpus=3,7" in shared.fix
    isolated = fake_proc(tmp_path / "proc-isolated", cmdline="quiet isolcpus=domain,managed_irq,3,7 nohz_full=3,7")
    assert check_smt([3], sys_root, isolated).status == DoctorStatus.PASS
    assert check_smt([3], fake_sys(tmp_path / "nosmt", smt=False), proc_root).status == DoctorStatus.PASS
    (sys_root / "devices/system/cpu/cpu3/topology/thread_siblings_list").unlink()
    unknown = check_smt([3], sys_root, proc_root)
    assert unknown.status == DoctorStatus.UNKNOWN and unknown.detail.startswith("cannot be read here: ")


def test_isolation_from_cmdline_sysfs_and_cpuset_partitions(tmp_path: Path) -> None:
    sys_root = fake_sys(tmp_path / "sys")
    plain = fake_proc(tmp_path / "plain")
    shared = check_isolation([3], sys_root, plain)
    assert shared.status == DoctorStatus.WARN and "isolcpus=3 nohz_full=3" in shared.fix
    assert check_isolation([3], sys_root, fake_proc(tmp_path / "iso", cmdline="isolcpus=nohz,2-3")).status \
        == DoctorStatus.PASS
    assert check_isolation([3], sys_root, fake_proc(tmp_path / "nohz", cmdline="nohz_full=3")).status \
        == DoctorStatus.PASS
    _write(sys_root / "fs/cgroup/cpuset.cpus.isolated", "3")  # a cgroup v2 isolated partition
    partition = check_isolation([3], sys_root, plain)
    assert partition.status == DoctorStatus.PASS and "/sys/fs/cgroup/cpuset.cpus.isolated" in partition.detail
    unknown = check_isolation([3], tmp_path / "empty-sys", tmp_path / "empty-proc")
    assert unknown.status == DoctorStatus.UNKNOWN and unknown.detail.startswith("cannot be read here: ")


def test_affinity_allowed_pass_outside_fail_unreadable_unknown(tmp_path: Path) -> None:
    sys_root = fake_sys(tmp_path / "sys")
    proc_root = fake_proc(tmp_path / "proc", allowed="0-3")
    _write(proc_root / "self/cpuset", "/runner")
    _write(sys_root / "fs/cgroup/runner/cpuset.cpus.effective", "0-3")
    allowed = check_affinity([3], sys_root, proc_root)
    assert allowed.status == DoctorStatus.PASS and allowed.detail == "allowed cpus 0,1,2,3; cpuset /runner: cpus 0-3"
    outside = check_affinity([3, 5], sys_root, proc_root)
    assert outside.status == DoctorStatus.FAIL and outside.fix.startswith("cpu 5 is offline or outside")
    _write(sys_root / "devices/system/cpu/online", "0-2")
    assert check_affinity([3], sys_root, proc_root).status == DoctorStatus.FAIL  # offline
    unknown = check_affinity([3], sys_root, fake_proc(tmp_path / "bare", allowed=None))
    assert unknown.status == DoctorStatus.UNKNOWN and unknown.detail.startswith("cannot be read here: ")


def test_load_from_two_proc_stat_readings(tmp_path: Path) -> None:
    before = busy_snapshot([2, 3], fake_proc(tmp_path / "t0", busy_ticks={2: 0, 3: 0}))
    quiet = busy_snapshot([2, 3], fake_proc(tmp_path / "t1", busy_ticks={2: ticks_for(10), 3: 0}))
    busy = busy_snapshot([2, 3], fake_proc(tmp_path / "t2", busy_ticks={2: ticks_for(200), 3: 0}))
    owned = busy_snapshot([2, 3], fake_proc(tmp_path / "t3", busy_ticks={2: 0, 3: ticks_for(900)}))
    proc_root = tmp_path / "t0"
    assert check_load([2, 3], before, quiet, 1.0, proc_root).status == DoctorStatus.PASS
    warned = check_load([2, 3], before, busy, 1.0, proc_root)
    assert warned.status == DoctorStatus.WARN
    assert warned.detail == "cpu2 20% busy, cpu3 0% busy over 1.00 s; load average 0.10 0.20 0.30"
    assert "on cpu 2 " in warned.fix
    assert check_load([2, 3], before, owned, 1.0, proc_root).status == DoctorStatus.FAIL
    assert busy_snapshot([9], proc_root) is None  # cpu9 is not in /proc/stat
    unknown = check_load([9], None, None, 1.0, proc_root)
    assert unknown.status == DoctorStatus.UNKNOWN and unknown.detail.startswith("cannot be read here: ")


def test_numa_one_node_pass_spanning_warn_no_nodes_unknown(tmp_path: Path) -> None:
    sys_root = fake_sys(tmp_path / "sys")  # node0: cpus 0,1,4,5; node1: 2,3,6,7
    one = check_numa([0, 4], sys_root)
    assert one.status == DoctorStatus.PASS and one.detail.endswith("pinned CPUs on node 0")
    spanning = check_numa([0, 3], sys_root)
    assert spanning.status == DoctorStatus.WARN and "span nodes 0,1" in spanning.fix
    shutil.rmtree(sys_root / "devices/system/node")
    unknown = check_numa([0], sys_root)
    assert unknown.status == DoctorStatus.UNKNOWN and unknown.detail.startswith("cannot be read here: ")


def test_aslr_full_pass_partial_or_off_warn_unreadable_unknown(tmp_path: Path) -> None:
    assert check_aslr(fake_proc(tmp_path / "full")).status == DoctorStatus.PASS
    for value in ("0", "1"):
        off = check_aslr(fake_proc(tmp_path / f"aslr{value}", aslr=value))
        assert off.status == DoctorStatus.WARN and "kernel.randomize_va_space=2" in off.fix
    assert check_aslr(fake_proc(tmp_path / "none", aslr=None)).status == DoctorStatus.UNKNOWN


def test_perf_event_paranoid_limits_non_root_only(tmp_path: Path) -> None:
    assert check_perf_paranoid(fake_proc(tmp_path / "p2"), euid=1000).status == DoctorStatus.PASS
    strict = fake_proc(tmp_path / "p4", paranoid="4")
    refused = check_perf_paranoid(strict, euid=1000)
    assert refused.status == DoctorStatus.WARN and "kernel.perf_event_paranoid=2" in refused.fix
    as_root = check_perf_paranoid(strict, euid=0)
    assert as_root.status == DoctorStatus.PASS and "running as root" in as_root.detail
    assert check_perf_paranoid(fake_proc(tmp_path / "none", paranoid=None), euid=1000).status \
        == DoctorStatus.UNKNOWN


def test_a_window_opened_earlier_counts_the_load_since_it_opened(tmp_path: Path) -> None:
    """A campaign opens the first row's window when its builds end: the load the doctor reports is what the
    pinned CPU did since then, not since the doctor started; a window for other CPUs is not used."""
    sys_root = fake_sys(tmp_path / "sys")
    proc_root = fake_proc(tmp_path / "proc", busy_ticks={3: 0})
    window = open_load_window([3], proc_root)
    assert window.cpus == (3,) and window.before == {3: 0.0}
    fake_proc(tmp_path / "proc", busy_ticks={3: ticks_for(10_000)})  # cpu3 busy since: far more than the window
    early = run_doctor([3], sandbox="none", sys_root=sys_root, proc_root=proc_root, load_window_s=0.05,
                       window=window)
    assert {c.name: c.status for c in early.checks}["load on the pinned CPUs"] == DoctorStatus.FAIL
    elsewhere = LoadWindow(cpus=(2,), before={2: 0.0}, opened=window.opened)
    fresh = run_doctor([3], sandbox="none", sys_root=sys_root, proc_root=proc_root, load_window_s=0.05,
                       window=elsewhere)
    assert {c.name: c.status for c in fresh.checks}["load on the pinned CPUs"] == DoctorStatus.PASS


def test_whole_doctor_on_a_fake_tree_and_the_worst_decides(tmp_path: Path) -> None:
    sys_root = fake_sys(tmp_path / "sys")
    proc_root = fake_proc(tmp_path / "proc", cmdline="isolcpus=3,7", busy_ticks={3: 0})
    report = run_doctor([3], sandbox="none", sys_root=sys_root, proc_root=proc_root, load_window_s=0.05)
    statuses = {check.name: check.status for check in report.checks}
    assert list(statuses) == CHECK_NAMES
    assert statuses["SMT siblings"] == statuses["isolated CPUs"] == statuses["load on the pinned CPUs"] \
        == DoctorStatus.PASS
    assert report.status == DoctorStatus.WARN  # --sandbox none
    assert json.loads(report.model_dump_json())["status"] == "WARN"

    def check(status: DoctorStatus) -> DoctorCheck:
        return DoctorCheck(name=status.value, status=status, detail="")

    assert worst([]) == DoctorStatus.PASS
    assert worst([check(DoctorStatus.UNKNOWN), check(DoctorStatus.PASS)]) == DoctorStatus.UNKNOWN
    assert worst([check(DoctorStatus.UNKNOWN), check(DoctorStatus.WARN)]) == DoctorStatus.WARN
    assert worst([check(DoctorStatus.FAIL), check(DoctorStatus.WARN)]) == DoctorStatus.FAIL
    assert [EXIT_FOR_STATUS[s] for s in DoctorStatus] == [0, 1, 1, 2]


# --- campaigns record it per row node ----------------------------------------------------------------------


def test_older_reports_without_a_doctor_still_load_and_render() -> None:
    data = json.loads(make_report("pass").model_dump_json())
    for row in data["rows"]:
        del row["doctor"]
    report = CampaignReport.model_validate(data)
    assert all(row.doctor is None for row in report.rows)
    assert "Node doctor" not in render.report_markdown(report, Links())
    assert "Node doctor" not in report_html(report)


# --- the campaign workflow's row job ----------------------------------------------------------------------

WORKFLOW = Path(__file__).resolve().parent.parent / ".github/workflows/kv-parity-campaign.yml"


def _doctor_step() -> tuple[int, int, dict[str, Any]]:
    steps = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"]["rows"]["steps"]
    doctor = next(i for i, step in enumerate(steps) if "kv-parity doctor" in step.get("run", ""))
    row = next(i for i, step in enumerate(steps) if "kv-parity row" in step.get("run", ""))
    return doctor, row, steps[doctor]


def test_row_jobs_run_the_doctor_first_and_a_bad_node_warns_without_stopping_the_row(tmp_path: Path) -> None:
    doctor, row, step = _doctor_step()
    assert doctor < row, "the doctor runs before the row"
    assert "${{" not in step["run"] and "continue-on-error" not in step
    for exit_status in (0, 1, 2):
        fake = tmp_path / f"exit-{exit_status}"
        fake.mkdir()
        (fake / "kv-parity").write_text(f"#!/bin/sh\necho doctor output\nexit {exit_status}\n", encoding="utf-8")
        (fake / "kv-parity").chmod(stat.S_IRWXU)
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                              env={"PATH": f"{fake}:/usr/bin:/bin"}, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr  # the step never stops the row
        warned = f"::warning title=kv-parity doctor::exit {exit_status} " in done.stdout
        assert warned == (exit_status != 0), done.stdout
        assert done.stdout.startswith("doctor output")
