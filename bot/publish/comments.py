"""The bot's comments on a pull request: one sticky status comment, one result comment per campaign, replies.

Comments are found again by hidden markers, but a marker is text anyone can paste: only comments whose
author id is the bot's own count. A user comment carrying a copied status or result marker is ignored, so
it can neither freeze the status comment nor suppress (or be folded as) a result.
"""

from __future__ import annotations

from datetime import UTC, datetime

from bot.core.campaign import Campaign
from bot.core.repo_values import CommentInfo
from bot.github.errors import GitHubNotFoundError
from bot.github.redact import RedactingGateway
from bot.publish.comment_markers import is_status_comment, result_marker_campaign

OWNER_PREFIX = "<!-- kv-parity:campaign "


def _utc_iso(moment: datetime) -> str:
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _owner(body: str) -> tuple[str, str] | None:
    """(campaign id, created ISO) of the campaign a status comment currently describes."""
    for line in body.splitlines()[:3]:
        if line.startswith(OWNER_PREFIX) and line.endswith(" -->"):
            campaign_id, _, created = line[len(OWNER_PREFIX) : -4].partition(" ")
            return campaign_id, created
    return None


class CommentWriter:
    """Posts and edits the bot's comments, recognising its own by author id."""

    def __init__(self, gateway: RedactingGateway) -> None:
        self.gateway = gateway
        self._bot_id: int | None = None
        self._status: dict[tuple[str, int], CommentInfo] = {}
        self._minimized: set[str] = set()

    @property
    def bot_id(self) -> int:
        """The numeric id of the account the bot posts as (looked up once)."""
        if self._bot_id is None:
            self._bot_id = self.gateway.identity().id
        return self._bot_id

    def ours(self, number: int) -> list[CommentInfo]:
        """The pull request's comments the bot itself wrote, oldest first."""
        return [c for c in self.gateway.list_comments(number) if c.author_id == self.bot_id]

    # --- the sticky status comment

    def remember_status(self, campaign: Campaign, ours: list[CommentInfo]) -> None:
        found = next((c for c in ours if is_status_comment(c.body)), None)
        if found is not None:
            self._status[(campaign.repo, campaign.pr_number)] = found

    def upsert_status(self, campaign: Campaign, body: str) -> int | None:
        """Edit the one status comment in place (creating it once), unless a newer campaign owns it."""
        body = self._with_owner(campaign, body)
        key = (campaign.repo, campaign.pr_number)
        if key not in self._status:
            self.remember_status(campaign, self.ours(campaign.pr_number))
        known = self._status.get(key)
        if known is None:
            self._status[key] = self.gateway.create_comment(campaign.pr_number, body)
            return self._status[key].id
        owner = _owner(known.body)
        if owner is not None and owner[0] != campaign.id and owner[1] > _utc_iso(campaign.created_at):
            return None
        if known.body != self.gateway.redactor.redact(body):
            try:
                self._status[key] = self.gateway.edit_comment(known.id, body)
            except GitHubNotFoundError:
                self._status[key] = self.gateway.create_comment(campaign.pr_number, body)
        return self._status[key].id

    @staticmethod
    def _with_owner(campaign: Campaign, body: str) -> str:
        marker, _, rest = body.partition("\n")
        return f"{marker}\n{OWNER_PREFIX}{campaign.id} {_utc_iso(campaign.created_at)} -->\n{rest}"

    # --- result comments

    def post_result(self, campaign: Campaign, body: str) -> CommentInfo:
        """Post the campaign's result comment once; a second call finds the first by its marker and edits it when
        the words changed (a republish after an acceptance).

        Older campaigns' result comments (the bot's only) are folded as outdated.
        """
        ours = self.ours(campaign.pr_number)
        self.remember_status(campaign, ours)
        existing = [c for c in ours if result_marker_campaign(c.body) == campaign.id]
        result = existing[0] if existing else self.gateway.create_comment(campaign.pr_number, body)
        if existing and result.body != self.gateway.redactor.redact(body):
            result = self.gateway.edit_comment(result.id, body)  # republished (an acceptance): same comment, new words
        for comment in ours:
            owner = result_marker_campaign(comment.body)
            if (
                owner is not None
                and owner != campaign.id
                and comment.id < result.id
                and comment.node_id not in self._minimized
            ):
                self.gateway.minimize_comment(comment.node_id, "OUTDATED")
                self._minimized.add(comment.node_id)
        return result

    def reply(self, number: int, body: str) -> None:
        self.gateway.create_comment(number, body)
