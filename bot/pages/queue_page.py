"""The queue page, `{public_url}/queue`: what is running and waiting, where, and when it should start; and the latest
endings with their conclusions. Served only when the details pages are (`public_url`), under their rules
(`bot.pages.details`): no script, nothing fetched, the pages' security headers, redacted once more, and only
campaigns of repositories a page may be shown for (public ones, or every one when the operator opted private ones
in). The estimate and its rule are `bot.queue`'s.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bot.core.campaign import Campaign
from bot.dispatch.base import RunHandle
from bot.pages.details import Pages, _html, _not_found, _when
from bot.publish.html_report import page
from bot.queue import ESTIMATE_FROM, LiveCampaign, queue_snapshot

ENDINGS_SHOWN = 20
LIVE_SHOWN = 200
RunUrl = Callable[[Campaign], str | None]

ESTIMATE_RULE = (
    "Campaigns run one at a time per backend, oldest first. The estimated start is now, plus what the running "
    "campaign has left of the backend's typical run, plus one typical run for each campaign ahead; a backend's "
    f"typical run is the median run time (dispatch to ending) of its latest {ESTIMATE_FROM} ended campaigns. "
    "Fewer rows, a reused build or a faster node make a run shorter: it is an estimate."
)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    minutes = round(seconds / 60)
    if minutes < 1:
        return f"{seconds:.0f} s"
    return f"{minutes} min" if minutes < 120 else f"{minutes / 60:.1f} h"


class QueueView:
    """The queue page's HTML, from the store (through the pages' redactor)."""

    def __init__(self, pages: Pages, run_url: RunUrl | None, clock: Callable[[], float]) -> None:
        self.pages, self.store, self.run_url, self.clock = pages, pages.store, run_url, clock
        self.host = socket.gethostname()

    def _pull(self, campaign: Campaign) -> str:
        url = f"{self.pages.web}/{campaign.repo}/pull/{campaign.pr_number}"
        return f'<a href="{escape(url)}">{escape(campaign.repo)}#{campaign.pr_number}</a>'

    def _campaign(self, campaign: Campaign, tokens: dict[str, str]) -> str:
        name = f"<code>{escape(campaign.id)}</code>"
        token = tokens.get(campaign.id)
        return f'<a href="{escape(self.pages.campaign_url(token))}">{name}</a>' if token else name

    def _where(self, live: LiveCampaign) -> str:
        """The node or Slurm job a running campaign is on (what the backend's handle names), or where a queued one's
        jobs wait in the scheduler."""
        campaign = live.campaign
        waiting = f'<br><span class="muted">{escape(campaign.scheduler_wait)}</span>' if campaign.scheduler_wait else ""
        raw = self.store.handle(campaign.id) if live.position == 0 else None
        if raw is None:
            return ("waiting for the backend" if live.position else "starting") + waiting
        handle = RunHandle.model_validate_json(raw)
        if handle.backend == "slurm":
            return f"Slurm job <code>{escape(handle.ref)}</code>{waiting}"
        if handle.backend == "actions":
            url = self.run_url(campaign) if self.run_url is not None else None
            return f'<a href="{escape(url)}">workflow run</a>' if url else "dispatched; its run not found yet"
        return f"this node (<code>{escape(self.host)}</code>), process {escape(handle.ref)}{waiting}"

    @staticmethod
    def _when_starts(live: LiveCampaign, now: float) -> str:
        if live.started is not None:
            return f"started {_when(live.started)} (running {_duration(now - live.started)})"
        if live.estimated_start is None:
            return "unknown: no campaign has ended on this backend yet"
        return f"~{_when(live.estimated_start)} (in {_duration(live.estimated_start - now)})"

    def render(self) -> str:
        now = self.clock()
        snapshot = queue_snapshot(self.store, now)
        live = [entry for entry in snapshot.live if self.pages.may_show(entry.campaign.repo, entry.campaign.id)]
        live = live[:LIVE_SHOWN]
        endings = [
            (campaign, ended, ran)
            for campaign_id, ended, ran in self.store.recent_endings(ENDINGS_SHOWN * 5)
            if (campaign := self.store.get(campaign_id)) is not None and self.pages.may_show(campaign.repo, campaign_id)
        ][:ENDINGS_SHOWN]
        ids = [entry.campaign.id for entry in live] + [campaign.id for campaign, _, _ in endings]
        tokens = self.store.page_tokens(ids)
        running = sum(1 for entry in live if entry.position == 0)
        body = Markup(
            f"<h1>kv-parity queue</h1><p>{running} running, {len(live) - running} queued, as of {_when(now)}.</p>"
            "<h2>Running and queued</h2>"
        )
        if live:
            cells = "".join(
                f"<tr><td class=\"num\">{'running' if entry.position == 0 else entry.position}</td>"
                f'<td class="id">{self._campaign(entry.campaign, tokens)}</td><td>{self._pull(entry.campaign)}</td>'
                f'<td class="id"><code>{escape(entry.campaign.head_sha[:12])}</code></td>'
                f"<td>{escape(', '.join(entry.rows) or '—')}"
                f"{' (all)' if entry.campaign.rows is None else ''}<br><span class=\"muted\">runner labels "
                f"{escape('; '.join(entry.runner_labels) or '—')}</span></td>"
                f"<td>{escape(entry.backend)}</td><td>{self._where(entry)}</td>"
                f"<td>{_when(entry.queued_since)}</td>"
                f"<td>{self._when_starts(entry, now)}</td></tr>"
                for entry in live
            )
            body += Markup(
                '<div class="scroll"><table><thead><tr><th class="num">position</th><th>campaign</th>'
                "<th>pull request</th><th>head</th><th>rows</th><th>backend</th><th>node or Slurm job</th>"
                f"<th>queued since</th><th>start</th></tr></thead><tbody>{cells}</tbody></table></div>"
            )
        else:
            body += Markup("<p>Nothing is running or queued.</p>")
        body += Markup(f'<p class="note">{escape(ESTIMATE_RULE)}</p><h2>Latest endings</h2>')
        verdicts = self.store.verdicts_of([campaign.id for campaign, _, _ in endings])
        if endings:
            cells = "".join(
                f"<tr><td>{self._campaign(campaign, tokens)}</td><td>{self._pull(campaign)}</td>"
                f"<td><code>{escape(campaign.head_sha[:12])}</code></td><td>{_when(ended)}</td>"
                f'<td class="num">{_duration(ran)}</td><td>{escape(campaign.state.value)}</td>'
                f'<td class="verdict-{escape(campaign.conclusion or "NOT_RUN")}">{escape(campaign.conclusion or "—")}'
                f"</td>{self._verdicts(verdicts.get(campaign.id, (None, None)))}</tr>"
                for campaign, ended, ran in endings
            )
            body += Markup(
                '<div class="scroll"><table><thead><tr><th>campaign</th><th>pull request</th><th>head</th>'
                '<th>ended</th><th class="num">ran for</th><th>state</th><th>conclusion</th><th>semantic</th>'
                f"<th>performance</th></tr></thead><tbody>{cells}</tbody></table></div>"
            )
        else:
            body += Markup("<p>No campaign has ended yet.</p>")
        return self.pages.redactor.redact(page("kv-parity queue", body))

    @staticmethod
    def _verdicts(verdicts: tuple[str | None, str | None]) -> str:
        return "".join(
            f'<td class="verdict-{escape(word or "NOT_RUN")}">{escape(word or "—")}</td>' for word in verdicts
        )


def queue_route(pages: Pages, run_url: RunUrl | None = None, clock: Callable[[], float] = time.time) -> Route:
    """`GET /queue`, mounted beside the page routes when `public_url` is set; 404 whenever pages are off.
    `run_url` links a running campaign's Actions run (the Actions backend)."""
    view = QueueView(pages, run_url, clock)

    def queue_page(request: Request) -> Response:
        if pages.base is None:
            return _not_found()
        return _html(view.render())

    return Route("/queue", queue_page, methods=["GET"])
