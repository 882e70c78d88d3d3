"""report.html in a real headless Chromium: it loads cleanly offline, every chart draws, nothing hostile runs,
and a phone-width viewport scrolls only inside the table containers.

Chromium comes from the distribution (`apt-get install -y chromium`; .ci/run installs it). Without it these
tests fail saying so: a page nobody loaded in a browser is not tested.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runners.schema.report import CampaignReport

from bot.publish.html_report import report_html
from tests.browser import Browser, BrowserError, PageResult
from tests.report_factory import OUTCOMES, make_report
from tests.test_html_report import HOSTILE_LINKS, pwned_report

GOLDEN = Path(__file__).parent / "golden" / "html"
PHONE: dict[str, Any] = {"width": 390, "height": 844, "mobile": True}

CHARTS = """[...document.querySelectorAll('svg')].map(svg => ({
    title: svg.getAttribute('aria-label'),
    paths: [...svg.querySelectorAll('path')].filter(p => (p.getAttribute('d') || '').trim().length > 0).length,
    width: svg.getBoundingClientRect().width,
}))"""
OVERFLOW = """(() => {
    const width = document.documentElement.clientWidth;
    const outside = [];
    for (const el of document.body.querySelectorAll('*')) {
        if (el.parentElement && el.parentElement.closest('.scroll, svg')) continue;
        const box = el.getBoundingClientRect();
        if (box.width && (box.right > width + 1 || box.left < -1)) {
            outside.push(`${el.tagName.toLowerCase()}.${el.className} right=${Math.round(box.right)}`);
        }
    }
    return {width, scrollWidth: document.documentElement.scrollWidth, outside: outside.slice(0, 10)};
})()"""


ROW_TABLE_FITS = """(() => {
    const box = document.querySelector('#rows + .scroll');
    const right = el => Math.round(el.getBoundingClientRect().right);
    const cells = [...box.querySelectorAll('tr:first-child > *')].map(right);
    return {scrollWidth: box.scrollWidth, clientWidth: box.clientWidth, right: right(box),
            lastCell: Math.max(...cells), page: document.documentElement.scrollWidth};
})()"""
EMOJI_MARKS = "✅❌⚠⛔➖☑🔎🚫⏭⌛💥"
MARKS = """[...document.querySelectorAll('svg.mark')].map(svg => ({
    name: svg.getAttribute('aria-label'), width: svg.getBoundingClientRect().width,
    painted: [...svg.querySelectorAll('path')].every(p => p.getTotalLength() > 0),
}))"""


def long_diagnostics_report() -> CampaignReport:
    """Every diagnostic of every measured row breached, each with a long detail and an unbreakable token, on rows
    named like the real ones: the Diagnostics column at its widest."""
    report = make_report("inconclusive_diagnostics")
    rows = []
    for row in report.rows:
        perf = row.performance
        assert perf is not None
        token = "sensor_package_temperature_drifted_across_the_whole_series_of_sixty_pairs"
        diagnostics = [
            check.model_copy(update={"breached": True, "detail": f"{check.detail}; {check.name}_{token}"})
            for check in perf.diagnostics
        ]
        rows.append(row.model_copy(update={"performance": perf.model_copy(update={"diagnostics": diagnostics})}))
    return report.model_copy(update={"rows": rows})


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with Browser() as running:
        yield running


def load(browser: Browser, path: Path, width: int = 1280, height: int = 900, mobile: bool = False) -> PageResult:
    """Open `path` and assert it loaded cleanly: no exception, no console error, nothing fetched off disk."""
    page = browser.open(path.resolve().as_uri(), width=width, height=height, mobile=mobile)
    assert page.exceptions == [], page.exceptions
    assert page.console_errors == [], page.console_errors
    offline = [url for url in page.requests if not url.startswith(("file:", "data:"))]
    assert offline == [], f"{path.name} requested the network: {offline}"
    return page


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_golden_page_loads_offline_and_every_chart_draws(browser: Browser, outcome: str) -> None:
    page = load(browser, GOLDEN / f"{outcome}.html")
    try:
        charts = page.evaluate(CHARTS)
        assert all(chart["paths"] >= 1 for chart in charts), charts
        assert all(chart["width"] > 0 for chart in charts), charts
        expected = (GOLDEN / f"{outcome}.html").read_text(encoding="utf-8").count("<svg")
        assert len(charts) == expected
        assert page.evaluate("document.querySelectorAll('.banner h1').length") == 1
    finally:
        page.close()


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_phone_width_scrolls_only_inside_tables(browser: Browser, outcome: str) -> None:
    page = load(browser, GOLDEN / f"{outcome}.html", **PHONE)
    try:
        layout = page.evaluate(OVERFLOW)
        assert layout["width"] == PHONE["width"]
        assert layout["scrollWidth"] <= layout["width"], layout
        assert layout["outside"] == [], layout
        charts = "[...document.querySelectorAll('svg:not(.mark)')]"
        assert page.evaluate(f"{charts}.every(s => s.getBoundingClientRect().right <= 390)")
    finally:
        page.close()


@pytest.mark.parametrize("outcome", ["perf_fail", "stage6", "pass_with_exceptions", "size_fail"])
def test_hostile_report_runs_nothing(browser: Browser, tmp_path: Path, outcome: str) -> None:
    path = tmp_path / "report.html"
    for public in (False, True):
        path.write_text(report_html(pwned_report(outcome), HOSTILE_LINKS, public=public), encoding="utf-8")
        page = load(browser, path)
        try:
            assert page.evaluate("typeof window.__pwned") == "undefined"
            assert page.evaluate("document.querySelectorAll('script, iframe, img, base').length") == 0
            assert page.evaluate("[...document.links].filter(a => a.protocol === 'javascript:').length") == 0
        finally:
            page.close()
        layout = load(browser, path, **PHONE)
        try:
            assert layout.evaluate(OVERFLOW)["outside"] == []
        finally:
            layout.close()


def test_the_pwned_check_would_see_a_script_that_ran(browser: Browser, tmp_path: Path) -> None:
    """The check above can fail: the same probe sees a script that does run."""
    path = tmp_path / "live.html"
    path.write_text("<!DOCTYPE html><title>t</title><script>window.__pwned = 1</script>", encoding="utf-8")
    page = browser.open(path.as_uri())
    try:
        assert page.evaluate("typeof window.__pwned") == "number"
    finally:
        page.close()


def test_a_console_error_is_reported(browser: Browser, tmp_path: Path) -> None:
    path = tmp_path / "noisy.html"
    path.write_text("<!DOCTYPE html><title>t</title><script>console.error('boom'); undefinedCall()</script>",
                    encoding="utf-8")
    page = browser.open(path.as_uri())
    try:
        assert any("boom" in line for line in page.console_errors), page.console_errors
        assert any("undefinedCall" in line for line in page.exceptions), page.exceptions
    finally:
        page.close()


def test_without_chromium_the_driver_says_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BrowserError, match="install chromium"), Browser():
        pass
    assert os.environ["PATH"] == str(tmp_path)


@pytest.mark.parametrize("outcome", [*OUTCOMES, "long_diagnostics"])
def test_the_row_table_fits_a_1280_pixel_window_without_sideways_scrolling(
    browser: Browser, tmp_path: Path, outcome: str
) -> None:
    path = GOLDEN / f"{outcome}.html"
    if outcome == "long_diagnostics":
        path = tmp_path / "report.html"
        path.write_text(report_html(long_diagnostics_report()), encoding="utf-8")
    page = load(browser, path, width=1280, height=900)
    try:
        fit = page.evaluate(ROW_TABLE_FITS)
        assert fit["scrollWidth"] <= fit["clientWidth"], f"the row table scrolls sideways: {fit}"
        assert fit["lastCell"] <= fit["right"], f"the Diagnostics column is cut off: {fit}"
        assert fit["page"] <= 1280, fit
    finally:
        page.close()


def test_the_long_diagnostics_report_is_what_scrolled_before(browser: Browser, tmp_path: Path) -> None:
    """The check above can fail: the same report, with the row table's desktop rules taken out, scrolls."""
    html = report_html(long_diagnostics_report())
    start = html.index("@media (min-width: 800px)")
    path = tmp_path / "report.html"
    path.write_text(html[:start] + html[html.index("}\n}\n", start) + 4:], encoding="utf-8")
    page = load(browser, path, width=1280, height=900)
    try:
        fit = page.evaluate(ROW_TABLE_FITS)
        assert fit["scrollWidth"] > fit["clientWidth"], fit
    finally:
        page.close()


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_verdict_marks_are_drawn_without_an_emoji_font(browser: Browser, outcome: str) -> None:
    """No verdict emoji is left in the page's text (this machine has no emoji font: each would be an empty box);
    each mark is an inline SVG that takes space and paints its shape, and says what it means."""
    page = load(browser, GOLDEN / f"{outcome}.html")
    try:
        text = page.evaluate("document.body.innerText")
        assert [c for c in text if c in EMOJI_MARKS] == []
        marks = page.evaluate(MARKS)
        assert marks, "the page shows verdicts"
        assert all(m["width"] > 0 and m["painted"] and m["name"] for m in marks), marks
    finally:
        page.close()
