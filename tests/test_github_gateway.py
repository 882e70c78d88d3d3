"""GitHubGateway against the GitHub stand-in, over real HTTP on 127.0.0.1.

Both sides are under test: the stand-in must refuse what GitHub refuses (so the bot cannot pass
here and fail in production), and the gateway must retry exactly what is transient.
"""

from __future__ import annotations

import io
import socket
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from bot.github.errors import (
    ArtifactTooLargeError,
    GitHubAuthError,
    GitHubError,
    GitHubNotFoundError,
    GitHubRateLimitError,
    GitHubRetryLaterError,
    GitHubUnavailableError,
    GitHubValidationError,
)
from bot.github.gateway import GitHubGateway
from bot.github.models import AppAuth, CheckAction, CheckOutput, TokenAuth
from tests.fakes.github_api import FakeGitHub, secondary_rate_limit
from tests.webhooks import commit, git, loopback, rsa_key_pair

REPO = "octo-org/kv-store"
TOKEN = "ghp_test_token"
APP_ID = 4242
INSTALLATION_ID = 77
CHECK_RUNS = r"/check-runs"


# ----------------------------------------------------------------- fixtures


class History:
    """main: c1 - c2 - c5 ; feature: c1 - c3 - c4 (diverged from main by 2/2)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        git(root, "init", "--quiet", "-b", "main")
        self.c1 = commit(root, {"bench.toml": b"iterations = 3\n", "src/lib.rs": b"fn a() {}\n"}, "c1")
        self.c2 = commit(root, {"README.md": b"# kv\n"}, "c2")
        git(root, "checkout", "--quiet", "-b", "feature", self.c1)
        self.c3 = commit(root, {"bench.toml": b"iterations = 5\n"}, "c3")
        self.c4 = commit(root, {"big.bin": bytes(range(256)) * 4500}, "c4")  # > 1 MiB
        git(root, "checkout", "--quiet", "main")
        self.c5 = commit(root, {"src/lib.rs": b"fn b() {}\n"}, "c5")


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    return History(tmp_path_factory.mktemp("kv-store"))


@pytest.fixture(scope="module")
def app_key() -> tuple[str, str]:
    """(private PEM, public PEM) of the registered GitHub App."""
    return rsa_key_pair()


@pytest.fixture(scope="module")
def server() -> Iterator[FakeGitHub]:
    with FakeGitHub() as running:
        yield running


@pytest.fixture
def fake(server: FakeGitHub, history: History, app_key: tuple[str, str]) -> FakeGitHub:
    server.reset()
    seed(server, history, app_key[1])
    return server


def seed(server: FakeGitHub, history: History, public_key: str) -> None:
    server.add_repo(REPO, history.root)
    server.add_token(TOKEN, "maintainer")
    server.register_app(APP_ID, public_key, "kv-parity")
    server.add_installation(INSTALLATION_ID, APP_ID, [REPO])
    server.add_installation_token("ghs_actions_token", INSTALLATION_ID)
    server.add_pull(REPO, 7, history.c4, "feature", "main", user="alice", labels=["perf", "parity"])
    server.add_pull(
        REPO, 8, history.c4, "patch-1", "main", head_repo_full_name="mallory/kv-store", user="mallory"
    )


class Sleeper:
    """Records the waits tenacity asks for instead of sleeping."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def sleeper() -> Sleeper:
    return Sleeper()


def gateway(
    url: str, sleeper: Sleeper, auth: TokenAuth | AppAuth | None = None, repo: str = REPO, **kw: Any
) -> GitHubGateway:
    """A gateway without PyGithub's request pacing, so tests run at loopback speed."""
    return GitHubGateway(
        repo,
        auth or TokenAuth(token=SecretStr(TOKEN)),
        url,
        sleep=sleeper,
        seconds_between_requests=None,
        seconds_between_writes=None,
        **kw,
    )


@pytest.fixture
def gh(fake: FakeGitHub, sleeper: Sleeper) -> GitHubGateway:
    return gateway(fake.url, sleeper)


@pytest.fixture
def app_gh(fake: FakeGitHub, sleeper: Sleeper, app_key: tuple[str, str]) -> GitHubGateway:
    """Gateway authenticated as the installed GitHub App (check runs need an App)."""
    auth = AppAuth(app_id=APP_ID, private_key=SecretStr(app_key[0]), installation_id=INSTALLATION_ID)
    return gateway(fake.url, sleeper, auth)


# ----------------------------------------------------------------- repository reads


