"""Self-contained SVG flame graphs from folded stacks: one per arm, and a differential one.

Widths are shares of the arm's samples, so two arms with different sample counts compare directly. In the
differential graph each frame of the candidate is coloured by how its own (self) share moved against the same
call path in the baseline (red: larger in the candidate, blue: smaller), so callers stay neutral. Plain SVG with
<title> tooltips; no script, no fonts or files fetched, so it opens from an artifact anywhere.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from html import escape

Stacks = Mapping[tuple[str, ...], int]
"""Root-first call stacks -> sample count."""

WIDTH = 1200
ROW = 17
MIN_SHARE = 0.002
"""Frames narrower than this share of all samples are not drawn (their time stays in the parent's width)."""


def _path_totals(stacks: Stacks) -> Counter[tuple[str, ...]]:
    """Inclusive samples of every call path prefix."""
    totals: Counter[tuple[str, ...]] = Counter()
    for stack, count in stacks.items():
        for depth in range(1, len(stack) + 1):
            totals[stack[:depth]] += count
    return totals


def _layout(stacks: Stacks) -> list[tuple[tuple[str, ...], float, float]]:
    """(path, x share, width share) of every drawn frame, children ordered by name like flamegraph.pl."""
    totals = _path_totals(stacks)
    grand = sum(stacks.values())
    if grand == 0:
        return []
    children: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for path in totals:
        children.setdefault(path[:-1], []).append(path)
    placed: list[tuple[tuple[str, ...], float, float]] = []
    pending: list[tuple[tuple[str, ...], float]] = [((), 0.0)]
    while pending:
        parent, x = pending.pop()
        for path in sorted(children.get(parent, [])):
            width = totals[path] / grand
            if width >= MIN_SHARE:
                placed.append((path, x, width))
                pending.append((path, x))
            x += width
    return placed


def _svg(frames: list[tuple[tuple[str, ...], float, float, str, str]], title: str) -> str:
    depth = max((len(path) for path, *_ in frames), default=0)
    height = (depth + 2) * ROW + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="monospace" font-size="11">',
        f'<rect width="{WIDTH}" height="{height}" fill="#f8f8f8"/>',
        f'<text x="6" y="14">{escape(title)}</text>',
    ]
    for path, x, width, colour, tooltip in frames:
        left, pixels = x * WIDTH, width * WIDTH
        top = height - (len(path) + 1) * ROW
        label = path[-1]
        chars = int(pixels / 7)
        shown = label if len(label) <= chars else (label[: chars - 1] + "…" if chars > 3 else "")
        parts.append(
            f'<g><title>{escape(tooltip)}</title>'
            f'<rect x="{left:.2f}" y="{top}" width="{max(pixels - 0.5, 0.1):.2f}" height="{ROW - 1}" '
            f'fill="{colour}" rx="1"/>'
            + (f'<text x="{left + 3:.2f}" y="{top + ROW - 5}">{escape(shown)}</text>' if shown else "")
            + "</g>"
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _warm(name: str) -> str:
    """Stable warm colour per function name (the classic flame palette)."""
    h = 0
    for char in name:
        h = (h * 31 + ord(char)) & 0xFFFF
    return f"rgb({205 + h % 50},{(h >> 4) % 180 + 40},{(h >> 9) % 55})"


def flame_svg(stacks: Stacks, title: str) -> str:
    grand = sum(stacks.values()) or 1
    totals = _path_totals(stacks)
    frames = [
        (path, x, width, _warm(path[-1]), f"{path[-1]}: {totals[path]} samples ({totals[path] / grand:.1%})")
        for path, x, width in _layout(stacks)
    ]
    return _svg(frames, f"{title} ({sum(stacks.values())} samples)")


def differential_flame_svg(baseline: Stacks, candidate: Stacks, title: str) -> str:
    """The candidate's flame graph, each frame coloured by how its *own* (self) share moved against the same call
    path in the baseline, so the frames that grew stand out and their callers stay neutral; the tooltip also
    gives the inclusive shares."""
    base_totals, cand_totals = _path_totals(baseline), _path_totals(candidate)
    base_grand, cand_grand = sum(baseline.values()) or 1, sum(candidate.values()) or 1
    frames = []
    for path, x, width in _layout(candidate):
        before = base_totals.get(path, 0) / base_grand
        after = cand_totals[path] / cand_grand
        own = candidate.get(path, 0) / cand_grand - baseline.get(path, 0) / base_grand
        strength = min(abs(own) / 0.05, 1.0)
        fade = int(235 - 175 * strength)
        colour = f"rgb(235,{fade},{fade})" if own > 0 else f"rgb({fade},{fade},235)"
        tooltip = f"{path[-1]}: {before:.1%} -> {after:.1%} of samples, self {own:+.1%}"
        frames.append((path, x, width, colour, tooltip))
    return _svg(frames, title)
