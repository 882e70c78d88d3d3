"""The fourth attack pass, on real sandboxed processes: work that escapes the pinned core and the kernel's accounting,
state that outlives a sandbox in the kernel keyring, and sample paths that tell a harness what it is running.

1. A harness that ignores SIGCHLD and forks a worker onto another core (the fixture's ESCAPE_FRACTION) looked
   faster on every clock. Each pinned start now runs in a cgroup of its own (cpuset locked to the row's CPUs, CPU
   time of every task), or, without a usable cgroup, under a seccomp program that refuses process creation and
   `sched_setaffinity`: either way the slower candidate FAILs.
2. The sandbox uid's keyring survived from one start to the next (the fixture's KEYRING_ENTROPY let the four
   "fresh" determinism processes agree on their entropy): every sandbox now refuses add_key/keyctl/request_key.
3. Every sample's `--timings-jsonl` path is an opaque token of one length.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from runners.exec.containment import JOIN_FAILED, SECCOMP_ONLY, ContainmentError, host_containment
from runners.exec.counter import SampleCounter
from runners.exec.placement import perf_placement
from runners.exec.sandbox import SYSTEM_PYTHON, Run, Sandbox
from runners.perf.sampler import run_performance
from runners.schema.config import CampaignConfig, InvalidationRules, PerfConfig
from runners.schema.report import PerfResult, PerfVerdict, Placement
from runners.stages.determinism import run_determinism
from tests.conftest import HarnessBuilder

ATTACK_PERF = PerfConfig(pairs=20, warmups_per_arm=1,
                         invalidation=InvalidationRules(max_interference_ms=1e6, max_reruns_per_pair=3))
"""Twenty pairs: the exact lower bound is the sixth smallest ratio, so a few pairs spoiled by the host still FAIL."""


@pytest.fixture(scope="module")
def placement() -> Placement:
    return perf_placement()


def _gate(tmp: Path, baseline: Path, candidate: Path, args: list[str], placement: Placement,
          sandbox: Sandbox, counter: SampleCounter | None = None) -> PerfResult:
    staged = tmp / "bin"
    staged.mkdir(parents=True, exist_ok=True)
    binaries = {"baseline": staged / "baseline", "candidate": staged / "candidate"}
    for arm, source in (("baseline", baseline), ("candidate", candidate)):
        binaries[arm].write_bytes(source.read_bytes())
        binaries[arm].chmod(0o755)
    return run_performance(row_id="escape", harness_args=args, binaries=binaries, perf=ATTACK_PERF,
                           timing_field="replay_execution_ms", placement=placement, workdir=tmp / "work",
                           sandbox=sandbox, counter=counter)


# --- 1. a forked worker stays on the pinned CPU and in the accounting ------------------------------------------


def test_a_worker_forked_onto_another_core_is_confined_and_counted(
    tmp_path: Path, harness: HarnessBuilder, demo_row_args: list[str], placement: Placement
) -> None:
    """20 % more work, half of it in a forked worker that moves to the other core and is reaped by the kernel:
    uncontained it read ×0.85 on its own timer and ×0.78 kernel CPU (PASS, benchmarks/README.md); in its cgroup
    the worker shares the pinned CPU and its CPU time is counted, so the kernel's CPU clock sees the whole 1.2 and
    the row can never PASS. The CPU clock is the assertion: a busy host moves wall times, not CPU time."""
    sandbox = Sandbox()
    if not sandbox.containment.uses_cgroup:
        pytest.skip(f"no usable cgroup here: {sandbox.containment.detail}")
    result = _gate(tmp_path, harness.binary(WORK_SCALE=2.0),
                   harness.binary(WORK_SCALE=2.4, ESCAPE_FRACTION=0.5), demo_row_args, placement, sandbox)
    _never_passes_and_the_cpu_clock_fails(result, sandbox.containment.kind)


def test_without_a_cgroup_the_seccomp_program_refuses_the_fork(
    tmp_path: Path, harness: HarnessBuilder, demo_row_args: list[str], placement: Placement
) -> None:
    """The fork is refused, so the harness does all the work itself, where rusage counts it."""
    result = _gate(tmp_path, harness.binary(WORK_SCALE=2.0),
                   harness.binary(WORK_SCALE=2.4, ESCAPE_FRACTION=0.5), demo_row_args, placement,
                   Sandbox(containment=SECCOMP_ONLY))
    _never_passes_and_the_cpu_clock_fails(result, "seccomp")


def _never_passes_and_the_cpu_clock_fails(result: PerfResult, containment: str) -> None:
    assert result.containment == containment
    assert result.verdict != PerfVerdict.PASS, result.reason
    cpu_gate = next(gate for gate in result.kernel_gates if gate.clock == "process_cpu_ms")
    assert cpu_gate.verdict == PerfVerdict.FAIL and cpu_gate.bounds.lower > 1.05, cpu_gate.reason


def _python(code: str, *args: str) -> list[str]:
    return [str(SYSTEM_PYTHON), "-I", "-S", "-c", code, *args]


CONFINED_PROBE = """
import json, os, sys, threading
seen = {}
try:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    seen["fork"] = "allowed"
except OSError as exc:
    seen["fork"] = exc.errno
