"""Small inline-SVG charts for HTML pages: no matplotlib, no JavaScript, nothing fetched.

Every chart is one self-contained `<svg>` with a `viewBox` and `width="100%"`, so it scales to a phone; the
data is drawn as `<path>` elements (axes and reference lines are `<line>`), and a chart with nothing finite
to draw is replaced by a sentence saying so, never by an empty frame. Every label is escaped here, so the
returned string is safe to insert into a page as-is (wrap it in `markupsafe.Markup`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from markupsafe import escape

WIDTH = 640
HEIGHT = 300
LEFT = 64
RIGHT = 16
TOP = 30
BOTTOM = 46
LEGEND_ROW = 16
CHAR_WIDTH = 6.2
"""Approximate advance of one 11 px sans-serif character, to lay out the legend without measuring text."""

PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#7f7f7f", "#000000")
"""Okabe–Ito colours: distinguishable with the common colour-vision deficiencies."""
REFERENCE_COLOURS = ("#c0392b", "#2c3e50", "#8e44ad", "#16a085", "#7f8c8d")
REFERENCE_DASHES = ("", "6 3", "2 3", "8 3 2 3", "1 2")

Marker = Literal["circle", "cross", "square"]


@dataclass(frozen=True)
class Series:
    """One named set of points: joined by a line, or drawn as markers only."""

    name: str
    points: Sequence[tuple[float, float]]
    line: bool = True
    marker: Marker | None = "circle"
    colour: str | None = None


@dataclass(frozen=True)
class _Frame:
    """Data ranges mapped onto the plot area of the viewBox."""

    x_min: float
    x_max: float
    y_min: float
    y_max: float
    bottom: float
    legend: list[tuple[str, str, str]] = field(default_factory=list)

    def x(self, value: float) -> float:
        return LEFT + (value - self.x_min) / (self.x_max - self.x_min) * (WIDTH - LEFT - RIGHT)

    def y(self, value: float) -> float:
        return self.bottom - (value - self.y_min) / (self.y_max - self.y_min) * (self.bottom - TOP)


def _label(value: float) -> str:
    """A reference value as a legend shows it: four decimals at most, no trailing zeros."""
    return f"{value:.4f}".rstrip("0").rstrip(".") if abs(value) < 1000 else f"{value:,.0f}"


def _num(value: float) -> str:
    """A coordinate with two decimals and no trailing zeros (stable across platforms for golden files)."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _finite(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(x, y) for x, y in points if math.isfinite(x) and math.isfinite(y)]


def _padded(low: float, high: float, share: float = 0.05) -> tuple[float, float]:
    """A range with a margin; a single value gets a small range around it so it is not on the frame."""
    if high <= low:
        pad = abs(low) * 0.01 or 1.0
        return low - pad, high + pad
    pad = (high - low) * share
    return low - pad, high + pad


TIME_STEPS = (1, 5, 15, 60, 300, 900, 1800, 3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400,
              14 * 86400, 30 * 86400, 91 * 86400, 182 * 86400, 365 * 86400)
"""Tick steps in seconds for a time axis, so ticks fall on whole minutes, hours and days (UTC)."""


def nice_ticks(
    low: float, high: float, count: int = 5, *, integer: bool = False, unix_time: bool = False
) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten, whole numbers if `integer`, whole minutes, hours or
    days on a time axis) inside [low, high]."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low] if math.isfinite(low) else []
    raw = (high - low) / max(1, count)
    if unix_time:
        step: float = next((s for s in TIME_STEPS if s >= raw), TIME_STEPS[-1])
    else:
        power = 10 ** math.floor(math.log10(raw))
        step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
        if integer:
            step = max(1.0, float(round(step)))
    first = math.ceil(low / step - 1e-9) * step
    ticks: list[float] = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def _tick_label(value: float, step: float, unix_time: bool) -> str:
    if unix_time:
        shape = "%Y-%m-%d" if step >= 86400 else "%m-%d %H:%M"
        return datetime.fromtimestamp(value, UTC).strftime(shape)
    if step >= 1 and abs(value) < 1e15:
        return f"{value:,.0f}"
    decimals = min(8, max(0, -math.floor(math.log10(step))))
    return f"{value:.{decimals}f}"


