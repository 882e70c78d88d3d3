"""Deterministic bisect.json documents, searched by the real rule (`runners.schema.bisect_rule.search`) over synthetic
probe campaigns: each attempt is one of report_factory's reports (every verdict computed by the real rules) moved
onto that probe's commit. What a probe's campaign says is chosen per commit and attempt; which commits are probed,
in which order, with which rerun, and the result are the rule's, never typed in."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence

from runners.schema.bisect_rule import BisectReport, Gate, conclude, search
from runners.schema.report import CampaignReport, Revision

from tests.report_factory import BASE_SHA, make_report

GOOD = BASE_SHA
SAYS = {"pass": "pass", "semantic": "parity_fail", "performance": "perf_fail", "sizes": "size_fail",
        "undecided": "inconclusive_straddle", "blocked": "blocked_missing_flag"}
"""What a probe's campaign concludes -> the report_factory outcome that concludes it (`undecided`: performance
INCONCLUSIVE with semantic PASS; `blocked`: a blocking stop, semantic BLOCKED)."""


def commit_sha(index: int) -> str:
    return hashlib.sha1(f"bisect commit {index}".encode()).hexdigest()


@functools.cache
def _outcome(name: str) -> CampaignReport:
    return make_report(SAYS[name])


def probe_report(says: str, commit: str, campaign_id: str) -> CampaignReport:
    """`says`'s report as a campaign of `commit` against GOOD."""
    revisions = [Revision(arm="baseline", sha=GOOD, requested=GOOD), Revision(arm="candidate", sha=commit,
                                                                               requested=commit)]
    return _outcome(says).model_copy(update={"campaign_id": campaign_id, "revisions": revisions}, deep=True)


def make_bisect(outcomes: Sequence[str | Sequence[str]], target: list[Gate] | None = None) -> BisectReport:
    """A bisect over len(outcomes) commits; outcomes[i] is what commit i+1's campaign says (one word for every
    attempt, or one per attempt)."""
    commits = [commit_sha(index) for index in range(1, len(outcomes) + 1)]
    says: Mapping[str, str | Sequence[str]] = dict(zip(commits, outcomes, strict=True))

    def attempt(number: int, commit: str, rerun: int) -> tuple[CampaignReport, str]:
        chosen = says[commit]
        word = chosen if isinstance(chosen, str) else chosen[rerun]
        label = f"{number:02d}-{commit[:12]}" + (f"-rerun{rerun}" if rerun else "")
        return probe_report(word, commit, f"bisect0001-{label}"), f"probes/{label}"

    rule, probes = search(commits, target, attempt)
    return BisectReport(
        bisect_id="bisect0001", created_unix=1764400000.0, tool_version="0.1.0 (test)", good=GOOD,
        bad=commits[-1], requested={"good": "main~8", "bad": "main"}, commits=commits,
        config=probes[0].attempts[0].report.config, config_source=f".github/kv-parity.toml@{GOOD}", rows=None,
        rule=rule, probes=probes, result=conclude(GOOD, commits, probes),
    )
