"""Test helpers for the webhook service: payload builders, signing, a service thread, a recording publisher,
and two programs run as real subprocesses (`python -m tests.webhooks campaign|serve`).

`campaign` is a stand-in for `kv-parity campaign` honouring the local backend's argv contract: it records
its argv and pid, emits progress, optionally spawns a grandchild and waits for a file to appear, then
writes a valid report.json built through the real pydantic models. `serve` runs the real service
(bot.service.app.run_server) with the recording publisher writing JSON lines, for kill-and-restart tests.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import hmac
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runners.progress import JsonlProgress, emit
from runners.schema.report import CampaignReport, Revision

if TYPE_CHECKING:  # imported where they are used: the stand-in runner, started per service campaign, needs none
    import httpx
    from starlette.applications import Starlette

SECRET = "s3cret-webhook"
REPO = "acme/widgets"

CONFIG_TOML = """\
[build]
command = ["cargo", "build", "--release", "-p", "dynamo-bench", "--no-default-features",
           "--features", "replay-bench", "--bench", "offline_replay_bench"]
features = ["replay-bench"]

[trace]
path = "/srv/traces/mooncake_trace.jsonl"
sha256 = "b434f1816a707f4bac697235588184ebc374c9907cb981bb65fb0643471fe711"
offset = 0
count = 5000

[[rows]]
id = "vllm-agg"
args = ["--engine-type", "vllm"]
expect = { pressure = [10, 20] }

[[rows]]
id = "vllm-disagg"
args = ["--serving-mode", "disagg", "--engine-type", "vllm"]
expect = { pressure = [10, 20], handoff = true }
"""
"""A valid campaign config with two rows, committed at the base revision of test repositories."""


# ----------------------------------------------------------------- payloads


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _user(login: str, kind: str = "User") -> dict[str, Any]:
    """A webhook `user`, with the id the GitHub stand-in gives that login (so payloads and API agree).

    Imported here, not at the top: the stand-in runner (`python -m tests.webhooks campaign`) must start fast,
    and the GitHub stand-in's module loads GitHub's OpenAPI description."""
    from tests.fakes.github_api import user_id

    return {"login": login, "id": user_id(login), "type": "Bot" if login.endswith("[bot]") else kind}


def full_user(login: str) -> dict[str, Any]:
    """A webhook `sender` / `owner` with every field GitHub's webhook schemas require."""
    from tests.fakes.github_api import user_id

    api = f"https://api.github.com/users/{login}"
    return {
        "login": login,
        "id": user_id(login),
        "node_id": f"U_{login}",
        "avatar_url": f"https://avatars.githubusercontent.com/u/{user_id(login)}?v=4",
        "gravatar_id": "",
        "url": api,
        "html_url": f"https://github.com/{login}",
        "followers_url": f"{api}/followers",
        "following_url": f"{api}/following{{/other_user}}",
        "gists_url": f"{api}/gists{{/gist_id}}",
        "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{api}/subscriptions",
        "organizations_url": f"{api}/orgs",
        "repos_url": f"{api}/repos",
        "events_url": f"{api}/events{{/privacy}}",
        "received_events_url": f"{api}/received_events",
        "type": "Bot" if login.endswith("[bot]") else "User",
        "site_admin": False,
    }


_REPO_URLS = {
    "archive_url": "/{archive_format}{/ref}", "assignees_url": "/assignees{/user}", "blobs_url": "/git/blobs{/sha}",
    "branches_url": "/branches{/branch}", "collaborators_url": "/collaborators{/collaborator}",
    "comments_url": "/comments{/number}", "commits_url": "/commits{/sha}", "compare_url": "/compare/{base}...{head}",
    "contents_url": "/contents/{+path}", "contributors_url": "/contributors", "deployments_url": "/deployments",
    "downloads_url": "/downloads", "events_url": "/events", "forks_url": "/forks",
    "git_commits_url": "/git/commits{/sha}",
    "git_refs_url": "/git/refs{/sha}", "git_tags_url": "/git/tags{/sha}", "hooks_url": "/hooks",
    "issue_comment_url": "/issues/comments{/number}", "issue_events_url": "/issues/events{/number}",
    "issues_url": "/issues{/number}", "keys_url": "/keys{/key_id}", "labels_url": "/labels{/name}",
    "languages_url": "/languages", "merges_url": "/merges", "milestones_url": "/milestones{/number}",
    "notifications_url": "/notifications{?since,all,participating}", "pulls_url": "/pulls{/number}",
    "releases_url": "/releases{/id}", "stargazers_url": "/stargazers", "statuses_url": "/statuses/{sha}",
    "subscribers_url": "/subscribers", "subscription_url": "/subscription", "tags_url": "/tags", "teams_url": "/teams",
    "trees_url": "/git/trees{/sha}",
}


