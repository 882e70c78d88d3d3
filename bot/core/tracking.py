"""Main-branch tracking, decided once for both modes: a push to the default branch -> the campaigns it starts.

A per-PR gate of 1.05 lets a series of pull requests each add just under 5%; ten compound to 1.5x with every
check green. With `[main] track = true` in the default branch's campaign config, every push to it is measured
against its first parent (an exact adjacent pair: the same protocol, the same gates), reported as the check run
`kv-parity / main` on the pushed commit; with `[main] reference` and `every = N`, every N-th tracked push also
measures the tip against the reference (`kv-parity / reference`): the cumulative change since it. A FAIL opens
the tracking issue (bot.publish.side_runs).

The config is read at the pushed commit itself: it is the default branch's new tip, the same trusted revision a
pull request's campaign reads its config at. Pushes to other branches, tags and deletions are ignored.
`kv-parity track` (schedules, Actions-only mode) starts the reference campaign directly (`reference_request`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.core.campaign import Campaign, CampaignRequest, CampaignState, DuplicateCampaign
from bot.core.events import PushEvent
from bot.core.repo_values import CommitInfo
from runners.schema.config import CampaignConfig, ConfigError, parse_config


class TrackingApi(Protocol):
    def read_file(self, path: str, ref: str) -> bytes | None: ...

    def commit(self, ref: str) -> CommitInfo: ...


class TrackingLedger(Protocol):
    """Where main-branch campaigns are recorded and started (the service's store; Actions-only mode's runs)."""

    def create(self, request: CampaignRequest) -> Campaign: ...

    def launch(self, campaign: Campaign) -> str: ...

    def end(
        self, campaign: Campaign, state: CampaignState, reason: str, *, published_state: str | None = None
    ) -> None: ...

    def queued_main(self) -> list[Campaign]:
        """Main campaigns recorded and not yet started (the ones `queue = "newest"` supersedes)."""
        ...

    def pushes_since_reference(self) -> int | None:
        """Tracked pushes since the last reference campaign; None when this ledger keeps no count."""
        ...


def default_branch_source(config_path: str, sha: str) -> str:
    """How reports name the config of a main-branch campaign."""
    return f"{config_path} @ {sha} (default branch tip)"


@dataclass(frozen=True)
class DefaultBranchConfig:
    sha: str
    source: str
    text: str
    config: CampaignConfig


def read_config(api: TrackingApi, config_path: str, sha: str) -> DefaultBranchConfig | str:
    """The campaign config at a default-branch commit, or why there is none to use."""
    source = default_branch_source(config_path, sha)
    raw = api.read_file(config_path, sha)
    if raw is None:
        return f"no campaign config at {source}"
    try:
        text = raw.decode("utf-8")
        return DefaultBranchConfig(sha, source, text, parse_config(text, source))
    except UnicodeDecodeError as exc:
        return f"{source}: not UTF-8 text: {exc}"
    except ConfigError as exc:
        return str(exc)


def _request(config: DefaultBranchConfig, head: str, base: str, purpose: str, who: str,
             trigger: str) -> CampaignRequest:
    return CampaignRequest(
        pr_number=0, head_sha=head, base_sha=base, relationship="ancestor", rows=None, rows_key=f"{purpose}:",
        requested_by=who, trigger=trigger, config_text=config.text, config_source=config.source,
        config_sha=config.sha, mode="campaign", rerun=False, purpose="reference" if purpose == "reference" else "main",
    )


def reference_request(api: TrackingApi, config: DefaultBranchConfig, reference: str, who: str,
                      trigger: str) -> CampaignRequest | str:
    """The tip (the config's commit) against `reference` (a tag or SHA), or why it cannot run."""
    try:
        pinned = api.commit(reference).sha
    except Exception as exc:  # the gateway's GitHubError, or a stand-in's: the reason is what matters
        return f"reference {reference!r} does not name a commit: {exc}"
    if pinned == config.sha:
        return f"the tip {config.sha[:12]} is the reference {reference!r} itself: nothing has changed since it"
    return _request(config, config.sha, pinned, "reference", who, trigger)


def start(ledger: TrackingLedger, request: CampaignRequest) -> str:
    """Record and start a main-branch campaign; a live one of the same key answers instead."""
    try:
        campaign = ledger.create(request)
    except DuplicateCampaign as duplicate:
        return f"duplicate of {duplicate.existing.id}"
    return ledger.launch(campaign)


def handle_push(event: PushEvent, ledger: TrackingLedger, api: TrackingApi, config_path: str) -> str:
    """Start what `[main]` asks for on this push; returns the outcome recorded with the delivery."""
    head = event.default_branch_head
    if head is None:
        return (f"ignored: push to {event.ref}{' (deleted)' if event.deleted else ''}, not to the default branch "
                f"{event.repository.default_branch!r}")
    found = read_config(api, config_path, head)
    if isinstance(found, str):
        return f"ignored: {found}"
    main = found.config.main
    if not main.track:
        return f"ignored: [main] track is off in {found.source}"
    who = event.sender.login
    parents = api.commit(head).parents
    if not parents:
        return f"ignored: {head[:12]} has no parent to measure against"
    if main.queue == "newest":
        for waiting in ledger.queued_main():
            ledger.end(waiting, CampaignState.SUPERSEDED,
                       f"superseded by the newer push {head[:12]} ([main] queue = \"newest\")")
    outcomes = [f"main: {start(ledger, _request(found, head, parents[0], 'main', who, 'push'))}"]
    if main.reference is not None and main.every is not None:
        since = ledger.pushes_since_reference()
        if since is not None and since >= main.every:
            reference = reference_request(api, found, main.reference, who, f"every {main.every} pushes")
            outcomes.append(f"reference: {reference if isinstance(reference, str) else start(ledger, reference)}")
    return "; ".join(outcomes)
