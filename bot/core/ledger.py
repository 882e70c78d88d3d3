"""What `bot.core.decisions` reads and writes: a pull request's campaigns, wherever they are kept.

Two implementations, side by side in `bot.modes`: `store_ledger.StoreLedger` (the service's SQLite store, driven
by `bot.lifecycle`) and `run_title_ledger.RunTitleLedger` (Actions-only mode, where a campaign is a live workflow
run named by its title).
What one mode can remember and the other cannot is a property of its ledger, never a branch in the decisions:
a ledger without an approvals record approves nothing by itself (the authorised command is the approval), one
without a record of heads says `records_heads = False` (a fork's plain rerun then approves nothing), one without
refusal memory answers every refusal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.core.campaign import Campaign, CampaignRequest, CampaignState
from bot.core.heads import HeadSeen
from runners.schema.report import Acceptance, CampaignReport


@dataclass(frozen=True)
class FinishedCampaign:
    """The latest campaign of a head that finished with a report, and that report as measured."""

    campaign: Campaign
    report: CampaignReport
    details_url: str | None = None
    """Where a person follows it, when the ledger knows (Actions-only mode: its workflow run)."""


@dataclass(frozen=True)
class HeadConclusion:
    """The kv-parity check's standing at a pull request's head, as the merge queue carries it forward."""

    conclusion: str | None
    """The conclusion published for the head's latest campaign (with its acceptances); None without one."""
    campaign_id: str | None
    detail: str
    """What a person reads: which campaign concluded what, or why there is no conclusion."""


class Ledger(Protocol):
    """One repository's campaigns as one event sees them."""

    @property
    def records_heads(self) -> bool:
        """Whether `heads_since` is a record: without one, nothing tells which head a comment was written
        about, so a fork's plain rerun approves nothing and is answered with the `sha=` command to use."""
        ...

    @property
    def runs_bisect(self) -> bool:
        """Whether `/parity bisect` can run here (the service's local backend; a bisect is many campaigns)."""
        ...

    def failed_campaign(self, pr: int, head_sha: str) -> Campaign | None:
        """The newest completed campaign of this head whose report FAILs a gate (what `/parity bisect` bisects)."""
        ...

    def config_text(self, campaign: Campaign) -> str:
        """The config text a recorded campaign ran with (a bisect runs under the same)."""
        ...

    def campaign(self, campaign_id: str) -> Campaign | None:
        """The campaign a check run names (its external_id), if this ledger knows it."""
        ...

    def campaigns(self, pr: int) -> list[Campaign]:
        """What `status` lists for a pull request."""
        ...

    def live(self, pr: int) -> list[Campaign]:
        """The pull request's queued and running campaigns, oldest first."""
        ...

    def end(
        self, campaign: Campaign, state: CampaignState, reason: str, *, published_state: str | None = None
    ) -> None:
        """Stop a live campaign and say so where it is shown (`published_state` overrides the shown state)."""
        ...

    def covering(self, request: CampaignRequest) -> Campaign | None:
        """The campaign that already answers this request, which is then not started."""
        ...

    def replaced(self, request: CampaignRequest) -> list[Campaign]:
        """Live campaigns of the request's head it takes the place of (other heads are superseded anyway)."""
        ...

    def create(self, request: CampaignRequest) -> Campaign:
        """Record the campaign; raises `bot.core.campaign.DuplicateCampaign` when its key is taken."""
        ...

    def launch(self, campaign: Campaign) -> str:
        """Queue or dispatch a created campaign; returns the outcome that says what was done."""
        ...

    def approve(self, pr: int, head_sha: str, login: str) -> None:
        """Remember that `login` approved exactly this head of a fork (a ledger without the record drops it)."""
        ...

    def is_approved(self, pr: int, head_sha: str) -> bool: ...

    def see_head(self, pr: int, head_sha: str, at: float, source: str) -> None:
        """Remember that the pull request's head was `head_sha` at `at` (a delivery, a fetch)."""
        ...

    def heads_since(self, pr: int, at: float) -> list[HeadSeen]:
        """The heads recorded latest at or before `at`, then every one recorded after, in time order."""
        ...

    def answered_refusal(self, pr: int, login: str, since: float) -> str | None:
        """The permission recorded with a refusal answered since `since`, or None (answer this one)."""
        ...

    def record_refusal(self, pr: int, login: str, permission: str, reason: str, *, answered: bool) -> None: ...

    # ------------------------------------------------------------------ acceptances and the merge queue

    def latest_finished(self, pr: int, head_sha: str) -> FinishedCampaign | None:
        """The newest campaign (not a profile) of this head that finished with a report."""
        ...

    def acceptances(self, pr: int, head_sha: str) -> list[Acceptance]:
        """The standing acceptances of this head, oldest first."""
        ...

    def record_acceptance(self, pr: int, acceptance: Acceptance) -> None:
        """Keep an acceptance (a ledger whose record is the bot's reply itself keeps nothing here)."""
        ...

    def revoke_acceptances(self, pr: int, head_sha: str, login: str, comment_id: int) -> int:
        """Withdraw the head's standing acceptances; returns how many there were."""
        ...

    def republish(self, finished: FinishedCampaign) -> str:
        """Publish the finished campaign again, judged with the head's standing acceptances."""
        ...

    def head_conclusion(self, pr: int, head_sha: str) -> HeadConclusion: ...

    def live_of_head(self, head_sha: str) -> list[Campaign]:
        """The queued and running campaigns of a commit (a merge group's), whichever pull request recorded them."""
        ...
