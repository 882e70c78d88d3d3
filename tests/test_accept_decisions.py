"""Who may accept what (`/parity accept`), table-tested through both real ledgers like tests/test_decisions.py:
the service's `StoreLedger` over real SQLite and the real lifecycle, and Actions-only mode's `RunTitleLedger` over
workflow runs kept in memory, whose report artifact is a real zip and whose acceptances are read back from the
comments (the bot's replies are posted as comments here, as the real publisher posts them).

Every case starts from one finished campaign of the pull request's head with the named report; where the modes
differ on purpose (only the store knows when a head was first seen, only the store remembers refusals), the row
says so with one expectation per ledger.
"""

from __future__ import annotations

import hashlib
import io
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.core.campaign import CampaignState
from bot.core.commands import COMMANDS, ParsedCommand, parse_commands
from bot.core.decisions import Decisions
from bot.core.ports import RepoServices
from bot.core.repo_values import BotIdentity, CheckRunInfo, CommentInfo
from bot.core.triggers import Accept
from bot.dispatch.local import LocalBackend
from bot.github.errors import ArtifactTooLargeError
from bot.github.models import ACTIONS_BOT
from bot.lifecycle import Lifecycle
from bot.modes.run_title_ledger import RunTitleLedger
from bot.modes.store_ledger import StoreLedger
from bot.publish import render
from bot.settings import Settings
from bot.store.campaigns import Store
from runners.schema.report import Revision
from tests.report_factory import make_report
from tests.test_decisions import BASE, HEAD, HEAD2, NOW, WRITTEN, MemoryGitHub, label
from tests.webhooks import CONFIG_TOML, REPO, RecordingPublisher

S = CampaignState
PERMISSIONS = {"maintainer": "write", "lead": "maintain", "owner": "admin", "reader": "read"}
ACCEPT = "/parity accept perf max=1.13 the new admission pass is intended work"


class GitHub(MemoryGitHub):
    """MemoryGitHub plus what acceptances read: comments by id, report artifacts, check runs (none here)."""

    def __init__(self) -> None:
        super().__init__()
        self.comments: list[CommentInfo] = []
        self.artifacts: dict[int, bytes] = {}
        self.config = CONFIG_TOML

    def permission(self, login: str) -> str:
        return PERMISSIONS.get(login, "none")

    def read_file(self, path: str, ref: str) -> bytes | None:
        return self.config.encode() if ref == "2" * 40 else None

    def list_comments(self, number: int) -> list[CommentInfo]:
        return list(self.comments)

    def comment(self, comment_id: int) -> CommentInfo | None:
        return next((c for c in self.comments if c.id == comment_id), None)

    def download_artifact(self, run_id: int, name: str, max_bytes: int | None = None) -> bytes | None:
        return self.artifacts.get(run_id)

    def check_runs_of(self, ref: str, check_name: str) -> list[CheckRunInfo]:
        return []

    def add_comment(self, body: str, login: str, author_id: int) -> CommentInfo:
        comment = CommentInfo(
            id=9000 + len(self.comments), node_id=f"IC_{len(self.comments)}", body=body, author_login=login,
            author_id=author_id, html_url=f"https://github.com/{REPO}/pull/1#issuecomment-{9000 + len(self.comments)}",
            created_at=WRITTEN,
        )
        self.comments.append(comment)
        return comment


class CommentingPublisher(RecordingPublisher):
    """Records every call and, like the real publisher, posts each reply as the bot's comment."""

    def __init__(self, github: GitHub) -> None:
        super().__init__()
        self.github = github

    def reply(self, number: int, kind: str, **context: Any) -> None:
        super().reply(number, kind, **context)
        body = render.reply(kind, "/parity", COMMANDS, "kv-parity", context)
        self.github.add_comment(body, ACTIONS_BOT.login, ACTIONS_BOT.id)


@dataclass
class Mode:
    name: str
    github: GitHub
    publisher: CommentingPublisher
    settings: Settings
    ledger: Any
    finish: Any
    effects: list[str] = field(default_factory=list)

    def decisions(self) -> Decisions:
        return Decisions(self.ledger(), self.github, self.publisher, self.settings, clock=NOW.timestamp)


def _report(outcome: str, campaign_id: str) -> str:
    report = make_report(outcome).model_copy(update={
        "campaign_id": campaign_id,
        "revisions": [Revision(arm="baseline", sha=BASE, requested=BASE),
                      Revision(arm="candidate", sha=HEAD, requested=HEAD)],
    })
    return report.model_dump_json()


