"""Details pages (issue 14 items 3 and 4) end to end: the real service over HTTP on 127.0.0.1 with the real
publisher, real SQLite, the GitHub stand-in (which records each check run's details_url and every comment) and
campaigns run by the local backend as real subprocesses.

The service's `public_url` is what browsers would use (behind a proxy); the test opens a published URL by
swapping that prefix for the local server's address. No sleeps: every wait is a bounded `wait_until`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.cli.history import history_main
from bot.core.campaign import Campaign, CampaignState
from bot.modes.wiring import default_publisher
from bot.pages.details import SECURITY_HEADERS, Pages
from bot.service.app import create_app
from bot.store.campaigns import Store
from bot.store.pages import NOT_COMPARABLE
from runners.schema.report import CampaignReport
from tests.browser import Browser
from tests.service_fixtures import Env, standin_env, widgets_history
from tests.webhooks import (
    REPO,
    SECRET,
    comment_event,
    loopback,
    post,
    register_test_app,
    serve_app,
    stand_in_flags,
    wait_until,
)

S = CampaignState
PUBLIC = "https://kv-parity.example.com/pages"
RAW_MARKER = "RAW-OUTPUT-OF-THE-PR-7f3a"
LEAKED_TOKEN = "ghp_" + "Z" * 36


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return widgets_history(tmp_path_factory.mktemp("widgets"))


@pytest.fixture()
def env(tmp_path: Path, history: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    with standin_env(tmp_path, history, monkeypatch) as found:
        yield found


class PageService:
    """The running service with the real publisher, and what the stand-in recorded."""

    def __init__(self, env: Env, url: str, store: Store) -> None:
        self.env, self.url, self.store = env, url, store

    def post(self, event: str, payload: dict[str, Any], *, private: bool | None, delivery: str) -> None:
        if private is not None:
            payload["repository"]["private"] = private
        assert post(self.url, event, payload, delivery=delivery).status_code == 202

    def finished(self, count: int = 1) -> list[Campaign]:
        done: list[Campaign] = wait_until(
            lambda: len(found := [c for c in reversed(self.store.for_pr(REPO, 1)) if c.state == S.COMPLETED]) >= count
            and found,
            f"{count} completed campaign(s)",
        )
        for campaign in done:
            wait_until(lambda c=campaign: ("finished", "done") in self.store.publications(c.id), "published")
        return done

    def check_run(self, campaign: Campaign) -> dict[str, Any]:
        [run] = [r for r in self.env.fake.check_runs(REPO) if r["external_id"] == campaign.id]
        return run

    def comments(self) -> list[str]:
        return [str(c["body"]) for c in self.env.fake.comments(REPO, 1)]

    def open(self, public_url: str) -> httpx.Response:
        assert public_url.startswith(PUBLIC + "/"), public_url
        return loopback().get(self.url + public_url.removeprefix(PUBLIC))


@contextmanager
def running(env: Env, **overrides: Any) -> Iterator[PageService]:
    argv = [sys.executable, "-m", "tests.test_pages", *stand_in_flags(env.runs_file)]
    settings = env.settings(**register_test_app(env.fake, env.tmp), local_campaign_argv=argv, **overrides)
    app = create_app(settings, publisher_factory=default_publisher)
    with serve_app(app) as url:
        yield PageService(env, url, app.state.store)


def _label(env: Env) -> dict[str, Any]:
    return env.label()


def _assert_headers(response: httpx.Response) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert response.headers[name] == value
    assert "script-src" not in response.headers["content-security-policy"]


DRAWN = "document.querySelectorAll('svg.chart path.series, svg.chart path.marks').length"


def _in_browser(url: str) -> int:
    """Load a served page in headless Chromium (its CSP header applies): no console error (a blocked style
    would be one), no exception, nothing fetched but the page; returns how many chart paths were drawn."""
    with Browser() as browser:
        page = browser.open(url)
        assert page.exceptions == [] and page.console_errors == [], (page.exceptions, page.console_errors)
        assert page.requests == [url], f"the page fetched more than itself: {page.requests}"
        drawn = page.evaluate(DRAWN)
        assert page.evaluate("getComputedStyle(document.body).maxWidth") == "1180px", "inline style applied"
    return int(drawn)


# ----------------------------------------------------------------- off by default


def test_pages_are_off_by_default_no_route_no_link_but_history_is_kept(env: Env) -> None:
    with running(env) as svc:
        svc.post("pull_request", _label(env), private=False, delivery="label")
        [done] = svc.finished()
        run = svc.check_run(done)
        assert run["details_url"] == f"{env.fake.url}/{REPO}/runs/{run['id']}", "no page, no artifact: itself"
        assert not any("/c/" in body for body in svc.comments())
        for path in ("/c/x", "/pr/x", "/pr/x/rows/vllm-disagg", f"/c/{'A' * 43}"):
            assert loopback().get(svc.url + path).status_code == 404
        assert svc.store.campaign_page(done.id) is None and svc.store.pr_token(REPO, 1) is None
        points = svc.store.baseline_history(REPO)
    assert points and {p.campaign_id for p in points} == {done.id}, "the merge base is measured by every campaign"


# ----------------------------------------------------------------- on


def test_the_check_runs_details_url_opens_the_public_redacted_report(env: Env) -> None:
    with running(env, public_url=PUBLIC) as svc:
        svc.post("pull_request", _label(env), private=False, delivery="label")
        [done] = svc.finished()
        details = svc.check_run(done)["details_url"]
        assert details is not None and details.startswith(f"{PUBLIC}/c/")
        token = details.removeprefix(f"{PUBLIC}/c/")
        assert len(token) >= 43 and done.id not in token, "a random token, not the campaign id"
        bodies = svc.comments()
        assert any(f"[Report page with charts]({details})" in body for body in bodies), "the result links it"
        assert any(f"[report page]({details})" in body for body in bodies), "the status comment links it"
        page = svc.open(details)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        _assert_headers(page)
        assert "PASS" in page.text and done.id in page.text
        assert "<script" not in page.text.lower()
        assert RAW_MARKER not in page.text, "no raw output of the code under test"
        assert SECRET not in page.text and LEAKED_TOKEN not in page.text and "[redacted]" in page.text
        assert env.head[:7] in page.text
        assert (done.artifact_dir / "report.json").read_text().count(RAW_MARKER) > 0  # type: ignore[operator]
        assert _in_browser(svc.url + details.removeprefix(PUBLIC)) > 0, "the report's charts are drawn"

        unknown = loopback().get(f"{svc.url}/c/{token[:-1]}x")
        assert (unknown.status_code, unknown.text) == (404, "Not Found")
        _assert_headers(unknown)
        assert loopback().get(f"{svc.url}/pr/{token}").status_code == 404, "a campaign token opens no PR page"


def test_a_private_repository_gets_no_page_and_no_link_unless_opted_in(env: Env) -> None:
    with running(env, public_url=PUBLIC) as svc:
        svc.post("pull_request", _label(env), private=True, delivery="private")
        [done] = svc.finished()
        run = svc.check_run(done)
        assert run["details_url"] == f"{env.fake.url}/{REPO}/runs/{run['id']}", "no page: the check run itself"
        assert not any("/c/" in body for body in svc.comments())
        page = svc.store.campaign_page(done.id)
        assert page is not None and page.private and page.token is None and page.report_json is None
        assert svc.store.pr_token(REPO, 1) is None
    with running(env, public_url=PUBLIC, pages_for_private_repositories=True) as svc:
        rerun = comment_event("/parity rerun")
        svc.post("issue_comment", rerun, private=True, delivery="private-opted-in")
        second = svc.finished(2)[-1]
        details = svc.check_run(second)["details_url"]
        assert details is not None and details.startswith(f"{PUBLIC}/c/")
        assert svc.open(details).status_code == 200


def test_pull_request_page_lists_campaigns_newest_first_and_row_history_has_one_point_per_campaign(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    with running(env, public_url=PUBLIC) as svc:
        svc.post("pull_request", _label(env), private=False, delivery="label")
        svc.finished()
        svc.post("issue_comment", comment_event("/parity rerun"), private=False, delivery="rerun")
        first, second = svc.finished(2)
        pr_token = svc.store.pr_token(REPO, 1)
        assert pr_token is not None
        listing = svc.open(f"{PUBLIC}/pr/{pr_token}")
        assert listing.status_code == 200
        _assert_headers(listing)
        text = listing.text
        assert text.index(second.id) < text.index(first.id), "newest first"
        for campaign in (first, second):
            page_token = svc.store.campaign_page(campaign.id).token  # type: ignore[union-attr]
            assert f'href="{PUBLIC}/c/{page_token}"' in text
        assert "label" in text and "comment" in text and "maintainer" in text and env.head[:7] in text

        points = svc.store.baseline_history(REPO, "vllm-disagg")
        assert [p.campaign_id for p in points] == [first.id, second.id], "two finished campaigns, two points"
        assert all(p.base_sha == env.base and p.samples > 0 and p.unit == "ms" for p in points)
        assert "Intel" in points[0].node_label and "bare-metal" in points[0].node_label

        counted = svc.store.instruction_history(REPO, "vllm-disagg")
        assert [p.campaign_id for p in counted] == [first.id, second.id], "one instruction count per campaign"
        assert all(p.instructions > 0 and p.exact and p.counted.startswith("timed region") for p in counted)

        row_page = svc.open(f"{PUBLIC}/pr/{pr_token}/rows/vllm-disagg")
        assert row_page.status_code == 200
        _assert_headers(row_page)
        assert "<svg" in row_page.text and NOT_COMPARABLE.split(":")[0] in row_page.text
        assert row_page.text.count("<svg") == 2 and "Merge-base instructions of row vllm-disagg" in row_page.text
        assert f"{counted[0].instructions:,}" in row_page.text
        assert _in_browser(f"{svc.url}/pr/{pr_token}/rows/vllm-disagg") > 0, "the history chart is drawn"
        assert row_page.text.count(first.id) == 2 and row_page.text.count(second.id) == 2, "timing and count tables"
        assert svc.open(f"{PUBLIC}/pr/{pr_token}/rows/no-such-row").status_code == 404
        assert loopback().get(f"{svc.url}/pr/{pr_token[:-1]}x/rows/vllm-disagg").status_code == 404

        settings = env.settings(public_url=PUBLIC)
        report = CampaignReport.model_validate_json((second.artifact_dir / "report.json").read_text())  # type: ignore[operator]
        Pages(svc.store, settings).finished(second, report)
        assert len(svc.store.baseline_history(REPO, "vllm-disagg")) == 2, "a re-publish adds no point"
        assert len(svc.store.instruction_history(REPO, "vllm-disagg")) == 2

    assert history_main(["--db", str(env.tmp / "bot.sqlite3"), "--baseline", REPO, "--row", "vllm-disagg"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("row vllm-disagg") and "not comparable" in out[0]
    assert out[1].startswith("  node bare-metal")
    assert [line.split("campaign ")[-1] for line in out[2:]] == [first.id, second.id]
    assert all(f"base {env.base[:12]}" in line and " ms (" in line for line in out[2:])
    assert history_main(["--db", str(env.tmp / "bot.sqlite3"), "--baseline", "other/repo"]) == 1


# ----------------------------------------------------------------- privacy now, not at publication


def _pages_of(svc: PageService, done: Campaign) -> list[str]:
    """Every page the campaign's repository has: the campaign's, its pull request's and a row's history."""
    page = svc.store.campaign_page(done.id)
    pr_token = svc.store.pr_token(REPO, 1)
    assert page is not None and page.token is not None and pr_token is not None
    return [f"/c/{page.token}", f"/pr/{pr_token}", f"/pr/{pr_token}/rows/vllm-disagg"]


def _privacy_event(private: bool) -> dict[str, Any]:
    """GitHub's `repository` event when a repository's visibility changes (an event the bot does not act on)."""
    return {
        "action": "privatized" if private else "publicized",
        "repository": {"full_name": REPO, "private": private, "visibility": "private" if private else "public"},
        "sender": {"login": "owner", "id": 7, "type": "User"},
    }


def test_every_page_of_a_repository_that_turns_private_answers_404_from_the_next_delivery_on(env: Env) -> None:
    with running(env, public_url=PUBLIC) as svc:
        svc.post("pull_request", _label(env), private=False, delivery="label")
        [done] = svc.finished()
        pages = _pages_of(svc, done)
        assert [loopback().get(svc.url + path).status_code for path in pages] == [200, 200, 200]

        answer = post(svc.url, "repository", _privacy_event(True), delivery="privatized")
        assert answer.status_code == 200 and "not handled" in answer.text, "not acted on, but its visibility counts"
        gone = [loopback().get(svc.url + path) for path in pages]
        assert [(r.status_code, r.text) for r in gone] == [(404, "Not Found")] * 3, "pages made while public too"
        for response in gone:
            _assert_headers(response)
        assert svc.store.repository_private(REPO) is True

        post(svc.url, "repository", _privacy_event(False), delivery="publicized")
        assert [loopback().get(svc.url + path).status_code for path in pages] == [200, 200, 200]
        svc.post("issue_comment", comment_event("/parity rerun"), private=True, delivery="rerun-private")
        second = svc.finished(2)[-1]
        assert [loopback().get(svc.url + path).status_code for path in pages] == [404] * 3, "any event's payload counts"
        run = svc.check_run(second)
        assert run["details_url"] == f"{env.fake.url}/{REPO}/runs/{run['id']}", "no link to a page that is hidden"
    with running(env, public_url=PUBLIC, pages_for_private_repositories=True) as svc:
        assert [loopback().get(svc.url + path).status_code for path in pages] == [200, 200, 200], "opted in"


def test_pages_switched_off_after_they_were_made_answer_404(env: Env) -> None:
    with running(env, public_url=PUBLIC) as svc:
        svc.post("pull_request", _label(env), private=False, delivery="label")
        [done] = svc.finished()
        pages = _pages_of(svc, done)
        assert [loopback().get(svc.url + path).status_code for path in pages] == [200, 200, 200]
    with running(env) as svc:
        assert [loopback().get(svc.url + path).status_code for path in pages] == [404] * 3
        assert Pages(svc.store, env.settings()).details_url(done) is None


# ----------------------------------------------------------------- the runner these tests use


def _leaky_campaign(argv: list[str]) -> int:
    """The stand-in runner, whose report then carries raw output and secrets where a build could put them."""
    from tests.webhooks import _campaign

    code = _campaign(argv)
    out = Path(argv[argv.index("--out") + 1]) / "report.json"
    report = CampaignReport.model_validate_json(out.read_text())
    row = report.rows[0]
    assert row.performance is not None
    samples = [
        s.model_copy(update={"stderr_tail": f"{RAW_MARKER}\npanicked at src/lib.rs"}) for s in row.performance.samples
    ]
    reason = f"{row.performance.reason} (env had {SECRET} and {LEAKED_TOKEN})"
    leaked = row.model_copy(
        update={"performance": row.performance.model_copy(update={"samples": samples, "reason": reason})}
    )
    skipped = [*report.skipped, f"trace note: {LEAKED_TOKEN}"]
    report = report.model_copy(update={"rows": [leaked, *report.rows[1:]], "skipped": skipped})
    out.write_text(report.model_dump_json(indent=1))
    return code


if __name__ == "__main__":
    sys.exit(_leaky_campaign(sys.argv[1:]))