def test_pull_of_same_repo_branch(gh: GitHubGateway, history: History) -> None:
    pull = gh.pull(7)

    assert pull.number == 7 and pull.state == "open"
    assert (pull.head_sha, pull.head_ref, pull.head_repo_full_name) == (history.c4, "feature", REPO)
    assert (pull.base_ref, pull.base_sha) == ("main", history.c5)
    assert not pull.is_fork
    assert pull.author_login == "alice"
    assert pull.labels == ["perf", "parity"]
    assert pull.html_url == f"https://github.com/{REPO}/pull/7"


def test_pull_from_fork_is_flagged(gh: GitHubGateway, fake: FakeGitHub) -> None:
    pull = gh.pull(8)

    assert pull.is_fork and pull.head_repo_full_name == "mallory/kv-store"
    assert [c.path for c in fake.calls] == [f"/repos/{REPO}/pulls/8"]


def test_missing_pull_is_not_retried(gh: GitHubGateway, fake: FakeGitHub, sleeper: Sleeper) -> None:
    with pytest.raises(GitHubError) as raised:
        gh.pull(99)

    assert raised.value.status == 404
    assert len(fake.calls) == 1 and sleeper.waits == []


def test_permission_reports_real_role(gh: GitHubGateway, fake: FakeGitHub) -> None:
    for login, role in [("root", "admin"), ("keeper", "maintain"), ("dev", "write"), ("helper", "triage")]:
        fake.set_permission(REPO, login, role)

    assert [gh.permission(u) for u in ["root", "keeper", "dev", "helper"]] == [
        "admin",
        "maintain",
        "write",
        "triage",
    ]
    assert gh.permission("stranger") == "read"  # public repository


def test_permission_on_private_repo_defaults_to_none(
    fake: FakeGitHub, sleeper: Sleeper, history: History
) -> None:
    fake.add_repo("octo-org/secret", history.root, private=True)
    gh = gateway(fake.url, sleeper, repo="octo-org/secret")

    assert gh.permission("stranger") == "none"


@pytest.mark.parametrize(
    ("base", "head", "status", "ahead", "behind", "merge_base"),
    [
        ("main", "c4", "diverged", 2, 2, "c1"),
        ("c1", "c4", "ahead", 2, 0, "c1"),
        ("main", "c1", "behind", 0, 2, "c1"),
        ("main", "c5", "identical", 0, 0, "c5"),
    ],
)
def test_merge_base_from_real_git(
    gh: GitHubGateway,
    history: History,
    base: str,
    head: str,
    status: str,
    ahead: int,
    behind: int,
    merge_base: str,
) -> None:
    sha_of = vars(history)
    result = gh.merge_base(sha_of.get(base, base), sha_of[head])

    assert (result.status, result.ahead_by, result.behind_by) == (status, ahead, behind)
    assert result.sha == sha_of[merge_base]


def test_read_file_at_ref(gh: GitHubGateway, history: History) -> None:
    assert gh.read_file("bench.toml", "main") == b"iterations = 3\n"
    assert gh.read_file("bench.toml", history.c3) == b"iterations = 5\n"
    assert gh.read_file("src/lib.rs", "feature") == b"fn a() {}\n"


def test_read_file_missing_path_or_ref_is_none(gh: GitHubGateway, sleeper: Sleeper) -> None:
    assert gh.read_file("nope.toml", "main") is None
    assert gh.read_file("bench.toml", "no-such-branch") is None
    assert sleeper.waits == []


def test_read_file_rejects_directory(gh: GitHubGateway) -> None:
    with pytest.raises(GitHubError, match="is a directory"):
        gh.read_file("src", "main")


def test_read_large_file_through_blob_api(gh: GitHubGateway, fake: FakeGitHub) -> None:
    data = gh.read_file("big.bin", "feature")

    assert data == bytes(range(256)) * 4500
    assert [c.path.split("/")[4] for c in fake.calls] == ["contents", "git"]


# ----------------------------------------------------------------- check runs


