"""Pictures of one row's performance series: ratios in run order against the bounds, and their spread.

Drawn with matplotlib's Agg backend (no display) from the stored PerfResult only.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot loads)

from runners.report import PerfResult, Sample  # noqa: E402
from runners.stats import observations  # noqa: E402

ORDER_STYLE = {
    "baseline_first": ("tab:blue", "o", "baseline first"),
    "candidate_first": ("tab:orange", "s", "candidate first"),
}


def _invalidated_ratios(samples: list[Sample]) -> list[tuple[int, float]]:
    """(pair, ratio) of every invalidated attempt whose two members both produced a metric."""
    attempts: dict[tuple[int, int], dict[str, float]] = {}
    for sample in samples:
        if sample.status == "invalidated" and sample.pair is not None and sample.metric_ms is not None:
            attempts.setdefault((sample.pair, sample.attempt), {})[sample.arm] = sample.metric_ms
    return [
        (pair, arms["candidate"] / arms["baseline"])
        for (pair, _), arms in sorted(attempts.items())
        if {"baseline", "candidate"} <= set(arms)
    ]


def write_plots(perf: PerfResult, out_dir: Path, row_id: str) -> list[Path]:
    """Two PNGs: ratio per pair in run order with bounds and threshold, and a histogram of the ratios."""
    out_dir.mkdir(parents=True, exist_ok=True)
    threshold = perf.perf_config.threshold if perf.perf_config is not None else None
    pairs = observations(perf.schedule, perf.samples)
    ratios = [p.ratio for p in pairs]
    title = f"{row_id}: {perf.timing_field} candidate / baseline — {perf.verdict.value}"

    series_path = out_dir / f"perf-{row_id}-ratios.png"
    figure, axes = plt.subplots(figsize=(9, 4.5), dpi=110)
    for order, (colour, marker, label) in ORDER_STYLE.items():
        chosen = [p for p in pairs if p.order == order]
        if chosen:
            axes.scatter(
                [p.pair for p in chosen],
                [p.ratio for p in chosen],
                color=colour,
                marker=marker,
                s=22,
                label=label,
                zorder=3,
            )
    axes.plot([p.pair for p in pairs], ratios, color="0.75", linewidth=0.8, zorder=2)
    invalid = _invalidated_ratios(perf.samples)
    if invalid:
        axes.scatter(
            [pair for pair, _ in invalid],
            [ratio for _, ratio in invalid],
            facecolors="none",
            edgecolors="tab:red",
            marker="X",
            s=40,
            label="invalidated attempt",
            zorder=3,
        )
    if perf.bounds is not None:
        b = perf.bounds
        axes.axhline(
            b.lower,
            color="tab:green",
            linestyle="--",
            linewidth=1,
            label=f"lower X({b.lower_index}) = {b.lower:.4f}",
        )
        axes.axhline(
            b.upper,
            color="tab:purple",
            linestyle="--",
            linewidth=1,
            label=f"upper X({b.upper_index}) = {b.upper:.4f}",
        )
    if threshold is not None:
        axes.axhline(threshold, color="tab:red", linewidth=1.2, label=f"threshold {threshold:g}")
    axes.axhline(1.0, color="0.4", linewidth=0.6, linestyle=":")
    axes.set_xlabel("pair (run order)")
    axes.set_ylabel("ratio candidate / baseline")
    axes.set_title(title, fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    figure.tight_layout()
    figure.savefig(series_path)
    plt.close(figure)

    histogram_path = out_dir / f"perf-{row_id}-histogram.png"
    figure, axes = plt.subplots(figsize=(6, 4), dpi=110)
    if ratios:
        axes.hist(ratios, bins=min(30, max(5, len(ratios) // 3)), color="tab:blue", alpha=0.75)
    if perf.bounds is not None:
        b = perf.bounds
        axes.axvline(b.lower, color="tab:green", linestyle="--", linewidth=1, label=f"lower {b.lower:.4f}")
        axes.axvline(b.upper, color="tab:purple", linestyle="--", linewidth=1, label=f"upper {b.upper:.4f}")
        axes.axvline(b.median, color="0.3", linewidth=1, label=f"median {b.median:.4f}")
    if threshold is not None:
        axes.axvline(threshold, color="tab:red", linewidth=1.2, label=f"threshold {threshold:g}")
    axes.set_xlabel("ratio candidate / baseline")
    axes.set_ylabel("pairs")
    axes.set_title(f"{row_id}: {len(ratios)} paired ratios", fontsize=10)
    axes.grid(alpha=0.3)
    if perf.bounds is not None or threshold is not None:
        axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(histogram_path)
    plt.close(figure)
    return [series_path, histogram_path]
