"""A bisect's Markdown surfaces (bisect.md, the pull-request comment, the `kv-parity / bisect` check run) for a
culprit, a range and nothing to bisect, compared byte for byte with tests/golden/ (regenerate with
`KV_PARITY_UPDATE_GOLDEN=1 pytest tests/test_bisect_render.py` and read the diff)."""

from __future__ import annotations

import pytest

from bot.publish.bisect_render import bisect_check_run, bisect_comment, bisect_markdown
from tests.bisect_factory import make_bisect
from tests.test_render_golden import GOLDEN, LINKS, check_golden, with_title

BISECTS = {
    "culprit": lambda: make_bisect(["pass"] * 4 + ["semantic"] * 4),
    "range": lambda: make_bisect(["pass", "pass", ["blocked", "blocked"], "performance"]),
    "not_bad": lambda: make_bisect(["pass", "sizes"], target=["semantic"]),
}


@pytest.mark.parametrize("outcome", sorted(BISECTS))
def test_bisect_surfaces(outcome: str) -> None:
    bisect = BISECTS[outcome]()
    assert bisect.result.outcome == outcome
    check_golden(f"bisect/{outcome}.md", bisect_markdown(bisect))
    check_golden(f"bisect/{outcome}.comment.md", bisect_comment(bisect, "kvp-0a1b2c3d4e5f", LINKS))
    check_golden(f"bisect/{outcome}.check_summary.md", with_title(bisect_check_run(bisect, LINKS)))


def test_every_bisect_golden_is_produced_by_a_test() -> None:
    produced = {f"{outcome}{kind}" for outcome in BISECTS for kind in (".md", ".comment.md", ".check_summary.md")}
    assert {path.name for path in (GOLDEN / "bisect").glob("*.md")} == produced
