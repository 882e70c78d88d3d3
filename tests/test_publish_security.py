"""What the publisher refuses to let through, tried as an attacker would, over HTTP against the stand-in.

- Raw output of the code under test (stderr tails, build errors, panic messages) reaches the artifact only.
- No configured secret and nothing shaped like a credential reaches any check run or comment.
- A user's comment carrying a copied status or result marker changes nothing.
- A forged report (another pull request's head) is refused by `kv-parity publish`, and nothing is published.
- Progress costs one write per stage change and at most one per interval within a stage.
- Earlier attempts of the same head are listed on every surface.
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from markupsafe import escape
from pydantic import SecretStr

from bot.cli.publish import CliSettings, publish_main
from bot.core.attempts import PriorAttempt
from bot.core.campaign import Campaign, CampaignState
from bot.exit_codes import EXIT_NOT_DISPATCHED
from bot.github.gateway import GitHubGateway
from bot.github.models import TokenAuth
from bot.github.redact import REDACTED, RedactingSideRunGateway, Redactor, secret_values
from bot.publish import comment_markers
from bot.publish.public import PublicReport, raw_outputs
from bot.publish.publisher import Publisher
from bot.publish.side_runs import SideRunPublisher
from bot.settings import Settings
from runners.progress import ProgressEvent
from runners.schema.report import CampaignReport, Revision, StopRecord
from tests.fakes.github_api import FakeGitHub
from tests.report_factory import BASE_SHA, CAMPAIGN_ID, HEAD_SHA, make_report
from tests.webhooks import rsa_key_pair

REPO = "octo-org/dynamo"
PR = 512
OTHER_PR = 513
OTHER_HEAD = "9" * 40
APP_ID = 4242
INSTALLATION_ID = 77
TOKEN = "ghs_actions_token"
BOT_LOGIN = "kv-parity[bot]"
MALLORY_TOKEN = "mallory-token"
WEBHOOK_SECRET = "whs_*so|secret_`value`"
"""Markdown characters on purpose: the redactor must find it after the renderers escaped it."""
GH_TOKEN_SHAPE = "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def cli_settings(api_url: str) -> CliSettings:
    return CliSettings(check_name="kv-parity", command_word="/parity", label="kv-parity", api_base_url=api_url)


def campaign(campaign_id: str = CAMPAIGN_ID, minute: int = 0) -> Campaign:
    return Campaign(
        id=campaign_id,
        repo=REPO,
        pr_number=PR,
        head_sha=HEAD_SHA,
        base_sha=BASE_SHA,
        relationship="ancestor",
        rows=None,
        state=CampaignState.RUNNING,
        requested_by="alice",
        trigger="label",
        created_at=datetime(2025, 11, 29, 10, minute, tzinfo=UTC),
        deadline=None,
        artifact_dir=None,
        queue_position=0,
        attempt=1,
        reason="",
        conclusion=None,
        config_source=f".github/kv-parity.toml @ {BASE_SHA}",
    )


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        server.add_repo(REPO)
        server.register_app(APP_ID, "unused", "kv-parity")
        server.add_installation(INSTALLATION_ID, APP_ID, [REPO])
        server.add_installation_token(TOKEN, INSTALLATION_ID)
        server.add_token(MALLORY_TOKEN, "mallory")
        server.add_pull(REPO, PR, HEAD_SHA, "feature", "main", base_sha=BASE_SHA)
        server.add_pull(REPO, OTHER_PR, OTHER_HEAD, "other", "main", base_sha=BASE_SHA)
        yield server


def gateway_for(fake: FakeGitHub, token: str, bot_login: str | None = BOT_LOGIN) -> GitHubGateway:
    return GitHubGateway(
        REPO,
        TokenAuth(token=SecretStr(token)),
        fake.url,
        bot_login=bot_login,
        sleep=lambda _: None,
        seconds_between_requests=None,
        seconds_between_writes=None,
    )


@pytest.fixture
def gateway(fake: FakeGitHub) -> GitHubGateway:
    return gateway_for(fake, TOKEN)


def published_text(fake: FakeGitHub) -> str:
    """Everything the bot sent to GitHub: check-run outputs and comment bodies."""
    parts: list[str] = []
    for run in fake.check_runs(REPO):
        output = run.get("output") or {}
        parts.extend(str(output.get(key) or "") for key in ("title", "summary", "text"))
    for number in (PR, OTHER_PR):
        parts.extend(c["body"] for c in fake.comments(REPO, number))
    return "\n".join(parts)


# --- raw output stays in the artifact -------------------------------------------------------------------


PANIC = "thread 'main' panicked at build.rs:3:5: KV_PARITY_WEBHOOK_SECRET=leaked-value"


def crashed_report() -> CampaignReport:
    """A report whose build error and process records carry the candidate's stderr."""
    report = make_report("pass")
    first = report.rows[0]
    assert first.determinism is not None
    runs = [run.model_copy(update={"stderr_tail": PANIC}) for run in first.determinism.runs]
    rows = [first.model_copy(update={"determinism": first.determinism.model_copy(update={"runs": runs})})]
    return report.model_copy(
        update={
            "rows": rows + report.rows[1:],
            "stopped": StopRecord(
                stage="build", reason=f"build of candidate 4a95f4ea3f82 failed (exit 101):\n{PANIC}", blocking=False
            ),
        }
    )


