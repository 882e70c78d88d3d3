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

from bot.publish.html_report import report_html
from tests.browser import Browser, BrowserError, PageResult
from tests.report_factory import OUTCOMES
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
        assert page.evaluate("[...document.querySelectorAll('svg')].every(s => s.getBoundingClientRect().right <= 390)")
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
