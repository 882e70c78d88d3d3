"""The App service's ledger: its SQLite store (`bot.store`), which records campaigns for the lifecycle to run.

What the store lets the service remember, and Actions-only mode cannot (`bot.modes.run_title_ledger`):
- every campaign, completed ones too: adding the label again to a head whose campaign completed is answered with
  that campaign, not run again; a rerun replaces a queued or running campaign of the same rows instead;
- fork approvals (`Store.approve_head`): a push of an approved head starts by itself;
- what each pull request's head was and when (from every pull_request delivery and every pull request fetch), so
  a plain `/parity rerun` on a fork approves its head only if it was the head when the comment was written and
  no other head was seen since;
- answered refusals: one answer per person per pull request per `refusal_window_seconds`.
"""

from __future__ import annotations

from pydantic import ValidationError

from bot.core.campaign import LIVE_STATES, Campaign, CampaignRequest, CampaignState
from bot.core.heads import HeadSeen
from bot.core.ledger import FinishedCampaign, HeadConclusion
from bot.core.ports import CampaignDriver
from bot.store.campaigns import Store
from runners.schema.report import Acceptance, CampaignReport
from runners.schema.verdicts import with_verdicts


def campaign_failed(campaign: Campaign) -> bool:
    """Whether a completed campaign's report FAILs a gate: its verdicts (an undecided campaign may conclude
    `failure` by `[checks] undecided_conclusion` without having FAILed anything)."""
    if campaign.conclusion != "failure" or campaign.artifact_dir is None:
        return False
    try:
        report = CampaignReport.model_validate_json((campaign.artifact_dir / "report.json").read_bytes())
    except (OSError, ValidationError):
        return False
    return with_verdicts(report).concluded.failed


