"""Every Markdown surface, for every outcome, compared byte for byte with tests/golden/.

Goldens are what GitHub will show, so a change of wording is a reviewed diff of these files.
Regenerate with `KV_PARITY_UPDATE_GOLDEN=1 pytest tests/test_render_golden.py` and read the diff.
"""

from __future__ import annotations

import difflib
import os
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.core.attempts import PriorAttempt
from bot.core.campaign import Campaign, CampaignState
from bot.core.commands import COMMANDS
from bot.core.merge_queue import carry, standing
from bot.core.watched_paths import watched_change
from bot.publish import comment_markers, limits, markdown, render, views
from bot.publish.views import Links, ProgressView
from runners.progress import ProgressEvent
from runners.schema.report import Acceptance, CampaignReport
from runners.schema.verdicts import with_acceptances
from tests.report_factory import BASE_SHA, CAMPAIGN_ID, HEAD_SHA, OUTCOMES, make_report, make_wide_report

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("KV_PARITY_UPDATE_GOLDEN") == "1"
REPO = "octo-org/dynamo"
ARTIFACT_URL = f"https://github.com/{REPO}/actions/runs/4242/artifacts/99"
LINKS = Links(
    artifact_url=ARTIFACT_URL,
    check_run_url=f"https://github.com/{REPO}/runs/1001",
    result_url=f"https://github.com/{REPO}/pull/512#issuecomment-2002",
    details_url="https://kv-parity.example.org/c/3nT0k3n-unguessable",
)
ENDED = {
    "cancelled": "cancelled by @alice with `/parity cancel`",
    "superseded": "superseded by campaign `c-20251129-0002` for the new head 9f8e7d6",
    "timed_out": "no report 6 h after dispatch (deadline 2025-11-29 16:00 UTC)",
    "errored": "campaign process exited with status 101 before writing report.json",
    "config_error": (
        ".github/kv-parity.toml@e8828036e3d3: invalid campaign config:\n"
        "  perf.pairs: Value error, pairs must be even so the schedule is balanced between arm orders\n"
        "  harness.exclusions: Value error, ['/summary/ttft'] not in the protocol's closed exclusion list"
    ),
}


def campaign(**changes: object) -> Campaign:
    """A stored campaign as the lifecycle engine hands it to the publisher."""
    fields: dict[str, object] = {
        "id": CAMPAIGN_ID,
        "repo": REPO,
        "pr_number": 512,
        "head_sha": HEAD_SHA,
        "base_sha": BASE_SHA,
        "relationship": "ancestor",
        "rows": None,
        "state": CampaignState.RUNNING,
        "requested_by": "alice",
        "trigger": "comment",
        "created_at": datetime(2025, 11, 29, 10, 0, tzinfo=UTC),
        "deadline": datetime(2025, 11, 29, 16, 0, tzinfo=UTC),
        "artifact_dir": None,
        "queue_position": 0,
        "attempt": 1,
        "reason": "",
        "conclusion": None,
        "config_source": f".github/kv-parity.toml@{BASE_SHA}",
    }
    fields.update(changes)
    return Campaign.model_validate(fields)


def _accepted_report(limit: float, gate: str = "performance") -> CampaignReport:
    """The performance FAIL (upper bound 1.1248) or the size FAIL (growth 7.93%), judged with an acceptance."""
    report = make_report("perf_fail" if gate == "performance" else "size_fail")
    acceptance = Acceptance(
        gate="performance" if gate == "performance" else "sizes",
        login="carol",
        permission="maintain",
        comment_id=3003,
        comment_url=f"https://github.com/{REPO}/pull/512#issuecomment-3003",
        reason="the admission pass is intended: it adds one scan per step (#498)",
        max=limit,
        head_sha=HEAD_SHA,
        written_unix=1764410000.0,
        recorded_unix=1764410400.0,
    )
    return with_acceptances(report, [acceptance])


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"no golden {name}; run with KV_PARITY_UPDATE_GOLDEN=1 and review it"
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(True), text.splitlines(True), f"golden/{name}", "rendered"
            )
        )
        pytest.fail(f"{name} differs from its golden:\n{diff}")