def test_raw_output_reaches_the_artifact_and_never_github(
    fake: FakeGitHub, gateway: GitHubGateway, tmp_path: Path
) -> None:
    publisher = Publisher(gateway, cli_settings(fake.url), Clock())
    view = campaign()

    publisher.finished(view, crashed_report(), tmp_path)
    publisher.ended(campaign("c-2", minute=1), "errored", f"runner exited 2 (usage or config error)\n{PANIC}")

    sent = published_text(fake)
    assert "panicked" not in sent and "leaked-value" not in sent
    assert "build of candidate 4a95f4ea3f82 failed (exit 101) (details in the artifact)" in sent
    assert "runner exited 2 (usage or config error) (the rest is not published" in sent
    report_md = (tmp_path / "report.md").read_text()
    assert report_md.count("panicked") >= 5, "the stop reason and every stderr tail, in full, in report.md"
    assert "### Output of the code under test" in report_md
    assert "/rows/0/determinism/runs/0/stderr_tail" in report_md


def test_public_report_carries_no_raw_output_field() -> None:
    public = PublicReport.of(crashed_report()).report

    assert raw_outputs(public) == []
    assert public.stopped is not None and "\n" not in public.stopped.reason
    assert raw_outputs(crashed_report()), "the full report still has them"


# --- the redactor ---------------------------------------------------------------------------------------


def app_settings(tmp_path: Path) -> tuple[Settings, str]:
    private, _public = rsa_key_pair()
    key = tmp_path / "app.pem"
    key.write_text(private, encoding="utf-8")
    settings = Settings(
        webhook_secret=SecretStr(WEBHOOK_SECRET),
        app_id=APP_ID,
        private_key_path=key,
        installation_id=INSTALLATION_ID,
        backend="actions",
        api_base_url="https://api.github.com",
    )
    return settings, private


def test_every_configured_secret_and_credential_shape_is_redacted_everywhere(
    fake: FakeGitHub, gateway: GitHubGateway, tmp_path: Path
) -> None:
    settings, private = app_settings(tmp_path)
    key_line = private.splitlines()[5]
    leak = f"{WEBHOOK_SECRET} {key_line} {GH_TOKEN_SHAPE} github_pat_{'x' * 30} {private}"
    report = crashed_report()
    assert report.stopped is not None
    report.stopped = report.stopped.model_copy(update={"reason": f"exit 101: {leak}", "stage": WEBHOOK_SECRET})
    report.revisions[1] = report.revisions[1].model_copy(update={"requested": f"refs/heads/{key_line}"})
    publisher = Publisher(gateway, settings.model_copy(update={"api_base_url": fake.url}), Clock())
    view = campaign()

    publisher.queued(view, 1)
    publisher.progress(view, ProgressEvent(stage="build", detail=leak))
    publisher.finished(view, report, tmp_path / "artifact")
    publisher.ended(campaign("c-2", minute=1), "config_error", f"bad config: {leak}\n{leak}")
    publisher.reply(PR, "refused", reason=leak, fix=key_line)

    sent = published_text(fake) + (tmp_path / "artifact" / "report.md").read_text()
    for secret in (WEBHOOK_SECRET, key_line, GH_TOKEN_SHAPE, "github_pat_", "BEGIN PRIVATE KEY"):
        assert secret not in sent, secret
        assert secret.replace("_", "\\_") not in sent, f"{secret} escaped"
    assert "so\\|secret" not in sent and "so|secret" not in sent
    assert REDACTED in sent
    assert len(fake.calls_to("PATCH", r"/check-runs/\d+$")) >= 2


