"""report.html: golden pages for every outcome, hostile text stays text, the artifact carries it redacted, and
`kv-parity report` renders any report.json (or exits 2 saying what is wrong with it).

Regenerate the goldens with `KV_PARITY_UPDATE_GOLDEN=1 pytest tests/test_html_report.py` and read the diff.
"""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from bot.cli.main import main
from bot.github.redact import Redactor
from bot.publish import svg
from bot.publish.artifact import write_artifact
from bot.publish.html_report import artifact_href, inline, page, report_html, row_charts, safe_url
from bot.publish.markdown import code, md
from bot.publish.views import Links
from runners.schema.report import CampaignReport, StopRecord
from tests.report_factory import OUTCOMES, make_report
from tests.test_render_golden import LINKS, PRIOR_ATTEMPTS, check_golden
from tests.test_render_hostile import poisoned

ROOT = Path(__file__).resolve().parent.parent
ALLOWED_TAGS = frozenset(
    {
        "html", "head", "meta", "title", "style", "body", "header", "nav", "section", "footer", "h1", "h2", "h3",
        "h4", "p", "ul", "li", "dl", "dt", "dd", "div", "span", "strong", "br", "a", "code", "pre", "table",
        "thead", "tbody", "tr", "th", "td", "details", "summary", "figure", "svg", "text", "line", "path", "rect",
    }
)
PWN = (
    '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1"></textarea></title></style>'
    '<svg onload="window.__pwned=1"><a href="javascript:window.__pwned=1">x</a>'
    "<iframe src=javascript:window.__pwned=1></iframe>]]><!-- --><base href=https://evil.example/>"
)
"""What every hostile string of `pwned_report` carries: each way a page could run script or fetch."""
HOSTILE_LINKS = Links(
    artifact_url="javascript:window.__pwned=1",
    check_run_url="https://github.com/octo-org/dynamo/runs/1001\"><script>window.__pwned=1</script>",
    result_url="data:text/html,<script>window.__pwned=1</script>",
)


class Structure(HTMLParser):
    """Every tag, attribute and text node of a page, as a browser's tokenizer sees them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))
        self._in_style = tag == "style"

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if not self._in_style:
            self.text.append(data)


def structure(html: str) -> Structure:
    parser = Structure()
    parser.feed(html)
    parser.close()
    return parser


def live_problems(html: str) -> list[str]:
    """Anything in `html` that could run, fetch or navigate somewhere the report did not mean to link."""
    found: list[str] = []
    parsed = structure(html)
    for tag, attrs in parsed.tags:
        if tag not in ALLOWED_TAGS:
            found.append(f"tag <{tag}>")
        for name, value in attrs:
            if name.startswith("on"):
                found.append(f"event handler {name} on <{tag}>")
            if name in ("href", "src", "xlink:href", "action", "formaction"):
                target = value or ""
                if tag != "a" or name != "href":
                    found.append(f"{name} on <{tag}>")
                elif not (target.startswith("#") or safe_url(target) == target or _relative(target)):
                    found.append(f"link {target!r}")
    return found


def _relative(target: str) -> bool:
    """A link to a file beside the page: no scheme, not absolute, no parent directory."""
    return ":" not in target and not target.startswith(("/", "\\")) and ".." not in target.split("/")


def pwned_report(outcome: str) -> CampaignReport:
    """`outcome`'s report with every string field it accepts carrying PWN (and the hostile fragments)."""
    text = poisoned(make_report(outcome), 0).model_dump_json()
    return CampaignReport.model_validate_json(
        text.replace("<img src=x onerror=alert(1)>", json.dumps(PWN)[1:-1])
    )


# --- golden pages -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_report_page_golden(outcome: str) -> None:
    html = report_html(make_report(outcome), LINKS)
    check_golden(f"html/{outcome}.html", html)
    assert live_problems(html) == []


def test_goldens_exist_for_every_outcome_and_nothing_else() -> None:
    golden = {path.stem for path in (ROOT / "tests" / "golden" / "html").glob("*.html")}
    assert golden == set(OUTCOMES)


def test_every_ran_row_draws_its_ratio_chart_and_histogram() -> None:
    report = make_report("perf_fail")
    html = report_html(report)
    assert html.count('<svg class="chart"') == 2 * len([r for r in report.rows if r.performance]) + len(
        [r for r in report.rows if r.instructions]), "and one figure of the instruction counts per counted row"
    first = report.rows[0].performance
    assert first is not None and first.invalidations, "the factory's first row has an invalidated pair"
    assert "invalidated attempt" in html
    assert f"threshold {report.config.perf.threshold:g}" in html