def with_title(content: views.CheckRunContent) -> str:
    """Golden form of a check-run output: the title as an invisible first line, then the summary."""
    return f"<!-- check run title: {content.title} -->\n{content.summary}"


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_report_surfaces(outcome: str) -> None:
    report = make_report(outcome)
    content = render.check_run_content(report, LINKS)

    check_golden(f"{outcome}.check_summary.md", with_title(content))
    check_golden(f"{outcome}.check_text.md", content.text)
    check_golden(f"{outcome}.result_comment.md", render.result_comment(report, LINKS))
    check_golden(
        f"{outcome}.status_comment.md",
        render.status_comment(campaign(state=CampaignState.COMPLETED), "finished", LINKS, report=report),
    )


PRIOR_ATTEMPTS = [
    PriorAttempt(
        campaign_id="kvp-0a1b2c3d4e5f",
        head_sha=HEAD_SHA,
        state="completed",
        semantic="FAIL",
        performance="NOT_RUN",
        requested_by="alice",
        finished_unix=1764400000.0,
    ),
    PriorAttempt(
        campaign_id="kvp-6a7b8c9d0e1f",
        head_sha=HEAD_SHA,
        state="cancelled",
        semantic=None,
        performance=None,
        requested_by="bob",
        finished_unix=1764405000.0,
    ),
]
"""A rerun after a FAIL and a cancelled attempt: both stay visible on the passing campaign's surfaces."""


def test_prior_attempts_surfaces() -> None:
    report = make_report("pass")
    content = render.check_run_content(report, LINKS, prior_attempts=PRIOR_ATTEMPTS)

    check_golden("rerun_after_fail.check_summary.md", with_title(content))
    check_golden(
        "rerun_after_fail.result_comment.md", render.result_comment(report, LINKS, prior_attempts=PRIOR_ATTEMPTS)
    )


@pytest.mark.parametrize("outcome", ["pass", "parity_fail", "kernel_contradiction", "instruction_contradiction"])
def test_report_markdown(outcome: str) -> None:
    check_golden(f"{outcome}.report.md", render.report_markdown(make_report(outcome), Links()))


@pytest.mark.parametrize("state", sorted(ENDED))
def test_ended_surfaces(state: str) -> None:
    view = campaign(state=state if state != "config_error" else CampaignState.ERRORED)
    links = Links(check_run_url=LINKS.check_run_url)

    check_golden(
        f"{state}.check_summary.md", with_title(render.ended_content(view, state, ENDED[state], links))
    )
    check_golden(
        f"{state}.status_comment.md",
        render.status_comment(view, "ended", links, state=state, reason=ENDED[state]),
    )


def test_queued_surfaces() -> None:
    view = campaign(state=CampaignState.REQUESTED, queue_position=2, rows=["vllm-disagg"], deadline=None)
    links = Links(check_run_url=LINKS.check_run_url)

    check_golden(
        "queued.check_summary.md", with_title(render.progress_content(view, None, links, position=2))
    )
    check_golden("queued.status_comment.md", render.status_comment(view, "queued", links, position=2))


def test_running_surfaces() -> None:
    event = ProgressEvent(
        stage="performance", row="vllm-disagg", detail="pair 17 (candidate first)", done=17, total=60
    )
    progress = ProgressView.of(event, eta_seconds=352.0)
    links = Links(check_run_url=LINKS.check_run_url)

    check_golden("running.check_summary.md", with_title(render.progress_content(campaign(), progress, links)))
    check_golden(
        "running.status_comment.md", render.status_comment(campaign(), "running", links)
    )


WAITING = "row vllm-disagg: Slurm job 4242 PENDING (Resources, 2 of 7 pending)"
"""What the Slurm backend says while a row job waits for a node (`runners.pipeline.slurm`'s pending line)."""


def test_waiting_status_comment() -> None:
    """The running status comment of a campaign whose row job pends: Slurm's reason and queue place."""
    links = Links(check_run_url=LINKS.check_run_url)
    check_golden(
        "waiting.status_comment.md", render.status_comment(campaign(scheduler_wait=WAITING), "running", links)
    )