try:
    os.sched_setaffinity(0, os.sched_getaffinity(0))
    seen["setaffinity"] = "allowed"
except OSError as exc:
    seen["setaffinity"] = exc.errno
ran = []
thread = threading.Thread(target=lambda: ran.append(1))
thread.start()
thread.join()
seen["thread"] = "allowed" if ran else "refused"
print(json.dumps(seen))
"""


def test_the_confined_program_refuses_process_creation_and_moves_but_not_threads(placement: Placement) -> None:
    sandbox = Sandbox(containment=SECCOMP_ONLY)
    pinned = sandbox.run(sandbox.harness_run(_python(CONFINED_PROBE), cpu_set=placement.cpu_set), timeout=60)
    assert pinned.returncode == 0, pinned.stderr
    assert json.loads(pinned.stdout) == {"fork": errno.EPERM, "setaffinity": errno.EPERM, "thread": "allowed"}
    unpinned = sandbox.run(sandbox.harness_run(_python(CONFINED_PROBE)), timeout=60)
    assert json.loads(unpinned.stdout)["fork"] == "allowed", "only pinned harness starts are confined"


ESCAPE_PROBE = """
import json, os, sys
cpus = sorted(os.sched_getaffinity(0))
try:
    os.sched_setaffinity(0, set(range(os.cpu_count())) - set(cpus))
    moved = sorted(os.sched_getaffinity(0))
except OSError as exc:
    moved = exc.errno
print(json.dumps({"pinned": cpus, "moved": moved}))
"""


def test_a_contained_start_cannot_move_itself_off_its_cpus(placement: Placement) -> None:
    sandbox = Sandbox()
    if not sandbox.containment.uses_cgroup:
        pytest.skip(f"no usable cgroup here: {sandbox.containment.detail}")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs a second CPU to move to")
    completed = sandbox.run(sandbox.harness_run(_python(ESCAPE_PROBE), cpu_set=placement.cpu_set), timeout=60)
    assert completed.returncode == 0, completed.stderr
    seen = json.loads(completed.stdout)
    assert seen == {"pinned": placement.cpu_set, "moved": errno.EINVAL}, "the cpuset holds no other CPU"


REAPED_BY_THE_KERNEL = """
import os, signal, sys, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
read, write = os.pipe()
if os.fork() == 0:
    until = time.process_time() + float(sys.argv[1])
    while time.process_time() < until:
        pass
    os.write(write, repr(time.process_time()).encode())
    os._exit(0)
