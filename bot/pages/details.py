"""Details pages behind the check run: a campaign's report, a pull request's campaigns, a row's merge-base history.

`kv-parity serve` answers them only when `public_url` is set, at URLs that carry a random token
(`{public_url}/c/{token}`, `{public_url}/pr/{token}`, `{public_url}/pr/{token}/rows/{row}`); an unknown token is a
plain 404. A page is as public as a comment: it shows the public rendering of the report (no raw output of the
code under test) passed through the publisher's redactor, and a private repository gets no page unless the
operator opted in (`pages_for_private_repositories`). Privacy is followed now, not at publication: every
delivery records its repository's visibility, and every page of a repository that is private (not opted in),
or served by a service whose pages are off, answers 404, pages made while it was public included.

The report a page shows is the public, redacted report JSON kept in the service's database when the campaign
finishes, not a path into the campaign's work directory: the work directory holds raw output and may be cleaned
up, while the kept copy is exactly what may be shown, redacted once with the secrets the service knows.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from markupsafe import Markup, escape
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from bot.core.campaign import Campaign, CampaignState
from bot.core.events import PayloadError, parse_event
from bot.github.redact import Redactor, secret_values
from bot.publish.html_report import page, report_html
from bot.publish.public import PublicReport, one_line
from bot.publish.publisher import web_url
from bot.publish.svg import line_chart
from bot.publish.views import Links
from bot.publish.wording import ENDED_STATES
from bot.settings import Settings
from bot.store.acceptances import AcceptanceEntry
from bot.store.campaigns import Store
from bot.store.pages import NOT_COMPARABLE, BaselinePoint, CampaignPage, InstructionPoint, RepositorySeen
from runners.schema.report import CampaignReport, RowReport
from runners.schema.verdicts import with_verdicts

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data: 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
"""Every page response (a 404 too): no script at all, nothing fetched, no referrer carrying the token away."""
PR_PAGE_CAMPAIGNS = 100


class _Delivered(BaseModel):
    """The one part of any delivery that privacy needs: the repository it is about (absent in a few events)."""

    repository: RepositorySeen | None = None


def repository_seen(body: bytes) -> RepositorySeen | None:
    """What a signed delivery of any event says of its repository's visibility; None when it says nothing
    (no repository, or a payload that is not that shape: the event's own parsing reports that)."""
    try:
        return _Delivered.model_validate_json(body).repository
    except ValidationError:
        return None


def _private(store: Store, repo: str, campaign_id: str | None = None) -> bool:
    """Whether the repository is private now: what the newest delivery said, else what the delivery that
    requested the campaign said (a database from before visibility was recorded); unknown = private."""
    recorded = store.repository_private(repo)
    if recorded is not None:
        return recorded
    delivery = store.delivery_of_campaign(campaign_id) if campaign_id else None
    if delivery is None:
        return True
    try:
        return parse_event(*delivery).repository.private
    except PayloadError:
        return True


def _redacted(value: Any, redactor: Redactor) -> Any:
    if isinstance(value, str):
        return redactor.redact(value)
    if isinstance(value, list):
        return [_redacted(item, redactor) for item in value]
    if isinstance(value, dict):
        return {key: _redacted(item, redactor) for key, item in value.items()}
    return value


def page_report(report: CampaignReport, redactor: Redactor) -> CampaignReport:
    """What a page may show: the public report (raw output emptied, reasons on one line), every string redacted."""
    public = PublicReport.of(with_verdicts(report)).report
    return CampaignReport.model_validate(_redacted(public.model_dump(mode="json"), redactor))


def node_label(row: RowReport) -> str:
    """The row's runner labels, CPU model and hostname: what makes two baseline figures comparable."""
    host = row.node or (row.performance.placement.host if row.performance else None)
    parts = [",".join(row.row.runner_labels)]
    if host is not None:
        parts += [host.cpu_model, host.hostname]
    return " · ".join(parts)


def baseline_points(campaign: Campaign, report: CampaignReport) -> list[BaselinePoint]:
    """Each measured row's merge-base figure: the median over the baseline's valid measured samples (an
    invalidated attempt's samples do not count, whichever arm was invalidated)."""
    points = []
    for row in report.rows:
        perf = row.performance
        if perf is None:
            continue
        invalid = {(i.pair, i.attempt) for i in perf.invalidations}
        values = [
            s.metric_ms
            for s in perf.samples
            if s.kind == "measured"
            and s.arm == "baseline"
            and s.status == "ok"
            and s.metric_ms is not None
            and (s.pair, s.attempt) not in invalid
        ]
        if not values:
            continue
        points.append(
            BaselinePoint(
                repo=campaign.repo,
                row_id=row.row.id,
                campaign_id=campaign.id,
                node_label=node_label(row),
                base_sha=campaign.base_sha,
                measured_unix=report.created_unix,
                median=statistics.median(values),
                timing_field=perf.timing_field,
                unit="ms",
                samples=len(values),
            )
        )
    return points


def instruction_points(campaign: Campaign, report: CampaignReport) -> list[InstructionPoint]:
    """Each counted row's merge-base instruction count: the mean of the baseline's runs (exact when they agree),
    labelled with what it counts; a trend without noise, by-product of the campaigns like the medians."""
    points = []
    for row in report.rows:
        counts = row.instructions
        mean = counts.mean("baseline") if counts is not None and counts.complete() else None
        if counts is None or mean is None:
            continue
        points.append(InstructionPoint(
            repo=campaign.repo, row_id=row.row.id, campaign_id=campaign.id, node_label=node_label(row),
            base_sha=campaign.base_sha, measured_unix=report.created_unix, instructions=round(mean),
            counted=counts.scope_label, exact=counts.agree("baseline"),
        ))
    return points


class Pages:
    """Which campaign has a page and at which URL, and what is kept when it finishes (used by the lifecycle)."""

    def __init__(self, store: Store, settings: Settings, environ: Mapping[str, str] | None = None) -> None:
        self.store = store
        self.settings = settings
        self.base = settings.public_url.rstrip("/") if settings.public_url else None
        self.redactor = Redactor(secret_values(settings, os.environ if environ is None else environ))
        self.web = web_url(settings.api_base_url)

    def page_of(self, campaign: Campaign) -> CampaignPage | None:
        """The campaign's page record, made on first use while pages are on (None while they are off)."""
        if self.base is None:
            return None
        found = self.store.campaign_page(campaign.id)
        if found is not None:
            return found
        private = _private(self.store, campaign.repo, campaign.id)
        allowed = not private or self.settings.pages_for_private_repositories
        return self.store.record_campaign_page(campaign.id, private=private, with_page=allowed)

    def may_show(self, repo: str, campaign_id: str | None = None) -> bool:
        """Whether any page of the repository is served now: pages are on, and the repository is public (as
        the newest delivery said) or the operator opted private ones in. Asked on every request, so a
        repository that turns private takes every page it had, old ones included, with it."""
        if self.base is None:
            return False
        return self.settings.pages_for_private_repositories or not _private(self.store, repo, campaign_id)

    def details_url(self, campaign: Campaign) -> str | None:
        found = self.page_of(campaign)
        if found is None or found.token is None or not self.may_show(campaign.repo, campaign.id):
            return None
        return self.campaign_url(found.token)

    def campaign_url(self, token: str) -> str:
        return f"{self.base}/c/{token}"

    def pr_url(self, token: str) -> str:
        return f"{self.base}/pr/{token}"

    def row_url(self, pr_token: str, row_id: str) -> str:
        return f"{self.base}/pr/{pr_token}/rows/{quote(row_id, safe='')}"

    def main_url(self, repo: str) -> str:
        """The default branch's history page (`bot/pages/main_pages.py`), by the repository's random token."""
        return f"{self.base}/main/{self.store.main_token(repo)}"

    def finished(self, campaign: Campaign, report: CampaignReport) -> None:
        """Keep the merge-base figures (always) and the page's report (when the campaign has a page)."""
        self.store.record_baselines(baseline_points(campaign, report))
        self.store.record_instruction_points(instruction_points(campaign, report))
        found = self.page_of(campaign)
        if found is not None and found.token is not None:
            self.store.keep_page_report(campaign.id, page_report(report, self.redactor).model_dump_json())


# --- views ---------------------------------------------------------------------------------------------------


def _when(unix: float | None) -> str:
    return "—" if unix is None else datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M UTC")


class PageViews:
    """The HTML of each page, from the store; every page passes through the redactor once more."""

    def __init__(self, pages: Pages) -> None:
        self.pages = pages
        self.store = pages.store

    def _nav(self, campaign: Campaign) -> Markup:
        if campaign.purpose in ("main", "reference"):
            return Markup(f'<nav class="toc"><a href="{escape(self.pages.main_url(campaign.repo))}">'
                          "History of the default branch</a></nav>")
        pr_token = self.store.pr_token(campaign.repo, campaign.pr_number)
        if pr_token is None:
            return Markup("")
        rows = sorted({p.row_id for p in self.store.baseline_history(campaign.repo)})
        links = [f'<a href="{escape(self.pages.pr_url(pr_token))}">All campaigns of this pull request</a>']
        links += [
            f'<a href="{escape(self.pages.row_url(pr_token, row))}">merge-base history of {escape(row)}</a>'
            for row in rows
        ]
        return Markup(f'<nav class="toc">{" ".join(links)}</nav>')

    def campaign(self, campaign_id: str) -> str:
        campaign = self.store.require(campaign_id)
        found = self.store.campaign_page(campaign_id)
        nav = self._nav(campaign)
        run_id = self.store.check_run_of(campaign_id)
        check_run = f"{self.pages.web}/{campaign.repo}/runs/{run_id}" if run_id else None
        if found is not None and found.report_json is not None:
            try:
                report = with_verdicts(CampaignReport.model_validate_json(found.report_json))
            except ValidationError as exc:
                raise RuntimeError(f"kept report of campaign {campaign_id} unreadable: {exc}") from exc
            document = report_html(
                report,
                links=Links(check_run_url=check_run),
                prior_attempts=self.store.prior_attempts(campaign_id),
                public=True,
                nav=nav,
            )
            return self.pages.redactor.redact(document)
        title = f"kv-parity {campaign.id}"
        facts = Markup(
            f"<p>Campaign <code>{escape(campaign.id)}</code> of {escape(campaign.repo)}#{campaign.pr_number}: "
            f"head <code>{escape(campaign.head_sha[:12])}</code> against "
            f"<code>{escape(campaign.base_sha[:12])}</code>, requested by {escape(campaign.requested_by)} "
            f"({escape(campaign.trigger)}).</p>"
        )
        state = campaign.state
        if state in (CampaignState.REQUESTED, CampaignState.DISPATCHED, CampaignState.RUNNING):
            what = Markup(f"<h1>{'Queued' if state == CampaignState.REQUESTED else 'Running'}</h1>")
            what += Markup("<p>The report appears here when the campaign finishes.</p>")
        elif state == CampaignState.COMPLETED:
            semantic, performance = self.store.verdicts_of([campaign_id]).get(campaign_id, (None, None))
            what = Markup(
                f"<h1>Completed</h1><p>semantic {escape(semantic or '—')} · performance "
                f"{escape(performance or '—')}. Its report was not kept for this page (it finished before pages "
                "were served); it is in the campaign artifact.</p>"
            )
        else:
            label = ENDED_STATES.get(state.value, ("", state.value))[1]
            what = Markup(
                f"<h1>{escape(label)}</h1><p>The campaign ended without a report: "
                f"{escape(one_line(campaign.reason))}</p>"
            )
        body = nav + what + facts
        if check_run:
            body += Markup(f'<p><a href="{escape(check_run)}">Check run</a></p>')
        return self.pages.redactor.redact(page(title, body))

    def pull_request(self, repo: str, pr_number: int, pr_token: str) -> str:
        campaigns = self.store.for_pr(repo, pr_number, limit=PR_PAGE_CAMPAIGNS)
        ids = [c.id for c in campaigns]
        tokens = self.store.page_tokens(ids)
        verdicts = self.store.verdicts_of(ids)
        rows = []
        for c in campaigns:
            name = escape(c.id)
            cell = f'<a href="{escape(self.pages.campaign_url(tokens[c.id]))}">{name}</a>' if c.id in tokens else name
            semantic, performance = verdicts.get(c.id, (None, None))
            rows.append(
                f"<tr><td><code>{cell}</code></td><td><code>{escape(c.head_sha[:7])}</code></td>"
                f"<td>{escape(c.trigger)}</td><td>{escape(c.requested_by)}</td><td>{escape(c.state.value)}</td>"
                f'<td class="verdict-{escape(semantic or "NOT_RUN")}">{escape(semantic or "—")}</td>'
                f'<td class="verdict-{escape(performance or "NOT_RUN")}">{escape(performance or "—")}</td>'
                f"<td>{_when(c.created_at.timestamp())}</td></tr>"
            )
        history = sorted({p.row_id for p in self.store.baseline_history(repo)})
        body = Markup(f"<h1>kv-parity · {escape(repo)}#{pr_number}</h1><p>Campaigns, newest first.</p>")
        body += self._acceptances(self.store.acceptance_history(repo, pr_number), "Acceptances of this pull request")
        body += Markup(
            '<div class="scroll"><table><thead><tr><th>campaign</th><th>head</th><th>trigger</th><th>who</th>'
            "<th>state</th><th>semantic</th><th>performance</th><th>requested</th></tr></thead><tbody>"
            + "".join(rows)
            + "</tbody></table></div>"
        )
        if history:
            links = " ".join(
                f'<a href="{escape(self.pages.row_url(pr_token, row))}">{escape(row)}</a>' for row in history
            )
            body += Markup(f'<h2>Merge-base timing over time</h2><nav class="toc">{links}</nav>')
        return self.pages.redactor.redact(page(f"kv-parity {repo}#{pr_number}", body))

    @staticmethod
    def _acceptances(entries: list[AcceptanceEntry], title: str) -> Markup:
        """A table of acceptances (revoked ones say so): who, of which head, what, up to where, why."""
        if not entries:
            return Markup("")
        def where(url: str) -> str:
            safe = url.startswith("https://")
            return f'<a href="{escape(url)}" rel="noopener noreferrer">comment</a>' if safe else "—"

        def revoked(entry: AcceptanceEntry) -> str:
            if entry.revoked_at is None:
                return "—"
            return f"revoked by {escape(entry.revoked_by or '?')}, {_when(entry.revoked_at)}"

        rows = "".join(
            f"<tr><td>#{e.pr_number}</td><td><code>{escape(e.acceptance.head_sha[:12])}</code></td>"
            f"<td>{escape(e.acceptance.line())}</td><td>{escape(e.acceptance.permission)}</td>"
            f"<td>{where(e.acceptance.comment_url)}</td><td>{_when(e.acceptance.recorded_unix)}</td>"
            f"<td>{revoked(e)}</td></tr>"
            for e in entries
        )
        return Markup(
            f"<h2>{escape(title)}</h2>"
            '<div class="scroll"><table><thead><tr><th>pull request</th><th>head</th><th>acceptance</th>'
            "<th>permission</th><th>where</th><th>recorded</th><th>revoked</th></tr></thead><tbody>"
            f"{rows}</tbody></table></div>"
        )

    def row(self, repo: str, pr_number: int, pr_token: str, row_id: str) -> str | None:
        points = self.store.baseline_history(repo, row_id)
        if not points:
            return None
        series: dict[str, list[tuple[float, float]]] = {}
        for p in points:
            series.setdefault(p.node_label, []).append((p.measured_unix, p.median))
        fields = sorted({f"{p.timing_field} ({p.unit})" for p in points})
        chart = line_chart(
            series,
            title=f"Merge-base median of row {row_id}",
            x_label="campaign time (UTC)",
            y_label=f"median {', '.join(fields)}",
            x_is_unix_time=True,
        )
        table = "".join(
            f"<tr><td>{_when(p.measured_unix)}</td><td>{escape(p.node_label)}</td>"
            f"<td><code>{escape(p.base_sha[:12])}</code></td><td><code>{escape(p.campaign_id)}</code></td>"
            f'<td class="num">{p.median:.4g} {escape(p.unit)}</td><td>{escape(p.timing_field)}</td>'
            f'<td class="num">{p.samples}</td></tr>'
            for p in points
        )
        body = Markup(
            f'<nav class="toc"><a href="{escape(self.pages.pr_url(pr_token))}">{escape(repo)}#{pr_number}</a></nav>'
            f"<h1>Merge-base timing of row {escape(row_id)}</h1>"
            f'<p class="note"><strong>{escape(NOT_COMPARABLE)}</strong></p>'
            f"<p>Each point is one campaign's median over the merge base's valid measured samples of the row.</p>"
            f'<figure class="chart">{chart}</figure>'
            '<div class="scroll"><table><thead><tr><th>when</th><th>node label</th><th>base</th><th>campaign</th>'
            '<th class="num">median</th><th>field</th><th class="num">n</th></tr></thead><tbody>'
            f"{table}</tbody></table></div>"
        ) + self._instruction_history(repo, row_id)
        accepted = [
            entry
            for entry in self.store.acceptance_history(repo)
            if entry.acceptance.gate == "performance"
            and (not entry.acceptance.rows or row_id in entry.acceptance.rows)
        ]
        body += self._acceptances(
            accepted, f"Accepted performance FAILs that may name row {row_id} (a step above may be one of them)"
        )
        return self.pages.redactor.redact(page(f"kv-parity {repo} row {row_id}", body))


    def _instruction_history(self, repo: str, row_id: str) -> Markup:
        """The row's merge-base instruction count per campaign: one line per node label and what was counted."""
        points = self.store.instruction_history(repo, row_id)
        if not points:
            return Markup("")
        series: dict[str, list[tuple[float, float]]] = {}
        for p in points:
            series.setdefault(f"{p.node_label} · {p.counted}", []).append((p.measured_unix, p.instructions / 1e6))
        chart = line_chart(series, title=f"Merge-base instructions of row {row_id}", x_label="campaign time (UTC)",
                           y_label="million instructions", x_is_unix_time=True)
        table = "".join(
            f"<tr><td>{_when(p.measured_unix)}</td><td>{escape(p.node_label)}</td>"
            f"<td><code>{escape(p.base_sha[:12])}</code></td><td><code>{escape(p.campaign_id)}</code></td>"
            f'<td class="num">{p.instructions:,}</td><td>{escape(p.counted)}</td>'
            f"<td>{'exact' if p.exact else 'runs differ'}</td></tr>"
            for p in points
        )
        return Markup(
            f"<h2>Merge-base instructions of row {escape(row_id)}</h2>"
            "<p>Each point is the merge base's instruction count in one campaign (valgrind, after the samples; the "
            "mean of its two runs, exact when they agree). A count does not move with load: a step between points "
            "of one label and one counted region is a change in the work done (or in the binary's toolchain).</p>"
            f'<figure class="chart">{chart}</figure>'
            '<div class="scroll"><table><thead><tr><th>when</th><th>node label</th><th>base</th><th>campaign</th>'
            '<th class="num">instructions</th><th>counted</th><th>runs</th></tr></thead><tbody>'
            f"{table}</tbody></table></div>"
        )


# --- routes --------------------------------------------------------------------------------------------------


def _not_found() -> Response:
    return PlainTextResponse("Not Found", status_code=404, headers=SECURITY_HEADERS)


def _html(text: str) -> Response:
    return HTMLResponse(text, headers=SECURITY_HEADERS)


def page_routes(pages: Pages) -> list[Route]:
    """The page routes `bot.service.app.create_app` mounts when `public_url` is set (none otherwise)."""
    views = PageViews(pages)
    store = pages.store

    def campaign_page(request: Request) -> Response:
        campaign_id = store.campaign_of_token(str(request.path_params["token"]))
        campaign = None if campaign_id is None else store.require(campaign_id)
        if campaign is None or not pages.may_show(campaign.repo, campaign.id):
            return _not_found()
        return _html(views.campaign(campaign.id))

    def pull_request_of(token: str) -> tuple[str, int] | None:
        found = store.pr_of_token(token)
        return found if found is not None and pages.may_show(found[0]) else None

    def pr_page(request: Request) -> Response:
        token = str(request.path_params["token"])
        found = pull_request_of(token)
        return _not_found() if found is None else _html(views.pull_request(*found, token))

    def row_page(request: Request) -> Response:
        token = str(request.path_params["token"])
        found = pull_request_of(token)
        text = None if found is None else views.row(*found, token, str(request.path_params["row_id"]))
        return _not_found() if text is None else _html(text)

    return [
        Route("/c/{token}", campaign_page, methods=["GET"]),
        Route("/pr/{token}", pr_page, methods=["GET"]),
        Route("/pr/{token}/rows/{row_id}", row_page, methods=["GET"]),
    ]
