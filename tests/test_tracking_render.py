"""Main-branch tracking's Markdown (the tracking issue for a push and for the creep, a later comment, the comment on
the merged pull request), compared byte for byte with tests/golden/tracking/ (regenerate with
`KV_PARITY_UPDATE_GOLDEN=1 pytest tests/test_tracking_render.py` and read the diff); a pull request's title is text
anyone with a fork writes, so it must render literally and notify nobody."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from runners.schema.config import MainConfig
from runners.schema.report import CampaignReport

from bot.github.gateway import PullRef
from bot.publish.tracking_render import pull_request_comment, regression_body
from tests.report_factory import make_report
from tests.test_render_golden import GOLDEN, LINKS, check_golden

PULL = PullRef(number=512, title="Faster routing", html_url="https://github.com/octo-org/dynamo/pull/512",
               merged=True)


def _creep() -> CampaignReport:
    report = make_report("perf_fail")
    config = report.config.model_copy(update={"main": MainConfig(track=True, reference="v1.4.0", every=10)})
    return report.model_copy(update={"config": config})


SURFACES: dict[str, Callable[[], str]] = {
    "issue_push": lambda: regression_body(make_report("perf_fail"), "kvp-0a1b2c3d4e5f", LINKS, [PULL],
                                          reference=None, label="kv-parity-regression"),
    "issue_direct_push": lambda: regression_body(make_report("parity_fail"), "kvp-0a1b2c3d4e5f", LINKS, [],
                                                 reference=None, label="kv-parity-regression"),
    "issue_reference": lambda: regression_body(_creep(), "kvp-0a1b2c3d4e5f", LINKS, [], reference="v1.4.0",
                                               label="kv-parity-regression"),
    "pull_request": lambda: pull_request_comment(make_report("perf_fail"), "kvp-0a1b2c3d4e5f", LINKS, 77),
}


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_tracking_surfaces(surface: str) -> None:
    check_golden(f"tracking/{surface}.md", SURFACES[surface]())


def test_every_tracking_golden_is_produced_by_a_test() -> None:
    assert {path.stem for path in (GOLDEN / "tracking").glob("*.md")} == set(SURFACES)


def test_a_hostile_pull_request_title_renders_literally_and_notifies_nobody() -> None:
    hostile = PULL.model_copy(update={"title": "@octo-org/admins see #1 <img src=x onerror=alert(1)> | [x](http://e)"})
    body = regression_body(make_report("perf_fail"), "kvp-1", LINKS, [hostile], reference=None, label="l")
    line = next(line for line in body.splitlines() if line.startswith("Brought by"))
    assert "<" not in line.replace("\\<", "") and "\\<img" in line and "\\[x\\]" in line and "\\|" in line
    assert "@octo-org" not in line and "@\u200bocto-org" in line and "#\u200b1" in line