os.close(write)
print(os.read(read, 64).decode(), flush=True)
"""


def test_the_cgroup_counts_a_child_the_kernel_reaped(placement: Placement) -> None:
    """wait4's rusage never sees a child reaped by the kernel (SIGCHLD ignored); the cgroup's accounting does. The
    start joins its cgroup itself (`StartCgroup.launcher`) before it runs anything."""
    containment = host_containment()
    if not containment.uses_cgroup:
        pytest.skip(f"no usable cgroup here: {containment.detail}")
    with containment.cgroup(placement.cpu_set) as cgroup:
        process = subprocess.Popen([*cgroup.launcher(), *_python(REAPED_BY_THE_KERNEL, "0.3")],
                                   stdout=subprocess.PIPE, text=True)
        assert process.stdout is not None
        child_cpu_ms = float(process.stdout.read()) * 1000.0
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        cgroup.drain()
        cgroup.check_joined(process.returncode)
        assert (usage.ru_utime + usage.ru_stime) * 1000.0 < child_cpu_ms, "rusage misses the kernel-reaped child"
        assert cgroup.cpu_ms() >= child_cpu_ms, "the cgroup counts every task"


def test_a_start_that_cannot_join_its_cgroup_is_the_bots_failure_not_the_harness(placement: Placement) -> None:
    """The joining shell exits 125 before anything runs when the kernel refuses the move: a ContainmentError,
    never a sample or a process record the harness would be blamed for."""
    containment = host_containment()
    if not containment.uses_cgroup:
        pytest.skip(f"no usable cgroup here: {containment.detail}")
    with containment.cgroup(placement.cpu_set) as cgroup:
        refused = [*cgroup.launcher()[:4], "/proc/self/no-such-cgroup-file", "--", "/bin/true"]
        completed = subprocess.run(refused, capture_output=True, check=False)
        assert completed.returncode == JOIN_FAILED
        with pytest.raises(ContainmentError, match="cannot move a start into"):
            cgroup.check_joined(completed.returncode)


def test_a_cgroup_that_cannot_hold_the_row_cpus_is_refused() -> None:
    containment = host_containment()
    if not containment.uses_cgroup:
        pytest.skip(f"no usable cgroup here: {containment.detail}")
    with pytest.raises(ContainmentError, match="not the row's|cannot make"), containment.cgroup([4095]):
        pass


# --- 2. the keyring ---------------------------------------------------------------------------------------------


KEYRING_PROBE = """
import ctypes, json, os, platform, sys
add_key, keyctl = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
user, name = b"user", b"kv-parity-test-key"
if sys.argv[1] == "write":
    value = b"state!!!"
    got = libc.syscall(add_key, user, name, value, ctypes.c_size_t(len(value)), ctypes.c_long(-4))
else:
    got = libc.syscall(keyctl, ctypes.c_long(10), ctypes.c_long(-4), user, name, ctypes.c_long(0))
print(json.dumps({"result": got, "errno": ctypes.get_errno() if got < 0 else 0}))
"""


def test_a_key_written_by_one_start_is_invisible_to_the_next() -> None:
    sandbox = Sandbox()
    wrote = sandbox.run(sandbox.harness_run(_python(KEYRING_PROBE, "write")), timeout=60)
    found = sandbox.run(sandbox.harness_run(_python(KEYRING_PROBE, "search")), timeout=60)
    assert json.loads(wrote.stdout) == {"result": -1, "errno": errno.EPERM}, wrote.stderr
    assert json.loads(found.stdout) == {"result": -1, "errno": errno.EPERM}, found.stderr
    assert sandbox.record().keyrings is False


def test_keyring_entropy_cannot_hide_nondeterminism(
    tmp_path: Path, harness: HarnessBuilder, demo_row_args: list[str], placement: Placement,
    campaign_config: CampaignConfig,
) -> None:
    """A candidate drawing its entropy once per uid into the keyring would make its four "fresh" processes agree;
    refused the keyring, each draws its own and the leak shows."""
    outcome = run_determinism(row_id="keyring", binaries={"baseline": harness.binary(),
                                                          "candidate": harness.binary(KEYRING_ENTROPY=True)},
                              harness_args=demo_row_args, exclusions=campaign_config.harness.exclusions,
                              cpu_sets=[placement.cpu_set],
                              workdir=tmp_path / "determinism", sandbox=Sandbox())
    assert outcome.failures == [] and outcome.blocked == []
    assert outcome.result.unstable_arms == ["candidate"]


# --- 3. opaque sample paths -------------------------------------------------------------------------------------


def test_a_sample_path_says_nothing_of_the_sample(
    tmp_path: Path, harness: HarnessBuilder, demo_row_args: list[str], placement: Placement
) -> None:
    binary = harness.binary()
    result = _gate(tmp_path, binary, binary, demo_row_args, placement, Sandbox())
    runs = [*result.probes, *result.warmups, *result.samples]
    paths = [sample.argv[sample.argv.index("--timings-jsonl") + 1] for sample in runs]
    assert len(set(paths)) == len(paths) == 2 + 2 + 2 * ATTACK_PERF.pairs
    assert len({len(path) for path in paths}) == 1, "every path has one length"
    words = ("probe", "warmup", "measured", "baseline", "candidate", "-p", "-a")
    for path in paths:
        own = Path(path).parent.name
        assert not any(word in own for word in words), own
    assert {Path(path).parent.parent for path in paths} == {tmp_path / "work" / "timings"}


def test_killing_a_sample_leaves_no_task_behind(placement: Placement) -> None:
    """A start that outlives its timeout is killed whole: the cgroup is drained and removed."""
    sandbox = Sandbox()
    if not sandbox.containment.uses_cgroup:
        pytest.skip(f"no usable cgroup here: {sandbox.containment.detail}")
    parent = sandbox.containment.cpuset
    assert parent is not None
    ours = f"{os.getpid()}-"  # other workers' starts make their own cgroups beside ours meanwhile
    before = {path.name for path in parent.iterdir() if path.is_dir() and path.name.startswith(ours)}
    sleeper = "import os, time\nos.fork()\ntime.sleep(60)"
    marker = f"kv-parity-sleeper-{uuid.uuid4().hex}"  # in the argv of the start and of its forked child
    with pytest.raises(subprocess.TimeoutExpired):
        sandbox.run(Run(argv=_python(sleeper, marker), cpu_set=tuple(placement.cpu_set), proc=True), timeout=1)
    after = {path.name for path in parent.iterdir() if path.is_dir() and path.name.startswith(ours)}
    assert after - before == set(), "the start's cgroup was removed"
    assert _processes_naming(marker) == [], "no task of the start survives it"


def _processes_naming(marker: str) -> list[str]:
    """The command lines of this host's processes that contain `marker` (processes may exit while /proc is read)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if marker.encode() in cmdline:
            found.append(f"{pid}: {cmdline.decode(errors='replace')}")
    return found