def test_slurms_reason_is_defused_on_both_surfaces() -> None:
    """The reason is Slurm's text, not ours: it can neither format, split the table, nor mention anyone."""
    hostile = "row a: Slurm job 7 PENDING (@team <img src=x> | #12 **x**, 1 of 1 pending)"
    view = campaign(scheduler_wait=hostile)
    comment = render.status_comment(view, "running", Links())
    reply = render.reply("status", "/parity", COMMANDS, "kv-parity", {"campaigns": [view]})
    escaped = "(@\u200bteam \\<img src=x\\> \\| #\u200b12 \\*\\*x\\*\\*, 1 of 1 pending)"
    assert escaped in comment and escaped in reply
    [row] = [line for line in reply.splitlines() if line.startswith("| `")]
    assert len(re.findall(r"(?<!\\)\|", row)) == 7, row


REPLIES: dict[str, dict[str, object]] = {
    "refused": {
        "reason": "@mallory has `read` permission on octo-org/dynamo; starting a campaign needs `write`",
        "fix": "ask a maintainer to comment `/parity rerun sha=4a95f4ea3f82` to approve this head",
    },
    "help": {},
    "status": {
        "campaigns": [
            campaign(scheduler_wait=WAITING),
            campaign(
                id="c-20251129-0002",
                state=CampaignState.REQUESTED,
                queue_position=1,
                rows=["sglang-disagg"],
                requested_by="bob",
                trigger="label",
            ),
        ]
    },
    "duplicate": {"campaign": campaign(state=CampaignState.REQUESTED, queue_position=3)},
    "unknown_command": {
        "line": "/parity rerun rows=vllm disagg",
        "reason": "`rerun` does not understand 'disagg'",
    },
    "accepted": {
        "marker": (
            f"<!-- kv-parity:accept comment=3003 head={HEAD_SHA} sha256={'5' * 64} permission=maintain "
            "at=1764410400 -->"
        ),
        "acceptance": (accepted := _accepted_report(1.13)).acceptances[0],
        "outcome": accepted.concluded.acceptances[0],
        "verdicts": accepted.concluded,
        "campaign": campaign(state=CampaignState.COMPLETED),
    },
    "revoked": {
        "marker": f"<!-- kv-parity:revoke comment=3004 head={HEAD_SHA} -->",
        "count": 1,
        "head_sha": HEAD_SHA,
        "campaign": campaign(state=CampaignState.COMPLETED),
    },
}


@pytest.mark.parametrize("kind", sorted(REPLIES))
def test_replies(kind: str) -> None:
    check_golden(f"reply.{kind}.md", render.reply(kind, "/parity", COMMANDS, "kv-parity", REPLIES[kind]))


def test_status_reply_without_campaigns() -> None:
    text = render.reply("status", "/parity", COMMANDS, "kv-parity", {"campaigns": []})

    assert text.startswith(
        "No parity campaign for this pull request. Comment `/parity rerun` or add the label"
    )


def test_unknown_reply_kind_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown reply kind"):
        render.reply("shrug", "/parity", COMMANDS, "kv-parity", {})


def test_missing_context_is_an_error_not_an_empty_string() -> None:
    """StrictUndefined: a refusal without its fix must fail loudly rather than post a half-sentence."""
    with pytest.raises(Exception, match="fix"):
        render.reply("refused", "/parity", COMMANDS, "kv-parity", {"reason": "x"})


@pytest.mark.parametrize(
    ("name", "limit", "gate"),
    [
        ("accepted", 1.13, "performance"),
        ("accepted_above_max", 1.10, "performance"),
        ("accepted_size", 0.08, "sizes"),
    ],
)
def test_accepted_surfaces(name: str, limit: float, gate: str) -> None:
    """An accepted FAIL says who accepted it, up to what and why, with a link to the comment; one above `max`
    stays a failure and says by how much."""
    report = _accepted_report(limit, gate)
    content = render.check_run_content(report, LINKS)
    check_golden(f"{name}.check_summary.md", with_title(content))
    check_golden(f"{name}.result_comment.md", render.result_comment(report, LINKS))
    check_golden(
        f"{name}.status_comment.md",
        render.status_comment(campaign(state=CampaignState.COMPLETED), "finished", LINKS, report=report),
    )