def test_check_run_lifecycle(app_gh: GitHubGateway, fake: FakeGitHub, history: History) -> None:
    rerun = CheckAction(label="Re-run", description="Run the parity campaign again", identifier="rerun")
    run_id = app_gh.create_check_run(
        history.c4,
        "kv-parity",
        "campaign-1",
        output=CheckOutput(title="Queued", summary="Waiting for a runner"),
        actions=[rerun],
        details_url="https://example.com/campaign-1",
    )
    app_gh.update_check_run(run_id, status="in_progress", output=CheckOutput(title="Running", summary="3/10"))
    app_gh.update_check_run(
        run_id,
        conclusion="success",
        output=CheckOutput(title="Parity", summary="byte-identical", text="details"),
    )

    (stored,) = fake.check_runs(REPO)
    assert stored["id"] == run_id and stored["head_sha"] == history.c4
    assert (stored["status"], stored["conclusion"]) == ("completed", "success")
    assert stored["completed_at"] is not None
    assert stored["external_id"] == "campaign-1"
    assert stored["details_url"] == "https://example.com/campaign-1"
    assert stored["output"] == {"title": "Parity", "summary": "byte-identical", "text": "details"}
    assert stored["actions"] == [rerun.model_dump()]
    check_calls = [(c.method, c.path) for c in fake.calls if CHECK_RUNS in c.path]
    assert check_calls == [
        ("POST", f"/repos/{REPO}/check-runs"),
        ("PATCH", f"/repos/{REPO}/check-runs/{run_id}"),
        ("PATCH", f"/repos/{REPO}/check-runs/{run_id}"),
    ]


def test_the_bots_check_run_is_found_past_the_first_page(app_gh: GitHubGateway, history: History) -> None:
    """A head with more kv-parity check runs than a page holds (reruns of long-lived pull requests): the oldest run
    sits on the second page of the newest-first list and is still found, so the publisher never makes a second."""
    ids = [app_gh.create_check_run(history.c4, "kv-parity", f"campaign-{n}") for n in range(101)]
    assert app_gh.check_run_of(history.c4, "kv-parity", "campaign-0") == ids[0]
    assert app_gh.check_run_of(history.c4, "kv-parity", "campaign-100") == ids[100]
    assert app_gh.check_run_of(history.c4, "kv-parity", "campaign-101") is None
    assert [run.id for run in app_gh.check_runs_of(history.c4, "kv-parity")] == [ids[100]], "filter=latest"


def test_check_runs_need_a_github_app(gh: GitHubGateway, history: History) -> None:
    with pytest.raises(GitHubError) as raised:
        gh.create_check_run(history.c4, "kv-parity", "campaign-1")

    assert raised.value.status == 403


def test_stand_in_requires_check_run_name(fake: FakeGitHub, history: History) -> None:
    response = loopback().post(
        f"{fake.url}/repos/{REPO}/check-runs",
        json={"head_sha": history.c4},
        headers={"Authorization": "token ghs_actions_token"},
    )

    assert response.status_code == 422
    body = response.json()
    assert body["message"] == "Validation Failed"
    assert body["errors"] == [
        {
            "resource": "CheckRun",
            "field": "name",
            "code": "missing_field",
            "message": '"name" wasn\'t supplied.',
        }
    ]


