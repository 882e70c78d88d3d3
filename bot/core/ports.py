"""The interfaces the layers share, in one small module so no layer imports another sideways to name them; the
values they carry are the core's too (`bot.core.campaign`, `bot.core.repo_values`, `bot.core.attempts`).

`bot.publish.publisher.Publisher` and `bot.github.gateway.GitHubGateway` implement them; `bot.lifecycle`, the two
modes (`bot.modes`) and `bot.core.decisions` only speak through them. The server wires the concrete
parts together (`bot.modes.wiring`, `bot.service.wiring`), so no module here needs to know who builds whom.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from bot.core.attempts import PriorAttempt
from bot.core.campaign import Campaign, CampaignState
from bot.core.merge_queue import CarriedResult
from bot.core.repo_values import BotIdentity, CheckRunInfo, CommentInfo, CommitInfo, PullInfo
from bot.core.resolve import RevisionSource
from bot.core.watched_paths import WatchedChange
from runners.progress import ProgressEvent
from runners.schema.bisect_rule import BisectReport
from runners.schema.report import CampaignReport


class Publisher(Protocol):
    """What the bot tells GitHub (`bot.publish.publisher.Publisher(gateway, settings)`), the one owner of the
    campaign's check run: it opens it (found first by its external_id, the campaign id, so a retry or a second
    path never makes two) and updates it. Every step takes `details_url`, where a person follows the campaign
    (its details page or its Actions run; None: the publisher's fallback); a step that writes the check run returns
    its id."""

    def queued(self, campaign: Campaign, position: int, *, details_url: str | None = None) -> int | None:
        """Show the queue position (0 = started)."""
        ...

    def progress(self, campaign: Campaign, event: ProgressEvent, *, details_url: str | None = None) -> None: ...

    def waiting(self, campaign: Campaign, *, details_url: str | None = None) -> None:
        """Show where the running campaign waits in its scheduler's queue (`campaign.scheduler_wait`)."""
        ...

    def finished(
        self,
        campaign: Campaign,
        report: CampaignReport,
        artifact_dir: Path,
        *,
        prior_attempts: list[PriorAttempt],
        details_url: str | None = None,
    ) -> int | None:
        """Complete the check run and post the result; `prior_attempts` are the earlier campaigns of the same
        head (oldest first), listed so repeated attempts are visible."""
        ...

    def ended(self, campaign: Campaign, state: str, reason: str, *, details_url: str | None = None) -> int | None:
        """cancelled | superseded | timed_out | errored | config_error, with the recorded reason."""
        ...

    def reply(self, number: int, kind: str, **context: object) -> None:
        """Kinds and their context: refused(reason, fix), help(), status(campaigns), duplicate(campaign),
        unknown_command(line, reason), accepted(marker, acceptance, outcome, verdicts, campaign),
        revoked(marker, count, campaign)."""
        ...


class PullRequestPublisher(Publisher, Protocol):
    """A pull request's publisher, which also concludes the campaign check on a merge group's commit and at an
    unlabelled head under watched paths (the decision core's; a side run's publisher reports only its own
    campaigns)."""

    def watched_paths_concluded(self, change: WatchedChange, *, details_url: str) -> int:
        """The campaign check at an unlabelled head, created concluded (`skipped` or `action_required`)."""
        ...

    def merge_group_carried(self, head_sha: str, result: CarriedResult) -> int:
        """Create the campaign check's run on a merge group's commit, concluded from `result` (carry mode)."""
        ...

class RepoApi(RevisionSource, Protocol):
    """The reads the bot makes through `bot.github.gateway.GitHubGateway`."""

    def pull(self, number: int) -> PullInfo: ...

    def permission(self, login: str) -> str: ...

    def commit(self, ref: str) -> CommitInfo:
        """A commit or tag's commit and its parents (main-branch tracking: the first parent, the reference)."""
        ...

    def suite_check_runs(self, check_suite_id: int, check_name: str) -> list[CheckRunInfo]: ...

    def check_runs_of(self, ref: str, check_name: str) -> list[CheckRunInfo]: ...

    def matching_refs(self, prefix: str) -> list[tuple[str, str]]: ...

    def commits_between(self, base: str, head: str) -> list[str]: ...

    def comment(self, comment_id: int) -> CommentInfo | None: ...


class SideRunPublisher(Publisher, Protocol):
    """What reports side runs (`bot.publish.side_runs.SideRunPublisher`): bisects and main-branch tracking, each on
    a check run of its own, never in a pull request's status comment."""

    def bisect_finished(
        self, campaign: Campaign, bisect: BisectReport, artifact_dir: Path, *, details_url: str | None = None
    ) -> int:
        """Complete the `kv-parity / bisect` check run and post the result on the pull request, once."""
        ...


ApiT = TypeVar("ApiT", bound=RepoApi, covariant=True)


@dataclass(frozen=True)
class RepoServices(Generic[ApiT]):
    """Everything bound to one repository: its gateway, its publisher and who the bot is there (`bot.modes.wiring`
    builds it for both modes; `ApiT` is what a mode reads through the gateway: the service `RepoApi`, Actions-only
    mode also the Actions calls)."""

    api: ApiT
    publisher: PullRequestPublisher
    bot: BotIdentity
    side_runs: SideRunPublisher | None = None
    """Reports bisects and main-branch tracking (None: a service that runs neither)."""


class CampaignDriver(Protocol):
    """What the service's ledger needs from `bot.lifecycle.Lifecycle`, which runs the campaigns it records."""

    def end(
        self, campaign: Campaign, state: CampaignState, reason: str, *, published_state: str | None = None
    ) -> Campaign: ...

    def announce(self, campaign: Campaign) -> None: ...