def test_merge_group_surfaces() -> None:
    """The campaign check on a merge group's commit, carried forward: it says nothing was measured there."""
    group, base = "7" * 40, "8" * 40
    passed = standing(512, HEAD_SHA, "open", "success", CAMPAIGN_ID,
                      f"campaign {CAMPAIGN_ID} of its head {HEAD_SHA[:12]} concluded success")
    failed = standing(513, "9" * 40, "open", "failure", "kvp-0123456789ab",
                      f"campaign kvp-0123456789ab of its head {'9' * 12} concluded failure")
    missing = standing(514, "6" * 40, "open", None, None, f"no kv-parity campaign of its head {'6' * 12}")
    ok = render.merge_group_content(carry(group, base, "main", [passed]))
    check_golden("merge_group_carried.check_summary.md", with_title(ok))
    lacking = render.merge_group_content(carry(group, base, "main", [passed, failed, missing]))
    check_golden("merge_group_not_carried.check_summary.md", with_title(lacking))
    needless = standing(515, "5" * 40, "open", "skipped", None,
                        f"its head {'5' * 12} changes no watched path: no campaign needed")
    with_needless = render.merge_group_content(carry(group, base, "main", [passed, needless]))
    check_golden("merge_group_carried_needless.check_summary.md", with_title(with_needless))


def test_watched_paths_surfaces() -> None:
    """The campaign check at an unlabelled head: needed (naming the watched paths, 50 at most), needed because
    GitHub's list was cut, or skipped; each says nothing was measured and names the patterns and their config."""
    patterns = ["lib/mocker/**", "Cargo.lock", "!**/*.md"]
    source = f".github/kv-parity.toml @ {BASE_SHA} (base branch tip)"
    changed = ("Cargo.lock", "README.md", *(f"lib/mocker/src/m{n:02}.rs" for n in range(52)))
    needed = watched_change(512, HEAD_SHA, source, patterns, changed)
    check_golden("watched_paths_needed.check_summary.md", with_title(render.watched_paths_content(needed, "kv-parity")))
    cut = watched_change(512, HEAD_SHA, source, patterns, None)
    check_golden("watched_paths_cut.check_summary.md", with_title(render.watched_paths_content(cut, "kv-parity")))
    skipped = watched_change(512, HEAD_SHA, source, patterns, ("README.md", "lib/mocker/NOTES.md"))
    check_golden("watched_paths_skipped.check_summary.md",
                 with_title(render.watched_paths_content(skipped, "kv-parity")))


def test_every_golden_is_produced_by_a_test() -> None:
    """A stale golden (an outcome that no longer renders) would mislead reviewers."""
    produced = {
        *(
            f"{o}.{s}.md"
            for o in OUTCOMES
            for s in ("check_summary", "check_text", "result_comment", "status_comment")
        ),
        "pass.report.md",
        "parity_fail.report.md",
        "kernel_contradiction.report.md",
        "instruction_contradiction.report.md",
        "rerun_after_fail.check_summary.md",
        "rerun_after_fail.result_comment.md",
        *(f"{s}.{k}.md" for s in ENDED for k in ("check_summary", "status_comment")),
        *(f"{s}.{k}.md" for s in ("queued", "running") for k in ("check_summary", "status_comment")),
        *(f"reply.{k}.md" for k in REPLIES),
        "waiting.status_comment.md",
        *(
            f"{name}.{kind}.md"
            for name in ("accepted", "accepted_above_max", "accepted_size")
            for kind in ("check_summary", "result_comment", "status_comment")
        ),
        "merge_group_carried.check_summary.md",
        "merge_group_not_carried.check_summary.md",
        "merge_group_carried_needless.check_summary.md",
        *(f"watched_paths_{kind}.check_summary.md" for kind in ("needed", "cut", "skipped")),
    }
    assert {p.name for p in GOLDEN.glob("*.md")} == produced


# --- limits, trimming and escaping ------------------------------------------------------------------------