def test_a_secret_in_the_tracking_issue_is_redacted_by_the_side_run_gateway(
    fake: FakeGitHub, gateway: GitHubGateway, tmp_path: Path
) -> None:
    """A merged pull request's title (its author's text) reaches the tracking issue and the comment on it; the
    side-run publisher's only door to GitHub redacts both, and an issue's title too."""
    settings, _private = app_settings(tmp_path)
    settings = settings.model_copy(update={"api_base_url": fake.url})
    leak = f"{WEBHOOK_SECRET} {GH_TOKEN_SHAPE}"
    merged_pr = 600
    fake.add_pull(REPO, merged_pr, OTHER_HEAD, "faster", "main", base_sha=BASE_SHA, title=f"Faster {leak}",
                  merge_commit_sha=HEAD_SHA)
    pushed = campaign().model_copy(update={"pr_number": 0, "purpose": "main", "trigger": "push"})

    SideRunPublisher(gateway, settings, Clock()).finished(pushed, make_report("perf_fail"), tmp_path / "artifact")

    [issue] = fake.issues(REPO)
    [on_pull] = fake.comments(REPO, merged_pr)
    for body in (issue["body"], on_pull["body"]):
        for secret in (WEBHOOK_SECRET, GH_TOKEN_SHAPE, "so\\|secret", "so|secret"):
            assert secret not in body, secret
    assert f"#{merged_pr} (Faster {REDACTED}" in issue["body"], "the pull request is still named"
    redacting = RedactingSideRunGateway(gateway, Redactor([WEBHOOK_SECRET]))
    opened = redacting.create_issue(f"title {WEBHOOK_SECRET}", f"body {GH_TOKEN_SHAPE}", ["kv-parity-regression"])
    assert [(i["title"], i["body"]) for i in fake.issues(REPO) if i["number"] == opened.number] == [
        (f"title {REDACTED}", f"body {REDACTED}")]


def test_secret_values_come_from_every_secret_setting_and_the_key_file(tmp_path: Path) -> None:
    settings, private = app_settings(tmp_path)

    values = secret_values(settings, {"GITHUB_TOKEN": "ghs_from_the_environment"})

    assert WEBHOOK_SECRET in values and private in values and "ghs_from_the_environment" in values
    assert all(line in values for line in private.splitlines())


@pytest.mark.parametrize(
    ("rendered", "secret"),
    [
        ("token `abc\\_def\\*ghi` here", "abc_def*ghi"),
        ("x @\u200bsecret-login y", "@secret-login"),
        ("line one two", "line one\ntwo"),
        ("-----BEGIN RSA PRIVATE KEY----- MIIE cut off", ""),
    ],
)
def test_redaction_survives_escaping(rendered: str, secret: str) -> None:
    out = Redactor([secret] if secret else []).redact(rendered)

    assert REDACTED in out and "abc" not in out and "secret-login" not in out and "MIIE" not in out


@pytest.mark.parametrize("secret", ["p<ss&w'rd\"42", "a&b<c>d'e"])
def test_redaction_finds_html_escaped_secrets(secret: str) -> None:
    """report.html and the served pages escape a secret's `<&'"` before the redactor sees the page."""
    pages = [f"<td>{escape(secret)}</td>", f"<p>{html.escape(secret, quote=True)}</p>", f"raw {secret}"]

    for page in pages:
        assert Redactor([secret]).redact(page).count(REDACTED) == 1, page


def test_short_values_are_not_redacted_on_their_own() -> None:
    assert Redactor(["ab"]).redact("a tab b") == "a tab b"


# --- markers count only on the bot's own comments --------------------------------------------------------