class StoreLedger:
    """The service's ledger: `bot.store.campaigns.Store`, with endings and launches made by the lifecycle. It only
    records: what is published, and when, is the lifecycle's and the publisher's."""

    records_heads = True

    def __init__(self, store: Store, driver: CampaignDriver, repo: str, *, backend: str, delivery_id: str) -> None:
        self.store, self.driver, self.repo = store, driver, repo
        self.backend, self.delivery_id = backend, delivery_id

    @property
    def runs_bisect(self) -> bool:
        return self.backend == "local"

    def failed_campaign(self, pr: int, head_sha: str) -> Campaign | None:
        campaign = self.store.latest_of_head(self.repo, pr, head_sha, completed=True)
        return campaign if campaign is not None and campaign_failed(campaign) else None

    def config_text(self, campaign: Campaign) -> str:
        return self.store.config_text(campaign.id)

    def campaign(self, campaign_id: str) -> Campaign | None:
        return self.store.get(campaign_id)

    def campaigns(self, pr: int) -> list[Campaign]:
        return self.store.for_pr(self.repo, pr)

    def live(self, pr: int) -> list[Campaign]:
        return self.store.for_pr(self.repo, pr, live_only=True)

    def end(
        self, campaign: Campaign, state: CampaignState, reason: str, *, published_state: str | None = None
    ) -> None:
        self.driver.end(campaign, state, reason, published_state=published_state)

    def covering(self, request: CampaignRequest) -> Campaign | None:
        """A label or push is answered by the live or completed campaign of its key; a rerun never is."""
        if request.rerun:
            return None
        return self.store.covering(self.repo, request.pr_number, request.head_sha, request.base_sha, request.rows_key)

    def replaced(self, request: CampaignRequest) -> list[Campaign]:
        """A rerun replaces the live campaign of its key; a label or push replaces nothing of its head."""
        if not request.rerun:
            return []
        live = self.store.live_for_key(
            self.repo, request.pr_number, request.head_sha, request.base_sha, request.rows_key
        )
        return [live] if live is not None else []

    def create(self, request: CampaignRequest) -> Campaign:
        """Record the campaign; nothing is published until the lifecycle announces it (`launch`)."""
        return self.store.create_campaign(request, self.repo, delivery_id=self.delivery_id, backend=self.backend)

    def launch(self, campaign: Campaign) -> str:
        """Queued: the lifecycle's worker dispatches campaigns one at a time, oldest first."""
        self.driver.announce(campaign)
        return f"campaign {campaign.id} requested"

    def queued_main(self) -> list[Campaign]:
        """Main-branch campaigns waiting for the backend (bot.core.tracking's `queue = "newest"`)."""
        return [c for c in self.store.side_runs(self.repo, ("main",), live_only=True)
                if c.state == CampaignState.REQUESTED]

    def pushes_since_reference(self) -> int | None:
        return self.store.pushes_since_reference(self.repo)

    def approve(self, pr: int, head_sha: str, login: str) -> None:
        self.store.approve_head(self.repo, pr, head_sha, login)

    def is_approved(self, pr: int, head_sha: str) -> bool:
        return self.store.is_approved(self.repo, pr, head_sha)

    def see_head(self, pr: int, head_sha: str, at: float, source: str) -> None:
        self.store.see_head(self.repo, pr, head_sha, at, source)

    def heads_since(self, pr: int, at: float) -> list[HeadSeen]:
        return self.store.heads_since(self.repo, pr, at)

    def answered_refusal(self, pr: int, login: str, since: float) -> str | None:
        recent = self.store.answered_refusal(self.repo, pr, login, since)
        return recent.permission if recent is not None else None

    def record_refusal(self, pr: int, login: str, permission: str, reason: str, *, answered: bool) -> None:
        self.store.record_refusal(self.repo, pr, login, permission, reason, answered=answered)

    # ------------------------------------------------------------------ acceptances and the merge queue

    def latest_finished(self, pr: int, head_sha: str) -> FinishedCampaign | None:
        """The newest completed campaign of the head whose report.json is still in its artifact directory."""
        campaign = self.store.latest_of_head(self.repo, pr, head_sha, completed=True)
        if campaign is None or campaign.artifact_dir is None:
            return None
        try:
            report = CampaignReport.model_validate_json((campaign.artifact_dir / "report.json").read_bytes())
        except (OSError, ValueError):
            return None
        return FinishedCampaign(campaign, with_verdicts(report))

    def acceptances(self, pr: int, head_sha: str) -> list[Acceptance]:
        return self.store.acceptances(self.repo, pr, head_sha)

    def record_acceptance(self, pr: int, acceptance: Acceptance) -> None:
        self.store.record_acceptance(self.repo, pr, acceptance)

    def revoke_acceptances(self, pr: int, head_sha: str, login: str, comment_id: int) -> int:
        return self.store.revoke_acceptances(self.repo, pr, head_sha, login, comment_id)

    def republish(self, finished: FinishedCampaign) -> str:
        """Queue the campaign's result for publication again: the lifecycle publishes it with the head's standing
        acceptances on its next tick, retried like any publication."""
        self.store.republish(finished.campaign.id, "finished", "republished with the head's acceptances")
        return f"republishing campaign {finished.campaign.id}"

    def head_conclusion(self, pr: int, head_sha: str) -> HeadConclusion:
        campaign = self.store.latest_of_head(self.repo, pr, head_sha)
        if campaign is None:
            return HeadConclusion(None, None, f"no kv-parity campaign of its head {head_sha[:12]}")
        if campaign.state == CampaignState.COMPLETED:
            return HeadConclusion(
                campaign.conclusion,
                campaign.id,
                f"campaign {campaign.id} of its head {head_sha[:12]} concluded {campaign.conclusion or 'nothing'}",
            )
        if campaign.state in LIVE_STATES:
            return HeadConclusion(None, campaign.id, f"campaign {campaign.id} of its head {head_sha[:12]} is still "
                                                     f"{campaign.state.value}")
        return HeadConclusion(None, campaign.id, f"campaign {campaign.id} of its head {head_sha[:12]} ended "
                                                 f"{campaign.state.value} without a verdict")

    def live_of_head(self, head_sha: str) -> list[Campaign]:
        return self.store.live_of_head(self.repo, head_sha)
