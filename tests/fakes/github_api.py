"""A stateful stand-in for the slice of the GitHub REST and GraphQL APIs the bot uses.

It is served over real HTTP on 127.0.0.1 so the gateway runs unmodified (PyGithub, requests,
tenacity) and it enforces the validation GitHub enforces on those endpoints, so a payload the
stand-in accepts is one GitHub would accept too.

Behaviour decisions, where GitHub is ambiguous or where the stand-in simplifies:

* Auth: every route needs ``Authorization: token X`` / ``Bearer X`` with a token registered via
  ``add_token``/``add_installation_token`` or minted from ``POST .../access_tokens``; a missing
  header is 401 "Requires authentication", an unknown or expired token 401 "Bad credentials".
  App routes (``/app``, ``.../access_tokens``, ``.../installation``) need an RS256 app JWT; a JWT
  on any other route is 403 "Resource not accessible by integration", as is ``GET /user`` with an
  installation token. Installation tokens only see their installation's repositories (404 others).
* Check runs can only be created by GitHub Apps (403 otherwise); ``waiting``/``requested``/
  ``pending`` are valid enum values only GitHub Actions may set, so they are rejected (422); a
  ``conclusion`` forces ``status`` to ``completed``; the output title has no documented limit and
  is not limited here. ``action_required`` needs a ``details_url`` (given now or earlier): GitHub's
  description of ``conclusion`` said "when the conclusion is `action_required`, additional details should
  be provided on the site specified by `details_url`" (the pinned description's text no longer says it;
  the stand-in is the stricter of the two), so it answers 422 naming ``details_url``.
* Collaborator permission of a non-collaborator is ``read`` on public repositories and ``none``
  on private ones (never 404). ``permission`` is the legacy level (maintain -> write,
  triage -> read), ``role_name`` the real role, as on GitHub.
* ``contents`` and ``compare`` are answered from a real git repository (``add_repo(git_dir=...)``)
  and are 404 for repositories registered without one. Files over 1 MiB come back with
  ``encoding: "none"`` like GitHub, to be read through ``git/blobs``. ``compare`` lists the changed files
  (merge base to head, at most 300, as GitHub) with their status and names but no line counts or patch.
* Workflow dispatch needs the workflow registered via ``add_workflow``; each accepted dispatch
  immediately creates a ``queued`` run (GitHub creates it a little later). Artifact downloads
  redirect (302) to a pre-signed blob URL on this server that needs no Authorization, as on
  GitHub where the blob lives on another host. A workflow's ``run_name`` renders
  ``${{ inputs.NAME }}`` (and nothing else) into the run's ``display_title``.
* Jobs of a run are seeded with ``add_job`` and listed for the latest attempt only; a job's
  annotations are served from ``check-runs/{job id}/annotations`` as on GitHub, where every job is
  a check run. Cancelling a run that is not completed answers 202 and completes it (GitHub gets
  there a little later) with its unfinished jobs cancelled; a completed run answers 409.
* Injected failures (``inject_failures``) are answered before authentication and routing, so
  they model trouble in front of the API; every request, answered or not, lands in ``calls``.
* User ids are a stable function of the login (``user_id``), so webhook payloads a test builds carry
  the ids the API answers with; ``github-actions[bot]`` is 41898282 as on github.com. ``GET
  /users/{login}`` answers for any login (the stand-in has no user directory).
* Every request it accepts and every answer it gives is checked against GitHub's published OpenAPI
  description (tests/fakes/openapi.py); fields of an answer the stand-in does not model are filled in
  from GitHub's documented example of that answer. Departures fail the test (``check_conformance``,
  run by ``reset`` and on exit).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import math
import operator
import re
import secrets
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, NamedTuple, Self
from urllib.parse import urlencode

import jwt
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.openapi import github_openapi

DOCS_URL = "https://docs.github.com/rest"
CHECK_STATUSES = ("queued", "in_progress", "completed", "waiting", "requested", "pending")
ACTIONS_ONLY_STATUSES = ("waiting", "requested", "pending")
CHECK_CONCLUSIONS = (
    "action_required",
    "cancelled",
    "failure",
    "neutral",
    "success",
    "skipped",
    "stale",
    "timed_out",
)
MINIMIZE_CLASSIFIERS = ("ABUSE", "DUPLICATE", "OFF_TOPIC", "OUTDATED", "RESOLVED", "SPAM")
ROLES = ("admin", "maintain", "write", "triage", "read", "none")
LEGACY_PERMISSION = {"maintain": "write", "triage": "read"}
MAX_CHECK_TEXT = 65535
MAX_COMMENT_BODY = 65536
MAX_DISPATCH_INPUTS = 25
CONTENTS_INLINE_LIMIT = 1024 * 1024
COMPARE_FILES_LIMIT = 300
"""GitHub's compare answer lists at most the first 300 changed files (from the merge base to the head)."""
RATE_LIMIT = 5000
"""Requests an hour a credential may make (GitHub's primary limit for a token), reported in every answer's headers."""

InjectedResponse = tuple[int, Mapping[str, str], Any]
AuthKind = Literal["token", "jwt", "none"]


class Call(NamedTuple):
    """One request as the stand-in saw it.

    ``path`` excludes the query string, ``body`` is the parsed JSON (raw text when it did not
    parse, None when empty) and header names are lower-cased.
    """

    method: str
    path: str
    body: Any
    headers: dict[str, str]


def secondary_rate_limit(retry_after: int | None, status: int = 403) -> InjectedResponse:
    """The response GitHub sends when a client trips the secondary rate limit."""
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    message = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
    return (status, headers, {"message": message, "documentation_url": DOCS_URL})


