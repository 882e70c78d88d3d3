"""What a person sees while a campaign runs: a live panel on a terminal, one line per stage in a log."""

from __future__ import annotations

import io

from rich.console import Console

from runners.progress import ProgressEvent
from runners.terminal import LiveProgress, PlainProgress, terminal_progress


def _script() -> list[ProgressEvent]:
    events = [
        ProgressEvent(stage="pin", detail="resolving main and pr"),
        ProgressEvent(stage="build", detail="baseline 1234"),
        ProgressEvent(stage="build", detail="candidate 5678"),
        ProgressEvent(stage="determinism", row="vllm-agg", detail="2 + 2 fresh processes"),
        ProgressEvent(stage="determinism", row="vllm-agg", detail="baseline repetition 1: abc"),
        ProgressEvent(stage="parity", row="vllm-agg", detail="PASS: identical"),
        ProgressEvent(stage="performance", row="vllm-agg", detail="10 warmups done", done=0, total=4),
    ]
    ratios = [1.01, 0.99, 1.02, 1.00]
    for pair, ratio in enumerate(ratios, start=1):
        events.append(ProgressEvent(stage="performance", row="vllm-agg", detail=f"pair {pair} (baseline-first)",
                                    done=pair, total=4, ratio=ratio))
        if pair == 2:
            events.append(ProgressEvent(stage="performance", row="vllm-agg", detail="pair 2 attempt 1 invalidated: "
                                        "competing load", done=1, total=4))
    events.append(ProgressEvent(stage="determinism", row="sglang-agg", detail="2 + 2 fresh processes"))
    events.append(ProgressEvent(stage="done", detail="semantic PASS · performance PASS · sizes PASS"))
    return events


def test_plain_logs_one_line_per_stage_change_plus_invalidations() -> None:
    out = io.StringIO()
    sink = PlainProgress(out)
    for event in _script():
        sink(event)
    lines = out.getvalue().splitlines()
    assert lines == [
        "[pin] resolving main and pr",
        "[build] baseline 1234",
        "[determinism/vllm-agg] 2 + 2 fresh processes",
        "[parity/vllm-agg] PASS: identical",
        "[performance/vllm-agg] 0/4 10 warmups done",
        "[performance/vllm-agg] 1/4 pair 2 attempt 1 invalidated: competing load",
        "[determinism/sglang-agg] 2 + 2 fresh processes",
        "[done] semantic PASS · performance PASS · sizes PASS",
    ]


def test_verbose_prints_every_event_and_quiet_none() -> None:
    loud, silent = io.StringIO(), io.StringIO()
    for event in _script():
        PlainProgress(loud, "verbose")(event)
        PlainProgress(silent, "quiet")(event)
    assert len(loud.getvalue().splitlines()) == len(_script())
    assert "pair 3 (baseline-first)" in loud.getvalue()
    assert silent.getvalue() == ""


def test_live_panel_collapses_each_row_to_a_summary_with_median_and_invalidations() -> None:
    out = io.StringIO()
    sink = LiveProgress(Console(file=out, force_terminal=True, width=120))
    script = _script()
    for event in script[:-2]:
        sink(event)
    assert sink.status.plain.endswith("running median ratio 1.0050  ·  1 invalidated")
    for event in script[-2:]:
        sink(event)
    text = out.getvalue()
    assert "row vllm-agg: PASS, median ratio 1.0050 over 4 pairs, 1 invalidated" in text
    assert "row sglang-agg: determinism" in text


def test_a_pipe_gets_plain_lines() -> None:
    assert isinstance(terminal_progress("normal", io.StringIO()), PlainProgress)
