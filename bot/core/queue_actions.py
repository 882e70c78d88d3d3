"""What the bot does when GitHub's merge queue asks for checks on a merge group, for both modes.

The base branch's campaign config chooses `[merge_queue] mode` (read at the base branch's tip, never from a pull
request or from the group's commit, which holds the queued pull requests' changes):
- `carry` (default): the campaign check's run on the group's commit, concluded at once from the standing of every
  pull request in the group (`bot.core.merge_queue`), saying plainly that nothing was measured on that commit;
- `measure`: a campaign of the group's commit against the group's base, concluding that check run like any
  campaign; `destroyed` (merged, invalidated, dequeued) cancels it while it is live;
- `off`: the event is ignored (a repository that requires the check then blocks its queue).
"""

from __future__ import annotations

from bot.core.campaign import CampaignRequest, CampaignState, DuplicateCampaign
from bot.core.events import MergeGroup, MergeGroupEvent
from bot.core.ledger import Ledger
from bot.core.merge_queue import MERGE_GROUP_TRIGGER, MemberStanding, branch_of, carry, queue_entry, standing
from bot.core.ports import PullRequestPublisher, RepoApi
from bot.core.repo_values import NotFoundError
from bot.core.resolve import resolve
from bot.core.watched_paths import watched_change
from bot.settings import Settings
from runners.schema.config import format_rows


class MergeQueueDesk:
    """Acts on one merge_group event through the decisions' ledger, API and publisher."""

    def __init__(self, ledger: Ledger, api: RepoApi, publisher: PullRequestPublisher, settings: Settings) -> None:
        self.ledger, self.api, self.publisher, self.settings = ledger, api, publisher, settings

    def act(self, event: MergeGroupEvent) -> str:
        group = event.merge_group
        if event.action == "destroyed":
            return self._destroyed(event)
        if event.action != "checks_requested":
            return f"ignored: merge_group action {event.action!r} is not a trigger"
        base = branch_of(group.base_ref)
        resolution = resolve(self.api, group.head_sha, base, self.settings.config_path)
        if resolution.config is None:
            return f"ignored: no usable campaign config on {base}: {resolution.error}"
        mode = resolution.config.merge_queue.mode
        if mode == "off":
            return f"ignored: [merge_queue] mode is off in {resolution.config_source}"
        if mode == "carry":
            return self._carry(group, base, resolution.config.checks.watched_paths, resolution.config_source)
        return self._measure(group, resolution.config_source, resolution.config_sha, resolution.config_text)

    # ------------------------------------------------------------------ carry

    def pull_requests(self, group: MergeGroup, base: str) -> list[int]:
        """The group's pull requests: the one its `head_ref` names, and every queue entry of the same base branch
        whose commit lies inside the group (the entries ahead of it)."""
        own = queue_entry(group.head_ref)
        numbers = {own[1]} if own is not None else set()
        others = [
            (entry[1], sha)
            for ref, sha in self.api.matching_refs(f"heads/gh-readonly-queue/{base}/")
            if (entry := queue_entry(ref)) is not None and entry[0] == base and entry[1] not in numbers
        ]
        if others:  # only then is it worth asking which commits the group holds
            inside = set(self.api.commits_between(base, group.head_sha))
            numbers |= {number for number, sha in others if sha in inside}
        return sorted(numbers)

    def _member(self, number: int, base: str, patterns: list[str], config_source: str) -> MemberStanding:
        try:
            pull = self.api.pull(number)
        except NotFoundError:
            return standing(number, None, None, None, None, "")
        found = self.ledger.head_conclusion(number, pull.head_sha)
        if found.conclusion is None and patterns and pull.state == "open":
            # No campaign of this head: under watched paths, one that changes none of them needs none.
            changed = self.api.merge_base(base, pull.head_sha).changed_files
            if not watched_change(number, pull.head_sha, config_source, patterns, changed).needs_campaign:
                return standing(number, pull.head_sha, pull.state, "skipped", None,
                                f"its head {pull.head_sha[:12]} changes no watched path: no campaign needed")
        return standing(number, pull.head_sha, pull.state, found.conclusion, found.campaign_id, found.detail)

    def _carry(self, group: MergeGroup, base: str, patterns: list[str], config_source: str) -> str:
        members = [self._member(number, base, patterns, config_source) for number in self.pull_requests(group, base)]
        result = carry(group.head_sha, group.base_sha, base, members)
        run_id = self.publisher.merge_group_carried(group.head_sha, result)
        lacking = [f"#{m.number}: {m.detail}" for m in result.members if not m.carried]
        shown = ", ".join(f"#{m.number}" for m in result.members) or "no pull request"
        why = f"; lacking: {'; '.join(lacking)}" if lacking else ""
        return f"carried {result.conclusion} to merge group {group.head_sha[:12]} ({shown}; check run {run_id}){why}"

    # ------------------------------------------------------------------ measure

    def _measure(self, group: MergeGroup, config_source: str, config_sha: str, config_text: str) -> str:
        """A campaign of the group's commit against its base; recorded under the pull request its `head_ref`
        names (it posts no comments there: the check run on the group's commit is its result)."""
        own = queue_entry(group.head_ref)
        if own is None:
            return f"ignored: merge group {group.head_ref!r} names no pull request"
        request = CampaignRequest(
            pr_number=own[1],
            head_sha=group.head_sha,
            base_sha=group.base_sha,
            relationship="ancestor",
            rows=None,
            rows_key=f"merge_group:{format_rows([])}",
            requested_by="merge queue",
            trigger=MERGE_GROUP_TRIGGER,
            config_text=config_text,
            config_source=config_source,
            config_sha=config_sha,
            mode="campaign",
            rerun=False,
        )
        existing = self.ledger.covering(request)
        if existing is not None:
            return f"duplicate of {existing.id}"
        try:
            campaign = self.ledger.create(request)
        except DuplicateCampaign as duplicate:
            return f"duplicate of {duplicate.existing.id}"
        return self.ledger.launch(campaign)

    def _destroyed(self, event: MergeGroupEvent) -> str:
        group = event.merge_group
        live = [c for c in self.ledger.live_of_head(group.head_sha) if c.trigger == MERGE_GROUP_TRIGGER]
        reason = f"the merge group was destroyed ({event.reason or 'no reason given'})"
        for campaign in live:
            self.ledger.end(campaign, CampaignState.CANCELLED, reason)
        return f"cancelled {[c.id for c in live]}: {reason}"