def test_user_comments_with_copied_markers_change_nothing(
    fake: FakeGitHub, gateway: GitHubGateway, tmp_path: Path
) -> None:
    mallory = gateway_for(fake, MALLORY_TOKEN, bot_login=None)
    fake_status = mallory.create_comment(
        PR,
        f"{comment_markers.STATUS_MARKER}\n<!-- kv-parity:campaign c-9 2099-01-01T00:00:00.000000Z -->\n✅ all good",
    )
    fake_result = mallory.create_comment(PR, comment_markers.result_marker(CAMPAIGN_ID, HEAD_SHA) + "\n✅ passed")
    fake_old = mallory.create_comment(PR, comment_markers.result_marker("c-0", HEAD_SHA) + "\nold result")
    publisher = Publisher(gateway, cli_settings(fake.url), Clock())
    view = campaign()

    publisher.queued(view, 1)
    [status_id] = [c["id"] for c in fake.comments(REPO, PR) if c["user"] == BOT_LOGIN]
    publisher.finished(view, make_report("perf_fail"), tmp_path)
    restarted = Publisher(gateway, cli_settings(fake.url), Clock())
    restarted.ended(campaign("c-2", minute=5), "cancelled", "cancelled by a maintainer")

    comments = {c["id"]: c for c in fake.comments(REPO, PR)}
    for planted in (fake_status, fake_result, fake_old):
        assert comments[planted.id]["body"] == planted.body and not comments[planted.id]["minimized"]
    bot = [c for c in comments.values() if c["user"] == BOT_LOGIN]
    statuses = [c for c in bot if comment_markers.is_status_comment(c["body"])]
    results = [c for c in bot if comment_markers.result_marker_campaign(c["body"]) == CAMPAIGN_ID]
    assert [c["id"] for c in statuses] == [status_id], "the bot's own status comment, edited in place"
    assert "Cancelled" in statuses[0]["body"], "still edited after a restart"
    assert len(results) == 1 and "❌" in results[0]["body"], "the bot's result is posted despite the fake"


# --- forged reports --------------------------------------------------------------------------------------


def publish_args(report_path: Path, pr: int = PR, **expect: str) -> list[str]:
    values = {"campaign-id": CAMPAIGN_ID, "head": HEAD_SHA, "base": BASE_SHA, **expect}
    return [
        "--report",
        str(report_path),
        "--repo",
        REPO,
        "--pr",
        str(pr),
        "--bot-login",
        BOT_LOGIN,
        *[arg for key, value in values.items() for arg in (f"--expect-{key}", value)],
    ]


def write_report(tmp_path: Path, report: CampaignReport) -> Path:
    path = tmp_path / "report.json"
    path.write_text(report.model_dump_json(indent=2), encoding="utf-8")
    return path


