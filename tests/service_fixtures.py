"""What the service end-to-end tests share (tests/test_server_e2e.py, tests/test_requests_e2e.py,
tests/test_pages.py): the GitHub stand-in serving a git history, the settings of a service using it, and the
service itself in a thread with a recording publisher."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.core.campaign import Campaign, CampaignState
from bot.service.app import create_app
from bot.settings import Settings
from bot.store.campaigns import Store
from tests.fakes.github_api import FakeGitHub
from tests.webhooks import (
    CONFIG_TOML,
    REPO,
    SECRET,
    RecordingPublisher,
    commit,
    git,
    pull_request_event,
    read_record,
    serve_app,
    stand_in_runner,
    wait_until,
)

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "ghp_bot_token"
BOT = "kv-parity-bot"


@dataclass
class Env:
    """A git history served by the GitHub stand-in, and the settings of a service using it.

    main:    root - base (adds the config) - main2 (moves main on: merge base != base branch tip)
    feature: base - head (also rewrites the config: it must never be read), head2 (a later push)
    fork:    base - fork1 - fork2 (a fork pull request)
    legacy:  root (no config) ; broken: root - invalid config ; both with a head on top.
    """

    tmp: Path
    fake: FakeGitHub
    repo: Path
    root: str
    base: str
    main2: str
    head: str
    head2: str
    fork1: str
    fork2: str
    legacy_head: str
    broken_head: str

    @property
    def runs_file(self) -> Path:
        return self.tmp / "runs.jsonl"

    @property
    def hold(self) -> Path:
        return self.tmp / "hold"

    def runs(self) -> list[dict[str, Any]]:
        return read_record(self.runs_file)

    def settings(self, *, hold: bool = False, runner: tuple[str, ...] = (), **overrides: Any) -> Settings:
        argv = [*stand_in_runner(self.runs_file), *runner]
        if hold:
            argv += ["--hold-until", str(self.hold)]
        values: dict[str, Any] = {
            "webhook_secret": SECRET,
            "token": TOKEN,
            "api_base_url": self.fake.url,
            "api_seconds_between_requests": 0,
            "api_seconds_between_writes": 0,
            "repo": REPO,
            "db_path": self.tmp / "bot.sqlite3",
            "work_dir": self.tmp / "work",
            "local_repo_path": self.repo,
            "local_campaign_argv": argv,
            "poll_interval_seconds": 0.05,
            "cancel_grace_seconds": 5,
        }
        values.update(overrides)
        return Settings.model_validate(values)

    def label(
        self, number: int = 1, head: str | None = None, *, sender: str = "maintainer", fork: bool = False
    ) -> dict[str, Any]:
        return pull_request_event(
            "labeled",
            number=number,
            head_sha=head or self.head,
            base_sha=self.main2,
            label="kv-parity",
            labels=("kv-parity",),
            sender=sender,
            fork=fork,
        )


def widgets_history(repo: Path) -> dict[str, Any]:
    """The git history of tests/test_server_e2e.py (see `Env`), committed into the empty directory `repo`."""
    git(repo, "init", "--quiet", "-b", "main")
    shas: dict[str, Any] = {"repo": repo}
    shas["root"] = commit(repo, {"README.md": "# widgets\n"}, "root")
    shas["base"] = commit(repo, {".github/kv-parity.toml": CONFIG_TOML}, "add the campaign config")
    shas["main2"] = commit(repo, {"src/lib.rs": "fn main2() {}\n"}, "main moves on")
    git(repo, "checkout", "--quiet", "-b", "feature", shas["base"])
    evil = CONFIG_TOML.replace('id = "vllm-agg"', 'id = "from-the-head"')
    shas["head"] = commit(repo, {"src/lib.rs": "fn head() {}\n", ".github/kv-parity.toml": evil}, "head")
    shas["head2"] = commit(repo, {"src/lib.rs": "fn head2() {}\n"}, "head 2")
    git(repo, "checkout", "--quiet", "-b", "fork", shas["base"])
    shas["fork1"] = commit(repo, {"src/fork.rs": "1\n"}, "fork 1")
    shas["fork2"] = commit(repo, {"src/fork.rs": "2\n"}, "fork 2")
    git(repo, "checkout", "--quiet", "-b", "legacy", shas["root"])
    git(repo, "checkout", "--quiet", "-b", "legacy-feature", shas["root"])
    shas["legacy_head"] = commit(repo, {".github/kv-parity.toml": CONFIG_TOML}, "config only in the head")
    git(repo, "checkout", "--quiet", "-b", "broken", shas["root"])
    commit(repo, {".github/kv-parity.toml": "[build]\ncommand = []\n"}, "invalid config")
    shas["broken_head"] = commit(repo, {"src/x.rs": "x\n"}, "on broken")
    git(repo, "checkout", "--quiet", "main")
    return shas


@contextmanager
def standin_env(
    tmp_path: Path, history: dict[str, Any], monkeypatch: pytest.MonkeyPatch, *, config_pulls: bool = True
) -> Iterator[Env]:
    """The stand-in serving `history` with pull requests #1 (feature) and #2 (a fork); with `config_pulls` also
    #3 (config only in its head) and #4 (an invalid config at its base)."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    with FakeGitHub() as fake:
        fake.add_token(TOKEN, BOT)
        fake.add_repo(REPO, history["repo"])
        fake.add_pull(REPO, 1, history["head"], "feature", "main")
        fake.add_pull(REPO, 2, history["fork1"], "fork", "main", head_repo_full_name="contributor/widgets")
        if config_pulls:
            fake.add_pull(REPO, 3, history["legacy_head"], "legacy-feature", "legacy")
            fake.add_pull(REPO, 4, history["broken_head"], "broken", "broken")
        fake.set_permission(REPO, "maintainer", "write")
        fake.set_permission(REPO, "reader", "read")
        yield Env(tmp_path, fake, **history)


@dataclass
class Service:
    url: str
    store: Store
    publisher: RecordingPublisher

    def campaigns(self, pr: int = 1) -> list[Campaign]:
        return list(reversed(self.store.for_pr(REPO, pr)))

    def wait_state(self, state: CampaignState, pr: int = 1, count: int = 1, timeout: float = 20) -> list[Campaign]:
        return wait_until(  # type: ignore[no-any-return]
            lambda: (found := [c for c in self.campaigns(pr) if c.state == state]) and len(found) >= count and found,
            f"{count} campaign(s) of #{pr} {state}; have {[(c.state, c.reason) for c in self.campaigns(pr)]}",
            timeout,
        )

    def wait_delivery(self, delivery: str) -> str:
        status = wait_until(
            lambda: (s := self.store.delivery_status(delivery)) and s[0] != "pending" and s,
            f"delivery {delivery}",
        )
        return str(status[1])


@contextmanager
def service(settings: Settings) -> Iterator[Service]:
    """The app in a thread; the test reads the database through its own connection, open after shutdown."""
    publisher = RecordingPublisher()
    app = create_app(settings, publisher_factory=lambda gateway, s: publisher)
    store = Store(settings.db_path)
    with serve_app(app) as url:
        yield Service(url, store, publisher)