def _sqlite(tmp_path: Path) -> Iterator[Mode]:
    github = GitHub()
    publisher = CommentingPublisher(github)
    settings = Settings(
        webhook_secret="unused", token="unused", db_path=tmp_path / "bot.sqlite3", work_dir=tmp_path / "work",
        local_repo_path=tmp_path, sandbox="none",
    )
    store = Store(settings.db_path)
    services = RepoServices(api=github, publisher=publisher, bot=BotIdentity(login="kv-parity[bot]", id=7))
    lifecycle = Lifecycle(
        store, settings, LocalBackend(tmp_path, sandbox=settings.sandbox), lambda repo: services, clock=NOW.timestamp
    )
    deliveries = iter(range(1_000_000))

    def ledger() -> StoreLedger:
        return StoreLedger(store, lifecycle, REPO, backend="local", delivery_id=f"d-{next(deliveries)}")

    def finish(outcome: str, *, seen_before: bool = True) -> None:
        """The head's campaign ran and wrote its report; the head was seen before the comment was written
        (unless `seen_before` is False: then the bot first sees it when the comment is handled)."""
        if seen_before:
            ledger().see_head(1, HEAD, (WRITTEN - timedelta(minutes=1)).timestamp(), "test")
        Decisions(ledger(), github, publisher, settings, clock=NOW.timestamp).act(label())
        [campaign] = store.for_pr(REPO, 1)
        out = tmp_path / campaign.id / "out"
        out.mkdir(parents=True)
        (out / "report.json").write_text(_report(outcome, campaign.id))
        store.transition(campaign.id, S.DISPATCHED, "test", artifact_dir=str(out))
        store.transition(campaign.id, S.RUNNING, "test")
        store.transition(campaign.id, S.COMPLETED, "test", publish="finished")
        lifecycle.tick()  # its first publication

    try:
        yield Mode("sqlite", github, publisher, settings, ledger, finish)
    finally:
        store.close()


def _runs() -> Iterator[Mode]:
    github = GitHub()
    publisher = CommentingPublisher(github)
    settings = Settings(webhook_secret="unused", token="unused", backend="actions", bot_login=ACTIONS_BOT.login)

    def ledger() -> RunTitleLedger:
        return RunTitleLedger(github, publisher, settings, REPO, clock=NOW.timestamp)

    def finish(outcome: str, *, seen_before: bool = True) -> None:
        """The campaign workflow's run completed and uploaded its report artifact (no record of heads here)."""
        Decisions(ledger(), github, publisher, settings, clock=NOW.timestamp).act(label())
        [(run_id, run)] = github.runs.items()
        campaign_id = run.display_title.split()[1]
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("report.json", _report(outcome, campaign_id))
        github.artifacts[run_id] = buffer.getvalue()
        github.complete(run_id, "success")

    yield Mode("runs", github, publisher, settings, ledger, finish)


@pytest.fixture(params=["sqlite", "runs"])
def mode(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Mode]:
    yield from (_sqlite(tmp_path) if request.param == "sqlite" else _runs())


def accept(mode: Mode, body: str, login: str = "lead") -> Accept:
    """The comment as a person wrote it (it exists on GitHub, to be read back by id) and its intent."""
    comment = mode.github.add_comment(body, login, 1000 + len(login))
    [command] = parse_commands(body)
    assert isinstance(command, ParsedCommand) and command.accept is not None
    return Accept(1, login, command.accept, comment.id, comment.html_url, WRITTEN, body)


@dataclass(frozen=True)
class Expect:
    outcome: str
    """A regular expression the outcome must match from its start."""
    replies: list[str]
    republished: str | None
    """The conclusion the campaign was published again with (None: not republished)."""


@dataclass(frozen=True)
class Case:
    name: str
    report: str
    body: str
    expect: Expect | dict[str, Expect]
    login: str = "lead"
    config: str = CONFIG_TOML