class _HTTPError(Exception):
    """Raised by handlers to answer with a GitHub-shaped error body."""

    def __init__(
        self,
        status: int,
        message: str,
        errors: list[dict[str, str]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body: dict[str, Any] = {"message": message, "documentation_url": DOCS_URL}
        if errors:
            self.body["errors"] = errors
        self.headers = dict(headers or {})

    def response(self) -> Response:
        return JSONResponse(self.body, status_code=self.status, headers=self.headers)


def _permission_flags(role: str) -> dict[str, bool]:
    """The collaborator's `permissions` booleans for a role, as GitHub derives them."""
    rank = ROLES[::-1].index(role) if role in ROLES else 0
    return {
        flag: rank >= ROLES[::-1].index(least)
        for flag, least in (
            ("pull", "read"), ("triage", "triage"), ("push", "write"), ("maintain", "maintain"), ("admin", "admin")
        )
    }


def _not_found() -> _HTTPError:
    return _HTTPError(404, "Not Found")


def _invalid(resource: str, field_name: str, code: str, message: str) -> _HTTPError:
    error = {"resource": resource, "field": field_name, "code": code, "message": message}
    return _HTTPError(422, "Validation Failed", [error])


ACTIONS_BOT_ID = 41898282


def user_id(login: str) -> int:
    """The numeric id GitHub gives ``login`` in this stand-in (logins are case-insensitive, ids are not)."""
    if login.lower() == "github-actions[bot]":
        return ACTIONS_BOT_ID
    return 10_000_000 + int(hashlib.sha1(login.lower().encode()).hexdigest()[:8], 16) % 90_000_000


def _timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@dataclass(frozen=True)
class _Identity:
    login: str
    kind: Literal["user", "installation", "app"]
    app_id: int | None = None
    installation_id: int | None = None
    expires_at: datetime | None = None


@dataclass(frozen=True)
class _App:
    id: int
    slug: str
    public_key: str


@dataclass(frozen=True)
class _Installation:
    id: int
    app_id: int
    repos: frozenset[str]


@dataclass
class _Pull:
    number: int
    head_sha: str
    head_ref: str
    base_ref: str
    base_sha: str
    head_repo: str
    user: str
    labels: list[str]
    state: str
    title: str
    created_at: datetime
    merge_commit_sha: str | None = None
    """Set for a merged pull request (`add_pull(..., merge_commit_sha=)`): `commits/{sha}/pulls` finds it."""


@dataclass
class _Issue:
    number: int
    title: str
    body: str
    user: str
    labels: list[str]
    state: str
    created_at: datetime


@dataclass
class _Comment:
    id: int
    node_id: str
    number: int
    body: str
    user: str
    created_at: datetime
    updated_at: datetime
    minimized_reason: str | None = None


@dataclass(frozen=True)
class _Workflow:
    id: int
    file_name: str
    name: str
    inputs: frozenset[str] | None
    required_inputs: frozenset[str]
    run_name: str | None = None


class _Git:
    """Answers repository questions from a real on-disk git repository."""

    def __init__(self, git_dir: Path) -> None:
        self._dir = git_dir

    def _run(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["git", "-C", str(self._dir), *args], capture_output=True, check=False)

    def commit(self, ref: str) -> str | None:
        """The commit sha ``ref`` names, or None; refs that look like options are never passed on."""
        if not ref or ref.startswith("-"):
            return None
        done = self._run("rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
        return done.stdout.decode().strip() if done.returncode == 0 else None

    def object_type(self, spec: str) -> str | None:
        done = self._run("cat-file", "-t", spec)
        return done.stdout.decode().strip() if done.returncode == 0 else None

    def rev_parse(self, spec: str) -> str:
        return self._run("rev-parse", "--verify", spec).stdout.decode().strip()

    def blob(self, spec: str) -> bytes:
        return self._run("cat-file", "blob", spec).stdout

    def tree(self, spec: str) -> list[tuple[str, str, str, int, str]]:
        """Entries of a tree as (mode, type, sha, size, name)."""
        entries = []
        for record in self._run("ls-tree", "-z", "--long", spec).stdout.decode().split("\0"):
            if not record:
                continue
            meta, name = record.split("\t", 1)
            mode, kind, sha, size = meta.split()
            entries.append((mode, kind, sha, int(size) if size != "-" else 0, name))
        return entries

    def merge_base(self, base: str, head: str) -> str | None:
        done = self._run("merge-base", base, head)
        return done.stdout.decode().strip() if done.returncode == 0 else None

    def changed_files(self, base: str, head: str) -> list[tuple[str, str, str | None]]:
        """(GitHub's status, path, path before a rename) of every file that differs between two commits, by name."""
        statuses = {"A": "added", "D": "removed", "M": "modified", "R": "renamed", "C": "copied", "T": "changed"}
        fields = self._run("diff", "--name-status", "-z", "-M", base, head, "--").stdout.decode().split("\0")
        found: list[tuple[str, str, str | None]] = []
        while len(fields) > 1:
            code = fields.pop(0)
            if code[:1] in ("R", "C"):
                before, after = fields.pop(0), fields.pop(0)
                found.append((statuses[code[0]], after, before))
            else:
                found.append((statuses[code[:1]], fields.pop(0), None))
        return sorted(found, key=lambda entry: entry[1])

    def count(self, revision_range: str) -> int:
        return int(self._run("rev-list", "--count", revision_range).stdout.decode().strip())

    def refs(self, prefix: str) -> list[tuple[str, str]]:
        """(ref, commit sha) of every ref under `refs/<prefix>` whose full name starts with it, sorted by name."""
        directory = f"refs/{prefix.rsplit('/', 1)[0]}"
        done = self._run("for-each-ref", "--format=%(refname)%09%(objectname)", "--", directory)
        found = [tuple(line.split("\t", 1)) for line in done.stdout.decode().splitlines() if "\t" in line]
        return sorted((ref, sha) for ref, sha in found if ref.startswith(f"refs/{prefix}"))

    def commits(self, *revisions: str, limit: int) -> list[dict[str, str]]:
        """Commit metadata, oldest first."""
        fmt = "%H%x1f%an%x1f%ae%x1f%aI%x1f%cn%x1f%ce%x1f%cI%x1f%P%x1f%B%x1e"
        done = self._run("log", "--reverse", f"--format={fmt}", f"--max-count={limit}", *revisions, "--")
        keys = ("sha", "author", "email", "date", "committer", "committer_email", "committed", "parents")
        commits = []
        for record in done.stdout.decode().split("\x1e"):
            record = record.lstrip("\n")
            if record:
                *values, message = record.split("\x1f")
                commits.append({**dict(zip(keys, values, strict=True)), "message": message.strip()})
        return commits


@dataclass
class _Repo:
    full_name: str
    id: int
    git: _Git | None
    default_branch: str
    private: bool
    pulls: dict[int, _Pull] = field(default_factory=dict)
    permissions: dict[str, str] = field(default_factory=dict)
    check_runs: dict[int, dict[str, Any]] = field(default_factory=dict)
    comments: dict[int, _Comment] = field(default_factory=dict)
    workflows: dict[str, _Workflow] = field(default_factory=dict)
    runs: dict[int, dict[str, Any]] = field(default_factory=dict)
    dispatches: list[dict[str, Any]] = field(default_factory=list)
    jobs: dict[int, dict[str, Any]] = field(default_factory=dict)
    job_annotations: dict[int, list[str]] = field(default_factory=dict)
    cancels: list[int] = field(default_factory=list)
    issues: dict[int, _Issue] = field(default_factory=dict)
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    """Repository labels by lower-cased name: name, color, description."""


@dataclass
class _Artifact:
    id: int
    repo: str
    run_id: int
    name: str
    data: bytes
    expired: bool
    created_at: datetime


@dataclass(frozen=True)
class _Ctx:
    identity: _Identity | None
    params: dict[str, str]
    query: dict[str, str]
    body: Any
    path: str


@dataclass(frozen=True)
class _Route:
    method: str
    pattern: re.Pattern[str]
    handler: str
    auth: AuthKind


_ROUTES: list[_Route] = []
_REPO = r"/repos/(?P<owner>[^/]+)/(?P<name>[^/]+)"


def _route(method: str, pattern: str, auth: AuthKind = "token") -> Callable[[Callable[..., Response]], Any]:
    def register(handler: Callable[..., Response]) -> Callable[..., Response]:
        _ROUTES.append(_Route(method, re.compile(pattern + r"\Z"), handler.__name__, auth))
        return handler

    return register


class _Server(uvicorn.Server):
    """uvicorn server that signals readiness instead of making callers poll ``started``."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


class FakeGitHub:
    """GitHub REST/GraphQL stand-in; use as a context manager to serve it on ``.url``."""

    def __init__(self, *, token_ttl: timedelta = timedelta(hours=1)) -> None:
        self._lock = threading.Lock()
        self._token_ttl = token_ttl
        self._blob_key = secrets.token_bytes(16)
        self.url = ""
        methods = ["GET", "POST", "PATCH", "PUT", "DELETE"]
        self.app = Starlette(routes=[Route("/{path:path}", self._endpoint, methods=methods)])
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.reset()

    def reset(self) -> None:
        """Forget all state and recorded calls, so one running server can serve many tests (after failing on
        any departure from GitHub's OpenAPI description the previous test caused)."""
        if hasattr(self, "violations"):
            self.check_conformance()
        with self._lock:
            self.violations: list[str] = []
            self._ids = itertools.count(1001)
            self._repos: dict[str, _Repo] = {}
            self._tokens: dict[str, _Identity] = {}
            self._apps: dict[int, _App] = {}
            self._installations: dict[int, _Installation] = {}
            self._artifacts: dict[int, _Artifact] = {}
            self._failures: list[tuple[str, re.Pattern[str], deque[InjectedResponse]]] = []
            self._failures_after: list[tuple[str, re.Pattern[str], deque[InjectedResponse]]] = []
            self.calls: list[Call] = []
            self._rate_used: dict[str, int] = {}

    # ----------------------------------------------------------------- lifecycle

    def __enter__(self) -> Self:
        github_openapi()  # fails here, saying how to install it, when GitHub's description is missing
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Accepted connections inherit this; without it h11 writes head and body separately and
        # Nagle plus delayed ACKs add ~40 ms to every response.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off", access_log=False)
        self._server = _Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        if not self._server.ready.wait(timeout=10):
            raise RuntimeError("fake GitHub did not start")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        if exc_type is None:
            self.check_conformance()

    # ----------------------------------------------------------------- seeding

    def add_repo(
        self,
        full_name: str,
        git_dir: Path | None = None,
        *,
        default_branch: str = "main",
        private: bool = False,
    ) -> None:
        with self._lock:
            git = _Git(git_dir) if git_dir is not None else None
            self._repos[full_name.lower()] = _Repo(full_name, next(self._ids), git, default_branch, private)

    def add_pull(
        self,
        repo: str,
        number: int,
        head_sha: str,
        head_ref: str,
        base_ref: str,
        head_repo_full_name: str | None = None,
        user: str = "octocat",
        labels: Iterable[str] = (),
        state: str = "open",
        *,
        base_sha: str | None = None,
        title: str = "A pull request",
        merge_commit_sha: str | None = None,
    ) -> None:
        """Seed a pull request; ``base_sha`` defaults to the base branch tip when git-backed; ``merge_commit_sha``
        makes it a merged one (state closed, found by `commits/{sha}/pulls` for that commit)."""
        with self._lock:
            state_repo = self._repo_state(repo)
            if base_sha is None:
                resolved = state_repo.git.commit(base_ref) if state_repo.git else None
                base_sha = resolved or hashlib.sha1(base_ref.encode()).hexdigest()
            state_repo.pulls[number] = _Pull(
                number,
                head_sha,
                head_ref,
                base_ref,
                base_sha,
                head_repo_full_name or state_repo.full_name,
                user,
                list(labels),
                "closed" if merge_commit_sha else state,
                title,
                _now(),
                merge_commit_sha,
            )

    def set_permission(self, repo: str, login: str, permission: str) -> None:
        if permission not in ROLES:
            raise ValueError(f"permission must be one of {ROLES}")
        with self._lock:
            self._repo_state(repo).permissions[login.lower()] = permission

    def add_token(self, token: str, login: str = "octocat") -> None:
        """Register a user token (PAT/OAuth) acting as ``login``."""
        with self._lock:
            self._tokens[token] = _Identity(login, "user")

    def register_app(self, app_id: int, public_key_pem: str, slug: str) -> None:
        """Register a GitHub App whose RS256 JWTs (signed by the matching private key) are accepted."""
        with self._lock:
            self._apps[app_id] = _App(app_id, slug, public_key_pem)

    def add_installation(self, installation_id: int, app_id: int, repos: Iterable[str]) -> None:
        with self._lock:
            repo_names = frozenset(name.lower() for name in repos)
            self._installations[installation_id] = _Installation(installation_id, app_id, repo_names)

    def add_installation_token(self, token: str, installation_id: int) -> None:
        """Register a ready-made installation token (like ``GITHUB_TOKEN`` inside Actions)."""
        with self._lock:
            self._tokens[token] = self._installation_identity(installation_id, expires_at=None)

    def add_workflow(
        self,
        repo: str,
        file_name: str,
        *,
        name: str | None = None,
        inputs: Iterable[str] | None = None,
        required_inputs: Iterable[str] = (),
        run_name: str | None = None,
    ) -> int:
        """Register a ``workflow_dispatch`` workflow; ``inputs=None`` accepts any input names."""
        with self._lock:
            workflow = _Workflow(
                next(self._ids),
                file_name,
                name or file_name,
                frozenset(inputs) if inputs is not None else None,
                frozenset(required_inputs),
                run_name,
            )
            self._repo_state(repo).workflows[file_name] = workflow
            return workflow.id

    def add_run(
        self,
        repo: str,
        workflow_file: str,
        *,
        event: str = "workflow_dispatch",
        ref: str = "main",
        created_at: datetime | None = None,
    ) -> int:
        """Seed a workflow run as if something other than the bot had started it."""
        with self._lock:
            state_repo = self._repo_state(repo)
            return self._create_run(
                state_repo, state_repo.workflows[workflow_file], event, ref, created_at or _now()
            )

    def set_run_status(self, run_id: int, status: str, conclusion: str | None = None) -> None:
        with self._lock:
            run = self._find_run(run_id)
            run.update(status=status, conclusion=conclusion, updated_at=_timestamp(_now()))

    def add_job(
        self,
        run_id: int,
        name: str,
        *,
        status: str = "completed",
        conclusion: str | None = "success",
        runner_name: str | None = "runner-1",
        annotations: Iterable[str] = (),
        steps: Iterable[tuple[str, str, str | None]] = (),
    ) -> int:
        """Seed a job of a run's current attempt, with the annotations GitHub attached to it and its steps as
        (name, status, conclusion) in order."""
        with self._lock:
            run = self._find_run(run_id)
            repo = self._repo_state(run["repository"]["full_name"])
            job_id = next(self._ids)
            base = f"{self.url}/repos/{repo.full_name}"
            repo.jobs[job_id] = {
                "id": job_id,
                "run_id": run_id,
                "run_url": run["url"],
                "run_attempt": run["run_attempt"],
                "node_id": f"CR_{job_id}",
                "head_sha": run["head_sha"],
                "head_branch": run["head_branch"],
                "url": f"{base}/actions/jobs/{job_id}",
                "html_url": f"https://github.com/{repo.full_name}/actions/runs/{run_id}/job/{job_id}",
                "check_run_url": f"{base}/check-runs/{job_id}",
                "status": status,
                "conclusion": conclusion,
                "created_at": run["created_at"],
                "started_at": run["created_at"],
                "completed_at": _timestamp(_now()) if status == "completed" else None,
                "name": name,
                "workflow_name": run["name"],
                "steps": [
                    {
                        "name": step_name,
                        "status": step_status,
                        "conclusion": step_conclusion,
                        "number": number,
                        "started_at": run["created_at"],
                        "completed_at": _timestamp(_now()) if step_status == "completed" else None,
                    }
                    for number, (step_name, step_status, step_conclusion) in enumerate(steps, start=1)
                ],
                "labels": [],
                "runner_id": None if runner_name is None else 1,
                "runner_name": runner_name,
                "runner_group_id": None,
                "runner_group_name": None,
            }
            repo.job_annotations[job_id] = list(annotations)
            return job_id

    def set_job_status(self, job_id: int, status: str, conclusion: str | None = None) -> None:
        with self._lock:
            for repo in self._repos.values():
                if job_id in repo.jobs:
                    repo.jobs[job_id].update(status=status, conclusion=conclusion)
                    return
            raise KeyError(f"unknown job {job_id}")

    def add_artifact(self, run_id: int, name: str, zip_bytes: bytes, *, expired: bool = False) -> int:
        with self._lock:
            run = self._find_run(run_id)
            artifact = _Artifact(
                next(self._ids), run["repository"]["full_name"], run_id, name, zip_bytes, expired, _now()
            )
            self._artifacts[artifact.id] = artifact
            return artifact.id

    def inject_failures(
        self, method: str, path_regex: str, responses: Sequence[InjectedResponse], *, after_acting: bool = False
    ) -> None:
        """Answer the next matching requests with ``responses`` (status, headers, body), in order.

        With ``after_acting`` the request is first handled as usual (a comment is created, say) and only
        its answer is replaced: GitHub acted, but the client saw an error (a 502 from a proxy, a timeout).
        """
        with self._lock:
            target = self._failures_after if after_acting else self._failures
            target.append((method.upper(), re.compile(path_regex), deque(responses)))

    # ----------------------------------------------------------------- inspection

    def check_runs(self, repo: str) -> list[dict[str, Any]]:
        """Check runs as stored, including the ``actions`` GitHub does not echo back."""
        with self._lock:
            return [json.loads(json.dumps(run)) for run in self._repo_state(repo).check_runs.values()]

    def comments(self, repo: str, number: int) -> list[dict[str, Any]]:
        with self._lock:
            return [
                {
                    "id": c.id,
                    "node_id": c.node_id,
                    "body": c.body,
                    "user": c.user,
                    "minimized": c.minimized_reason is not None,
                    "minimized_reason": c.minimized_reason,
                }
                for c in self._repo_state(repo).comments.values()
                if c.number == number
            ]

    def issues(self, repo: str) -> list[dict[str, Any]]:
        """Issues (not pull requests) as opened, with their labels."""
        with self._lock:
            return [{"number": i.number, "title": i.title, "body": i.body, "user": i.user, "labels": list(i.labels),
                     "state": i.state} for i in self._repo_state(repo).issues.values()]

    def labels(self, repo: str) -> list[dict[str, str]]:
        with self._lock:
            return [dict(label) for label in self._repo_state(repo).labels.values()]

    def dispatches(self, repo: str) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(d) for d in self._repo_state(repo).dispatches]

    def run(self, run_id: int) -> dict[str, Any]:
        with self._lock:
            return dict(self._find_run(run_id))

    def cancelled_runs(self, repo: str) -> list[int]:
        """Runs a cancel request was accepted for, in order."""
        with self._lock:
            return list(self._repo_state(repo).cancels)

    def calls_to(self, method: str, path_regex: str) -> list[Call]:
        pattern = re.compile(path_regex)
        return [c for c in self.calls if c.method == method.upper() and pattern.search(c.path)]

    # ----------------------------------------------------------------- plumbing

    async def _endpoint(self, request: Request) -> Response:
        raw = await request.body()
        method, path = request.method, request.url.path
        headers = {key.lower(): value for key, value in request.headers.items()}
        body: Any = None
        bad_json = False
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body, bad_json = raw.decode(errors="replace"), True
        with self._lock:
            self.calls.append(Call(method, path, body, headers))
            injected = self._take_injected(method, path)
        if injected is not None:
            return injected
        query = {key: value for key, value in request.query_params.items()}
        try:
            response = await run_in_threadpool(self._handle, method, path, headers, query, body, bad_json)
        except _HTTPError as error:
            response = error.response()
        response = self._conform(method, path, query, body, response)
        with self._lock:
            replaced = self._take_injected(method, path, self._failures_after)
            if replaced is None and path != "/graphql" and not path.startswith("/_blobs/"):
                response.headers.update(self._rate_limit_headers(headers.get("authorization", "")))
        return response if replaced is None else replaced

    def _rate_limit_headers(self, credential: str) -> dict[str, str]:
        """GitHub's primary rate limit headers, sent with every REST answer: 5,000 requests an hour per
        credential, counted down by each answered request (the lock is held)."""
        used = self._rate_used[credential] = self._rate_used.get(credential, 0) + 1
        return {
            "X-RateLimit-Limit": str(RATE_LIMIT),
            "X-RateLimit-Remaining": str(max(0, RATE_LIMIT - used)),
            "X-RateLimit-Used": str(used),
            "X-RateLimit-Reset": str(int(time.time()) + 3600),
            "X-RateLimit-Resource": "core",
        }

    def _conform(
        self, method: str, path: str, query: dict[str, str], body: Any, response: Response
    ) -> Response:
        """The answer completed from GitHub's documented example of it (fields the stand-in does not model),
        recording where the accepted request or the answer departs from GitHub's OpenAPI description
        (tests/fakes/openapi.py). The stand-in's own routes (GraphQL, artifact blobs) are not REST API."""
        if path == "/graphql" or path.startswith("/_blobs/"):
            return response
        described = github_openapi()
        operation = described.operation(method, path)
        if operation is None:
            problems = [] if response.status_code == 404 else ["no such operation in GitHub's REST API"]
        else:
            problems = [] if response.status_code >= 400 else described.check_request(operation, query, body)
            answer = json.loads(response.body) if response.body else None
            if answer is not None and response.status_code < 300:
                completed = described.complete(operation, response.status_code, answer)
                if completed != answer:
                    headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
                    response = JSONResponse(completed, status_code=response.status_code, headers=headers)
                    answer = completed
            problems += described.check_response(operation, response.status_code, answer)
        with self._lock:
            self.violations += [f"{method} {path} -> {response.status_code}: {problem}" for problem in problems]
        return response

    def check_conformance(self) -> None:
        """Fail naming every departure from GitHub's OpenAPI description seen since the last check."""
        with self._lock:
            found, self.violations = self.violations, []
        if found:
            raise AssertionError(
                f"the GitHub stand-in departed from GitHub's OpenAPI description {len(found)} time(s):\n  "
                + "\n  ".join(found[:40])
            )

    def _take_injected(
        self,
        method: str,
        path: str,
        failures: list[tuple[str, re.Pattern[str], deque[InjectedResponse]]] | None = None,
    ) -> Response | None:
        for wanted, pattern, queue in self._failures if failures is None else failures:
            if queue and wanted == method and pattern.search(path):
                status, headers, body = queue.popleft()
                if body is None:
                    return Response(status_code=status, headers=dict(headers))
                if isinstance(body, str | bytes):
                    return Response(body, status_code=status, headers=dict(headers))
                return JSONResponse(body, status_code=status, headers=dict(headers))
        return None

    def _handle(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        query: dict[str, str],
        body: Any,
        bad_json: bool,
    ) -> Response:
        matches = [(route, route.pattern.match(path)) for route in _ROUTES]
        found = [(route, m) for route, m in matches if m is not None]
        route_match = next(((route, m) for route, m in found if route.method == method), None)
        with self._lock:
            auth: AuthKind = route_match[0].auth if route_match else "token"
            identity = self._authenticate(auth, headers)
            if route_match is None:
                raise _not_found()
            if bad_json:
                raise _HTTPError(400, "Problems parsing JSON")
            if method in ("POST", "PATCH", "PUT") and body is not None and not isinstance(body, dict):
                raise _HTTPError(422, "Invalid request.\n\nThe request body must be a JSON object.")
            route, match = route_match
            ctx = _Ctx(identity, match.groupdict(), query, body, path)
            handler: Callable[[_Ctx], Response] = getattr(self, route.handler)
            return handler(ctx)

    def _authenticate(self, kind: AuthKind, headers: Mapping[str, str]) -> _Identity | None:
        if kind == "none":
            return None
        scheme, _, credential = headers.get("authorization", "").partition(" ")
        if scheme.lower() not in ("token", "bearer") or not credential:
            raise _HTTPError(401, "Requires authentication")
        if scheme.lower() == "bearer" and credential.count(".") == 2:
            identity = self._verify_jwt(credential)
        else:
            found = self._tokens.get(credential)
            if found is None or (found.expires_at is not None and found.expires_at <= _now()):
                raise _HTTPError(401, "Bad credentials")
            identity = found
        if kind == "jwt" and identity.kind != "app":
            raise _HTTPError(401, "A JSON web token could not be decoded")
        if kind == "token" and identity.kind == "app":
            raise _HTTPError(403, "Resource not accessible by integration")
        return identity

    def _verify_jwt(self, token: str) -> _Identity:
        try:
            claims = jwt.decode(token, options={"verify_signature": False})
            app = self._apps.get(int(claims["iss"]))
        except (jwt.PyJWTError, KeyError, TypeError, ValueError) as error:
            raise _HTTPError(401, "A JSON web token could not be decoded") from error
        if app is None:
            raise _HTTPError(401, "Integration not found")
        try:
            claims = jwt.decode(
                token, app.public_key, algorithms=["RS256"], options={"require": ["exp", "iat", "iss"]}
            )
        except jwt.ExpiredSignatureError as error:
            message = "'Expiration time' claim ('exp') must be a numeric value in the future"
            raise _HTTPError(401, message) from error
        except jwt.PyJWTError as error:
            raise _HTTPError(401, "A JSON web token could not be decoded") from error
        if claims["exp"] > _now().timestamp() + 600:
            raise _HTTPError(401, "'Expiration time' claim ('exp') is too far in the future")
        return _Identity(f"{app.slug}[bot]", "app", app_id=app.id)

    def _installation_identity(self, installation_id: int, expires_at: datetime | None) -> _Identity:
        installation = self._installations[installation_id]
        app = self._apps[installation.app_id]
        return _Identity(f"{app.slug}[bot]", "installation", app.id, installation_id, expires_at)

    def _repo_state(self, full_name: str) -> _Repo:
        try:
            return self._repos[full_name.lower()]
        except KeyError:
            raise KeyError(f"unknown repository {full_name}; add_repo it first") from None

    def _repo(self, ctx: _Ctx) -> _Repo:
        full_name = f"{ctx.params['owner']}/{ctx.params['name']}".lower()
        repo = self._repos.get(full_name)
        if repo is None:
            raise _not_found()
        if not self._visible(ctx.identity, full_name):
            raise _not_found()
        return repo

    def _visible(self, identity: _Identity | None, full_name: str) -> bool:
        """Installation tokens only see their installation's repositories."""
        if identity is None or identity.installation_id is None:
            return True
        return full_name.lower() in self._installations[identity.installation_id].repos

    def _find_run(self, run_id: int) -> dict[str, Any]:
        for repo in self._repos.values():
            if run_id in repo.runs:
                return repo.runs[run_id]
        raise KeyError(f"unknown run {run_id}")

    def _paginate(
        self, ctx: _Ctx, items: Sequence[Any], wrap: Callable[[list[Any]], Any] | None = None
    ) -> Response:
        try:
            per_page = min(max(int(ctx.query.get("per_page", "30")), 1), 100)
        except ValueError:
            per_page = 30
        try:
            page = max(int(ctx.query.get("page", "1")), 1)
        except ValueError:
            page = 1
        chunk = list(items[(page - 1) * per_page : page * per_page])
        last = max(1, math.ceil(len(items) / per_page))

        def link(target: int, rel: str) -> str:
            params = {**ctx.query, "per_page": str(per_page), "page": str(target)}
            return f'<{self.url}{ctx.path}?{urlencode(params)}>; rel="{rel}"'

        links = []
        if page < last:
            links += [link(page + 1, "next"), link(last, "last")]
        if page > 1:
            links += [link(1, "first"), link(page - 1, "prev")]
        headers = {"Link": ", ".join(links)} if links else {}
        return JSONResponse(wrap(chunk) if wrap else chunk, headers=headers)

    # ----------------------------------------------------------------- JSON shapes

    def _user(self, login: str) -> dict[str, Any]:
        uid = user_id(login)
        return {
            "login": login,
            "id": uid,
            "node_id": f"U_{uid}",
            "type": "Bot" if login.endswith("[bot]") else "User",
            "site_admin": False,
            "url": f"{self.url}/users/{login}",
            "html_url": f"https://github.com/{login}",
            "avatar_url": f"https://avatars.githubusercontent.com/u/{uid}",
        }

    def _repo_json(self, full_name: str) -> dict[str, Any]:
        known = self._repos.get(full_name.lower())
        repo_id = known.id if known else int(hashlib.sha1(full_name.encode()).hexdigest()[:6], 16)
        return {
            "id": repo_id,
            "node_id": f"R_{repo_id}",
            "name": full_name.split("/")[1],
            "full_name": full_name,
            "owner": self._user(full_name.split("/")[0]),
            "private": known.private if known else False,
            "fork": known is None,
            "html_url": f"https://github.com/{full_name}",
            "url": f"{self.url}/repos/{full_name}",
            "default_branch": known.default_branch if known else "main",
            "language": None,
        }

    def _check_run_json(self, repo: _Repo, run: dict[str, Any]) -> dict[str, Any]:
        shown = {key: value for key, value in run.items() if key != "actions"}
        output = run.get("output") or {}
        shown["output"] = {
            "title": output.get("title"),
            "summary": output.get("summary"),
            "text": output.get("text"),
            "annotations_count": len(output.get("annotations", [])),
            "annotations_url": f"{self.url}/repos/{repo.full_name}/check-runs/{run['id']}/annotations",
        }
        return shown

    def _comment_json(self, repo: _Repo, comment: _Comment) -> dict[str, Any]:
        return {
            "id": comment.id,
            "node_id": comment.node_id,
            "url": f"{self.url}/repos/{repo.full_name}/issues/comments/{comment.id}",
            "html_url": f"https://github.com/{repo.full_name}/pull/{comment.number}#issuecomment-{comment.id}",
            "issue_url": f"{self.url}/repos/{repo.full_name}/issues/{comment.number}",
            "body": comment.body,
            "user": self._user(comment.user),
            "created_at": _timestamp(comment.created_at),
            "updated_at": _timestamp(comment.updated_at),
            "author_association": "NONE",
        }

    def _commit_json(self, repo: _Repo, commit: Mapping[str, str]) -> dict[str, Any]:
        return {
            "sha": commit["sha"],
            "node_id": f"C_{commit['sha']}",
            "url": f"{self.url}/repos/{repo.full_name}/commits/{commit['sha']}",
            "html_url": f"https://github.com/{repo.full_name}/commit/{commit['sha']}",
            "commit": {
                "message": commit["message"],
                "author": {"name": commit["author"], "email": commit["email"], "date": commit["date"]},
                "committer": {
                    "name": commit["committer"],
                    "email": commit["committer_email"],
                    "date": commit["committed"],
                },
            },
            "parents": [{"sha": parent} for parent in commit["parents"].split()],
        }

    # ----------------------------------------------------------------- users, apps

    @_route("GET", r"/user")
    def _get_user(self, ctx: _Ctx) -> Response:
        assert ctx.identity is not None
        if ctx.identity.kind != "user":
            raise _HTTPError(403, "Resource not accessible by integration")
        return JSONResponse({**self._user(ctx.identity.login), "user_view_type": "private"})

    @_route("GET", r"/users/(?P<login>[^/]+)")
    def _get_named_user(self, ctx: _Ctx) -> Response:
        return JSONResponse({**self._user(ctx.params["login"]), "user_view_type": "public"})

    @_route("GET", r"/app", auth="jwt")
    def _get_app(self, ctx: _Ctx) -> Response:
        assert ctx.identity is not None and ctx.identity.app_id is not None
        app = self._apps[ctx.identity.app_id]
        return JSONResponse(
            {
                "id": app.id,
                "slug": app.slug,
                "node_id": f"A_{app.id}",
                "name": app.slug,
                "owner": self._user("octo-org"),
                "html_url": f"https://github.com/apps/{app.slug}",
                "permissions": {},
                "events": [],
            }
        )

    @_route("GET", _REPO + r"/installation", auth="jwt")
    def _get_repo_installation(self, ctx: _Ctx) -> Response:
        assert ctx.identity is not None
        repo = self._repo(ctx)
        for installation in self._installations.values():
            if installation.app_id == ctx.identity.app_id and repo.full_name.lower() in installation.repos:
                return JSONResponse(
                    {
                        "id": installation.id,
                        "app_id": installation.app_id,
                        "app_slug": self._apps[installation.app_id].slug,
                        "account": self._user(repo.full_name.split("/")[0]),
                        "target_type": "User",
                        "repository_selection": "selected",
                        "permissions": {},
                        "events": [],
                        "access_tokens_url": f"{self.url}/app/installations/{installation.id}/access_tokens",
                        "html_url": f"https://github.com/settings/installations/{installation.id}",
                    }
                )
        raise _not_found()

    @_route("POST", r"/app/installations/(?P<installation_id>\d+)/access_tokens", auth="jwt")
    def _create_installation_token(self, ctx: _Ctx) -> Response:
        assert ctx.identity is not None
        installation = self._installations.get(int(ctx.params["installation_id"]))
        if installation is None or installation.app_id != ctx.identity.app_id:
            raise _not_found()
        if ctx.body is not None and not isinstance(ctx.body.get("permissions", {}), dict):
            raise _invalid("InstallationToken", "permissions", "invalid", "permissions must be an object")
        expires_at = _now() + self._token_ttl
        token = f"ghs_{secrets.token_hex(18)}"
        self._tokens[token] = self._installation_identity(installation.id, expires_at)
        return JSONResponse(
            {
                "token": token,
                "expires_at": _timestamp(expires_at),
                "permissions": {"checks": "write", "contents": "read", "pull_requests": "write"},
                "repository_selection": "selected",
            },
            status_code=201,
        )

    # ----------------------------------------------------------------- repository reads

    @_route("GET", _REPO)
    def _get_repo(self, ctx: _Ctx) -> Response:
        return JSONResponse(self._repo_json(self._repo(ctx).full_name))

    @_route("GET", _REPO + r"/pulls/(?P<number>\d+)")
    def _get_pull(self, ctx: _Ctx) -> Response:
        repo = self._repo(ctx)
        pull = repo.pulls.get(int(ctx.params["number"]))
        if pull is None:
            raise _not_found()
        head_owner = pull.head_repo.split("/")[0]
        base_owner = repo.full_name.split("/")[0]
        return JSONResponse(
            {
                "id": pull.number + 500000,
                "node_id": f"PR_{repo.id}_{pull.number}",
                "number": pull.number,
                "state": pull.state,
                "title": pull.title,
                "user": self._user(pull.user),
                "labels": [
                    {"id": i + 1, "node_id": f"LA_{i + 1}", "name": name, "color": "ededed", "default": False}
                    for i, name in enumerate(pull.labels)
                ],
                "head": {
                    "label": f"{head_owner}:{pull.head_ref}",
                    "ref": pull.head_ref,
                    "sha": pull.head_sha,
                    "user": self._user(head_owner),
                    "repo": self._repo_json(pull.head_repo),
                },
                "base": {
                    "label": f"{base_owner}:{pull.base_ref}",
                    "ref": pull.base_ref,
                    "sha": pull.base_sha,
                    "user": self._user(base_owner),
                    "repo": self._repo_json(repo.full_name),
                },
                "url": f"{self.url}/repos/{repo.full_name}/pulls/{pull.number}",
                "html_url": f"https://github.com/{repo.full_name}/pull/{pull.number}",
                "issue_url": f"{self.url}/repos/{repo.full_name}/issues/{pull.number}",
                "created_at": _timestamp(pull.created_at),
                "updated_at": _timestamp(pull.created_at),
                "merged": False,
                "draft": False,
            }
        )

    @_route("GET", _REPO + r"/collaborators/(?P<login>[^/]+)/permission")
    def _get_permission(self, ctx: _Ctx) -> Response:
        repo = self._repo(ctx)
        login = ctx.params["login"]
        role = repo.permissions.get(login.lower(), "none" if repo.private else "read")
        return JSONResponse(
            {
                "permission": LEGACY_PERMISSION.get(role, role),
                "role_name": role,
                "user": {**self._user(login), "role_name": role, "permissions": _permission_flags(role)},
            }
        )

    @_route("GET", _REPO + r"/compare/(?P<basehead>.+)")
    def _compare(self, ctx: _Ctx) -> Response:
        repo = self._repo(ctx)
        base_ref, sep, head_ref = ctx.params["basehead"].partition("...")
        if repo.git is None or not sep:
            raise _not_found()
        base, head = repo.git.commit(base_ref), repo.git.commit(head_ref)
        if base is None or head is None:
            raise _not_found()
        merge_base = repo.git.merge_base(base, head)
        if merge_base is None:
            raise _HTTPError(404, f"No common ancestor between {base_ref} and {head_ref}.")
        ahead_by, behind_by = repo.git.count(f"{base}..{head}"), repo.git.count(f"{head}..{base}")
        status = (
            "identical"
            if ahead_by == behind_by == 0
            else "ahead"
            if behind_by == 0
            else "behind"
            if ahead_by == 0
            else "diverged"
        )
        (base_commit,) = repo.git.commits(base, limit=1)[-1:]
        (merge_base_commit,) = repo.git.commits(merge_base, limit=1)[-1:]
        commits = repo.git.commits(f"{base}..{head}", limit=250)
        files = [
            {
                "sha": hashlib.sha1(f"{head}:{path}".encode()).hexdigest(),
                "filename": path,
                "status": status,
                "additions": 0,
                "deletions": 0,
                "changes": 0,
                "blob_url": f"https://github.com/{repo.full_name}/blob/{head}/{path}",
                "raw_url": f"https://github.com/{repo.full_name}/raw/{head}/{path}",
                "contents_url": f"{self.url}/repos/{repo.full_name}/contents/{path}?ref={head}",
                **({"previous_filename": before} if before is not None else {}),
            }
            for status, path, before in repo.git.changed_files(merge_base, head)[:COMPARE_FILES_LIMIT]
        ]
        return JSONResponse(
            {
                "url": f"{self.url}/repos/{repo.full_name}/compare/{ctx.params['basehead']}",
                "html_url": f"https://github.com/{repo.full_name}/compare/{ctx.params['basehead']}",
                "permalink_url": f"https://github.com/{repo.full_name}/compare/{base}...{head}",
                "status": status,
                "ahead_by": ahead_by,
                "behind_by": behind_by,
                "total_commits": ahead_by,
                "base_commit": self._commit_json(repo, base_commit),
                "merge_base_commit": self._commit_json(repo, merge_base_commit),
                "commits": [self._commit_json(repo, commit) for commit in commits],
                "files": files,
            }
        )

    @_route("GET", _REPO + r"/contents(?:/(?P<path>.*))?")
    def _get_contents(self, ctx: _Ctx) -> Response:
        repo = self._repo(ctx)
        path = (ctx.params.get("path") or "").strip("/")
        ref = ctx.query.get("ref") or repo.default_branch
        if repo.git is None:
            raise _not_found()
        commit = repo.git.commit(ref)
        if commit is None:
            raise _HTTPError(404, f"No commit found for the ref {ref}")
        spec = f"{commit}:{path}"
        kind = repo.git.object_type(spec)
        if kind == "tree":
            entries = []
            for mode, entry_kind, sha, size, name in repo.git.tree(spec):
                entry_type = {"tree": "dir", "commit": "submodule"}.get(entry_kind, "file")
                if mode == "120000":
                    entry_type = "symlink"
                entries.append(
                    self._content_entry(repo, f"{path}/{name}".lstrip("/"), entry_type, sha, size, ref)
                )
            return JSONResponse(entries)
        if kind != "blob":
            raise _not_found()
        data = repo.git.blob(spec)
        entry = self._content_entry(repo, path, "file", repo.git.rev_parse(spec), len(data), ref)
        inline = len(data) <= CONTENTS_INLINE_LIMIT
        entry["encoding"] = "base64" if inline else "none"
        entry["content"] = base64.encodebytes(data).decode() if inline else ""
        return JSONResponse(entry)

    def _content_entry(
        self, repo: _Repo, path: str, kind: str, sha: str, size: int, ref: str
    ) -> dict[str, Any]:
        return {
            "type": kind,
            "name": path.rsplit("/", 1)[-1],
            "path": path,
            "sha": sha,
            "size": size,
            "url": f"{self.url}/repos/{repo.full_name}/contents/{path}?ref={ref}",
            "git_url": f"{self.url}/repos/{repo.full_name}/git/blobs/{sha}",
            "html_url": f"https://github.com/{repo.full_name}/blob/{ref}/{path}",
            "download_url": f"https://raw.githubusercontent.com/{repo.full_name}/{ref}/{path}",
            "_links": {
                "self": f"{self.url}/repos/{repo.full_name}/contents/{path}?ref={ref}",
                "git": f"{self.url}/repos/{repo.full_name}/git/blobs/{sha}",
                "html": f"https://github.com/{repo.full_name}/blob/{ref}/{path}",
            },
        }

    @_route("GET", _REPO + r"/git/blobs/(?P<sha>[0-9a-f]{40})")
    def _get_blob(self, ctx: _Ctx) -> Response:
        repo = self._repo(ctx)
        sha = ctx.params["sha"]
        if repo.git is None or repo.git.object_type(sha) != "blob":
            raise _not_found()
        data = repo.git.blob(sha)
        return JSONResponse(
            {
                "sha": sha,
                "node_id": f"B_{sha}",
                "size": len(data),
                "url": f"{self.url}/repos/{repo.full_name}/git/blobs/{sha}",
                "content": base64.encodebytes(data).decode(),
                "encoding": "base64",
            }
        )

    # ----------------------------------------------------------------- check runs

    def _validate_check_run(self, repo: _Repo, body: dict[str, Any], existing: dict[str, Any] | None) -> None:
        def bad(field_name: str, code: str, message: str) -> _HTTPError:
            return _invalid("CheckRun", field_name, code, message)

        creating = existing is None
        for key in ("name", "head_sha"):
            if creating and key not in body:
                raise bad(key, "missing_field", f'"{key}" wasn\'t supplied.')
            if key in body and (not isinstance(body[key], str) or not body[key]):
                raise bad(key, "invalid", f"{key} must be a non-empty string")
        if "head_sha" in body and repo.git is not None and repo.git.commit(body["head_sha"]) is None:
            raise _HTTPError(422, f"No commit found for SHA: {body['head_sha']}")
        for key in ("details_url", "external_id"):
            if body.get(key) is not None and not isinstance(body[key], str):
                raise bad(key, "invalid", f"{key} must be a string")
        status = body.get("status")
        if status is not None and status not in CHECK_STATUSES:
            raise bad("status", "invalid", f"status must be one of {', '.join(CHECK_STATUSES)}")
        if status in ACTIONS_ONLY_STATUSES:
            raise bad("status", "invalid", f"Only GitHub Actions can set a status of {status}")
        conclusion = body.get("conclusion")
        if conclusion is not None and conclusion not in CHECK_CONCLUSIONS:
            raise bad("conclusion", "invalid", f"conclusion must be one of {', '.join(CHECK_CONCLUSIONS)}")
        has_conclusion = conclusion is not None or (
            existing is not None and existing.get("conclusion") is not None
        )
        if status == "completed" and not has_conclusion:
            raise bad("conclusion", "missing_field", "Conclusion can't be blank when status is completed")
        before = existing or {}
        final_conclusion = conclusion if conclusion is not None else before.get("conclusion")
        if final_conclusion == "action_required" and not (body.get("details_url") or before.get("details_url")):
            raise bad("details_url", "missing_field", "details_url must be provided when conclusion is action_required")
        for key in ("started_at", "completed_at"):
            if body.get(key) is not None:
                try:
                    datetime.fromisoformat(str(body[key]))
                except ValueError:
                    raise bad(key, "invalid", f"{key} must be an ISO 8601 timestamp") from None
        if "output" in body:
            output = body["output"]
            if not isinstance(output, dict):
                raise bad("output", "invalid", "output must be an object")
            for key in ("title", "summary"):
                if not isinstance(output.get(key), str):
                    raise bad(f"output.{key}", "missing_field", f'"{key}" wasn\'t supplied.')
            for key in ("summary", "text"):
                value = output.get(key)
                if value is not None and not isinstance(value, str):
                    raise bad(f"output.{key}", "invalid", f"{key} must be a string")
                if isinstance(value, str) and len(value) > MAX_CHECK_TEXT:
                    raise bad(
                        f"output.{key}",
                        "too_long",
                        f"Only {MAX_CHECK_TEXT} characters are allowed; {len(value)} were supplied.",
                    )
            if len(output.get("annotations") or []) > 50:
                raise bad("output.annotations", "too_long", "No more than 50 annotations per request")
        if "actions" in body:
            actions = body["actions"]
            if not isinstance(actions, list):
                raise bad("actions", "invalid", "actions must be an array")
            if len(actions) > 3:
                raise bad(
                    "actions", "too_long", f"No more than 3 items are allowed; {len(actions)} were supplied."
                )
            for action in actions:
                if not isinstance(action, dict):
                    raise bad("actions", "invalid", "each action must be an object")
                for key, limit in (("label", 20), ("description", 40), ("identifier", 20)):
                    value = action.get(key)
                    if not isinstance(value, str) or not value:
                        raise bad(f"actions.{key}", "missing_field", f'"{key}" wasn\'t supplied.')
                    if len(value) > limit:
                        raise bad(
                            f"actions.{key}", "too_long", f"{key} is too long (maximum is {limit} characters)"
                        )

    def _apply_check_run(self, run: dict[str, Any], body: Mapping[str, Any]) -> None:
        for key in (
            "name",
            "head_sha",
            "details_url",
            "external_id",
            "status",
            "conclusion",
            "started_at",
            "output",
            "actions",
        ):
            if key in body:
                run[key] = body[key]
        if body.get("conclusion") is not None:
            run["status"] = "completed"
        if run["status"] == "completed":
            run["completed_at"] = body.get("completed_at") or run.get("completed_at") or _timestamp(_now())

    @_route("POST", _REPO + r"/check-runs")
    def _create_check_run(self, ctx: _Ctx) -> Response:
        repo = self._repo(ctx)
        assert ctx.identity is not None
        if ctx.identity.kind != "installation":
            raise _HTTPError(403, "You must authenticate via a GitHub App.")
        body = ctx.body or {}
        self._validate_check_run(repo, body, None)
        run_id = next(self._ids)
        app = self._apps[ctx.identity.app_id] if ctx.identity.app_id is not None else None
        run: dict[str, Any] = {
            "id": run_id,
            "node_id": f"CR_{run_id}",
            "url": f"{self.url}/repos/{repo.full_name}/check-runs/{run_id}",
            "html_url": f"https://github.com/{repo.full_name}/runs/{run_id}",
            "details_url": None,
            "external_id": None,
            "status": "queued",
            "conclusion": None,
            "started_at": _timestamp(_now()),
            "completed_at": None,
            "output": None,
            "actions": [],
            "check_suite": {"id": run_id + 1},
            "app": (
                {"id": app.id, "slug": app.slug, "name": app.slug, "owner": self._user(repo.full_name.split("/")[0])}
                if app
                else None
            ),
            "pull_requests": [],
        }
        self._apply_check_run(run, body)
        repo.check_runs[run_id] = run
        return JSONResponse(self._check_run_json(repo, run), status_code=201)

    def _check_run(self, ctx: _Ctx) -> tuple[_Repo, dict[str, Any]]:
        repo = self._repo(ctx)
        run = repo.check_runs.get(int(ctx.params["check_run_id"]))
        if run is None:
            raise _not_found()
        return repo, run

    @_route("GET", _REPO + r"/check-runs/(?P<check_run_id>\d+)")
    def _get_check_run(self, ctx: _Ctx) -> Response:
        repo, run = self._check_run(ctx)
        return JSONResponse(self._check_run_json(repo, run))

    @_route("PATCH", _REPO + r"/check-runs/(?P<check_run_id>\d+)")
    def _update_check_run(self, ctx: _Ctx) -> Response:
        repo, run = self._check_run(ctx)
        assert ctx.identity is not None
        if ctx.identity.app_id != (run["app"] or {}).get("id"):
            raise _HTTPError(403, "Resource not accessible by integration")
        body = ctx.body or {}
        self._validate_check_run(repo, body, run)
        self._apply_check_run(run, body)
        return JSONResponse(self._check_run_json(repo, run))

    def _listed_check_runs(self, ctx: _Ctx, repo: _Repo, runs: Iterable[dict[str, Any]]) -> Response:
        """Newest first, filtered by `check_name` and `status`; `filter=latest` (GitHub's default) keeps the newest
        run of each name per App."""
        found, seen = [], set()
        for run in sorted(runs, key=lambda run: run["id"], reverse=True):
            if ctx.query.get("check_name", run["name"]) != run["name"]:
                continue
            if ctx.query.get("status", run["status"]) != run["status"]:
                continue
            key = (run["name"], (run["app"] or {}).get("id"))
            if ctx.query.get("filter", "latest") == "latest" and key in seen:
                continue
            seen.add(key)
            found.append(self._check_run_json(repo, run))
        return self._paginate(ctx, found, lambda chunk: {"total_count": len(found), "check_runs": chunk})

    @_route("GET", _REPO + r"/commits/(?P<ref>[^/]+)/check-runs")
    def _list_check_runs(self, ctx: _Ctx) -> Response:
        repo = self._repo(ctx)
        ref = ctx.params["ref"]
        sha = (repo.git.commit(ref) if repo.git else None) or ref
        return self._listed_check_runs(ctx, repo, [run for run in repo.check_runs.values() if run["head_sha"] == sha])

    @_route("GET", _REPO + r"/check-suites/(?P<check_suite_id>\d+)/check-runs")
    def _list_suite_check_runs(self, ctx: _Ctx) -> Response:
        repo = self._repo(ctx)
        suite = int(ctx.params["check_suite_id"])
        runs = [run for run in repo.check_runs.values() if run["check_suite"]["id"] == suite]
        if not runs:
            raise _not_found()
        return self._listed_check_runs(ctx, repo, runs)

    # ----------------------------------------------------------------- refs

    @_route("GET", _REPO + r"/git/matching-refs/(?P<ref>.+)")
    def _matching_refs(self, ctx: _Ctx) -> Response:
        repo = self._repo(ctx)
        found = repo.git.refs(ctx.params["ref"]) if repo.git is not None else []
        return JSONResponse(
            [
                {
                    "ref": ref,
                    "node_id": f"REF_{ref}",
                    "url": f"{self.url}/repos/{repo.full_name}/git/{ref}",
                    "object": {
                        "type": "commit",
                        "sha": sha,
                        "url": f"{self.url}/repos/{repo.full_name}/git/commits/{sha}",
                    },
                }
                for ref, sha in found
            ]
        )

    # ----------------------------------------------------------------- issue comments

    def _validate_comment_body(self, body: Mapping[str, Any]) -> str:
        text = body.get("body")
        if text is None:
            raise _invalid("IssueComment", "body", "missing_field", "body wasn't supplied")
        if not isinstance(text, str):
            raise _invalid("IssueComment", "body", "invalid", "body must be a string")
        if len(text) > MAX_COMMENT_BODY:
            raise _invalid(
                "IssueComment",
                "body",
                "custom",
                f"Body is too long (maximum is {MAX_COMMENT_BODY} characters)",
            )
        return text

    def _comment(self, ctx: _Ctx) -> tuple[_Repo, _Comment]:
        repo = self._repo(ctx)
        comment = repo.comments.get(int(ctx.params["comment_id"]))
        if comment is None:
            raise _not_found()
        return repo, comment

    @_route("POST", _REPO + r"/issues/(?P<number>\d+)/comments")
    def _create_comment(self, ctx: _Ctx) -> Response:
        repo = self._repo(ctx)
        number = int(ctx.params["number"])
        if number not in repo.pulls and number not in repo.issues:
            raise _not_found()
        assert ctx.identity is not None
        text = self._validate_comment_body(ctx.body or {})
        comment_id = next(self._ids)
        now = _now()
        node_id = "IC_" + base64.urlsafe_b64encode(f"{repo.id}:{comment_id}".encode()).decode().rstrip("=")
        comment = _Comment(comment_id, node_id, number, text, ctx.identity.login, now, now)
        repo.comments[comment_id] = comment
        return JSONResponse(self._comment_json(repo, comment), status_code=201)

    @_route("GET", _REPO + r"/issues/(?P<number>\d+)/comments")
    def _list_comments(self, ctx: _Ctx) -> Response:
        repo = self._repo(ctx)
        number = int(ctx.params["number"])
        if number not in repo.pulls and number not in repo.issues:
            raise _not_found()
        comments = [self._comment_json(repo, c) for c in repo.comments.values() if c.number == number]
        return self._paginate(ctx, comments)

    @_route("GET", _REPO + r"/issues/comments/(?P<comment_id>\d+)")
    def _get_comment(self, ctx: _Ctx) -> Response:
        repo, comment = self._comment(ctx)
        return JSONResponse(self._comment_json(repo, comment))

    @_route("PATCH", _REPO + r"/issues/comments/(?P<comment_id>\d+)")
    def _edit_comment(self, ctx: _Ctx) -> Response:
        repo, comment = self._comment(ctx)
        comment.body = self._validate_comment_body(ctx.body or {})
        comment.updated_at = _now()
        return JSONResponse(self._comment_json(repo, comment))

    @_route("DELETE", _REPO + r"/issues/comments/(?P<comment_id>\d+)")
    def _delete_comment(self, ctx: _Ctx) -> Response:
        repo, comment = self._comment(ctx)
        del repo.comments[comment.id]
        return Response(status_code=204)

    # ----------------------------------------------------------------- commits, labels, issues (main tracking)

    @_route("GET", _REPO + r"/commits/(?P<ref>[^/]+)")
    def _get_commit(self, ctx: _Ctx) -> Response:
        """A commit by SHA, branch or tag (as GitHub resolves `ref`); 422 for a ref naming no commit."""
        repo = self._repo(ctx)
        if repo.git is None:
            raise _not_found()
        sha = repo.git.commit(ctx.params["ref"])
        if sha is None:
            raise _HTTPError(422, f"No commit found for SHA: {ctx.params['ref']}")
        [found] = repo.git.commits(sha, limit=1)
        body = self._commit_json(repo, found)
        body.update({"comments_url": f"{body['url']}/comments", "files": []})
        return JSONResponse(body)

    def _pull_simple_json(self, repo: _Repo, pull: _Pull) -> dict[str, Any]:
        base_owner = repo.full_name.split("/")[0]
        head_owner = pull.head_repo.split("/")[0]
        url = f"{self.url}/repos/{repo.full_name}/pulls/{pull.number}"
        merged = pull.merge_commit_sha is not None
        return {
            "id": pull.number + 500000, "node_id": f"PR_{repo.id}_{pull.number}", "number": pull.number,
            "state": pull.state, "title": pull.title, "user": self._user(pull.user), "body": None,
            "labels": [], "url": url, "html_url": f"https://github.com/{repo.full_name}/pull/{pull.number}",
            "issue_url": f"{self.url}/repos/{repo.full_name}/issues/{pull.number}",
            "created_at": _timestamp(pull.created_at), "updated_at": _timestamp(pull.created_at),
            "closed_at": _timestamp(pull.created_at) if merged else None,
            "merged_at": _timestamp(pull.created_at) if merged else None,
            "merge_commit_sha": pull.merge_commit_sha, "assignee": None, "milestone": None, "locked": False,
            "author_association": "MEMBER", "auto_merge": None,
            "head": {"label": f"{head_owner}:{pull.head_ref}", "ref": pull.head_ref, "sha": pull.head_sha,
                     "user": self._user(head_owner), "repo": self._repo_json(pull.head_repo)},
            "base": {"label": f"{base_owner}:{pull.base_ref}", "ref": pull.base_ref, "sha": pull.base_sha,
                     "user": self._user(base_owner), "repo": self._repo_json(repo.full_name)},
        }

    @_route("GET", _REPO + r"/commits/(?P<sha>[^/]+)/pulls")
    def _list_commit_pulls(self, ctx: _Ctx) -> Response:
        """The pull requests that brought a commit: merged ones whose merge commit it is, open ones whose head it
        is (GitHub: "the merged pull request that introduced the commit", or open ones containing it)."""
        repo = self._repo(ctx)
        sha = ctx.params["sha"]
        found = [self._pull_simple_json(repo, pull) for pull in repo.pulls.values()
                 if pull.merge_commit_sha == sha or (pull.state == "open" and pull.head_sha == sha)]
        return self._paginate(ctx, found)

    def _label_json(self, repo: _Repo, label: Mapping[str, str]) -> dict[str, Any]:
        label_id = int(hashlib.sha1(label["name"].encode()).hexdigest()[:8], 16)
        return {"id": label_id, "node_id": f"LA_{label_id}", "name": label["name"], "color": label["color"],
                "description": label["description"] or None, "default": False,
                "url": f"{self.url}/repos/{repo.full_name}/labels/{label['name']}"}

    @_route("GET", _REPO + r"/labels/(?P<label>[^/]+)")
    def _get_label(self, ctx: _Ctx) -> Response:
        repo = self._repo(ctx)
        label = repo.labels.get(ctx.params["label"].lower())
        if label is None:
            raise _not_found()
        return JSONResponse(self._label_json(repo, label))

    @_route("POST", _REPO + r"/labels")
    def _create_label(self, ctx: _Ctx) -> Response:
        repo = self._repo(ctx)
        body = ctx.body or {}
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise _invalid("Label", "name", "missing_field", "name wasn't supplied")
        if name.lower() in repo.labels:
            raise _invalid("Label", "name", "already_exists", "Label already exists")
        color = body.get("color", "ededed")
        if not isinstance(color, str) or not re.fullmatch(r"[0-9a-fA-F]{6}", color):
            raise _invalid("Label", "color", "invalid", "color is not a 6-digit hexadecimal code")
        description = body.get("description", "")
        if not isinstance(description, str) or len(description) > 100:
            raise _invalid("Label", "description", "invalid", "description is too long (maximum is 100 characters)")
        repo.labels[name.lower()] = {"name": name, "color": color.lower(), "description": description}
        return JSONResponse(self._label_json(repo, repo.labels[name.lower()]), status_code=201)

    def _issue_json(self, repo: _Repo, issue: _Issue) -> dict[str, Any]:
        url = f"{self.url}/repos/{repo.full_name}/issues/{issue.number}"
        return {
            "id": issue.number + 700000, "node_id": f"I_{repo.id}_{issue.number}", "number": issue.number,
            "title": issue.title, "body": issue.body, "user": self._user(issue.user), "state": issue.state,
            "labels": [self._label_json(repo, repo.labels[name.lower()]) for name in issue.labels],
            "assignee": None, "milestone": None, "locked": False, "comments": sum(
                1 for c in repo.comments.values() if c.number == issue.number),
            "url": url, "repository_url": f"{self.url}/repos/{repo.full_name}", "labels_url": f"{url}/labels{{/name}}",
            "comments_url": f"{url}/comments", "events_url": f"{url}/events",
            "html_url": f"https://github.com/{repo.full_name}/issues/{issue.number}",
            "created_at": _timestamp(issue.created_at), "updated_at": _timestamp(issue.created_at), "closed_at": None,
            "author_association": "NONE",
        }

    @_route("GET", _REPO + r"/issues")
    def _list_issues(self, ctx: _Ctx) -> Response:
        """Issues by state and labels (every named label), oldest first with `direction=asc`; pull requests are
        issues on GitHub too, but the stand-in's pull requests carry no labels this route is asked for."""
        repo = self._repo(ctx)
        state = ctx.query.get("state", "open")
        wanted = {name.strip().lower() for name in ctx.query.get("labels", "").split(",") if name.strip()}
        found = [issue for issue in repo.issues.values()
                 if state in ("all", issue.state) and wanted <= {name.lower() for name in issue.labels}]
        found.sort(key=lambda issue: issue.number, reverse=ctx.query.get("direction", "desc") != "asc")
        return self._paginate(ctx, [self._issue_json(repo, issue) for issue in found])

    @_route("POST", _REPO + r"/issues")
    def _create_issue(self, ctx: _Ctx) -> Response:
        """A new issue; labels it names that the repository lacks are created (as GitHub does for a writer)."""
        repo = self._repo(ctx)
        assert ctx.identity is not None
        body = ctx.body or {}
        title = body.get("title")
        if not isinstance(title, str) or not title:
            raise _invalid("Issue", "title", "missing_field", "title wasn't supplied")
        text = body.get("body") or ""
        if not isinstance(text, str) or len(text) > MAX_COMMENT_BODY:
            raise _invalid("Issue", "body", "custom", f"Body is too long (maximum is {MAX_COMMENT_BODY} characters)")
        labels = body.get("labels") or []
        if not isinstance(labels, list) or not all(isinstance(name, str) for name in labels):
            raise _invalid("Issue", "labels", "invalid", "labels must be a list of names")
        for name in labels:
            repo.labels.setdefault(name.lower(), {"name": name, "color": "ededed", "description": ""})
        number = max([0, *repo.pulls, *repo.issues]) + 1
        repo.issues[number] = _Issue(number, title, text, ctx.identity.login, list(labels), "open", _now())
        return JSONResponse(self._issue_json(repo, repo.issues[number]), status_code=201)

    # ----------------------------------------------------------------- GraphQL

    @_route("POST", r"/graphql")
    def _graphql(self, ctx: _Ctx) -> Response:
        body = ctx.body or {}
        query = body.get("query")
        if not isinstance(query, str):
            return JSONResponse(
                {"errors": [{"message": "A query attribute must be specified and must be a string."}]}
            )
        match = re.search(r"minimizeComment\s*\(\s*input\s*:\s*(?:\$(\w+)|\{([^}]*)\})\s*\)", query)
        if match is None:
            message = "This stand-in implements only the minimizeComment mutation."
            return JSONResponse({"errors": [{"message": message, "extensions": {"code": "undefinedField"}}]})
        if match.group(1):
            mutation_input = (body.get("variables") or {}).get(match.group(1)) or {}
        else:
            literal = match.group(2)
            subject = re.search(r'subjectId\s*:\s*"([^"]*)"', literal)
            classifier = re.search(r"classifier\s*:\s*(\w+)", literal)
            mutation_input = {
                "subjectId": subject.group(1) if subject else None,
                "classifier": classifier.group(1) if classifier else None,
            }
        subject_id, classifier_value = mutation_input.get("subjectId"), mutation_input.get("classifier")
        if classifier_value not in MINIMIZE_CLASSIFIERS or not isinstance(subject_id, str):
            message = (
                "Variable $input of type MinimizeCommentInput! was provided invalid value for subjectId or "
                f"classifier (Expected {classifier_value!r} to be one of: {', '.join(MINIMIZE_CLASSIFIERS)})"
            )
            return JSONResponse(
                {"errors": [{"message": message, "extensions": {"code": "variableMismatch"}}]}
            )
        for repo in self._repos.values():
            for comment in repo.comments.values():
                if comment.node_id == subject_id and self._visible(ctx.identity, repo.full_name):
                    comment.minimized_reason = classifier_value.lower().replace("_", "-")
                    minimized = {"isMinimized": True, "minimizedReason": comment.minimized_reason}
                    return JSONResponse({"data": {"minimizeComment": {"minimizedComment": minimized}}})
        error = {
            "type": "NOT_FOUND",
            "path": ["minimizeComment"],
            "message": f"Could not resolve to a node with the global id of '{subject_id}'",
        }
        return JSONResponse({"data": {"minimizeComment": None}, "errors": [error]})

    # ----------------------------------------------------------------- Actions

    def _workflow(self, repo: _Repo, workflow_id: str) -> _Workflow:
        for workflow in repo.workflows.values():
            if workflow_id in (workflow.file_name, str(workflow.id)):
                return workflow
        raise _not_found()

    def _create_run(
        self,
        repo: _Repo,
        workflow: _Workflow,
        event: str,
        ref: str,
        created_at: datetime,
        inputs: Mapping[str, str] | None = None,
    ) -> int:
        run_id = next(self._ids)
        head_sha = (repo.git.commit(ref) if repo.git else None) or hashlib.sha1(ref.encode()).hexdigest()
        base = f"{self.url}/repos/{repo.full_name}/actions/runs/{run_id}"
        repo.runs[run_id] = {
            "id": run_id,
            "node_id": f"WFR_{run_id}",
            "name": workflow.name,
            "display_title": _run_name(workflow, inputs) if inputs is not None else workflow.name,
            "path": f".github/workflows/{workflow.file_name}",
            "workflow_id": workflow.id,
            "run_number": len(repo.runs) + 1,
            "run_attempt": 1,
            "event": event,
            "status": "queued",
            "conclusion": None,
            "head_branch": ref,
            "head_sha": head_sha,
            "url": base,
            "html_url": f"https://github.com/{repo.full_name}/actions/runs/{run_id}",
            "artifacts_url": f"{base}/artifacts",
            "jobs_url": f"{base}/jobs",
            "logs_url": f"{base}/logs",
            "cancel_url": f"{base}/cancel",
            "rerun_url": f"{base}/rerun",
            "created_at": _timestamp(created_at),
            "updated_at": _timestamp(created_at),
            "run_started_at": _timestamp(created_at),
            "repository": self._repo_json(repo.full_name),
            "pull_requests": [],
        }
        return run_id

    @_route("POST", _REPO + r"/actions/workflows/(?P<workflow_id>[^/]+)/dispatches")
    def _dispatch(self, ctx: _Ctx) -> Response:
        repo = self._repo(ctx)
        workflow = self._workflow(repo, ctx.params["workflow_id"])
        body = ctx.body or {}
        ref = body.get("ref")
        if not isinstance(ref, str) or not ref:
            raise _HTTPError(
                422,
                'Invalid request.\n\n"ref" wasn\'t supplied.',
                [{"resource": "WorkflowDispatch", "field": "ref", "code": "missing_field"}],
            )
        inputs = body.get("inputs", {})
        if not isinstance(inputs, dict):
            raise _HTTPError(
                422,
                "Invalid request.\n\nFor 'properties/inputs', it is not an object.",
                [{"resource": "WorkflowDispatch", "field": "inputs", "code": "invalid"}],
            )
        if len(inputs) > MAX_DISPATCH_INPUTS:
            message = (
                f"Invalid request.\n\nNo more than {MAX_DISPATCH_INPUTS} properties are allowed; "
                f"{len(inputs)} were supplied."
            )
            raise _HTTPError(
                422, message, [{"resource": "WorkflowDispatch", "field": "inputs", "code": "too_long"}]
            )
        for key, value in inputs.items():
            if not isinstance(value, str):
                message = f"Invalid request.\n\nFor 'properties/{key}', {json.dumps(value)} is not a string."
                raise _HTTPError(
                    422,
                    message,
                    [{"resource": "WorkflowDispatch", "field": f"inputs.{key}", "code": "invalid"}],
                )
        if workflow.inputs is not None and (unexpected := sorted(set(inputs) - workflow.inputs)):
            raise _HTTPError(422, f"Unexpected inputs provided: {json.dumps(unexpected)}")
        if missing := sorted(workflow.required_inputs - set(inputs)):
            raise _HTTPError(422, f"Required input '{missing[0]}' not provided")
        if repo.git is not None and repo.git.commit(ref) is None:
            raise _HTTPError(422, f"No ref found for: {ref}")
        run_id = self._create_run(repo, workflow, "workflow_dispatch", ref, _now(), inputs)
        repo.dispatches.append(
            {"workflow": workflow.file_name, "ref": ref, "inputs": dict(inputs), "run_id": run_id}
        )
        return Response(status_code=204)

    def _list_runs(self, ctx: _Ctx, workflow: _Workflow | None) -> Response:
        repo = self._repo(ctx)
        created = _created_filter(ctx.query["created"]) if "created" in ctx.query else None
        runs = [
            run
            for run in sorted(repo.runs.values(), key=lambda r: (r["created_at"], r["id"]), reverse=True)
            if (workflow is None or run["workflow_id"] == workflow.id)
            and ctx.query.get("event", run["event"]) == run["event"]
            and ctx.query.get("branch", run["head_branch"]) == run["head_branch"]
            and ctx.query.get("head_sha", run["head_sha"]) == run["head_sha"]
            and ctx.query.get("status", run["status"]) in (run["status"], run["conclusion"])
            and (created is None or created(datetime.fromisoformat(run["created_at"])))
        ]
        return self._paginate(ctx, runs, lambda chunk: {"total_count": len(runs), "workflow_runs": chunk})

    @_route("GET", _REPO + r"/actions/runs")
    def _list_repo_runs(self, ctx: _Ctx) -> Response:
        return self._list_runs(ctx, None)

    @_route("GET", _REPO + r"/actions/workflows/(?P<workflow_id>[^/]+)/runs")
    def _list_workflow_runs(self, ctx: _Ctx) -> Response:
        return self._list_runs(ctx, self._workflow(self._repo(ctx), ctx.params["workflow_id"]))

    @_route("GET", _REPO + r"/actions/runs/(?P<run_id>\d+)")
    def _get_run(self, ctx: _Ctx) -> Response:
        run = self._repo(ctx).runs.get(int(ctx.params["run_id"]))
        if run is None:
            raise _not_found()
        return JSONResponse(run)

    @_route("POST", _REPO + r"/actions/runs/(?P<run_id>\d+)/cancel")
    def _cancel_run(self, ctx: _Ctx) -> Response:
        repo = self._repo(ctx)
        run = repo.runs.get(int(ctx.params["run_id"]))
        if run is None:
            raise _not_found()
        if run["status"] == "completed":
            raise _HTTPError(409, "Cannot cancel a workflow run that is completed.")
        run.update(status="completed", conclusion="cancelled", updated_at=_timestamp(_now()))
        for job in repo.jobs.values():
            if job["run_id"] == run["id"] and job["status"] != "completed":
                job.update(status="completed", conclusion="cancelled", completed_at=_timestamp(_now()))
        repo.cancels.append(run["id"])
        return JSONResponse({}, status_code=202)

    @_route("GET", _REPO + r"/actions/runs/(?P<run_id>\d+)/jobs")
    def _list_jobs(self, ctx: _Ctx) -> Response:
        repo = self._repo(ctx)
        run = repo.runs.get(int(ctx.params["run_id"]))
        if run is None:
            raise _not_found()
        if ctx.query.get("filter", "latest") not in ("latest", "all"):
            raise _invalid("WorkflowJob", "filter", "invalid", "filter must be one of latest, all")
        jobs = [
            job
            for job in repo.jobs.values()
            if job["run_id"] == run["id"]
            and (ctx.query.get("filter", "latest") == "all" or job["run_attempt"] == run["run_attempt"])
        ]
        return self._paginate(ctx, jobs, lambda chunk: {"total_count": len(jobs), "jobs": chunk})

    @_route("GET", _REPO + r"/check-runs/(?P<check_run_id>\d+)/annotations")
    def _list_annotations(self, ctx: _Ctx) -> Response:
        repo = self._repo(ctx)
        check_run_id = int(ctx.params["check_run_id"])
        if check_run_id in repo.job_annotations:
            messages = repo.job_annotations[check_run_id]
            annotations = [
                {
                    "path": ".github",
                    "start_line": 1,
                    "end_line": 1,
                    "start_column": None,
                    "end_column": None,
                    "annotation_level": "failure",
                    "title": "",
                    "message": message,
                    "raw_details": "",
                    "blob_href": "",
                }
                for message in messages
            ]
        elif check_run_id in repo.check_runs:
            annotations = list((repo.check_runs[check_run_id].get("output") or {}).get("annotations") or [])
        else:
            raise _not_found()
        return self._paginate(ctx, annotations)

    def _artifact_json(self, repo: _Repo, artifact: _Artifact) -> dict[str, Any]:
        run = repo.runs[artifact.run_id]
        url = f"{self.url}/repos/{repo.full_name}/actions/artifacts/{artifact.id}"
        return {
            "id": artifact.id,
            "node_id": f"MDg6QXJ0aWZhY3Q{artifact.id}",
            "name": artifact.name,
            "size_in_bytes": len(artifact.data),
            "url": url,
            "archive_download_url": f"{url}/zip",
            "expired": artifact.expired,
            "created_at": _timestamp(artifact.created_at),
            "updated_at": _timestamp(artifact.created_at),
            "expires_at": _timestamp(artifact.created_at + timedelta(days=90)),
            "workflow_run": {"id": run["id"], "head_branch": run["head_branch"], "head_sha": run["head_sha"]},
        }

    @_route("GET", _REPO + r"/actions/runs/(?P<run_id>\d+)/artifacts")
    def _list_artifacts(self, ctx: _Ctx) -> Response:
        repo = self._repo(ctx)
        run_id = int(ctx.params["run_id"])
        if run_id not in repo.runs:
            raise _not_found()
        artifacts = [
            self._artifact_json(repo, artifact)
            for artifact in self._artifacts.values()
            if artifact.run_id == run_id and ctx.query.get("name", artifact.name) == artifact.name
        ]
        return self._paginate(
            ctx, artifacts, lambda chunk: {"total_count": len(artifacts), "artifacts": chunk}
        )

    def _blob_signature(self, artifact_id: int) -> str:
        return hmac.new(self._blob_key, str(artifact_id).encode(), hashlib.sha256).hexdigest()

    @_route("GET", _REPO + r"/actions/artifacts/(?P<artifact_id>\d+)/zip")
    def _download_artifact(self, ctx: _Ctx) -> Response:
        repo = self._repo(ctx)
        artifact = self._artifacts.get(int(ctx.params["artifact_id"]))
        if artifact is None or artifact.repo.lower() != repo.full_name.lower():
            raise _not_found()
        if artifact.expired:
            raise _HTTPError(410, "Artifact has expired")
        location = f"{self.url}/_blobs/artifacts/{artifact.id}?sig={self._blob_signature(artifact.id)}"
        return Response(status_code=302, headers={"Location": location})

    @_route("GET", r"/_blobs/artifacts/(?P<artifact_id>\d+)", auth="none")
    def _get_artifact_blob(self, ctx: _Ctx) -> Response:
        artifact_id = int(ctx.params["artifact_id"])
        artifact = self._artifacts.get(artifact_id)
        if artifact is None or not hmac.compare_digest(
            ctx.query.get("sig", ""), self._blob_signature(artifact_id)
        ):
            return Response("AuthenticationFailed", status_code=403, media_type="application/xml")
        return Response(artifact.data, media_type="application/zip")


def _run_name(workflow: _Workflow, inputs: Mapping[str, str]) -> str:
    """The run's display title: the workflow's `run-name` with `${{ inputs.NAME }}` filled in."""
    if workflow.run_name is None:
        return workflow.name
    return re.sub(
        r"\$\{\{\s*inputs\.(\w+)\s*\}\}", lambda match: inputs.get(match.group(1), ""), workflow.run_name
    )


def _created_filter(expression: str) -> Callable[[datetime], bool]:
    """GitHub's search date syntax (``>=T``, ``>T``, ``<=T``, ``<T``, ``A..B``, ``DATE``)."""

    def parse(text: str) -> datetime:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise _invalid("WorkflowRun", "created", "invalid", f"invalid date {text!r}") from None
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)

    comparisons: tuple[tuple[str, Callable[[datetime, datetime], bool]], ...] = (
        (">=", operator.ge),
        ("<=", operator.le),
        (">", operator.gt),
        ("<", operator.lt),
    )
    for symbol, compare in comparisons:
        if expression.startswith(symbol):
            bound = parse(expression[len(symbol) :])
            return lambda moment: compare(moment, bound)
    if ".." in expression:
        low, high = (parse(part) for part in expression.split("..", 1))
        return lambda moment: low <= moment <= high
    day = parse(expression)
    return lambda moment: day <= moment < day + timedelta(days=1)