def test_a_row_without_ratios_says_why_instead_of_an_empty_chart() -> None:
    html = report_html(make_report("blocked_timing_field"))
    assert 'class="chart-empty"' in html
    assert "no pair completed" in html


def test_a_row_with_only_invalidated_attempts_shows_them_and_says_why_there_is_no_histogram() -> None:
    perf = make_report("pass").rows[0].performance
    assert perf is not None
    blocked = perf.model_copy(update={
        "samples": [sample.model_copy(update={"status": "invalidated"}) for sample in perf.samples],
        "ratios": [],
    })
    scatter, histogram = row_charts("r", blocked, 1.05)
    assert 'class="marks"' in scatter and "invalidated attempt" in scatter
    assert "baseline first" not in scatter
    assert 'class="chart-empty"' in histogram and "only invalidated attempts" in histogram


def test_prior_attempts_and_https_links_are_shown() -> None:
    html = report_html(make_report("pass"), LINKS, prior_attempts=PRIOR_ATTEMPTS)
    assert PRIOR_ATTEMPTS[0].campaign_id in html
    assert f'href="{LINKS.artifact_url}"' in html


def test_the_public_variant_has_no_raw_output() -> None:
    report = make_report("pass_with_exceptions")
    tail = report.rows[0].exceptions[0].runs[0].stderr_tail
    assert tail in report_html(report)
    public = report_html(report, public=True)
    assert tail not in public
    assert 'id="raw"' not in public


# --- hostile text ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("outcome", OUTCOMES)
@pytest.mark.parametrize("round_", [0, 1, 2, 3])
def test_hostile_strings_stay_text(outcome: str, round_: int) -> None:
    report = poisoned(make_report(outcome), round_)
    for public in (False, True):
        html = report_html(report, HOSTILE_LINKS, prior_attempts=PRIOR_ATTEMPTS, public=public)
        assert live_problems(html) == [], outcome
    if round_ == 0:
        text = "".join(structure(html).text)
        assert "<img src=x onerror=alert(1)>" in text, "hostile text is shown literally, not dropped"


@pytest.mark.parametrize("outcome", ["perf_fail", "stage6", "pass_with_exceptions", "size_fail"])
def test_script_payloads_in_every_field_stay_text(outcome: str) -> None:
    html = report_html(pwned_report(outcome), HOSTILE_LINKS)
    assert live_problems(html) == []
    assert "javascript:" not in " ".join(value or "" for _, attrs in structure(html).tags for _, value in attrs)
    assert PWN in "".join(structure(html).text)


def test_links_only_to_http_urls_and_relative_artifact_files() -> None:
    assert safe_url("https://github.com/o/r/actions/runs/1") == "https://github.com/o/r/actions/runs/1"
    for bad in ("javascript:alert(1)", "JAVASCRIPT:alert(1)", "data:text/html,x", "//evil.example", "/etc/passwd",
                "https://a b", "http:///x"):
        assert safe_url(bad) is None, bad
    assert artifact_href("attribution", "row/../x", "javascript:alert(1)") == (
        "attribution/row%2F..%2Fx/javascript%3Aalert%281%29"
    )
    assert artifact_href("attribution", "..", "x") is None


def test_inline_markdown_becomes_escaped_html() -> None:
    hostile = "<b>`x`</b> | **y** \\ @me #1"
    assert inline(md(hostile)) == "&lt;b&gt;`x`&lt;/b&gt; | **y** \\ @\u200bme #\u200b1"
    assert inline(code("a|b`c`<i>")) == "<code>a|b`c`&lt;i&gt;</code>"
    assert inline("unclosed `fence") == "unclosed `fence"


# --- svg primitives -------------------------------------------------------------------------------------------


def test_charts_escape_labels_and_draw_paths() -> None:
    chart = svg.line_chart(
        {"<script>": [(1.0, 1.0), (2.0, 1.01)]},
        title="</svg><script>x</script>",
        x_label="&",
        y_label="<",
        reference_lines={"threshold <1>": 1.05},
    )
    assert "<script>" not in chart and "&lt;script&gt;" in chart
    assert chart.startswith('<svg class="chart"') and 'viewBox="0 0 ' in chart and 'width="100%"' in chart
    assert 'd="M' in chart


def test_charts_with_nothing_finite_say_so() -> None:
    assert "no finite values" in svg.line_chart({"a": [(1.0, float("nan"))]}, title="t", x_label="x", y_label="y")
    assert "no finite values" in svg.histogram([float("inf")], title="t", x_label="x")
    assert "<path" not in svg.histogram([], title="t", x_label="x")