def four_actions() -> list[CheckAction]:
    return [CheckAction(label=f"a{i}", description="d", identifier=f"i{i}") for i in range(4)]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": ""}, "name"),
        ({"status": "bogus"}, "status"),
        ({"status": "completed"}, "conclusion"),
        ({"output": CheckOutput(title="t", summary="x" * 65536)}, "output.summary"),
        ({"output": CheckOutput(title="t", summary="s", text="x" * 65536)}, "output.text"),
        ({"actions": four_actions()}, "actions"),
        ({"actions": [CheckAction(label="x" * 21, description="d", identifier="i")]}, "actions.label"),
        ({"actions": [CheckAction(label="l", description="x" * 41, identifier="i")]}, "actions.description"),
        ({"actions": [CheckAction(label="l", description="d", identifier="x" * 21)]}, "actions.identifier"),
    ],
)
def test_invalid_check_run_is_rejected_without_retry(
    app_gh: GitHubGateway,
    fake: FakeGitHub,
    sleeper: Sleeper,
    history: History,
    kwargs: dict[str, Any],
    field: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    args: dict[str, Any] = {"head_sha": history.c4, "name": "kv-parity", "external_id": "c-1", **kwargs}

    with pytest.raises(GitHubValidationError) as raised:
        app_gh.create_check_run(**args)

    assert raised.value.status == 422
    assert raised.value.body["errors"][0]["field"] == field
    assert len(fake.calls_to("POST", CHECK_RUNS)) == 1
    assert sleeper.waits == [] and fake.check_runs(REPO) == []
    assert "GitHub rejected" in caplog.text and field in caplog.text


def test_completing_without_conclusion_is_rejected(
    app_gh: GitHubGateway, fake: FakeGitHub, history: History
) -> None:
    run_id = app_gh.create_check_run(history.c4, "kv-parity", "c-1", status="in_progress")

    with pytest.raises(GitHubValidationError):
        app_gh.update_check_run(run_id, status="completed")

    assert len(fake.calls_to("PATCH", CHECK_RUNS)) == 1
    assert fake.check_runs(REPO)[0]["status"] == "in_progress"


def test_action_required_needs_a_details_url_given_now_or_before(
    app_gh: GitHubGateway, fake: FakeGitHub, history: History
) -> None:
    """GitHub asks for a details_url with `action_required`; the stand-in refuses one without it."""
    bare = app_gh.create_check_run(history.c4, "kv-parity", "c-1", status="in_progress")
    with pytest.raises(GitHubValidationError) as raised:
        app_gh.update_check_run(bare, conclusion="action_required")
    assert raised.value.body["errors"][0]["field"] == "details_url"
    assert fake.check_runs(REPO)[0]["status"] == "in_progress"
    app_gh.update_check_run(bare, conclusion="action_required", details_url="https://example.com/c-1")
    linked = app_gh.create_check_run(history.c4, "kv-parity", "c-2", details_url="https://example.com/c-2")
    app_gh.update_check_run(linked, conclusion="action_required")
    assert [run["conclusion"] for run in fake.check_runs(REPO)] == ["action_required", "action_required"]


def test_check_run_for_unknown_commit_is_rejected(app_gh: GitHubGateway) -> None:
    with pytest.raises(GitHubValidationError, match="No commit found"):
        app_gh.create_check_run("0" * 40, "kv-parity", "c-1")


# ----------------------------------------------------------------- retries


def test_bad_gateway_then_success_is_retried(
    app_gh: GitHubGateway, fake: FakeGitHub, sleeper: Sleeper, history: History
) -> None:
    fake.inject_failures("POST", CHECK_RUNS, [(502, {}, {"message": "Server Error"})])

    run_id = app_gh.create_check_run(history.c4, "kv-parity", "c-1")

    assert len(fake.calls_to("POST", CHECK_RUNS)) == 2
    assert sleeper.waits == [1.0]
    assert [run["id"] for run in fake.check_runs(REPO)] == [run_id]


def test_persistent_server_errors_give_up_after_bounded_attempts(
    gh: GitHubGateway, fake: FakeGitHub, sleeper: Sleeper
) -> None:
    fake.inject_failures("GET", r"/pulls/7$", [(503, {}, "upstream down")] * 5)

    with pytest.raises(GitHubUnavailableError):
        gh.pull(7)

    assert len(fake.calls) == 5
    assert sleeper.waits == [1.0, 2.0, 4.0, 8.0]


def test_secondary_rate_limit_honours_retry_after(
    gh: GitHubGateway, fake: FakeGitHub, sleeper: Sleeper
) -> None:
    fake.inject_failures("POST", r"/issues/7/comments$", [secondary_rate_limit(retry_after=7)])

    gh.create_comment(7, "hello")

    assert len(fake.calls_to("POST", r"/comments$")) == 2
    assert sleeper.waits == [7.0]
    assert [c["body"] for c in fake.comments(REPO, 7)] == ["hello"]


def test_429_honours_rate_limit_reset(fake: FakeGitHub, sleeper: Sleeper) -> None:
    now = 1_700_000_000.0
    gh = gateway(fake.url, sleeper, clock=lambda: now)
    limited = (
        429,
        {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(now) + 12)},
        {"message": "slow down"},
    )
    fake.inject_failures("GET", r"/pulls/7$", [limited])

    assert gh.pull(7).number == 7
    assert sleeper.waits == [12.0]


def test_rate_limit_longer_than_max_wait_surfaces_at_once(
    gh: GitHubGateway, fake: FakeGitHub, sleeper: Sleeper
) -> None:
    fake.inject_failures("GET", r"/pulls/7$", [secondary_rate_limit(retry_after=3600)])

    with pytest.raises(GitHubRateLimitError) as raised:
        gh.pull(7)

    assert raised.value.retry_after == 3600
    assert len(fake.calls) == 1 and sleeper.waits == []


def test_connection_errors_are_retried(sleeper: Sleeper) -> None:
    with socket.socket() as sock:  # a port nobody listens on once closed
        sock.bind(("127.0.0.1", 0))
        dead_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    gh = gateway(dead_url, sleeper, max_attempts=3)

    with pytest.raises(GitHubUnavailableError, match="no answer"):
        gh.pull(7)

    assert sleeper.waits == [1.0, 2.0]


# ----------------------------------------------------------------- comments


