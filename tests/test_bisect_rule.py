"""The bisect's rule and its recomputation, on synthetic probe campaigns (tests/bisect_factory.py) and on real
git histories (no build): which commits are probed and in which order, the one rerun, the narrowest range, the
target the bad endpoint names, and `kv-parity verify bisect.json` catching every kind of tampering."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.cli.reports import main_verify
from runners.pipeline.bisect import BisectError, first_parent_commits, parse_target
from runners.schema.bisect_rule import BisectReport, ProbeState, probe_state
from runners.verify import verify_bisect
from tests.bisect_factory import GOOD, commit_sha, make_bisect, probe_report
from tests.webhooks import commit, git

FIRST_BAD_AT_5 = ["pass"] * 4 + ["semantic"] * 4


def _positions(bisect: BisectReport) -> list[int]:
    return [probe.position for probe in bisect.probes]


def test_a_semantic_change_is_found_by_binary_search_after_the_bad_endpoint() -> None:
    bisect = make_bisect(FIRST_BAD_AT_5)
    assert _positions(bisect) == [8, 4, 6, 5]
    assert [probe.state for probe in bisect.probes] == ["bad", "good", "bad", "bad"]
    assert bisect.rule.target == ["semantic"] and bisect.rule.target_source == "bad endpoint"
    assert bisect.result.outcome == "culprit" and bisect.result.culprit == commit_sha(5)
    assert bisect.result.good == commit_sha(4)
    assert bisect.result.last_line == f"culprit: {commit_sha(5)}"
    assert verify_bisect(bisect) == []


def test_the_bad_endpoint_names_the_target_and_other_gates_do_not_count() -> None:
    """The endpoint FAILs performance: a commit whose only FAIL is its size is good for this search."""
    bisect = make_bisect(["pass", "sizes", "performance", "performance"])
    assert bisect.rule.target == ["performance"]
    assert _positions(bisect) == [4, 2, 3]
    assert bisect.probes[1].state == ProbeState.GOOD, "a size FAIL is not the performance target"
    assert bisect.result.culprit == commit_sha(3)
    assert verify_bisect(bisect) == []


def test_a_performance_target_cannot_be_decided_past_a_semantic_change() -> None:
    """Performance is measured only once correctness holds: the endpoint is undecided, rerun once, and the search
    reports the whole range instead of a guess."""
    bisect = make_bisect(["performance", "semantic"], target=["performance"])
    [endpoint] = bisect.probes
    assert [attempt.state for attempt in endpoint.attempts] == ["undecided", "undecided"]
    assert bisect.result.outcome == "range" and (bisect.result.good, bisect.result.bad) == (GOOD, commit_sha(2))
    assert bisect.result.last_line == f"range: {GOOD}..{commit_sha(2)}"
    assert verify_bisect(bisect) == []


def test_an_undecided_probe_is_rerun_once_then_the_narrowest_decided_range_is_reported() -> None:
    outcomes: list[str | list[str]] = ["pass"] * 8
    outcomes[3] = ["blocked", "blocked"]
    outcomes[5:] = ["semantic"] * 3
    bisect = make_bisect(outcomes)
    assert _positions(bisect) == [8, 4]
    assert len(bisect.probes[1].attempts) == 2, "exactly one rerun, never more"
    assert bisect.result.outcome == "range"
    assert (bisect.result.good, bisect.result.bad) == (GOOD, commit_sha(8))
    assert verify_bisect(bisect) == []
    later: list[str | list[str]] = ["pass"] * 8
    later[5] = ["blocked", "blocked"]
    later[6:] = ["semantic"] * 2
    narrowed = make_bisect(later)
    assert _positions(narrowed) == [8, 4, 6]
    assert (narrowed.result.good, narrowed.result.bad) == (commit_sha(4), commit_sha(8))


def test_a_rerun_that_decides_continues_the_search_and_keeps_both_attempts() -> None:
    outcomes: list[str | list[str]] = list(FIRST_BAD_AT_5)
    outcomes[3] = ["blocked", "pass"]
    bisect = make_bisect(outcomes)
    assert _positions(bisect) == [8, 4, 6, 5]
    assert [a.state for a in bisect.probes[1].attempts] == ["undecided", "good"]
    assert bisect.result.culprit == commit_sha(5)
    assert verify_bisect(bisect) == []


def test_a_bad_endpoint_that_passes_leaves_nothing_to_bisect() -> None:
    bisect = make_bisect(["pass", "pass"])
    assert _positions(bisect) == [2] and bisect.result.outcome == "not_bad"
    assert bisect.rule.target == []
    assert verify_bisect(bisect) == []


def test_a_one_commit_range_needs_only_the_endpoint() -> None:
    bisect = make_bisect(["semantic"])
    assert _positions(bisect) == [1] and bisect.result.culprit == commit_sha(1)


def test_probe_state_follows_the_target_gates_only() -> None:
    verdicts = probe_report("performance", commit_sha(1), "x").concluded
    assert probe_state(verdicts, ["performance"]) == ProbeState.BAD
    assert probe_state(verdicts, ["semantic"]) == ProbeState.GOOD
    undecided = probe_report("undecided", commit_sha(1), "x").concluded
    assert probe_state(undecided, ["semantic"]) == ProbeState.GOOD
    assert probe_state(undecided, ["performance"]) == ProbeState.UNDECIDED


def _tampered(bisect: BisectReport, change: str) -> BisectReport:
    data = json.loads(bisect.model_dump_json())
    if change == "state":
        data["probes"][1]["state"] = data["probes"][1]["attempts"][0]["state"] = "bad"
    elif change == "result":
        data["result"]["culprit"] = commit_sha(6)
    elif change == "order":
        data["probes"][1], data["probes"][2] = data["probes"][2], data["probes"][1]
    elif change == "dropped":
        data["probes"].pop()
    elif change == "baseline":
        data["probes"][2]["attempts"][0]["report"]["revisions"][0]["sha"] = commit_sha(1)
    elif change == "verdict":
        data["probes"][3]["attempts"][0]["report"]["verdicts"]["semantic"] = "PASS"
    elif change == "extra rerun":
        data["probes"][1]["attempts"].append(data["probes"][1]["attempts"][0])
    elif change == "target":
        data["rule"]["target"] = ["semantic", "performance"]
    return BisectReport.model_validate(data)


@pytest.mark.parametrize(("change", "complaint"), [
    ("state", "state bad, recomputed good"),
    ("result", f"result culprit: {commit_sha(6)}, recomputed culprit: {commit_sha(5)}"),
    ("order", "the rule probes commit 4"),
    ("dropped", "the rule had not concluded"),
    ("baseline", "not " + commit_sha(6)[:12] + " against good"),
    ("verdict", "campaign semantic: stored PASS, recomputed FAIL"),
    ("extra rerun", "rerun although this attempt decided (good)"),
    ("target", "target ['semantic', 'performance'], but the bad endpoint FAILs ['semantic']"),
])
def test_verify_recomputes_every_probe_and_the_culprit(change: str, complaint: str) -> None:
    problems = verify_bisect(_tampered(make_bisect(FIRST_BAD_AT_5), change))
    assert any(complaint in problem for problem in problems), problems


def test_kv_parity_verify_reads_a_bisect_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bisect.json"
    path.write_text(make_bisect(FIRST_BAD_AT_5).model_dump_json(), encoding="utf-8")
    assert main_verify(path) == 0
    assert f"consistent (4 probes, 4 campaigns; culprit: {commit_sha(5)})" in capsys.readouterr().out
    path.write_text(_tampered(make_bisect(FIRST_BAD_AT_5), "result").model_dump_json(), encoding="utf-8")
    assert main_verify(path) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{path}: 1 disagreement(s) with the recomputation:",
        f"  - result culprit: {commit_sha(6)}, recomputed culprit: {commit_sha(5)}"]
    data = json.loads(path.read_text())
    del data["rule"]
    path.write_text(json.dumps(data), encoding="utf-8")
    assert main_verify(path) == 2
    assert "is not a kv-parity.bisect.v1 bisect" in capsys.readouterr().err


def test_target_names_are_checked() -> None:
    assert parse_target("sizes, semantic") == ["semantic", "sizes"]
    assert parse_target("") is None
    with pytest.raises(BisectError, match=r"unknown gates \['speed'\]"):
        parse_target("semantic,speed")


def test_the_commits_are_the_first_parent_line_from_good_to_bad(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "--quiet", "-b", "main")
    good = commit(repo, {"a": "0"}, "good")
    first = commit(repo, {"a": "1"}, "one")
    git(repo, "checkout", "--quiet", "-b", "side", good)
    side = commit(repo, {"b": "1"}, "side")
    git(repo, "checkout", "--quiet", "main")
    git(repo, "merge", "--quiet", "--no-ff", "-m", "merge side", "side")
    merged = git(repo, "rev-parse", "HEAD")
    last = commit(repo, {"a": "2"}, "two")
    assert first_parent_commits(repo, good, last) == [first, merged, last], "the side branch is not probed"
    with pytest.raises(BisectError, match="is not on the first-parent history"):
        first_parent_commits(repo, side, last)
    with pytest.raises(BisectError, match="nothing to bisect"):
        first_parent_commits(repo, last, last)
    with pytest.raises(BisectError, match="is not on the first-parent history"):
        first_parent_commits(repo, last, good)


def test_verify_finds_an_undecided_probe_that_was_never_rerun() -> None:
    outcomes: list[str | list[str]] = list(FIRST_BAD_AT_5)
    outcomes[3] = ["blocked", "blocked"]
    outcomes[5:] = ["semantic"] * 3
    data = make_bisect(outcomes).model_dump(mode="json")
    data["probes"][1]["attempts"].pop()
    problems = verify_bisect(BisectReport.model_validate(data))
    assert f"probe 2 ({commit_sha(4)[:12]}): undecided after 1 attempt(s) but never rerun; the rule reruns an " \
           "undecided probe 1 time" in problems, problems


def test_verify_judges_the_target_on_recomputed_verdicts_not_stored_ones() -> None:
    """The endpoint's stored verdicts are gone: verify says so and still recomputes the target from the rows,
    instead of failing on the missing verdicts."""
    data = make_bisect(FIRST_BAD_AT_5).model_dump(mode="json")
    data["probes"][0]["attempts"][0]["report"]["verdicts"] = None
    problems = verify_bisect(BisectReport.model_validate(data))
    assert problems and all(problem.startswith("probe 1 ") for problem in problems), problems
    assert not any(problem.startswith("target") for problem in problems), problems
