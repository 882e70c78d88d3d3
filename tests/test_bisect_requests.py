"""`/parity bisect` in the decision core, against both ledgers: it bisects the current head's FAILed campaign from
that campaign's merge base under that campaign's config, when the head is two or more commits ahead; anything
else is refused with the reason and what to do."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest

from bot.core.campaign import Campaign, CampaignRequest, CampaignState
from bot.core.ports import SideRunPublisher
from bot.core.repo_values import MergeBase
from bot.core.triggers import Bisect
from bot.lifecycle import Lifecycle
from bot.store.campaigns import Store
from tests.report_factory import make_report, with_undecided_conclusion
from tests.test_decisions import BASE, HEAD, TIP, Mode, _runs, _sqlite
from tests.webhooks import CONFIG_TOML, REPO

S = CampaignState


@pytest.fixture()
def sqlite(tmp_path: Path) -> Iterator[Mode]:
    """test_decisions' service ledger, with a side-run publisher (a bisect's check run is its own)."""
    for mode in _sqlite(tmp_path):
        ledger = mode.new_ledger()
        lifecycle: Lifecycle = ledger.driver  # type: ignore[attr-defined]
        with_side_runs = replace(lifecycle.services(REPO), side_runs=cast(SideRunPublisher, mode.publisher))
        lifecycle.services = lambda repo, found=with_side_runs: found  # type: ignore[misc]
        yield mode


def _ahead(mode: Mode, commits: int) -> None:
    """The head is `commits` commits ahead of its base branch (what the compare API says)."""
    def merge_base(base_ref: str, head_sha: str) -> MergeBase:
        return MergeBase(sha=BASE, base_tip_sha=TIP, status="diverged", ahead_by=commits, behind_by=1)

    mode.github.merge_base = merge_base  # type: ignore[method-assign]


def _completed(mode: Mode, tmp_path: Path, outcome: str, rows: tuple[str, ...] | None = None) -> Campaign:
    """A finished campaign of the current head whose report is report_factory's `outcome`."""
    ledger = mode.new_ledger()
    request = CampaignRequest(
        pr_number=1, head_sha=HEAD, base_sha=BASE, relationship="diverged", rows=rows, rows_key=",".join(rows or ()),
        requested_by="maintainer", trigger="label", config_text=CONFIG_TOML, config_source=f"config @ {TIP}",
        config_sha=TIP, mode="campaign", rerun=False,
    )
    campaign = ledger.create(request)
    store: Store = ledger.store  # type: ignore[attr-defined]
    out = tmp_path / campaign.id / "out"
    out.mkdir(parents=True)
    report = make_report("perf_fail") if outcome == "fail" else with_undecided_conclusion(
        make_report("inconclusive_straddle"), "failure")
    (out / "report.json").write_text(report.model_dump_json())
    store.transition(campaign.id, S.DISPATCHED, "test", artifact_dir=str(out))
    store.transition(campaign.id, S.RUNNING, "test")
    return store.transition(campaign.id, S.COMPLETED, "test", conclusion=report.concluded.conclusion.value)


def test_a_failed_head_of_several_commits_is_bisected_from_its_merge_base_under_its_config(
        sqlite: Mode, tmp_path: Path) -> None:
    failed = _completed(sqlite, tmp_path, "fail", rows=("vllm-disagg",))
    _ahead(sqlite, 3)
    outcome = sqlite.act(Bisect(1, "maintainer"))
    assert outcome.startswith(f"bisect of {failed.id}: campaign kvp-")
    [bisect] = [c for c in sqlite.new_ledger().campaigns(1) if c.purpose == "bisect"]
    assert (bisect.head_sha, bisect.base_sha, bisect.rows, bisect.mode) == (HEAD, BASE, ["vllm-disagg"], "campaign")
    assert bisect.config_source == failed.config_source and bisect.check_kind == "bisect"
    assert sqlite.new_ledger().config_text(bisect) == CONFIG_TOML, "the bisect is judged by the campaign's config"
    # Asked again while it runs: the new request replaces it (rerun means rerun), as a rerun does.
    sqlite.act(Bisect(1, "maintainer"))
    states = sorted(c.state.value for c in sqlite.new_ledger().campaigns(1) if c.purpose == "bisect")
    assert states == ["requested", "superseded"]


@pytest.mark.parametrize(("outcome", "ahead", "reason"), [
    (None, 3, f"no campaign of the head {HEAD[:12]} has FAILed"),
    ("undecided", 3, f"no campaign of the head {HEAD[:12]} has FAILed"),
    ("fail", 1, f"the head {HEAD[:12]} is 1 commit ahead of its base: it is the culprit itself"),
])
def test_a_bisect_without_a_failed_range_is_refused_saying_why(
        sqlite: Mode, tmp_path: Path, outcome: str | None, ahead: int, reason: str) -> None:
    """An undecided campaign concluding `failure` (`[checks] undecided_conclusion`) FAILed no gate."""
    if outcome is not None:
        _completed(sqlite, tmp_path, outcome)
    _ahead(sqlite, ahead)
    assert sqlite.act(Bisect(1, "maintainer")).startswith(f"invalid: {reason}")
    [reply] = sqlite.replies()
    assert reply["kind"] == "refused" and reply["context"]["reason"].startswith(reason)
    assert not [c for c in sqlite.new_ledger().campaigns(1) if c.purpose == "bisect"]


def test_actions_only_mode_refuses_a_bisect_and_says_where_to_run_one() -> None:
    [runs] = list(_runs())
    assert runs.act(Bisect(1, "maintainer")) == (
        "invalid: this bot's mode cannot run a bisect (it runs on the service's local backend)")
    [reply] = runs.replies()
    assert "kv-parity bisect --good <merge base> --bad <head>" in reply["context"]["fix"]
    assert runs.github.runs == {}