@pytest.fixture
def token_env(fake: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KV_PARITY_TOKEN", TOKEN)
    monkeypatch.setenv("KV_PARITY_API_BASE_URL", fake.url)


def test_a_report_renamed_to_another_prs_head_is_refused(
    fake: FakeGitHub, token_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    forged = make_report("pass")
    forged.revisions = [
        Revision(arm="baseline", sha=BASE_SHA, requested="main"),
        Revision(arm="candidate", sha=OTHER_HEAD, requested="refs/pull/513/head"),
    ]
    path = write_report(tmp_path, forged)

    code = publish_main([*publish_args(path, OTHER_PR, head=HEAD_SHA), "--api-url", fake.url])

    assert code == EXIT_NOT_DISPATCHED
    err = capsys.readouterr().err
    assert "head SHA" in err and OTHER_HEAD in err and HEAD_SHA in err and "nothing published" in err
    assert fake.check_runs(REPO) == [] and published_text(fake) == ""


@pytest.mark.parametrize(
    ("expect", "field"),
    [({"campaign-id": "c-other"}, "campaign id"), ({"base": "0" * 40}, "base SHA"), ({"rows": "vllm-disagg"}, "rows")],
)
def test_every_dispatched_field_is_checked(
    fake: FakeGitHub,
    token_env: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    expect: dict[str, str],
    field: str,
) -> None:
    path = write_report(tmp_path, make_report("pass"))

    assert publish_main([*publish_args(path, PR, **expect), "--api-url", fake.url]) == EXIT_NOT_DISPATCHED
    assert field in capsys.readouterr().err and published_text(fake) == ""


def test_a_report_for_a_head_the_pr_no_longer_has_is_refused(
    fake: FakeGitHub, token_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Even when the dispatched values agree, the API's current head of the pull request must too."""
    path = write_report(tmp_path, make_report("pass"))

    code = publish_main([*publish_args(path, OTHER_PR), "--api-url", fake.url])

    assert code == EXIT_NOT_DISPATCHED
    assert "current head" in capsys.readouterr().err and published_text(fake) == ""


def test_the_dispatched_report_is_published(fake: FakeGitHub, token_env: None, tmp_path: Path) -> None:
    path = write_report(tmp_path, make_report("pass"))

    assert publish_main([*publish_args(path, rows="vllm-disagg,sglang-disagg"), "--api-url", fake.url]) == 0
    (run,) = fake.check_runs(REPO)
    assert run["conclusion"] == "success"


# --- progress: one prompt write per stage change -------------------------------------------------------


def test_progress_costs_one_write_per_stage_and_one_per_interval(fake: FakeGitHub, gateway: GitHubGateway) -> None:
    clock = Clock()
    publisher = Publisher(gateway, cli_settings(fake.url), clock)
    view = campaign()
    publisher.queued(view, 0)
    writes_before = len(fake.calls_to("PATCH", r"/check-runs/\d+$"))
    comments_before = len(fake.calls_to("PATCH", r"/issues/comments/\d+$"))

    script: list[tuple[float, ProgressEvent]] = [
        (0.0, ProgressEvent(stage="pin", detail="resolving")),
        (0.2, ProgressEvent(stage="pin", detail="baseline is an ancestor")),  # same stage, 0.2 s: held back
        (0.5, ProgressEvent(stage="trace", detail="5000 rows")),  # stage change: written
        (1.0, ProgressEvent(stage="build", detail="baseline")),  # written
        (30.0, ProgressEvent(stage="build", detail="candidate")),  # same stage, 29 s later: written
        (31.0, ProgressEvent(stage="determinism", row="a")),  # written
        (32.0, ProgressEvent(stage="parity", row="a")),  # written
    ]
    script += [
        (40.0 + 2.0 * pair, ProgressEvent(stage="performance", row="a", done=pair, total=60)) for pair in range(61)
    ]
    # performance: the stage change at 40 s, then one per 10 s up to 160 s: 13 writes
    for at, event in script:
        clock.now = 1000.0 + at
        publisher.progress(view, event)

    writes = len(fake.calls_to("PATCH", r"/check-runs/\d+$")) - writes_before
    assert writes == 6 + 13
    assert len(fake.calls_to("PATCH", r"/issues/comments/\d+$")) == comments_before, "no status-comment edits"


def test_a_batch_of_events_is_one_write_showing_the_newest(fake: FakeGitHub, gateway: GitHubGateway) -> None:
    clock = Clock()
    publisher = Publisher(gateway, cli_settings(fake.url), clock)
    view = campaign()
    publisher.queued(view, 0)
    before = len(fake.calls_to("PATCH", r"/check-runs/\d+$"))

    publisher.progress_batch(
        view,
        [
            ProgressEvent(stage="pin"),
            ProgressEvent(stage="trace"),
            ProgressEvent(stage="build", detail="baseline"),
            ProgressEvent(stage="build", detail="candidate"),
        ],
    )

    assert len(fake.calls_to("PATCH", r"/check-runs/\d+$")) == before + 1
    (run,) = fake.check_runs(REPO)
    assert run["output"]["title"] == "🏃 Running: build" and "Latest: candidate" in run["output"]["summary"]


# --- earlier attempts are listed --------------------------------------------------------------------------


def test_earlier_attempts_are_listed_on_every_surface(
    fake: FakeGitHub, gateway: GitHubGateway, tmp_path: Path
) -> None:
    attempts = [
        PriorAttempt(
            campaign_id="kvp-first",
            head_sha=HEAD_SHA,
            state="completed",
            semantic="FAIL",
            performance="NOT_RUN",
            requested_by="alice",
            finished_unix=1764400000.0,
        ),
        PriorAttempt(
            campaign_id="kvp-second",
            head_sha=HEAD_SHA,
            state="cancelled",
            semantic=None,
            performance=None,
            requested_by="bob",
            finished_unix=1764405000.0,
        ),
    ]

    Publisher(gateway, cli_settings(fake.url), Clock()).finished(
        campaign(), make_report("pass"), tmp_path, prior_attempts=attempts
    )

    (run,) = fake.check_runs(REPO)
    (result,) = [c for c in fake.comments(REPO, PR) if comment_markers.result_marker_campaign(c["body"])]
    report_md = (tmp_path / "report.md").read_text()
    for surface in (run["output"]["summary"], result["body"], report_md):
        assert "`kvp-first`" in surface and "`kvp-second`" in surface
        assert "❌ FAIL" in surface and "cancelled" in surface