def test_forty_rows_fit_github_limits_with_a_pointer_to_the_artifact() -> None:
    report = make_wide_report(40)
    content = render.check_run_content(report, LINKS)
    comment = render.result_comment(report, LINKS)

    assert len(content.summary) <= limits.CHECK_TEXT_LIMIT and len(content.text) <= limits.CHECK_TEXT_LIMIT
    assert len(comment) <= limits.COMMENT_LIMIT and len(content.title) <= limits.TITLE_LIMIT
    assert all(f"`row-{n:02d}-vllm-disagg`" in content.summary for n in range(40)), (
        "the verdict table is whole"
    )
    assert "did not fit GitHub's size limit" in content.text and ARTIFACT_URL in content.text
    assert "### Rerun" in content.text, "the closing sections survive: only row details are dropped"
    assert content.text.count("```mermaid") == content.text.count("<sub>Grey bars"), "no chart is cut in half"
    full = render.report_markdown(report, Links())
    assert len(full) > limits.CHECK_TEXT_LIMIT and full.count("```mermaid") == 40, (
        "report.md is never trimmed"
    )


def test_trim_never_cuts_inside_a_code_fence() -> None:
    text = "intro\n\n```mermaid\n" + "x\n" * 200 + "```\n\ntail\n"

    trimmed = limits.trim_markdown(text, 120, "see the artifact")

    assert trimmed == "intro\n\n---\n✂️ see the artifact\n"


def test_trim_counts_bytes_so_multibyte_text_stays_within_the_limit() -> None:
    text = "✅ ok\n" * 20_000

    trimmed = limits.trim_markdown(text, limits.CHECK_TEXT_LIMIT, "pointer")

    assert len(trimmed.encode()) <= limits.CHECK_TEXT_LIMIT and trimmed.endswith("✂️ pointer\n")


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("feat/**bold**|<img src=x>", "feat/\\*\\*bold\\*\\*\\|\\<img src=x\\>"),
        ("@octo-org/team fixes #12", "@\u200bocto-org/team fixes #\u200b12"),
        ("# heading", "\\# heading"),
        ("1. item", "1\\. item"),
        ("[link](javascript:x)", "\\[link\\](javascript:x)"),
        ("6.8.0-49-generic", "6.8.0-49-generic"),
    ],
)
def test_user_text_is_escaped(raw: str, escaped: str) -> None:
    assert markdown.md(raw) == escaped


def test_branch_names_render_literally_in_every_surface() -> None:
    report = make_report("pass")
    hostile = "feat/`x`|**y**"
    report.revisions[1] = report.revisions[1].model_copy(update={"requested": hostile})

    comment = render.result_comment(report, LINKS)

    assert "(requested as ``feat/`x`|**y**``)" in comment


def test_code_spans_survive_backticks_and_pipes() -> None:
    assert markdown.code("a`b|c") == "``a`b\\|c``"
    assert markdown.code("`edge`") == "`` `edge` ``"


def test_result_marker_round_trip_and_quotes_are_ignored() -> None:
    marker = comment_markers.result_marker("c-1", HEAD_SHA)

    assert comment_markers.result_marker_campaign(marker + "\nbody") == "c-1"
    assert comment_markers.result_marker_campaign("> " + marker) is None
    status = comment_markers.STATUS_MARKER
    assert comment_markers.is_status_comment(status + "\nx") and not comment_markers.is_status_comment("> " + status)


@pytest.mark.parametrize(
    ("method", "says"),
    [
        ("batch_iut", "a batch intersection–union test over 3 contiguous batches decides"),
        ("none", "the verdict is INCONCLUSIVE (no dependence-aware method declared)"),
    ],
)
def test_performance_plan_names_the_declared_dependence_method(method: str, says: str) -> None:
    report = make_report("pass")
    perf = report.config.perf.model_copy(update={"dependence_method": method})
    report = report.model_copy(update={"config": report.config.model_copy(update={"perf": perf})})
    text = render.check_run_content(report, LINKS).text
    plan = next(line for line in text.splitlines() if "Performance plan" in line)
    assert f"if a diagnostic breaches, {says}" in plan
