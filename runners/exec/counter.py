"""Hardware instruction counts of each measured sample, from `perf stat`, where the node's PMU offers them.

Valgrind counts each arm after a row's samples (runners/stages/instructions.py); where `perf_event_open` offers
`instructions:u` (bare metal, not a VM without a virtual PMU), every sample also records its own user-space
instruction count at no extra run. `perf stat` is attached by the bot to the sample's first sandboxed process while
bwrap blocks before the command (`SampleCounter.attached`): a separate trusted process, never an ancestor of the
harness, so no descriptor of its output reaches pull-request code, and counting is enabled (and acknowledged)
before the harness runs. The counters follow the process through its execs and are inherited by everything it
starts; once the sample is reaped, perf is interrupted and writes the total to a file of the bot's own.
`kv-parity doctor` says whether the node offers the counter (`check_hardware_counter`).
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from runners.exec.containment import MeasurementFault
from runners.schema.report import DoctorCheck, DoctorStatus

PERF_STAT_EVENT = "instructions:u"
ENABLE_TIMEOUT_S = 10.0
"""How long perf may take to attach and acknowledge that counting is on before the sample is given up."""
COUNTER_EXIT_WAIT_S = 10.0
"""How long perf may take to write its count once interrupted, before it is killed."""


class CounterError(MeasurementFault):
    """perf could not be attached to a sample, or did not acknowledge counting: the row stops, naming why."""


def _event_pattern(event: str) -> re.Pattern[str]:
    """The event, or one PMU's share of it on a hybrid CPU (`cpu_core/instructions:u/`)."""
    return re.compile(r"(?:[\w.-]+/)?" + re.escape(event) + "/?")


def counted_command(perf: str, output: Path, command: list[str], event: str = PERF_STAT_EVENT) -> list[str]:
    """`command` under `perf stat`, counting `event` of it and everything it starts into `output`. For trusted
    commands only: perf's output stream is inherited by what it starts."""
    return [perf, "stat", "-x,", "-e", event, "-o", str(output), "--", *command]


def parse_perf_stat(text: str, event: str = PERF_STAT_EVENT) -> float | None:
    """`event`'s count from `perf stat -x,` output; None when perf did not count it exactly (`<not supported>` on a
    VM without a PMU, `<not counted>`, or a count scaled from part of the run).

    CSV fields: value, unit, event, (with `-G`, the cgroup,) run time, percentage of the run counted, then
    optional metric columns. A hybrid CPU reports one line per core type; their counts add up."""
    pattern = _event_pattern(event)
    total: float | None = None
    for line in text.splitlines():
        fields = line.split(",")
        if line.startswith("#") or len(fields) < 5 or not pattern.fullmatch(fields[2].strip()):
            continue
        cgroup = fields[3].startswith("/") and len(fields) > 5
        value, share = fields[0].strip(), fields[5 if cgroup else 4].strip()
        try:
            number = float(value)
        except ValueError:
            continue
        try:
            if float(share) != 100.0:
                return None  # multiplexed: perf scaled an estimate, not a count
        except ValueError:
            return None
        total = (total or 0.0) + number
    return total


def hardware_counter_check(perf: str | None, output: str | None, count: float | None) -> DoctorCheck:
    """The doctor's answer from what `perf stat` printed for a trivial command (or that perf is missing)."""
    name = "hardware instruction counter"
    if perf is None:
        return DoctorCheck(name=name, status=DoctorStatus.WARN, detail="perf missing: samples count no instructions",
                           fix="install perf (linux-perf or linux-tools): on a node with a PMU every measured sample "
                               "then records its instruction count")
    if count is not None:
        return DoctorCheck(name=name, status=DoctorStatus.PASS,
                           detail=f"perf_event_open offers {PERF_STAT_EVENT} ({count:,.0f} for `true`): every "
                                  "measured sample records its instruction count")
    shown = next((line.strip() for line in (output or "").splitlines()
                  if line.strip() and not line.startswith("#")), "no output")
    return DoctorCheck(name=name, status=DoctorStatus.WARN,
                       detail=f"perf_event_open does not offer {PERF_STAT_EVENT} here (perf stat: {shown}): samples "
                              "record no instruction count; the counts after each row's samples (valgrind) remain",
                       fix="a VM without a virtual PMU cannot count: bare metal, or a hypervisor exposing the PMU "
                           "(KVM `-cpu host`, a cloud instance type with PMU access); as non-root, "
                           "kernel.perf_event_paranoid <= 2")


