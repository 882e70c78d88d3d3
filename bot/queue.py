"""The queue as an operator sees it: each queued and running campaign with the rows it runs, the runner labels they
need, its position and an estimated start. One place for the estimate, shown by the queue page
(`bot.pages.queue_page`) and counted by `/metrics` (`bot.metrics`).

**The estimate.** Campaigns run one at a time per backend, oldest first (`bot.lifecycle`). A backend's typical run
is the median run time (from dispatch to ending) of its latest `ESTIMATE_FROM` campaigns that ended; the n-th in
line starts when the running campaign has used up its typical run (at once if it already ran longer) plus n - 1
typical runs. With no campaign ended on the backend yet there is nothing to estimate from, and it says so. A
campaign of fewer rows, a build cache hit or a faster node makes a run shorter than typical: it is an estimate.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass

from bot.core.campaign import Campaign
from bot.store.campaigns import Store
from runners.schema.config import ConfigError, parse_config

ESTIMATE_FROM = 20
"""How many of a backend's latest ended campaigns its typical run time is the median of."""


@dataclass(frozen=True)
class LiveCampaign:
    """A queued (position >= 1) or running (position 0) campaign, as the page and the metrics show it."""

    campaign: Campaign
    backend: str
    rows: list[str]
    """The rows it runs: those the requester named, else every row of its config."""
    runner_labels: list[str]
    """The distinct runner label sets its rows need, each comma-joined (a row needs all of its labels at once)."""
    queued_since: float
    """When it last entered the queue (a campaign restarted after a lost process queues again)."""
    started: float | None
    """When its current attempt was dispatched; None while queued."""
    estimated_start: float | None
    """Queued: when it should start (module docstring); None when running or when nothing can be estimated."""

    @property
    def position(self) -> int:
        return self.campaign.queue_position or 0


@dataclass(frozen=True)
class QueueSnapshot:
    now: float
    live: list[LiveCampaign]
    typical_run: dict[str, float | None]
    """Each backend with a live campaign: the median run time it estimates with (None: no campaign ended there)."""


@functools.lru_cache(maxsize=1024)
def _rows(config_text: str, selected: tuple[str, ...] | None) -> tuple[tuple[str, str], ...]:
    """(row id, comma-joined runner labels) of each row the campaign runs, from the config it was requested with."""
    try:
        config = parse_config(config_text, "the campaign's recorded config")
    except ConfigError:
        return tuple((row, "") for row in selected or ())
    chosen = [row for row in config.rows if selected is None or row.id in selected]
    return tuple((row.id, ",".join(row.runner_labels)) for row in chosen)


def typical_run(store: Store, backend: str) -> float | None:
    """The median run time of the backend's latest `ESTIMATE_FROM` ended campaigns (None: none ended yet)."""
    recent = store.recent_run_seconds(backend, ESTIMATE_FROM)
    return statistics.median(recent) if recent else None


def queue_snapshot(store: Store, now: float) -> QueueSnapshot:
    """Every live campaign of every backend, oldest first, with the estimate."""
    waiting = store.live_campaigns()
    typical = {backend: typical_run(store, backend) for backend in sorted({w.backend for w in waiting})}
    remaining: dict[str, float] = {}
    for entry in waiting:
        median = typical[entry.backend]
        if entry.started is not None and median is not None:
            remaining[entry.backend] = max(0.0, median - (now - entry.started))
    live = []
    for entry in waiting:
        campaign = store.get(entry.campaign_id)
        if campaign is None or campaign.queue_position is None:
            continue  # ended between the two reads
        median = typical[entry.backend]
        estimate = None
        if campaign.queue_position >= 1 and median is not None:
            estimate = now + remaining.get(entry.backend, 0.0) + (campaign.queue_position - 1) * median
        rows = _rows(store.config_text(campaign.id), tuple(campaign.rows) if campaign.rows is not None else None)
        live.append(
            LiveCampaign(
                campaign=campaign,
                backend=entry.backend,
                rows=[row for row, _ in rows],
                runner_labels=sorted({labels for _, labels in rows}),
                queued_since=entry.queued_since,
                started=entry.started,
                estimated_start=estimate,
            )
        )
    return QueueSnapshot(now, live, typical)