def full_repository(repo: str = REPO, *, private: bool = False) -> dict[str, Any]:
    """A webhook `repository` with every field GitHub's webhook schemas require."""
    owner, name = repo.split("/")
    api = f"https://api.github.com/repos/{repo}"
    return {
        "id": 17273051,
        "node_id": f"R_{name}",
        "name": name,
        "full_name": repo,
        "private": private,
        "owner": full_user(owner),
        "html_url": f"https://github.com/{repo}",
        "description": None,
        "fork": False,
        "url": api,
        **{key: api + suffix for key, suffix in _REPO_URLS.items()},
        "created_at": "2024-02-28T02:42:51Z",
        "updated_at": "2026-03-11T14:54:13Z",
        "pushed_at": "2026-03-11T14:54:10Z",
        "git_url": f"git://github.com/{repo}.git",
        "ssh_url": f"git@github.com:{repo}.git",
        "clone_url": f"https://github.com/{repo}.git",
        "svn_url": f"https://github.com/{repo}",
        "homepage": None,
        "size": 300,
        "stargazers_count": 0,
        "watchers_count": 0,
        "language": "Rust",
        "has_issues": True,
        "has_projects": False,
        "has_downloads": True,
        "has_wiki": False,
        "has_pages": False,
        "forks_count": 0,
        "mirror_url": None,
        "archived": False,
        "disabled": False,
        "open_issues_count": 1,
        "license": None,
        "forks": 0,
        "open_issues": 1,
        "watchers": 0,
        "default_branch": "main",
    }


