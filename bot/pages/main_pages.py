"""The default branch's history page (main-branch tracking): per row, each tracked push's median ratio against its
first parent, and as a line over time beside it the cumulative ratio of the reference campaigns (the tip against
`[main] reference`), with the threshold; a table of every point with its bounds and verdicts below.

Served, like every details page, only when `public_url` is set, at `{public_url}/main/{token}` (a random token per
repository, `bot.store.tracking`), under the same privacy rules (`bot.pages.details.Pages.may_show`): a private
repository not opted in has no page. Linked from the report page of each main-branch campaign.
"""

from __future__ import annotations

from datetime import UTC, datetime

from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from bot.pages.details import SECURITY_HEADERS, Pages
from bot.publish.html_report import page
from bot.publish.svg import line_chart
from bot.store.tracking import MainPoint

PER_MERGE = "per push: head / first parent"
CUMULATIVE = "cumulative: tip / reference"


def _when(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def _row_section(row_id: str, points: list[MainPoint]) -> Markup:
    series = {PER_MERGE: [(p.measured_unix, p.median_ratio) for p in points
                          if p.purpose == "main" and p.median_ratio is not None],
              CUMULATIVE: [(p.measured_unix, p.median_ratio) for p in points
                           if p.purpose == "reference" and p.median_ratio is not None]}
    series = {name: values for name, values in series.items() if values}
    threshold = points[-1].threshold
    chart = line_chart(series, title=f"Median ratio of row {row_id}", x_label="campaign time (UTC)",
                       y_label="median candidate / baseline", x_is_unix_time=True,
                       reference_lines={f"threshold {threshold:g}": threshold}) if series else ""
    rows = "".join(
        f"<tr><td>{_when(p.measured_unix)}</td><td>{'push' if p.purpose == 'main' else 'reference'}</td>"
        f"<td><code>{escape(p.head_sha[:12])}</code></td><td><code>{escape(p.base_sha[:12])}</code></td>"
        f'<td class="num">{_ratio(p.median_ratio)} [{_ratio(p.lower)}, {_ratio(p.upper)}]</td>'
        f'<td class="verdict-{escape(p.semantic)}">{escape(p.semantic)}</td>'
        f'<td class="verdict-{escape(p.performance)}">{escape(p.performance)}</td>'
        f"<td><code>{escape(p.campaign_id)}</code></td></tr>"
        for p in reversed(points))
    figure = Markup(f'<figure class="chart">{chart}</figure>') if chart else Markup("<p>No ratio measured yet.</p>")
    return Markup(
        f"<h2>Row {escape(row_id)}</h2>") + figure + Markup(
        '<div class="scroll"><table><thead><tr><th>when</th><th>kind</th><th>head</th><th>against</th>'
        '<th class="num">median [lower, upper]</th><th>semantic</th><th>performance</th><th>campaign</th></tr>'
        f"</thead><tbody>{rows}</tbody></table></div>")


def main_history_page(pages: Pages, repo: str) -> str:
    points = pages.store.main_history(repo)
    body = Markup(f"<h1>kv-parity · {escape(repo)} · the default branch</h1>") + Markup(
        "<p>Each tracked push is measured against its first parent with the campaign config's gates (its median "
        "ratio per row is a point of the per-push series); each reference campaign measures the tip against "
        "<code>[main] reference</code>, so its ratio is the change accumulated since then, drawn as a line beside "
        "them. Ratios near 1 on every push can still add up: the cumulative line is what crosses the threshold "
        "first.</p>")
    for row_id in sorted({p.row_id for p in points}):
        body += _row_section(row_id, [p for p in points if p.row_id == row_id])
    if not points:
        body += Markup("<p>No main-branch campaign has finished yet.</p>")
    return pages.redactor.redact(page(f"kv-parity {repo} default branch", body))


def main_routes(pages: Pages) -> list[Route]:
    """The main history route `bot.service.app.create_app` mounts with the other pages (only with `public_url`)."""

    def main_page(request: Request) -> Response:
        repo = pages.store.repo_of_main_token(str(request.path_params["token"]))
        if repo is None or not pages.may_show(repo):
            return PlainTextResponse("Not Found", status_code=404, headers=SECURITY_HEADERS)
        return HTMLResponse(main_history_page(pages, repo), headers=SECURITY_HEADERS)

    return [Route("/main/{token}", main_page, methods=["GET"])]