def probe_hardware_counter(search_path: str | None = None) -> tuple[str | None, str | None, float | None]:
    """(perf, what it printed, the count) for `perf stat` around `true`: the node's own answer, not a guess."""
    perf = shutil.which("perf", path=search_path)
    true = shutil.which("true")
    if perf is None or true is None:
        return perf, None, None
    with tempfile.TemporaryDirectory(prefix="kv-parity-perf-stat-") as scratch:
        output = Path(scratch) / "stat.csv"
        try:
            subprocess.run(counted_command(perf, output, [true]), capture_output=True, check=False, timeout=60)
            text = output.read_text(encoding="utf-8", errors="replace") if output.is_file() else None
        except (OSError, subprocess.SubprocessError) as exc:
            return perf, f"perf stat failed: {exc}", None
    return perf, text, parse_perf_stat(text or "")


def check_hardware_counter(search_path: str | None = None) -> DoctorCheck:
    """`kv-parity doctor`: does this node give each measured sample its instruction count?"""
    return hardware_counter_check(*probe_hardware_counter(search_path))


@dataclass(frozen=True)
class SampleCounter:
    """What counts each measured sample: `perf` attached for `event` (`instructions:u` in production; a software
    event such as `task-clock` where no PMU exists, for the tests of the attachment itself)."""

    perf: str
    event: str = PERF_STAT_EVENT

    @classmethod
    def offered(cls, search_path: str | None = None) -> SampleCounter | None:
        """The counter this node offers (the doctor's probe found an exact count), else None."""
        perf, _, count = probe_hardware_counter(search_path)
        return cls(perf) if perf is not None and count is not None else None

    def attached(self, pid: int, output: Path) -> AttachedCount:
        """Count `pid` and everything it starts from now until it exits, into `output` (a file of the bot's)."""
        return AttachedCount(self, pid, output)


class AttachedCount:
    """`perf stat -p PID`, started disabled and enabled through its control pipe; on entry counting is on (perf
    acknowledged it), and after exit `value` is the count (None when perf did not count exactly)."""

    def __init__(self, counter: SampleCounter, pid: int, output: Path) -> None:
        self.counter, self.pid, self.output = counter, pid, output
        self.value: float | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._control: int | None = None

    def __enter__(self) -> AttachedCount:
        ctl_read, ctl_write = os.pipe()
        ack_read, ack_write = os.pipe()
        try:
            self._process = subprocess.Popen(
                [self.counter.perf, "stat", "-x,", "-e", self.counter.event, "-p", str(self.pid), "-D", "-1",
                 "--control", f"fd:{ctl_read},{ack_write}", "-o", str(self.output)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                pass_fds=(ctl_read, ack_write))
        finally:
            os.close(ctl_read)
            os.close(ack_write)
        self._control = ctl_write
        try:
            os.write(ctl_write, b"enable\n")
            ready, _, _ = select.select([ack_read], [], [], ENABLE_TIMEOUT_S)
            acknowledged = os.read(ack_read, 64) if ready else b""
        finally:
            os.close(ack_read)
        if not acknowledged.startswith(b"ack"):
            self._stop()
            raise CounterError(f"perf stat did not start counting pid {self.pid} within {ENABLE_TIMEOUT_S:g} s: "
                               f"{self._stderr()}")
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._stop()
        try:
            text = self.output.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        self.value = parse_perf_stat(text, self.counter.event)

    def _stop(self) -> None:
        """perf is interrupted, which makes it read and write what it counted (an attached `perf stat` notices its
        process's end only on its next one-second look); one that ignores that is killed."""
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=COUNTER_EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._control is not None:
            os.close(self._control)
            self._control = None

    def _stderr(self) -> str:
        process = self._process
        if process is None or process.stderr is None:
            return "no output"
        return process.stderr.read().decode("utf-8", "replace").strip()[-300:] or "no output"