def test_comment_create_edit_list(gh: GitHubGateway, fake: FakeGitHub) -> None:
    created = gh.create_comment(7, "benchmark queued")
    edited = gh.edit_comment(created.id, "benchmark done")

    assert created.author_login == "maintainer"
    assert created.html_url.endswith(f"/pull/7#issuecomment-{created.id}")
    assert edited.id == created.id and edited.body == "benchmark done"
    assert gh.list_comments(7) == [edited]
    assert [(c.method, c.path) for c in fake.calls][:2] == [
        ("POST", f"/repos/{REPO}/issues/7/comments"),
        ("PATCH", f"/repos/{REPO}/issues/comments/{created.id}"),
    ]


MARKED = "<!-- kv-parity:result campaign=kvp-1 sha=abc -->\n**kv-parity** result"


def test_a_comment_created_before_the_502_is_used_not_posted_again(
    gh: GitHubGateway, fake: FakeGitHub, sleeper: Sleeper
) -> None:
    fake.inject_failures("POST", r"/issues/7/comments$", [(502, {}, {"message": "Bad Gateway"})], after_acting=True)

    comment = gh.create_comment(7, MARKED)

    assert [(c["id"], c["body"]) for c in fake.comments(REPO, 7)] == [(comment.id, MARKED)]
    assert len(fake.calls_to("POST", r"/issues/7/comments$")) == 1
    assert sleeper.waits == [1.0]


def test_a_comment_the_failed_post_did_not_create_is_posted_again(
    gh: GitHubGateway, fake: FakeGitHub, sleeper: Sleeper
) -> None:
    fake.inject_failures("POST", r"/issues/7/comments$", [(502, {}, {"message": "Bad Gateway"})])

    gh.create_comment(7, MARKED)

    assert [c["body"] for c in fake.comments(REPO, 7)] == [MARKED]
    assert len(fake.calls_to("POST", r"/issues/7/comments$")) == 2


def test_only_the_bots_own_comment_with_the_same_campaign_marker_counts(
    gh: GitHubGateway, fake: FakeGitHub, sleeper: Sleeper
) -> None:
    fake.add_token("ghp_mallory", "mallory")
    gateway(fake.url, sleeper, TokenAuth(token=SecretStr("ghp_mallory"))).create_comment(7, MARKED)
    earlier = gh.create_comment(7, "<!-- kv-parity:result campaign=kvp-1 sha=abc -->\nfirst rendering")
    fake.inject_failures("POST", r"/issues/7/comments$", [(502, {}, {"message": "Bad Gateway"})])

    assert gh.create_comment(7, MARKED) == earlier  # same campaign marker, by the bot: it is that comment
    assert [c["user"] for c in fake.comments(REPO, 7)] == ["mallory", "maintainer"]

    fake.inject_failures("POST", r"/issues/7/comments$", [(502, {}, {"message": "Bad Gateway"})])
    status = "<!-- kv-parity:status -->\nqueued"
    gh.create_comment(7, "<!-- kv-parity:status -->\nrunning")
    posted = gh.create_comment(7, status)  # a marker naming no campaign needs the identical body
    assert posted.body == status and len(fake.comments(REPO, 7)) == 4


def test_a_rate_limit_longer_than_the_bound_is_handed_back_and_nothing_is_sent_until_then(
    fake: FakeGitHub, sleeper: Sleeper
) -> None:
    now = [1_700_000_000.0]
    gh = gateway(fake.url, sleeper, clock=lambda: now[0], max_wait=10.0)
    fake.inject_failures("POST", r"/issues/7/comments$", [secondary_rate_limit(retry_after=90)])

    with pytest.raises(GitHubRetryLaterError) as raised:
        gh.create_comment(7, "hello")
    assert raised.value.not_before == now[0] + 90 and sleeper.waits == []

    sent = len(fake.calls)
    now[0] += 60
    with pytest.raises(GitHubRetryLaterError, match="not sent"):
        gh.pull(7)
    assert len(fake.calls) == sent

    now[0] += 31
    assert gh.pull(7).number == 7 and fake.comments(REPO, 7) == []


def test_list_comments_follows_pagination(gh: GitHubGateway, fake: FakeGitHub) -> None:
    for i in range(105):
        gh.create_comment(7, f"comment {i}")

    comments = gh.list_comments(7)

    assert [c.body for c in comments] == [f"comment {i}" for i in range(105)]
    assert len(fake.calls_to("GET", r"/issues/7/comments$")) == 2


def test_comment_body_limit(gh: GitHubGateway, fake: FakeGitHub, sleeper: Sleeper) -> None:
    gh.create_comment(7, "x" * 65536)

    with pytest.raises(GitHubValidationError, match="422") as raised:
        gh.create_comment(7, "x" * 65537)

    assert "Body is too long" in raised.value.body["errors"][0]["message"]
    assert len(fake.calls_to("POST", r"/comments$")) == 2 and sleeper.waits == []


