"""`/parity accept`: who may accept which FAIL of which head, decided once for both modes.

- Who: the sender's permission against `[checks] accept_permission` of the campaign config at the base branch's
  tip (never the pull request's), refused once per window like every refusal.
- Which head: the pull request's head when the comment was written. A ledger that records when it first saw each
  head refuses a comment written before the current head existed; without that record, the head at the moment the
  comment is handled is the one accepted (as for a fork approval). A later push ends the acceptance.
- What: pinned to what was measured, so the head needs a finished campaign. A semantic FAIL is never accepted
  (a semantic exception record is the way), an undecided gate neither (rerun it), a gate that passed has nothing
  to accept. A FAIL above `max` is recorded but stays a failure; the published summary says by how much
  (`runners.schema.acceptance`).
- Effects: the acceptance is recorded, answered with a reply that carries the record's marker (Actions-only mode
  reads acceptances back from it, `bot.core.accept_comments`), and the latest finished campaign of the head is
  republished at once, judged with every standing acceptance of the head.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bot.core.accept_comments import accept_marker, acceptance_of, revoke_marker
from bot.core.authz import is_sufficient
from bot.core.heads import not_the_head_written_about
from bot.core.ledger import FinishedCampaign, Ledger
from bot.core.ports import Publisher, RepoApi
from bot.core.repo_values import PullInfo
from bot.core.resolve import resolve
from bot.core.triggers import Accept, Refuse
from bot.settings import Settings
from runners.schema.config import CampaignConfig
from runners.schema.report import CampaignReport, GateVerdict, PerfVerdict, SemanticVerdict
from runners.schema.verdicts import with_acceptances

EXCEPTIONS_DOC = "docs/configuration.md#semantic-exceptions-kv-parityexceptionstoml"
"""Where a semantic difference is made acceptable instead: a verified semantic exception record."""



@dataclass(frozen=True)
class _Refusal:
    reason: str
    fix: str


class AcceptanceDesk:
    """Acts on one `Accept` intent through the decisions' ledger, API, publisher and permission lookup."""

    def __init__(
        self,
        ledger: Ledger,
        api: RepoApi,
        publisher: Publisher,
        settings: Settings,
        *,
        clock: Callable[[], float],
        pull: Callable[[int], PullInfo],
        permission_of: Callable[[str], str],
        refuse: Callable[[Refuse], str],
    ) -> None:
        self.ledger, self.api, self.publisher, self.settings = ledger, api, publisher, settings
        self.clock, self.pull, self.permission_of, self.refuse = clock, pull, permission_of, refuse

    def act(self, intent: Accept) -> str:
        pull = self.pull(intent.pr)
        if pull.state != "open":
            return self._reply(intent, _Refusal(f"pull request #{pull.number} is {pull.state}", "reopen it first"))
        resolution = resolve(self.api, pull.head_sha, pull.base_ref, self.settings.config_path)
        if resolution.config is None:
            fix = "fix the campaign config on the base branch (it is never read from the pull request)"
            return self._reply(intent, _Refusal(resolution.error or "no campaign config", fix))
        config = resolution.config
        needed = config.checks.accept_permission
        permission = self.permission_of(intent.requested_by)
        if not is_sufficient(permission, needed):
            reason = (
                f"@{intent.requested_by} has {permission!r} permission on this repository; accepting a FAIL needs "
                f"at least {needed!r} (`[checks] accept_permission` in {resolution.config_source})"
            )
            fix = f"ask a collaborator with at least {needed!r} permission to review the result and accept it"
            return self.refuse(Refuse(intent.pr, intent.requested_by, permission, reason, fix=fix, action="accepting"))
        moved = self._head_moved(intent, pull)
        if moved is not None:
            return self._reply(intent, moved)
        if intent.args.revoke:
            return self._revoke(intent, pull)
        finished = self.ledger.latest_finished(intent.pr, pull.head_sha)
        if finished is None:
            live = [c for c in self.ledger.live(intent.pr) if c.head_sha == pull.head_sha and c.mode == "campaign"]
            waiting = f"; campaign {live[-1].id} is still {live[-1].state.value}" if live else ""
            reason = (
                f"no campaign of head {pull.head_sha[:12]} has finished{waiting}: an acceptance is pinned to what "
                "was measured"
            )
            fix = "comment again once this head's campaign has finished" + (
                "" if live else f" (`{self.settings.command_word} rerun` starts one)"
            )
            return self._reply(intent, _Refusal(reason, fix))
        refusal = self._not_acceptable(intent, finished.report, config)
        if refusal is not None:
            return self._reply(intent, refusal)
        return self._accept(intent, pull, finished, permission)

    # ------------------------------------------------------------------ refusals

    def _reply(self, intent: Accept, refusal: _Refusal) -> str:
        self.publisher.reply(intent.pr, "refused", reason=refusal.reason, fix=refusal.fix, action="accepting")
        return f"accept refused: {refusal.reason}"

    def _head_moved(self, intent: Accept, pull: PullInfo) -> _Refusal | None:
        """An acceptance covers only the head the comment was written about (bot.core.heads): a head pushed after
        it, or pushed away and back before it was handled, is not accepted."""
        if not self.ledger.records_heads:
            return None
        written = intent.written_at.timestamp()
        reason = not_the_head_written_about(self.ledger.heads_since(pull.number, written), pull.head_sha, written,
                                            "the head")
        if reason is None:
            return None
        return _Refusal(f"{reason}; an acceptance covers the head that was measured when it was written",
                        f"look at the result for {pull.head_sha[:12]}, then comment again")

    def _not_acceptable(self, intent: Accept, report: CampaignReport, config: CampaignConfig) -> _Refusal | None:
        """Why the head's latest result has nothing this command may accept, or None."""
        args, head = intent.args, report.revisions
        rerun = f"comment `{self.settings.command_word} rerun` to measure again"
        verdicts = report.concluded
        sha = next((r.sha[:12] for r in head if r.arm == "candidate"), "?")
        if verdicts.semantic == SemanticVerdict.FAIL:
            return _Refusal(
                f"semantic parity FAILed on {sha} (campaign {report.campaign_id}): a semantic FAIL is never accepted",
                f"if the difference is intended, add a semantic exception record that the campaign verifies "
                f"({EXCEPTIONS_DOC}); otherwise fix it",
            )
        if verdicts.semantic == SemanticVerdict.BLOCKED:
            return _Refusal(f"semantic parity is BLOCKED on {sha}: nothing was decided, so nothing can be accepted",
                            f"fix what the check run names, then {rerun}")
        if args.gate == "sizes":
            if verdicts.sizes == GateVerdict.PASS:
                return _Refusal(f"the size gate PASSed on {sha}: there is nothing to accept", "nothing to do")
            if verdicts.sizes != GateVerdict.FAIL:
                return _Refusal(f"the size gate is {verdicts.sizes.value} on {sha}: an undecided gate is not accepted",
                                rerun)
            return None
        known = {row.id for row in config.rows}
        unknown = sorted(set(args.rows or ()) - known)
        if unknown:
            return _Refusal(f"unknown rows {unknown}; the base branch's config defines {sorted(known)}",
                            "name rows of the config, or omit `rows=` to accept every row's performance FAIL")
        named = [row for row in report.rows if args.rows is None or row.row.id in args.rows]
        if any(row.perf_verdict == PerfVerdict.FAIL for row in named):
            return None
        undecided = [f"{row.row.id} {row.perf_verdict.value}" for row in named if row.perf_verdict != PerfVerdict.PASS]
        if undecided:
            return _Refusal(
                f"performance is undecided on {sha} ({', '.join(undecided)}): an INCONCLUSIVE or BLOCKED result is "
                "not accepted",
                rerun,
            )
        return _Refusal(f"performance PASSed on {sha}: there is nothing to accept", "nothing to do")

    # ------------------------------------------------------------------ effects

    def _accept(self, intent: Accept, pull: PullInfo, finished: FinishedCampaign, permission: str) -> str:
        acceptance = acceptance_of(intent.args, login=intent.requested_by, permission=permission,
                                   comment_id=intent.comment_id, comment_url=intent.comment_url,
                                   head_sha=pull.head_sha, written_unix=intent.written_at.timestamp(),
                                   recorded_unix=self.clock())
        standing = [a for a in self.ledger.acceptances(intent.pr, pull.head_sha) if a.comment_id != intent.comment_id]
        self.ledger.record_acceptance(intent.pr, acceptance)
        judged = with_acceptances(finished.report, [*standing, acceptance])
        verdicts = judged.concluded
        outcome = next(o for o in verdicts.acceptances if o.acceptance.comment_id == acceptance.comment_id)
        self.publisher.reply(
            intent.pr,
            "accepted",
            marker=accept_marker(acceptance, intent.body),
            acceptance=acceptance,
            outcome=outcome,
            verdicts=verdicts,
            campaign=finished.campaign,
        )
        republished = self.ledger.republish(finished)
        return f"accepted: {acceptance.line()}; {republished}"

    def _revoke(self, intent: Accept, pull: PullInfo) -> str:
        count = self.ledger.revoke_acceptances(intent.pr, pull.head_sha, intent.requested_by, intent.comment_id)
        if count == 0:
            return self._reply(
                intent, _Refusal(f"head {pull.head_sha[:12]} has no standing acceptance to revoke", "nothing to do")
            )
        finished = self.ledger.latest_finished(intent.pr, pull.head_sha)
        self.publisher.reply(
            intent.pr,
            "revoked",
            marker=revoke_marker(intent.comment_id, pull.head_sha),
            count=count,
            head_sha=pull.head_sha,
            campaign=finished.campaign if finished else None,
        )
        republished = self.ledger.republish(finished) if finished is not None else "nothing to republish"
        return f"revoked {count} acceptance(s) of {pull.head_sha[:12]}; {republished}"
