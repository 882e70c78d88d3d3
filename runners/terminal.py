"""What a person running `kv-parity campaign` or `kv-parity demo` sees while it works.

On a terminal: one live panel (stage, row, pair k/N with ETA, the running median ratio, invalidations so far)
that collapses to a one-line summary per finished row. Elsewhere (CI logs, pipes): one plain line per stage
change, plus every invalidation and stop. `--verbose` prints every event (each pair), `--quiet` nothing; the
caller always prints the verdicts and the file to open last.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, field
from typing import Literal, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeRemainingColumn
from rich.text import Text

from runners.progress import ProgressEvent, ProgressSink

Verbosity = Literal["quiet", "normal", "verbose"]


def _where(event: ProgressEvent) -> str:
    return f"[{event.stage}{'/' + event.row if event.row else ''}]"


def _is_invalidation(event: ProgressEvent) -> bool:
    return event.stage == "performance" and "invalidated" in event.detail


@dataclass
class _RowState:
    """What one row has shown so far, for its live line and its closing summary."""

    row: str
    stage: str = ""
    ratios: list[float] = field(default_factory=list)
    invalidations: int = 0
    verdict: str = ""

    def summary(self) -> str:
        median = f", median ratio {statistics.median(self.ratios):.4f} over {len(self.ratios)} pairs" \
            if self.ratios else ""
        invalid = f", {self.invalidations} invalidated" if self.invalidations else ""
        return f"row {self.row}: {self.verdict or self.stage}{median}{invalid}"


class PlainProgress:
    """One line per stage change (per row), every invalidation and stop; every event when verbose."""

    def __init__(self, stream: TextIO | None = None, verbosity: Verbosity = "normal") -> None:
        self.stream = stream or sys.stderr
        self.verbosity = verbosity
        self._last: tuple[str, str | None] | None = None

    def __call__(self, event: ProgressEvent) -> None:
        if self.verbosity == "quiet":
            return
        key = (event.stage, event.row)
        if self.verbosity == "normal" and key == self._last and not _is_invalidation(event) \
                and event.stage not in ("stopped", "done", "parity", "fixtures"):
            return
        self._last = key
        count = f" {event.done}/{event.total}" if event.total else ""
        print(f"{_where(event)}{count} {event.detail}", file=self.stream, flush=True)


class LiveProgress:
    """A rich live panel on a terminal; finished rows scroll above it as one-line summaries."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                             TimeRemainingColumn(), console=self.console)
        self._task: TaskID | None = None
        self._rows: dict[str, _RowState] = {}
        self._current: _RowState | None = None
        self.status = Text("starting")
        self._live = Live(Group(self.status, self._bar), console=self.console, transient=True,
                          refresh_per_second=8)
        self._live.start()

    def __call__(self, event: ProgressEvent) -> None:
        if event.row is not None:
            state = self._rows.setdefault(event.row, _RowState(event.row))
            if self._current is not None and self._current is not state:
                self._close_row(self._current)
            self._current = state
            state.stage = event.stage
            if event.ratio is not None:
                state.ratios.append(event.ratio)
            if _is_invalidation(event):
                state.invalidations += 1
            if event.stage == "parity":
                state.verdict = event.detail.split(":", 1)[0]
        self.status.plain = self._status_line(event)
        if event.stage == "performance" and event.total:
            if self._task is None:
                self._task = self._bar.add_task("pairs", total=event.total)
            self._bar.update(self._task, completed=event.done or 0, total=event.total,
                             description=f"pairs {event.row or ''}")
        if event.stage in ("stopped", "done"):
            self.close()

    def _status_line(self, event: ProgressEvent) -> str:
        line = f"{_where(event)} {event.detail}"
        state = self._current
        if state is not None and state.ratios:
            line += f"  ·  running median ratio {statistics.median(state.ratios):.4f}"
        if state is not None and state.invalidations:
            line += f"  ·  {state.invalidations} invalidated"
        return line

    def _close_row(self, state: _RowState) -> None:
        self.console.print(state.summary(), highlight=False)
        if self._task is not None:
            self._bar.remove_task(self._task)
            self._task = None

    def close(self) -> None:
        if self._current is not None:
            self._close_row(self._current)
            self._current = None
        self._live.stop()


def terminal_progress(verbosity: Verbosity, stream: TextIO | None = None) -> ProgressSink:
    """Live panel on a TTY at normal verbosity; plain lines otherwise."""
    target = stream or sys.stderr
    if verbosity == "normal" and target.isatty():
        return LiveProgress(Console(file=target))
    return PlainProgress(target, verbosity)