ACCEPTED = r"accepted: performance FAIL accepted by @\w+ \(max 1\.13\)"
CASES = [
    Case("maintain accepts a performance FAIL within max", "perf_fail", ACCEPT,
         Expect(ACCEPTED, ["accepted"], "success")),
    Case("admin accepts it too", "perf_fail", ACCEPT, Expect(ACCEPTED, ["accepted"], "success"), login="owner"),
    Case("write is not enough by default", "perf_fail", ACCEPT,
         Expect(r"refused: @maintainer has 'write' permission", ["refused"], None), login="maintainer"),
    Case("write may accept where the base branch's config says so", "perf_fail", ACCEPT,
         Expect(ACCEPTED, ["accepted"], "success"), login="maintainer",
         config=CONFIG_TOML + '\n[checks]\naccept_permission = "write"\n'),
    Case("read never", "perf_fail", ACCEPT, Expect(r"refused: @reader has 'read' permission", ["refused"], None),
         login="reader"),
    Case("a FAIL above max is recorded and stays a failure", "perf_fail",
         "/parity accept perf max=1.10 intended", Expect(r"accepted: performance FAIL", ["accepted"], "failure")),
    Case("a size FAIL within max", "size_fail", "/parity accept size max=8% bigger tables are intended",
         Expect(r"accepted: size FAIL accepted by @lead \(max 8%\)", ["accepted"], "success")),
    Case("a semantic FAIL is never accepted", "parity_fail", ACCEPT,
         Expect(r"accept refused: semantic parity FAILed on .*: a semantic FAIL is never accepted", ["refused"], None)),
    Case("an inconclusive result is not accepted", "inconclusive_straddle", ACCEPT,
         Expect(r"accept refused: performance is undecided .*INCONCLUSIVE", ["refused"], None)),
    Case("a blocked result is not accepted", "blocked_timing_field", ACCEPT,
         Expect(r"accept refused: (semantic parity is BLOCKED|performance is undecided)", ["refused"], None)),
    Case("a passing gate has nothing to accept", "size_fail", ACCEPT,
         Expect(r"accept refused: performance PASSed .*nothing to accept", ["refused"], None)),
    Case("rows the base config does not define", "perf_fail", "/parity accept perf rows=nope max=1.13 why",
         Expect(r"accept refused: unknown rows \['nope'\]", ["refused"], None)),
    Case("revoke with nothing standing", "perf_fail", "/parity accept revoke",
         Expect(r"accept refused: head a{12} has no standing acceptance to revoke", ["refused"], None)),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_who_may_accept_what(case: Case, mode: Mode) -> None:
    mode.github.config = case.config
    mode.finish(case.report)
    replied, published = len(mode.publisher.of("reply")), len(mode.publisher.of("finished"))
    outcome = mode.decisions().act(accept(mode, case.body, case.login))
    expect = case.expect[mode.name] if isinstance(case.expect, dict) else case.expect
    assert re.match(expect.outcome, outcome), outcome
    assert [reply["kind"] for reply in mode.publisher.of("reply")[replied:]] == expect.replies
    assert bool(mode.ledger().acceptances(1, HEAD)) == (expect.replies == ["accepted"])
    if mode.name == "sqlite":  # the service republishes on the lifecycle's next tick
        _tick_lifecycle(mode)
    republished = mode.publisher.of("finished")[published:]
    assert [r["conclusion"] for r in republished] == ([expect.republished] if expect.republished else [])


def _tick_lifecycle(mode: Mode) -> None:
    ledger: StoreLedger = mode.ledger()
    assert isinstance(ledger.driver, Lifecycle)
    ledger.driver.tick()


def test_a_comment_written_before_the_current_head_existed_accepts_it_only_without_a_record_of_heads(
    mode: Mode,
) -> None:
    """The store records which head was current when the comment was written, so it refuses (the rule a fork
    approval follows, bot/core/heads.py); Actions-only mode, which records no heads, accepts the head of the moment
    the comment is handled."""
    mode.finish("perf_fail", seen_before=False)
    outcome = mode.decisions().act(accept(mode, ACCEPT))
    if mode.name == "sqlite":
        assert outcome.startswith(f"accept refused: the head is {HEAD[:12]}, but when the comment was written")
    else:
        assert re.match(ACCEPTED, outcome)


def test_a_new_push_ends_the_acceptance(mode: Mode) -> None:
    """Pinned to the head: the next head has no acceptance, whatever was accepted before."""
    mode.finish("perf_fail")
    assert re.match(ACCEPTED, mode.decisions().act(accept(mode, ACCEPT)))
    assert [a.head_sha for a in mode.ledger().acceptances(1, HEAD)] == [HEAD]
    assert mode.ledger().acceptances(1, HEAD2) == []


def test_an_edited_accept_comment_is_refused_where_the_comment_is_the_record(mode: Mode) -> None:
    """Actions-only mode reads the acceptance from the comment itself, so an edit after it was accepted voids it;
    the service kept what it accepted in its database."""
    mode.finish("perf_fail")
    intent = accept(mode, ACCEPT)
    assert re.match(ACCEPTED, mode.decisions().act(intent))
    assert [a.max for a in mode.ledger().acceptances(1, HEAD)] == [1.13]
    index = next(i for i, c in enumerate(mode.github.comments) if c.id == intent.comment_id)
    edited = ACCEPT.replace("1.13", "9.99")
    mode.github.comments[index] = mode.github.comments[index].model_copy(update={"body": edited})
    assert hashlib.sha256(edited.encode()).hexdigest() not in mode.github.comments[-1].body
    assert hashlib.sha256(ACCEPT.encode()).hexdigest() in mode.github.comments[-1].body  # the reply pins the original
    standing = mode.ledger().acceptances(1, HEAD)
    assert [a.max for a in standing] == ([1.13] if mode.name == "sqlite" else [])


def test_an_oversized_report_artifact_skips_that_run_not_the_reading() -> None:
    """Actions-only mode reads a head's finished campaign from its runs' artifacts, newest first: a newer run whose
    upload is over the bound is that run's problem, and the older run's report still answers."""
    [mode] = list(_runs())
    mode.finish("perf_fail")
    [(first_id, first)] = mode.github.runs.items()
    newer_id = first_id + 1
    mode.github.runs[newer_id] = first.model_copy(update={"id": newer_id, "created_at": first.created_at
                                                           + timedelta(minutes=1)})
    oversized = {newer_id}
    served = mode.github.download_artifact

    def download(run_id: int, name: str, max_bytes: int | None = None) -> bytes | None:
        if run_id in oversized:
            raise ArtifactTooLargeError(f"artifact {name!r} of run {run_id} is over {max_bytes} bytes")
        return served(run_id, name, max_bytes)

    mode.github.download_artifact = download  # type: ignore[method-assign]
    finished = mode.ledger().latest_finished(1, HEAD)
    assert finished is not None and finished.campaign.head_sha == HEAD
    assert re.match(ACCEPTED, mode.decisions().act(accept(mode, ACCEPT)))