def test_minimize(gh: GitHubGateway, fake: FakeGitHub) -> None:
    old = gh.create_comment(7, "stale report")
    new = gh.create_comment(7, "fresh report")

    gh.minimize_comment(old.node_id)

    stored = {c["id"]: c for c in fake.comments(REPO, 7)}
    assert stored[old.id]["minimized"] and stored[old.id]["minimized_reason"] == "outdated"
    assert not stored[new.id]["minimized"]


def test_minimize_unknown_node_is_not_found(gh: GitHubGateway) -> None:
    with pytest.raises(GitHubError) as raised:
        gh.minimize_comment("IC_nope")

    assert raised.value.status == 404


def test_stand_in_graphql_errors_are_graphql_shaped(fake: FakeGitHub) -> None:
    headers = {"Authorization": f"bearer {TOKEN}"}
    unknown = loopback().post(f"{fake.url}/graphql", json={"query": "{ viewer { login } }"}, headers=headers)
    bad_enum = loopback().post(
        f"{fake.url}/graphql",
        json={"query": 'mutation { minimizeComment(input: {subjectId: "x", classifier: MEH}) { id } }'},
        headers=headers,
    )

    assert unknown.status_code == 200 and "data" not in unknown.json()
    assert unknown.json()["errors"][0]["extensions"]["code"] == "undefinedField"
    assert "MEH" in bad_enum.json()["errors"][0]["message"]


def test_stand_in_http_errors(fake: FakeGitHub) -> None:
    auth = {"Authorization": f"token {TOKEN}"}
    unknown_route = loopback().get(f"{fake.url}/repos/{REPO}/nonsense", headers=auth)
    bad_json = loopback().post(f"{fake.url}/repos/{REPO}/issues/7/comments", content=b"{nope", headers=auth)
    no_auth = loopback().get(f"{fake.url}/repos/{REPO}")

    assert (unknown_route.status_code, unknown_route.json()["message"]) == (404, "Not Found")
    assert (bad_json.status_code, bad_json.json()["message"]) == (400, "Problems parsing JSON")
    assert (no_auth.status_code, no_auth.json()["message"]) == (401, "Requires authentication")


def test_stand_in_read_endpoints(
    app_gh: GitHubGateway, gh: GitHubGateway, fake: FakeGitHub, history: History
) -> None:
    """Endpoints the gateway does not use yet but the bot's other tests may poke directly."""
    run_id = app_gh.create_check_run(history.c4, "kv-parity", "c-1")
    app_gh.create_check_run(history.c4, "other", "c-2")
    comment = gh.create_comment(7, "to be deleted")
    fake.add_workflow(REPO, "parity.yml")
    workflow_run = fake.add_run(REPO, "parity.yml", event="push")
    with httpx.Client(base_url=fake.url, headers={"Authorization": "token ghs_actions_token"}) as client:
        one = client.get(f"/repos/{REPO}/check-runs/{run_id}").json()
        by_commit = client.get(
            f"/repos/{REPO}/commits/feature/check-runs", params={"check_name": "kv-parity"}
        ).json()
        got_comment = client.get(f"/repos/{REPO}/issues/comments/{comment.id}")
        deleted = client.delete(f"/repos/{REPO}/issues/comments/{comment.id}")
        pushes = client.get(f"/repos/{REPO}/actions/runs", params={"event": "push"}).json()
        dispatched = client.get(f"/repos/{REPO}/actions/runs", params={"event": "workflow_dispatch"}).json()
        single_run = client.get(f"/repos/{REPO}/actions/runs/{workflow_run}").json()

    assert (one["name"], one["status"], one["output"]["annotations_count"]) == ("kv-parity", "queued", 0)
    assert [r["id"] for r in by_commit["check_runs"]] == [run_id] and by_commit["total_count"] == 1
    assert got_comment.json()["body"] == "to be deleted"
    assert deleted.status_code == 204 and fake.comments(REPO, 7) == []
    assert [r["id"] for r in pushes["workflow_runs"]] == [workflow_run]
    assert dispatched == {"total_count": 0, "workflow_runs": []}
    assert single_run["path"] == ".github/workflows/parity.yml"


# ----------------------------------------------------------------- Actions


@pytest.fixture
def workflow(fake: FakeGitHub) -> str:
    fake.add_workflow(REPO, "parity.yml", name="parity")
    return "parity.yml"