def test_processes_naming_finds_a_live_process() -> None:
    """The check above can fail: a process that holds the marker in its argv is found while it lives."""
    marker = f"kv-parity-waiter-{uuid.uuid4().hex}"
    waits = "import sys; print('ready', flush=True); sys.stdin.read()"
    with subprocess.Popen(_python(waits, marker), stdin=subprocess.PIPE, stdout=subprocess.PIPE) as waiter:
        try:
            assert waiter.stdout is not None and waiter.stdout.readline() == b"ready\n"  # its exec is complete
            assert [line.split(":", 1)[0] for line in _processes_naming(marker)] == [str(waiter.pid)]
        finally:
            assert waiter.stdin is not None
            waiter.stdin.close()
    assert _processes_naming(marker) == []


# --- 4. each sample's own hardware count, where the PMU offers one ---------------------------------------------


def test_perf_stat_is_attached_before_the_harness_and_counts_every_sample_into_the_bots_file(
    tmp_path: Path, harness: HarnessBuilder, demo_row_args: list[str], placement: Placement
) -> None:
    """Where the PMU offers `instructions:u`, every sandboxed sample is counted by `perf stat` attached to its first
    process while bwrap waits, counting the harness and all it starts into a file of the bot's. This VM has no
    PMU, so the same attachment counts the software event `task-clock` (CPU milliseconds): every probe, warmup and
    sample gets a count of its own."""
    perf = shutil.which("perf")
    if perf is None:
        pytest.skip("perf is not installed")
    binary = harness.binary()
    sandbox = Sandbox()
    result = _gate(tmp_path, binary, binary, demo_row_args, placement, sandbox,
                   counter=SampleCounter(perf, event="task-clock"))
    assert result.counter == "task-clock"
    runs = [*result.probes, *result.warmups, *result.samples]
    assert len(runs) == 2 + 2 + 2 * ATTACK_PERF.pairs, "every probe, warmup and sample, none dropped"
    assert all(run.counted is not None and run.counted > 0 for run in runs), [run.counted for run in runs]
    files = sorted((tmp_path / "work" / "logs").glob("*.perf-stat"))
    assert len(files) == len(runs), "one count per start, kept where the bot writes, never in a sandbox's directory"
    assert not list((tmp_path / "work" / "timings").rglob("*.perf-stat"))