def _legend_rows(items: list[tuple[str, str, str]]) -> list[list[tuple[str, str, str, float]]]:
    """Lay legend entries (label, colour, kind) into rows that fit the width; each gets its x offset."""
    rows: list[list[tuple[str, str, str, float]]] = [[]]
    x = float(LEFT)
    for label, colour, kind in items:
        width = 22 + len(label) * CHAR_WIDTH + 14
        if rows[-1] and x + width > WIDTH - RIGHT:
            rows.append([])
            x = float(LEFT)
        rows[-1].append((label, colour, kind, x))
        x += width
    return rows if rows[0] else []


def _marker_path(kind: Marker, pixels: list[tuple[float, float]]) -> str:
    """One path holding a marker at each pixel position (one element however many points)."""
    parts: list[str] = []
    for x, y in pixels:
        if kind == "circle":
            parts.append(f"M{_num(x - 3)} {_num(y)}a3 3 0 1 0 6 0a3 3 0 1 0 -6 0")
        elif kind == "square":
            parts.append(f"M{_num(x - 3)} {_num(y - 3)}h6v6h-6z")
        else:
            parts.append(f"M{_num(x - 3.5)} {_num(y - 3.5)}l7 7m0 -7l-7 7")
    return "".join(parts)


def _svg_open(title: str, height: float) -> list[str]:
    label = escape(title)
    return [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {_num(height)}" '
        f'width="100%" role="img" aria-label="{label}" preserveAspectRatio="xMidYMid meet">',
        f"<title>{label}</title>",
        f'<text x="{LEFT}" y="18" class="chart-title" font-size="13" font-weight="600">{label}</text>',
    ]


def _axes(
    frame: _Frame,
    x_label: str,
    y_label: str,
    x_is_unix_time: bool,
    x_ticks: Sequence[float] | None,
    y_ticks: Sequence[float] | None = None,
) -> list[str]:
    out: list[str] = []
    right = WIDTH - RIGHT
    if y_ticks is None:
        y_ticks = nice_ticks(frame.y_min, frame.y_max)
    y_step = y_ticks[1] - y_ticks[0] if len(y_ticks) > 1 else 1.0
    for tick in y_ticks:
        y = _num(frame.y(tick))
        out.append(f'<line x1="{LEFT}" y1="{y}" x2="{right}" y2="{y}" stroke="#e3e3e3" stroke-width="1"/>')
        out.append(
            f'<text x="{LEFT - 6}" y="{y}" font-size="11" text-anchor="end" dominant-baseline="middle">'
            f"{escape(_tick_label(tick, y_step, False))}</text>"
        )
    if x_ticks is None:
        x_ticks = nice_ticks(frame.x_min, frame.x_max, 6, unix_time=x_is_unix_time)
    x_step = x_ticks[1] - x_ticks[0] if len(x_ticks) > 1 else 1.0
    for tick in x_ticks:
        x = _num(frame.x(tick))
        out.append(f'<line x1="{x}" y1="{_num(frame.bottom)}" x2="{x}" y2="{_num(frame.bottom + 4)}" stroke="#555"/>')
        out.append(
            f'<text x="{x}" y="{_num(frame.bottom + 16)}" font-size="11" text-anchor="middle">'
            f"{escape(_tick_label(tick, x_step, x_is_unix_time))}</text>"
        )
    bottom = _num(frame.bottom)
    out.append(f'<line x1="{LEFT}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#555"/>')
    out.append(f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}" stroke="#555"/>')
    out.append(
        f'<text x="{_num((LEFT + right) / 2)}" y="{_num(frame.bottom + 34)}" font-size="11" '
        f'text-anchor="middle">{escape(x_label)}</text>'
    )
    middle = _num((TOP + frame.bottom) / 2)
    out.append(
        f'<text x="14" y="{middle}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 14 {middle})">{escape(y_label)}</text>'
    )
    return out