def test_dispatch_records_and_finds_run(gh: GitHubGateway, fake: FakeGitHub, workflow: str) -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    fake.add_run(REPO, workflow, created_at=before - timedelta(hours=1))  # someone else's, earlier

    gh.dispatch_workflow(workflow, "feature", {"campaign": "c-1", "iterations": "5"})
    run_id = gh.find_dispatched_run(workflow, before)

    (dispatch,) = fake.dispatches(REPO)
    assert dispatch == {
        "workflow": workflow,
        "ref": "feature",
        "inputs": {"campaign": "c-1", "iterations": "5"},
        "run_id": run_id,
    }
    assert gh.find_dispatched_run(workflow, datetime.now(UTC) + timedelta(minutes=5)) is None


def test_dispatch_with_too_many_inputs_is_rejected(
    gh: GitHubGateway, fake: FakeGitHub, sleeper: Sleeper, workflow: str
) -> None:
    with pytest.raises(GitHubValidationError, match="No more than 25"):
        gh.dispatch_workflow(workflow, "main", {f"k{i}": "v" for i in range(26)})

    gh.dispatch_workflow(workflow, "main", {f"k{i}": "v" for i in range(25)})
    assert len(fake.dispatches(REPO)) == 1 and sleeper.waits == []


def test_dispatch_with_non_string_input_is_rejected(
    gh: GitHubGateway, fake: FakeGitHub, workflow: str
) -> None:
    with pytest.raises(GitHubValidationError, match="is not a string"):
        gh.dispatch_workflow(workflow, "main", {"iterations": 5})  # type: ignore[dict-item]

    assert fake.dispatches(REPO) == []
    assert len(fake.calls_to("POST", r"/dispatches$")) == 1


def test_dispatch_to_unknown_ref_is_rejected(gh: GitHubGateway, workflow: str) -> None:
    with pytest.raises(GitHubValidationError, match="No ref found"):
        gh.dispatch_workflow(workflow, "no-such-branch", {})


def test_download_artifact_via_presigned_redirect(gh: GitHubGateway, fake: FakeGitHub, workflow: str) -> None:
    run_id = fake.add_run(REPO, workflow)
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("report.json", '{"parity": true}')
    fake.add_artifact(run_id, "report", b"stale", expired=True)
    fake.add_artifact(run_id, "report", archive.getvalue())

    data = gh.download_artifact(run_id, "report")

    assert data is not None
    assert zipfile.ZipFile(io.BytesIO(data)).read("report.json") == b'{"parity": true}'
    assert gh.download_artifact(run_id, "missing") is None
    (blob_call,) = fake.calls_to("GET", r"^/_blobs/")
    assert "authorization" not in blob_call.headers


def test_oversized_artifact_is_refused_before_download(gh: GitHubGateway, fake: FakeGitHub, workflow: str) -> None:
    run_id = fake.add_run(REPO, workflow)
    fake.add_artifact(run_id, "report", b"x" * 4096)

    with pytest.raises(ArtifactTooLargeError, match="4096 bytes; the limit is 1024"):
        gh.download_artifact(run_id, "report", max_bytes=1024)
    assert fake.calls_to("GET", r"/zip$") == [] and fake.calls_to("GET", r"^/_blobs/") == []
    assert gh.download_artifact(run_id, "report", max_bytes=4096) == b"x" * 4096


# ----------------------------------------------------------------- authentication


def test_app_installation_token_is_minted_once_and_reused(
    fake: FakeGitHub, sleeper: Sleeper, app_key: tuple[str, str], history: History
) -> None:
    gh = gateway(fake.url, sleeper, AppAuth(app_id=APP_ID, private_key=SecretStr(app_key[0])))

    gh.pull(7)
    comment = gh.create_comment(7, "from the app")
    gh.create_check_run(history.c4, "kv-parity", "c-1")
    gh.read_file("bench.toml", "main")

    assert comment.author_login == "kv-parity[bot]"
    assert len(fake.calls_to("GET", r"/installation$")) == 1
    (mint,) = fake.calls_to("POST", r"^/app/installations/77/access_tokens$")
    assert mint.headers["authorization"].startswith("Bearer ")
    tokens = {
        c.headers["authorization"]
        for c in fake.calls
        if c.path.startswith("/repos/") and "installation" not in c.path
    }
    assert len(tokens) == 1 and tokens.pop().startswith("token ghs_")


def test_app_installation_token_is_refreshed_near_expiry(
    history: History, sleeper: Sleeper, app_key: tuple[str, str]
) -> None:
    with FakeGitHub(token_ttl=timedelta(seconds=10)) as short_lived:  # inside PyGithub's 20 s margin
        seed(short_lived, history, app_key[1])
        auth = AppAuth(app_id=APP_ID, private_key=SecretStr(app_key[0]), installation_id=INSTALLATION_ID)
        gh = gateway(short_lived.url, sleeper, auth)

        gh.pull(7)
        gh.pull(7)

        assert len(short_lived.calls_to("POST", r"/access_tokens$")) == 2