def test_time_axis_ticks_fall_on_whole_hours() -> None:
    start = 1_764_410_400.0  # 2025-11-29 10:00 UTC
    chart = svg.line_chart(
        {"median": [(start + 600, 1.0), (start + 5 * 3600, 1.02)]},
        title="t", x_label="when", y_label="ratio", x_is_unix_time=True,
    )
    assert ">11-29 11:00<" in chart


def test_page_wraps_a_body_in_the_shared_base() -> None:
    from markupsafe import Markup

    html = page("a <title>", Markup("<p>body</p>"))
    assert "<title>a &lt;title&gt;</title>" in html
    assert "<p>body</p>" in html
    assert "Content-Security-Policy" in html and 'name="viewport"' in html


# --- the artifact and the CLI ---------------------------------------------------------------------------------


def test_the_artifact_holds_report_html_redacted(tmp_path: Path) -> None:
    secret = "kvp-secret-0123456789abcdef"
    report = make_report("pass_with_exceptions")
    run = report.rows[0].exceptions[0].runs[0]
    run.stderr_tail = f"token leaked: {secret}\n"
    written = write_artifact(report, tmp_path, redactor=Redactor([secret]))
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert tmp_path / "report.html" in written
    assert secret not in html
    assert "token leaked: [redacted]" in html
    assert secret in (tmp_path / "report.json").read_text(encoding="utf-8"), "report.json stays exact"


def kv_parity(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """`kv-parity ARGS` through the CLI's own entry point (argument parsing, dispatch, exit code), in process."""
    code = main(list(args))
    return code, capsys.readouterr().err


def _strip_defaults(value: Any, model: Any) -> Any:
    """An old report.json: every field still at its default left out, as reports written before it existed."""
    from pydantic import BaseModel

    if isinstance(model, BaseModel) and isinstance(value, dict):
        kept = {}
        for name, info in type(model).model_fields.items():
            if name in value and (
                info.is_required() or getattr(model, name) != info.get_default(call_default_factory=True)
            ):
                kept[name] = _strip_defaults(value[name], getattr(model, name))
        return kept
    if isinstance(model, list) and isinstance(value, list):
        return [_strip_defaults(v, m) for v, m in zip(value, model, strict=True)]
    if isinstance(model, dict) and isinstance(value, dict):
        return {k: _strip_defaults(v, model[k]) for k, v in value.items()}
    return value


def minimal_report() -> CampaignReport:
    """A report stopped before performance with none of the optional sections (no fixtures, toolchain,
    sandbox record, sizes, artifacts or trace), written with only the required fields."""
    full = make_report("blocked_missing_flag").model_copy(
        update={
            "toolchain": None, "artifacts": [], "trace": None, "sizes": None, "fixtures": [], "sandbox": None,
            "rows": [], "skipped": [],
            "stopped": StopRecord(stage="build", reason="cargo build failed for the candidate", blocking=False,
                                  output_tail="error[E0308]: mismatched types\n"),
        }
    )
    return CampaignReport.model_validate(_strip_defaults(full.model_dump(mode="json"), full))


def test_cli_renders_any_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, report in [("minimal", minimal_report()), *((o, make_report(o)) for o in OUTCOMES)]:
        source = tmp_path / name / "report.json"
        source.parent.mkdir()
        source.write_text(report.model_dump_json(exclude_defaults=True), encoding="utf-8")
        code, err = kv_parity(capsys, "report", str(source))
        assert code == 0, (name, err)
        html = (source.parent / "report.html").read_text(encoding="utf-8")
        assert report.campaign_id in html and (source.parent / "report.md").exists()
        assert live_problems(html) == []


def test_the_installed_command_writes_to_out_dir(tmp_path: Path) -> None:
    source = tmp_path / "report.json"
    source.write_text(minimal_report().model_dump_json(exclude_defaults=True), encoding="utf-8")
    done = subprocess.run(
        [str(Path(sys.executable).parent / "kv-parity"), "report", str(source), "--out", str(tmp_path / "pages")],
        capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "pages").iterdir()) == ["report.html", "report.md"]
    assert "stopped at build" in (tmp_path / "pages" / "report.html").read_text(encoding="utf-8").lower()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("{\"campaign_id\": ", "is not valid JSON"),
        ("{\"campaign_id\": \"c-1\"}", "is not a campaign report: created_unix: Field required"),
        ("[1, 2]", "is not a campaign report: (top level)"),
    ],
)
def test_cli_refuses_what_is_not_a_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    source = tmp_path / "report.json"
    if content is not None:
        source.write_text(content, encoding="utf-8")
    code, err = kv_parity(capsys, "report", str(source))
    assert code == 2
    assert message in err, err
    assert not (tmp_path / "report.html").exists()