def _reference_items(reference_lines: Mapping[str, float]) -> list[tuple[str, float, str, str]]:
    return [
        (name, value, REFERENCE_COLOURS[i % len(REFERENCE_COLOURS)], REFERENCE_DASHES[i % len(REFERENCE_DASHES)])
        for i, (name, value) in enumerate(reference_lines.items())
        if math.isfinite(value)
    ]


def _legend(items: list[tuple[str, str, str]], top: float) -> list[str]:
    out: list[str] = []
    for index, row in enumerate(_legend_rows(items)):
        y = top + index * LEGEND_ROW
        for label, colour, kind, x in row:
            if kind.startswith("line"):
                dash = kind[5:]
                dashed = f' stroke-dasharray="{dash}"' if dash else ""
                out.append(
                    f'<line x1="{_num(x)}" y1="{_num(y)}" x2="{_num(x + 16)}" y2="{_num(y)}" stroke="{colour}" '
                    f'stroke-width="2"{dashed}/>'
                )
            else:
                shape = kind.removeprefix("mark ")
                marker: Marker = "cross" if shape == "cross" else "square" if shape == "square" else "circle"
                fill = "none" if marker == "cross" else colour
                out.append(
                    f'<path d="{_marker_path(marker, [(x + 8, y)])}" fill="{fill}" '
                    f'stroke="{colour}" stroke-width="1.5"/>'
                )
            out.append(
                f'<text x="{_num(x + 22)}" y="{_num(y)}" font-size="11" dominant-baseline="middle">'
                f"{escape(label)}</text>"
            )
    return out


def empty_chart(title: str, why: str) -> str:
    """What stands in for a chart with nothing to draw: a sentence, never an empty frame."""
    return f'<p class="chart-empty"><strong>{escape(title)}</strong>: {escape(why)}</p>'


def _legend_height(items: list[tuple[str, str, str]]) -> float:
    return len(_legend_rows(items)) * LEGEND_ROW


def chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_is_unix_time: bool = False,
    reference_lines: Mapping[str, float] | None = None,
) -> str:
    """Points and lines on shared axes with labelled horizontal reference lines (threshold, bounds, ...)."""
    drawn = [(s, _finite(s.points)) for s in series]
    drawn = [(s, pts) for s, pts in drawn if pts]
    if not drawn:
        return empty_chart(title, "no finite values to draw")
    references = _reference_items(reference_lines or {})
    xs = [x for _, pts in drawn for x, _ in pts]
    ys = [y for _, pts in drawn for _, y in pts] + [value for _, value, _, _ in references]
    colours = [s.colour or PALETTE[i % len(PALETTE)] for i, (s, _) in enumerate(drawn)]
    legend: list[tuple[str, str, str]] = [
        (s.name, c, f"mark {s.marker or 'circle'}" if s.marker or not s.line else "line ")
        for (s, _), c in zip(drawn, colours, strict=True)
    ]
    legend += [(f"{name} {_label(value)}", colour, f"line {dash}") for name, value, colour, dash in references]
    plot_bottom = HEIGHT - BOTTOM
    height = HEIGHT + _legend_height(legend) + 4
    x_min, x_max = _padded(min(xs), max(xs), 0.02)
    y_min, y_max = _padded(min(ys), max(ys), 0.08)
    frame = _Frame(x_min, x_max, y_min, y_max, plot_bottom)
    out = _svg_open(title, height)
    integer_x = not x_is_unix_time and all(float(x).is_integer() for x in xs)
    x_ticks = nice_ticks(x_min, x_max, 6, integer=integer_x, unix_time=x_is_unix_time)
    out += _axes(frame, x_label, y_label, x_is_unix_time, x_ticks)
    for name, value, colour, dash in references:
        y = _num(frame.y(value))
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(
            f'<line class="reference" x1="{LEFT}" y1="{y}" x2="{WIDTH - RIGHT}" y2="{y}" stroke="{colour}" '
            f'stroke-width="1.5"{dashed}><title>{escape(name)} {_label(value)}</title></line>'
        )
    for (s, pts), colour in zip(drawn, colours, strict=True):
        if s.line and len(pts) > 1:
            d = "M" + "L".join(f"{_num(frame.x(x))} {_num(frame.y(y))}" for x, y in pts)
            out.append(f'<path class="series" d="{d}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        marker: Marker = s.marker or "circle"
        if s.marker is not None or not s.line or len(pts) == 1:
            fill = "none" if marker == "cross" else colour
            marks = _marker_path(marker, [(frame.x(x), frame.y(y)) for x, y in pts])
            out.append(
                f'<path class="marks" d="{marks}" fill="{fill}" stroke="{colour}" stroke-width="1.5">'
                f"<title>{escape(s.name)}</title></path>"
            )
    out += _legend(legend, plot_bottom + BOTTOM + 4)
    out.append("</svg>")
    return "\n".join(out)


def line_chart(
    series: Mapping[str, Sequence[tuple[float, float]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_is_unix_time: bool = False,
    reference_lines: Mapping[str, float] = {},  # noqa: B006 - read only; the signature other pages call
) -> str:
    """One line (with point markers) per named series, e.g. a row's median ratio per campaign over time."""
    return chart(
        [Series(name, points) for name, points in series.items()],
        title=title,
        x_label=x_label,
        y_label=y_label,
        x_is_unix_time=x_is_unix_time,
        reference_lines=reference_lines,
    )


def histogram(
    values: Sequence[float],
    *,
    title: str,
    x_label: str,
    reference_lines: Mapping[str, float] | None = None,
    bins: int | None = None,
) -> str:
    """Counts of `values` in equal-width bins, with vertical reference lines (e.g. the threshold)."""
    finite = sorted(v for v in values if math.isfinite(v))
    if not finite:
        return empty_chart(title, "no finite values to count")
    references = _reference_items(reference_lines or {})
    bins = bins or max(5, min(30, round(math.sqrt(len(finite)) * 1.5)))
    low, high = finite[0], finite[-1]
    if high <= low:
        low, high = _padded(low, high)
    width = (high - low) / bins
    counts = [0] * bins
    for value in finite:
        counts[min(bins - 1, int((value - low) / width))] += 1
    legend: list[tuple[str, str, str]] = [("pairs per bin", PALETTE[0], "mark square")]
    legend += [(f"{name} {_label(value)}", colour, f"line {dash}") for name, value, colour, dash in references]
    plot_bottom = HEIGHT - BOTTOM
    height = HEIGHT + _legend_height(legend) + 4
    x_values = [low, high] + [value for _, value, _, _ in references]
    x_min, x_max = _padded(min(x_values), max(x_values), 0.03)
    frame = _Frame(x_min, x_max, 0.0, max(counts) * 1.1, plot_bottom)
    out = _svg_open(title, height)
    step = max(1, math.ceil(max(counts) / 5))
    y_ticks = [float(t) for t in range(0, max(counts) + 1, step)]
    out += _axes(frame, x_label, "pairs", False, None, y_ticks)
    bars = "".join(
        f"M{_num(frame.x(low + i * width))} {_num(frame.y(0))}V{_num(frame.y(n))}"
        f"H{_num(frame.x(low + (i + 1) * width))}V{_num(frame.y(0))}Z"
        for i, n in enumerate(counts)
        if n
    )
    out.append(
        f'<path class="bars" d="{bars}" fill="{PALETTE[0]}" fill-opacity="0.75" stroke="#fff" stroke-width="0.5"/>'
    )
    for name, value, colour, dash in references:
        x = _num(frame.x(value))
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(
            f'<line class="reference" x1="{x}" y1="{TOP}" x2="{x}" y2="{_num(plot_bottom)}" stroke="{colour}" '
            f'stroke-width="1.5"{dashed}><title>{escape(name)} {_label(value)}</title></line>'
        )
    out += _legend(legend, plot_bottom + BOTTOM + 4)
    out.append("</svg>")
    return "\n".join(out)


def bars(
    values: Sequence[tuple[str, float, str]],
    *,
    title: str,
    x_label: str,
    reference_lines: Mapping[str, float] | None = None,
) -> str:
    """Horizontal bars from zero, one per (label, value, colour), labelled with their value, with vertical
    reference lines: a few figures side by side (each arm's instruction count per run against the threshold)."""
    drawn = [(label, value, colour) for label, value, colour in values if math.isfinite(value) and value >= 0]
    if not drawn:
        return empty_chart(title, "no finite values to draw")
    references = _reference_items(reference_lines or {})
    legend = [(f"{name} {_label(value)}", colour, f"line {dash}") for name, value, colour, dash in references]
    row, bar = 26.0, 18.0
    left = max(float(LEFT), min(220.0, 12 + max(len(label) for label, _, _ in drawn) * CHAR_WIDTH))
    plot_bottom = TOP + 8 + len(drawn) * row
    height = plot_bottom + BOTTOM + _legend_height(legend) + 4
    x_max = max([value for _, value, _ in drawn] + [value for _, value, _, _ in references]) * 1.08 or 1.0
    right = WIDTH - RIGHT

    def x(value: float) -> float:
        return left + value / x_max * (right - left)

    out = _svg_open(title, height)
    ticks = nice_ticks(0.0, x_max)
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    for tick in ticks:
        at = _num(x(tick))
        out.append(f'<line x1="{at}" y1="{TOP}" x2="{at}" y2="{_num(plot_bottom)}" stroke="#e3e3e3" stroke-width="1"/>')
        out.append(f'<text x="{at}" y="{_num(plot_bottom + 16)}" font-size="11" text-anchor="middle">'
                   f"{escape(_tick_label(tick, step, False))}</text>")
    for index, (label, value, colour) in enumerate(drawn):
        top = TOP + 8 + index * row + (row - bar) / 2
        middle = _num(top + bar / 2)
        out.append(f'<text x="{_num(left - 6)}" y="{middle}" font-size="11" text-anchor="end" '
                   f'dominant-baseline="middle">{escape(label)}</text>')
        out.append(f'<path class="bars" d="M{_num(left)} {_num(top)}H{_num(x(value))}V{_num(top + bar)}'
                   f'H{_num(left)}Z" fill="{colour}" fill-opacity="0.8"><title>{escape(label)} '
                   f"{_label(value)}</title></path>")
        out.append(f'<text x="{_num(x(value) + 4)}" y="{middle}" font-size="11" dominant-baseline="middle">'
                   f"{escape(_label(value))}</text>")
    for name, value, colour, dash in references:
        at = _num(x(value))
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<line class="reference" x1="{at}" y1="{TOP}" x2="{at}" y2="{_num(plot_bottom)}" '
                   f'stroke="{colour}" stroke-width="1.5"{dashed}><title>{escape(name)} {_label(value)}</title></line>')
    bottom = _num(plot_bottom)
    out.append(f'<line x1="{_num(left)}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#555"/>')
    out.append(f'<line x1="{_num(left)}" y1="{TOP}" x2="{_num(left)}" y2="{bottom}" stroke="#555"/>')
    out.append(f'<text x="{_num((left + right) / 2)}" y="{_num(plot_bottom + 34)}" font-size="11" '
               f'text-anchor="middle">{escape(x_label)}</text>')
    out += _legend(legend, plot_bottom + BOTTOM + 4)
    out.append("</svg>")
    return "\n".join(out)