def test_app_with_wrong_key_is_refused(fake: FakeGitHub, sleeper: Sleeper) -> None:
    other, _ = rsa_key_pair()
    gh = gateway(fake.url, sleeper, AppAuth(app_id=APP_ID, private_key=SecretStr(other), installation_id=77))

    with pytest.raises(GitHubAuthError):
        gh.pull(7)

    assert len(fake.calls) == 1 and sleeper.waits == []


def test_bad_token_is_a_clear_auth_error(fake: FakeGitHub, sleeper: Sleeper) -> None:
    gh = gateway(fake.url, sleeper, TokenAuth(token=SecretStr("ghp_wrong")))

    with pytest.raises(GitHubAuthError, match="HTTP 401 Bad credentials") as raised:
        gh.pull(7)

    assert raised.value.status == 401
    assert len(fake.calls) == 1 and sleeper.waits == []
    assert "ghp_wrong" not in repr(TokenAuth(token=SecretStr("ghp_wrong")))


def test_authenticated_login(fake: FakeGitHub, sleeper: Sleeper, app_gh: GitHubGateway) -> None:
    assert gateway(fake.url, sleeper).authenticated_login() == "maintainer"
    assert app_gh.authenticated_login() == "kv-parity[bot]"
    assert app_gh.authenticated_login() == "kv-parity[bot]"
    assert len(fake.calls_to("GET", r"^/app$")) == 1

    configured = gateway(
        fake.url, sleeper, TokenAuth(token=SecretStr("ghs_actions_token")), bot_login="github-actions[bot]"
    )
    calls_before = len(fake.calls)
    assert configured.authenticated_login() == "github-actions[bot]"
    assert len(fake.calls) == calls_before


def test_installation_token_cannot_read_user(fake: FakeGitHub, sleeper: Sleeper) -> None:
    gh = gateway(fake.url, sleeper, TokenAuth(token=SecretStr("ghs_actions_token")))

    with pytest.raises(GitHubError) as raised:
        gh.authenticated_login()

    assert raised.value.status == 403


# ----------------------------------------------------------------- the service's metrics (issue 38)


def test_the_gateway_counts_its_calls_errors_retries_and_the_rate_limit(
    fake: FakeGitHub, sleeper: Sleeper, tmp_path: Path
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from bot.metrics import ServiceMetrics
    from bot.settings import Settings
    from bot.store.campaigns import Store

    settings = Settings(webhook_secret="s", token="t", local_repo_path=tmp_path, db_path=tmp_path / "db.sqlite3")
    metrics = ServiceMetrics(Store(settings.db_path), settings, "local")
    gh = gateway(fake.url, sleeper, observer=metrics, max_wait=10)

    def samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = metrics.exposition().decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples
                if s.name.startswith("kv_parity_github")}

    repo = (("repo", REPO),)
    gh.pull(7)
    assert samples() == {("kv_parity_github_calls_total", repo): 1,
                         ("kv_parity_github_rate_limit_remaining", repo): 4999,
                         ("kv_parity_github_rate_limit", repo): 5000}
    fake.inject_failures("GET", r"/pulls/7$", [(502, {}, {"message": "Bad Gateway"})])
    gh.pull(7)
    fake.inject_failures("GET", r"/pulls/7$", [(404, {}, {"message": "Not Found"})])
    with pytest.raises(GitHubNotFoundError):
        gh.pull(7)
    fake.inject_failures("GET", r"/pulls/7$", [secondary_rate_limit(retry_after=90)])
    with pytest.raises(GitHubRetryLaterError):
        gh.pull(7)
    with pytest.raises(GitHubRetryLaterError):
        gh.pull(7)  # refused without a request while GitHub asked to wait: not a call
    assert samples() == {("kv_parity_github_calls_total", repo): 4,
                         ("kv_parity_github_retries_total", (("reason", "unavailable"), *repo)): 1,
                         ("kv_parity_github_errors_total", (("kind", "not_found"), *repo)): 1,
                         ("kv_parity_github_errors_total", (("kind", "retry_later"), *repo)): 1,
                         ("kv_parity_github_rate_limit_remaining", repo): 4998,  # injected answers are not counted
                         ("kv_parity_github_rate_limit", repo): 5000}
    assert sleeper.waits == [1.0]