def github_time(moment: float | None = None) -> str:
    """A timestamp as GitHub writes it in payloads (UTC, whole seconds); now by default."""
    when = datetime.now(UTC) if moment is None else datetime.fromtimestamp(moment, UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def pull_request_event(
    action: str,
    *,
    number: int = 1,
    head_sha: str,
    base_sha: str,
    sender: str = "maintainer",
    label: str | None = None,
    labels: tuple[str, ...] = (),
    fork: bool = False,
    state: str = "open",
    repo: str = REPO,
) -> dict[str, Any]:
    head_repo = "contributor/widgets" if fork else repo
    payload: dict[str, Any] = {
        "action": action,
        "number": number,
        "pull_request": {
            "number": number,
            "state": state,
            "title": "Change the replay loop",
            "user": _user("contributor"),
            "head": {"ref": "feature", "sha": head_sha, "repo": {"full_name": head_repo}},
            "base": {"ref": "main", "sha": base_sha, "repo": {"full_name": repo}},
            "labels": [{"name": name} for name in labels],
        },
        "sender": _user(sender),
        "repository": {"full_name": repo},
    }
    if label is not None:
        payload["label"] = {"name": label}
    return payload


def comment_event(
    body: str,
    *,
    number: int = 1,
    sender: str = "maintainer",
    action: str = "created",
    on_pull: bool = True,
    repo: str = REPO,
    created_at: str | None = None,
    comment_id: int = 555,
) -> dict[str, Any]:
    issue: dict[str, Any] = {"number": number, "title": "Change the replay loop"}
    if on_pull:
        issue["pull_request"] = {"url": f"https://api.github.com/repos/{repo}/pulls/{number}"}
    comment = {
        "id": comment_id,
        "body": body,
        "user": _user(sender),
        "created_at": created_at or github_time(),
        "html_url": f"https://github.com/{repo}/pull/{number}#issuecomment-{comment_id}",
    }
    return {
        "action": action,
        "issue": issue,
        "comment": comment,
        "sender": _user(sender),
        "repository": {"full_name": repo},
    }


def check_suite_event(
    action: str,
    *,
    suite_id: int,
    head_sha: str,
    sender: str = "maintainer",
    pulls: tuple[int, ...] = (1,),
    repo: str = REPO,
    app_id: int = 4242,
) -> dict[str, Any]:
    """A `check_suite` delivery shaped like GitHub's (the fields of its webhook schema the bot and a reader see)."""
    owner = repo.split("/")[0]
    return {
        "action": action,
        "check_suite": {
            "id": suite_id,
            "node_id": f"CS_{suite_id}",
            "head_branch": "feature",
            "head_sha": head_sha,
            "status": "completed",
            "conclusion": "failure",
            "url": f"https://api.github.com/repos/{repo}/check-suites/{suite_id}",
            "before": None,
            "after": head_sha,
            "pull_requests": [
                {
                    "url": f"https://api.github.com/repos/{repo}/pulls/{n}",
                    "id": 1000 + n,
                    "number": n,
                    "head": {"ref": "feature", "sha": head_sha, "repo": _repo_ref(repo)},
                    "base": {"ref": "main", "sha": "0" * 40, "repo": _repo_ref(repo)},
                }
                for n in pulls
            ],
            "app": {
                "id": app_id,
                "slug": "kv-parity",
                "node_id": f"A_{app_id}",
                "owner": full_user(owner),
                "name": "kv-parity",
                "description": "Replay parity campaigns",
                "external_url": "https://example.com/kv-parity",
                "html_url": "https://github.com/apps/kv-parity",
                "created_at": "2026-01-01T00:00:00Z",
                "updated_at": "2026-01-01T00:00:00Z",
            },
            "created_at": github_time(),
            "updated_at": github_time(),
            "rerequestable": True,
            "runs_rerequestable": True,
            "latest_check_runs_count": 1,
            "check_runs_url": f"https://api.github.com/repos/{repo}/check-suites/{suite_id}/check-runs",
            "head_commit": _head_commit(head_sha),
        },
        "sender": full_user(sender),
        "repository": full_repository(repo),
    }


def _repo_ref(repo: str) -> dict[str, Any]:
    return {"id": 17273051, "url": f"https://api.github.com/repos/{repo}", "name": repo.split("/")[1]}


def _head_commit(sha: str) -> dict[str, Any]:
    person = {"name": "Test", "email": "t@example.com"}
    return {
        "id": sha,
        "tree_id": "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
        "message": "Merge the queue",
        "timestamp": github_time(),
        "author": person,
        "committer": person,
    }


def merge_group_event(
    action: str,
    *,
    head_sha: str,
    base_sha: str,
    number: int,
    base: str = "main",
    reason: str | None = None,
    repo: str = REPO,
    sender: str = "maintainer",
) -> dict[str, Any]:
    """A `merge_group` delivery shaped like GitHub's: `head_ref` is the queue's branch for pull request `number`."""
    payload: dict[str, Any] = {
        "action": action,
        "merge_group": {
            "head_sha": head_sha,
            "head_ref": f"refs/heads/gh-readonly-queue/{base}/pr-{number}-{base_sha}",
            "base_sha": base_sha,
            "base_ref": f"refs/heads/{base}",
            "head_commit": _head_commit(head_sha),
        },
        "repository": full_repository(repo),
        "sender": full_user(sender),
    }
    if reason is not None:
        payload["reason"] = reason
    return payload


def check_run_event(
    action: str,
    *,
    external_id: str,
    head_sha: str,
    sender: str = "maintainer",
    identifier: str | None = None,
    pulls: tuple[int, ...] = (1,),
    repo: str = REPO,
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "action": action,
        "check_run": {
            "id": 9001,
            "name": "kv-parity",
            "external_id": external_id,
            "head_sha": head_sha,
            "pull_requests": [{"number": n} for n in pulls],
        },
        "sender": _user(sender),
        "repository": {"full_name": repo},
    }
    if identifier is not None:
        payload["requested_action"] = {"identifier": identifier}
    return payload


def push_event(
    *,
    after: str,
    before: str,
    ref: str = "refs/heads/main",
    sender: str = "maintainer",
    repo: str = REPO,
    default_branch: str = "main",
    message: str = "Merge pull request #5 from contributor/feature",
    deleted: bool = False,
    installation_id: int | None = 77,
) -> dict[str, Any]:
    """A `push` delivery with the field shapes of GitHub's documented example (octokit/webhooks
    payload-examples/api.github.com/push): the ref, `before` and `after` SHAs, the pushed commits and
    `head_commit`, the repository as push payloads carry it (`default_branch`, `master_branch`, unix
    `created_at` and `pushed_at`), the git-level `pusher`, the `sender` and the App `installation`. A deleted ref
    has `after` all zeros, no commits and no `head_commit`."""
    owner = repo.split("/")[0]
    zeros = "0" * 40
    after = zeros if deleted else after
    person = {"name": sender, "email": f"{sender}@users.noreply.github.com", "username": sender}
    commit = {
        "id": after, "tree_id": hashlib.sha1(f"tree {after}".encode()).hexdigest(), "distinct": True,
        "message": message, "timestamp": "2026-12-06T10:00:00Z",
        "url": f"https://github.com/{repo}/commit/{after}", "author": person, "committer": person,
        "added": [], "removed": [], "modified": ["src/lib.rs"],
    }
    now = int(time.time())
    payload: dict[str, Any] = {
        "ref": ref, "before": before, "after": after, "created": before == zeros, "deleted": deleted,
        "forced": False, "base_ref": None,
        "compare": f"https://github.com/{repo}/compare/{before[:12]}...{after[:12]}",
        "commits": [] if deleted else [commit], "head_commit": None if deleted else commit,
        "repository": {
            "id": 186853002, "node_id": "R_kgDOLZ7UCg", "name": repo.split("/")[1], "full_name": repo,
            "private": False, "owner": {"name": owner, "email": None, **_user(owner)},
            "html_url": f"https://github.com/{repo}", "description": None, "fork": False,
            "url": f"https://github.com/{repo}", "created_at": now - 86400, "updated_at": github_time(),
            "pushed_at": now, "default_branch": default_branch, "master_branch": default_branch,
            "visibility": "public",
        },
        "pusher": {"name": sender, "email": f"{sender}@users.noreply.github.com"},
        "sender": _user(sender),
    }
    if installation_id is not None:
        payload["installation"] = {"id": installation_id, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uNzc="}
    return payload


def post(
    base_url: str,
    event: str,
    payload: dict[str, Any] | bytes,
    *,
    delivery: str | None = None,
    secret: str = SECRET,
    signature: str | None = None,
) -> httpx.Response:
    """POST a delivery the way GitHub does (signed unless `signature` overrides it)."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(body, secret) if signature is None else signature,
    }
    if signature == "":
        del headers["X-Hub-Signature-256"]
    return loopback().post(f"{base_url}/webhook", content=body, headers=headers, timeout=10)


@functools.cache
def loopback() -> httpx.Client:
    """One client for every request a test sends to a server on 127.0.0.1: httpx builds a TLS context for each
    client it makes (the CA bundle loaded: about 25 ms of CPU), and `httpx.get`/`post` make one per call, though
    these requests never use TLS. No connection is kept alive, since a test's servers come and go."""
    import httpx  # not at module level: the stand-in programs below import this module and never send

    return httpx.Client(verify=False, trust_env=False, limits=httpx.Limits(max_keepalive_connections=0))


# ----------------------------------------------------------------- waiting and serving


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Poll a real condition until it holds; fail after `timeout` seconds saying what never happened. The bound
    only ends a hang: a suite once saw this VM's disk stall for 30 s (both cores in I/O wait), and a service
    starting then answered /healthz after more than the 20 s this bound used to be."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for: {what}")
        time.sleep(0.02)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def serve_app(app: Starlette) -> Iterator[str]:
    """Run an ASGI app (with its lifespan) under uvicorn on 127.0.0.1 in a thread; yields its base URL."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started, "service started", timeout=10)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


# ----------------------------------------------------------------- recording publisher


class RecordingPublisher:
    """Records every call the lifecycle makes (and optionally appends it to a JSONL file)."""

    def __init__(self, record: Path | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.record = record
        self._lock = threading.Lock()
        self.check_runs: dict[str, int] = {}

    def _add(self, method: str, **fields: Any) -> None:
        entry = {"method": method, **fields}
        with self._lock:
            self.calls.append(entry)
            if self.record is not None:
                with self.record.open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps(entry, default=str) + "\n")

    def _check_run(self, campaign: Any) -> int:
        """The check run a real publisher would write: one per campaign, numbered as they are first written."""
        with self._lock:
            if campaign.id not in self.check_runs:
                self.check_runs[campaign.id] = len(self.check_runs) + 1
            return self.check_runs[campaign.id]

    def queued(self, campaign: Any, position: int, *, details_url: str | None = None) -> int:
        self._add("queued", campaign=campaign.id, position=position)
        return self._check_run(campaign)

    def progress(self, campaign: Any, event: Any, *, details_url: str | None = None) -> None:
        self._add("progress", campaign=campaign.id, stage=event.stage)

    def waiting(self, campaign: Any, *, details_url: str | None = None) -> None:
        self._add("waiting", campaign=campaign.id, waiting=campaign.scheduler_wait)

    def finished(
        self, campaign: Any, report: CampaignReport, artifact_dir: Path, *, prior_attempts: list[Any],
        details_url: str | None = None,
    ) -> int:
        conclusion = report.verdicts.conclusion.value if report.verdicts else None
        summary = report.verdicts.summary if report.verdicts else None
        prior = [attempt.model_dump(mode="json") for attempt in prior_attempts]
        self._add(
            "finished", campaign=campaign.id, conclusion=conclusion, summary=summary, artifact_dir=str(artifact_dir),
            prior=prior,
        )
        return self._check_run(campaign)

    def ended(self, campaign: Any, state: str, reason: str, *, details_url: str | None = None) -> int:
        self._add("ended", campaign=campaign.id, state=state, reason=reason)
        return self._check_run(campaign)

    def reply(self, number: int, kind: str, **context: Any) -> None:
        self._add("reply", number=number, kind=kind, context={k: str(v) for k, v in context.items()})

    def of(self, method: str, **match: Any) -> list[dict[str, Any]]:
        with self._lock:
            return [c for c in self.calls if c["method"] == method and all(c.get(k) == v for k, v in match.items())]


def read_record(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ----------------------------------------------------------------- subprocess programs


@functools.cache
def _pass_report_json() -> str:
    from tests.report_factory import make_report

    return make_report("pass").model_dump_json()


def stand_in_flags(record: Path) -> list[str]:
    """The stand-in runner's test flags, recording into `record`. The report it writes is a template built once
    per test process and written beside `record`: the factory computes a real report's statistics, which each of
    the suite's runner starts would otherwise repeat."""
    template = record.parent / "stand-in-report.json"
    template.write_text(_pass_report_json(), encoding="utf-8")
    return ["--record", str(record), "--report-template", str(template)]


def stand_in_runner(record: Path) -> list[str]:
    """Argv of the stand-in runner (`stand_in_flags`), before the `kv-parity campaign` flags a backend adds."""
    return [sys.executable, "-m", "tests.webhooks", "campaign", *stand_in_flags(record)]


def _campaign(argv: list[str]) -> int:
    """The stand-in runner: same flags as `kv-parity campaign`, plus test knobs before them."""
    parser = argparse.ArgumentParser(prog="stand-in campaign")
    parser.add_argument("--sandbox", choices=["bwrap", "none"], required=True)
    parser.add_argument("--repo", required=True)
    parser.add_argument("--base", required=True)
    parser.add_argument("--head", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--config-ref")
    parser.add_argument("--config-source", required=True)
    parser.add_argument("--rows")
    parser.add_argument("--profile-only", action="store_true")
    parser.add_argument("--build-cache")
    parser.add_argument("--out", required=True)
    parser.add_argument("--campaign-id", required=True)
    parser.add_argument("--progress-jsonl", required=True)
    parser.add_argument("--record", help="append this run's argv and pids as JSON")
    parser.add_argument("--report-template", required=True, help="the valid report to write (stand_in_runner)")
    parser.add_argument("--hold-until", help="wait for this file to exist before finishing")
    parser.add_argument("--grandchild", action="store_true", help="spawn a long-lived child process")
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--row-progress", action="store_true", help="report determinism and performance per row")
    args = parser.parse_args(argv)
    child = None
    if args.grandchild:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    if args.record:
        entry = {
            "argv": argv,
            "pid": os.getpid(),
            "child": child.pid if child else None,
            "config": Path(args.config).read_text(),
            "cwd": str(Path.cwd()),
        }
        with open(args.record, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")
    progress = JsonlProgress(Path(args.progress_jsonl))
    emit(progress, "build", "building both revisions")
    if args.hold_until:
        while not Path(args.hold_until).exists():
            time.sleep(0.02)
    if args.row_progress:
        from runners.schema.config import parse_config, parse_rows

        chosen = parse_rows(args.rows)
        for row in parse_config(Path(args.config).read_text(), args.config).rows:
            if chosen is None or row.id in chosen:
                emit(progress, "determinism", "2 + 2 fresh processes", row=row.id)
                emit(progress, "performance", "pairs", row=row.id, done=0, total=60)
    emit(progress, "report", "writing the report")
    if not args.no_report:
        template = CampaignReport.model_validate_json(Path(args.report_template).read_text(encoding="utf-8"))
        report = template.model_copy(
            update={
                "campaign_id": args.campaign_id,
                "config_source": args.config_source,
                "revisions": [
                    Revision(arm="baseline", sha=args.base, requested=args.base),
                    Revision(arm="candidate", sha=args.head, requested=args.head),
                ],
            }
        )
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json.tmp").write_text(report.model_dump_json(indent=1))
        (out / "report.json.tmp").replace(out / "report.json")
    if child is not None:
        child.kill()
        child.wait()
    return int(args.exit_code)


def _serve(argv: list[str]) -> int:
    """The real service with a recording publisher (settings from $KV_PARITY_SETTINGS)."""
    from bot.service.app import run_server
    from bot.settings import load_settings

    parser = argparse.ArgumentParser(prog="recording service")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", type=Path, required=True)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    publisher = RecordingPublisher(args.record)
    run_server(
        load_settings(),
        "127.0.0.1",
        args.port,
        publisher_factory=lambda gateway, s: publisher,
        log_level=args.log_level,
    )
    return 0


if __name__ == "__main__":
    command, rest = sys.argv[1], sys.argv[2:]
    sys.exit(_campaign(rest) if command == "campaign" else _serve(rest))


def rsa_key_pair() -> tuple[str, str]:
    """(private PKCS8 PEM, public PEM) of a fresh 2048-bit key, for GitHub App credentials in tests."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    return private, public


def register_test_app(fake: Any, directory: Path, app_id: int = 4242, installation_id: int = 77) -> dict[str, Any]:
    """A GitHub App known to the stand-in (check runs need app credentials); returns the settings that use it."""
    private, public = rsa_key_pair()
    fake.register_app(app_id, public, "kv-parity")
    fake.add_installation(installation_id, app_id, [REPO])
    (directory / "app.pem").write_text(private)
    return {"token": None, "app_id": app_id, "private_key_path": directory / "app.pem",
            "installation_id": installation_id}


def git(repo: Path, *args: str) -> str:
    """git in a test repository, with a fixed identity; returns stdout."""
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=Test", "-c", "user.email=t@example.com", *args],
        capture_output=True,
        check=True,
        text=True,
    )
    return done.stdout.strip()


def commit(repo: Path, files: dict[str, str] | dict[str, bytes], message: str) -> str:
    """Write `files` (text or bytes) and commit them; returns the new SHA."""
    for name, content in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (repo / name).write_bytes(content)
        else:
            (repo / name).write_text(content)
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", message)
    return git(repo, "rev-parse", "HEAD")
