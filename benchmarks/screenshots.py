"""Screenshots of report.html for the README, and what the page costs next to report.md.

Renders two factory outcomes (a clean PASS, and a performance FAIL whose row carries regression attribution)
through `bot.publish.html_report.report_html`, loads each in headless Chromium (tests/browser.py) at a desktop
width and writes `benchmarks/screenshots/pass.png` and `fail.png` (the top of the page: the verdicts, the row
table and the first row's charts; in fail.png the passing row's section is folded away so the failing row's
charts and attribution show; --full for the whole page). It also prints the
page's size for every factory outcome and the render time of `report_html` against
`render.report_markdown` for the same report (median of --repeat runs, as a ratio).

    .venv/bin/python benchmarks/screenshots.py [--out benchmarks/screenshots] [--width 1280] [--height 2300]
                                               [--full] [--repeat 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.publish.html_report import report_html  # noqa: E402
from bot.publish.render import report_markdown  # noqa: E402
from bot.publish.views import Links  # noqa: E402
from tests.browser import Browser  # noqa: E402
from tests.report_factory import OUTCOMES, make_report  # noqa: E402

SHOTS = {"pass": "pass", "fail": "perf_fail"}
"""Screenshot name -> factory outcome."""
FOLD_PASSING_ROWS = """document.querySelectorAll('section.row').forEach(section => {
    if (!section.querySelector('h2 .verdict-FAIL')) section.style.display = 'none';
})"""
"""For the FAIL shot: fold away the sections of rows that passed, so the failing row's charts, decision and
attribution sit right below the verdicts and the row table."""


def _median_seconds(render: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        render()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "screenshots")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=2300)
    parser.add_argument("--full", action="store_true", help="the whole page instead of the first --height px")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    print("report.html size per factory outcome:")
    for outcome in OUTCOMES:
        print(f"  {outcome:26} {len(report_html(make_report(outcome)).encode()):>8,} B")

    print(f"render time, median of {args.repeat} (report_html / report_markdown, same report):")
    for outcome in ("pass", "perf_fail", "stage6"):
        report = make_report(outcome)
        html = _median_seconds(lambda report=report: report_html(report), args.repeat)
        markdown = _median_seconds(lambda report=report: report_markdown(report, Links()), args.repeat)
        print(f"  {outcome:26} html {html * 1000:7.1f} ms  md {markdown * 1000:7.1f} ms  ratio {html / markdown:.2f}")

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kv-parity-shots-") as scratch, Browser() as browser:
        for name, outcome in SHOTS.items():
            page_path = Path(scratch) / f"{name}.html"
            page_path.write_text(report_html(make_report(outcome)), encoding="utf-8")
            page = browser.open(page_path.as_uri(), width=args.width, height=args.height)
            if page.console_errors or page.exceptions:
                raise SystemExit(f"{name}: the page logged errors: {page.console_errors + page.exceptions}")
            if name == "fail" and not args.full:
                page.evaluate(FOLD_PASSING_ROWS)
            shot = page.screenshot(args.out / f"{name}.png", full_page=args.full)
            page.close()
            print(f"wrote {shot} ({shot.stat().st_size:,} B)")


if __name__ == "__main__":
    main()
