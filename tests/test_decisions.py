"""The decision core, table-tested without HTTP (prow's trigger style): (ledger state, intent) -> (effects,
replies, outcome), run through both real ledgers.

`sqlite` is the service's `StoreLedger` over a real SQLite store and the real lifecycle (which never starts a
process here); `runs` is Actions-only mode's `RunTitleLedger` over workflow runs kept in memory and titled by the
campaign workflow's real `run-name`. Where the modes differ on purpose (what a ledger can remember), the row
says so with one expectation per ledger; everything else must come out the same in both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest

from bot.core.campaign import Campaign, CampaignRequest, CampaignState
from bot.core.commands import ParsedCommand, approval_command, parse_commands
from bot.core.decisions import Decisions
from bot.core.events import parse_event
from bot.core.ledger import Ledger
from bot.core.ports import RepoServices
from bot.core.repo_values import BotIdentity, MergeBase, PullInfo
from bot.core.triggers import Cancel, Intent, NeedsApproval, Refuse, Rerun, Start, Status
from bot.dispatch.campaign_workflow import RUN_NAME
from bot.dispatch.local import LocalBackend
from bot.github.models import ACTIONS_BOT, WorkflowRunInfo
from bot.lifecycle import Lifecycle
from bot.modes.run_title_ledger import RunTitleLedger
from bot.modes.store_ledger import StoreLedger
from bot.settings import Settings
from bot.store.campaigns import Store
from tests.webhooks import CONFIG_TOML, REPO, RecordingPublisher, pull_request_event

S = CampaignState
HEAD, HEAD2, FORK, FORK2, LEGACY = "a" * 40, "b" * 40, "c" * 40, "d" * 40, "e" * 40
BASE, TIP, LEGACY_TIP = "1" * 40, "2" * 40, "3" * 40
NAMES = {HEAD: "head", HEAD2: "head2", FORK: "fork", FORK2: "fork2", LEGACY: "legacy"}
TIPS = {"main": TIP, "legacy": LEGACY_TIP}
"""Base branch -> its tip; only main's tip has a campaign config."""
WRITTEN = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
NOW = WRITTEN + timedelta(minutes=5)
PERMISSIONS = {"maintainer": "write", "reader": "read"}


class MemoryGitHub:
    """What a decision reads from GitHub and the Actions calls it makes, in memory: pull requests, permissions,
    merge bases, the config at a base branch's tip, and workflow runs titled from their inputs by RUN_NAME."""

    def __init__(self) -> None:
        self.pulls = {1: self._pull(1, HEAD), 2: self._pull(2, FORK, fork=True), 3: self._pull(3, LEGACY, "legacy")}
        self.runs: dict[int, WorkflowRunInfo] = {}

    @staticmethod
    def _pull(number: int, head: str, base_ref: str = "main", *, fork: bool = False) -> PullInfo:
        return PullInfo(
            number=number, state="open", head_sha=head, head_ref=f"branch-{number}",
            head_repo_full_name="contributor/widgets" if fork else REPO, base_ref=base_ref, base_sha=TIPS[base_ref],
            is_fork=fork, author_login="contributor", labels=["kv-parity"], html_url=f"https://example/pull/{number}",
        )

    def pull(self, number: int) -> PullInfo:
        return self.pulls[number]

    def permission(self, login: str) -> str:
        return PERMISSIONS.get(login, "none")

    def merge_base(self, base_ref: str, head_sha: str) -> MergeBase:
        return MergeBase(sha=BASE, base_tip_sha=TIPS[base_ref], status="diverged", ahead_by=1, behind_by=1)

    def read_file(self, path: str, ref: str) -> bytes | None:
        return CONFIG_TOML.encode() if ref == TIP else None

    def dispatch_workflow(self, workflow_file: str, ref: str, inputs: Mapping[str, str]) -> None:
        title = re.sub(r"\$\{\{\s*inputs\.(\w+)\s*\}\}", lambda match: inputs.get(match.group(1), ""), RUN_NAME)
        run_id = len(self.runs) + 1
        self.runs[run_id] = WorkflowRunInfo(
            id=run_id, display_title=title, status="queued", conclusion=None,
            html_url=f"https://example/runs/{run_id}", created_at=NOW + timedelta(seconds=run_id),
        )

    def workflow_runs(self, workflow_file: str, status: str) -> list[WorkflowRunInfo]:
        return [run for run in self.runs.values() if run.status == status]

    def cancel_workflow_run(self, run_id: int) -> bool:
        self.complete(run_id, "cancelled")
        return True

    def complete(self, run_id: int, conclusion: str) -> None:
        self.runs[run_id] = self.runs[run_id].model_copy(update={"status": "completed", "conclusion": conclusion})

    def identity(self) -> BotIdentity:
        return ACTIONS_BOT


def label_of(campaign: Campaign) -> str:
    """How a row names a campaign: head, rows and mode (ids are random)."""
    return f"{NAMES[campaign.head_sha]} {','.join(campaign.rows) if campaign.rows else 'all'} {campaign.mode}"


class Spy:
    """The real ledger, with the effects a row expects (endings and launches) written down as they happen."""

    def __init__(self, ledger: Ledger, effects: list[tuple[str, ...]]) -> None:
        self._ledger, self._effects = ledger, effects

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)

    def end(
        self, campaign: Campaign, state: CampaignState, reason: str, *, published_state: str | None = None
    ) -> None:
        self._effects.append(("end", label_of(campaign), str(published_state or state)))
        self._ledger.end(campaign, state, reason, published_state=published_state)

    def launch(self, campaign: Campaign) -> str:
        self._effects.append(("launch", label_of(campaign)))
        return self._ledger.launch(campaign)


@dataclass(frozen=True)
class Pushed:
    """A table step that is a delivery, not an intent: the head of fork pull request #2 became `head`, and the
    bot received the `pull_request` delivery saying so at `at` (the ledger records heads from it)."""

    head: str
    at: datetime
    action: str = "synchronize"


@dataclass
class Mode:
    """One ledger implementation and what it acts through; `act` builds a fresh ledger per event, as both
    adapters do."""

    name: str
    github: MemoryGitHub
    publisher: RecordingPublisher
    settings: Settings
    new_ledger: Callable[[], Ledger]
    effects: list[tuple[str, ...]] = field(default_factory=list)

    def decisions(self) -> Decisions:
        ledger = cast(Ledger, Spy(self.new_ledger(), self.effects))
        return Decisions(ledger, self.github, self.publisher, self.settings, clock=NOW.timestamp)

    def act(self, step: Intent | Pushed) -> str:
        if isinstance(step, Pushed):
            return self.push(step)
        return self.decisions().act(step)

    def push(self, pushed: Pushed) -> str:
        """The fork's author makes `head` the head of #2 (what a fetch now sees) and its delivery arrives at `at`."""
        self.github.pulls[2] = self.github.pulls[2].model_copy(update={"head_sha": pushed.head})
        payload = pull_request_event(pushed.action, number=2, head_sha=pushed.head, base_sha=TIP, fork=True,
                                     sender="contributor", labels=("kv-parity",))
        event = parse_event("pull_request", json.dumps(payload).encode())
        return self.decisions().handle(event, bot_id=ACTIONS_BOT.id, received_at=pushed.at.timestamp())

    def replies(self) -> list[dict[str, Any]]:
        return self.publisher.of("reply")


def _sqlite(tmp_path: Path) -> Iterator[Mode]:
    github, publisher = MemoryGitHub(), RecordingPublisher()
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

    def ledger() -> Ledger:
        return StoreLedger(store, lifecycle, REPO, backend="local", delivery_id=f"d-{next(deliveries)}")

    try:
        yield Mode("sqlite", github, publisher, settings, ledger)
    finally:
        store.close()


def _runs() -> Iterator[Mode]:
    github, publisher = MemoryGitHub(), RecordingPublisher()
    settings = Settings(webhook_secret="unused", token="unused", backend="actions", bot_login=ACTIONS_BOT.login)

    def ledger() -> Ledger:
        return RunTitleLedger(github, publisher, settings, REPO, clock=NOW.timestamp)

    yield Mode("runs", github, publisher, settings, ledger)


@pytest.fixture(params=["sqlite", "runs"])
def mode(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Mode]:
    yield from (_sqlite(tmp_path) if request.param == "sqlite" else _runs())


# ----------------------------------------------------------------- the table


def label(pr: int = 1, head: str = HEAD, base_ref: str = "main", *, approve: bool = False) -> Start:
    return Start(pr, head, base_ref, "label", "maintainer", approve_head=approve)


def push(head: str) -> Start:
    return Start(1, head, "main", "synchronize", "maintainer", approve_head=False)


def rerun(pr: int = 1, **kwargs: Any) -> Rerun:
    return Rerun(pr, "maintainer", "comment", **kwargs)


def cancel(trigger: str) -> Cancel:
    return Cancel(1, "maintainer", trigger, f"cancel by @maintainer ({trigger})")


PLAIN_FORK_RERUN_REFUSED = (r"invalid: a plain `/parity rerun` cannot approve the head of a fork pull request here: "
                            "nothing records which head the comment was written about")
REFUSE = Refuse(1, "reader", "read", "@reader has 'read' permission; a `/parity` command needs 'write'")
LAUNCHED = r"(dispatched )?campaign kvp-[0-9a-f]{12}"


@dataclass(frozen=True)
class Expect:
    effects: list[tuple[str, ...]]
    replies: list[str]
    """Reply kinds, in order."""
    outcome: str
    """A regular expression the outcome must match from its start."""


@dataclass(frozen=True)
class Case:
    name: str
    setup: tuple[Intent | Pushed, ...]
    intent: Intent
    expect: Expect | dict[str, Expect]
    """One expectation for both ledgers, or one per ledger where the modes differ on purpose."""


CASES = [
    Case("a label launches", (), label(), Expect([("launch", "head all campaign")], [], LAUNCHED)),
    Case("the label again while live is a duplicate", (label(),), label(), Expect([], ["duplicate"], "duplicate of ")),
    Case(
        "a rerun replaces the live campaign of its rows (Actions: a duplicate, one run per head, rows and mode)",
        (label(),),
        rerun(),
        {
            "sqlite": Expect(
                [("end", "head all campaign", "superseded"), ("launch", "head all campaign")], [], LAUNCHED
            ),
            "runs": Expect([], ["duplicate"], "duplicate of kvp-"),
        },
    ),
    Case(
        "a rerun of other rows runs beside the first (Actions: replaces it, one run per head and mode)",
        (rerun(rows=("vllm-agg",)),),
        rerun(rows=("vllm-disagg",)),
        {
            "sqlite": Expect([("launch", "head vllm-disagg campaign")], [], LAUNCHED),
            "runs": Expect(
                [("end", "head vllm-agg campaign", "superseded"), ("launch", "head vllm-disagg campaign")], [], LAUNCHED
            ),
        },
    ),
    Case(
        "a push supersedes the old head's campaign",
        (label(),),
        push(HEAD2),
        Expect([("end", "head all campaign", "superseded"), ("launch", "head2 all campaign")], [], LAUNCHED),
    ),
    Case(
        "a profile runs beside the campaign of its head",
        (label(),),
        rerun(profile=True),
        Expect([("launch", "head all profile")], [], LAUNCHED),
    ),
    Case("cancel with nothing live is answered", (), cancel("comment"), Expect([], ["refused"], r"cancelled \[\]")),
    Case(
        "cancel ends the live campaign",
        (label(),),
        cancel("comment"),
        Expect([("end", "head all campaign", "cancelled")], [], r"cancelled \['kvp-"),
    ),
    Case("a label removal with nothing live is quiet", (), cancel("label"), Expect([], [], r"cancelled \[\]")),
    Case(
        "a fork approved by its full SHA launches",
        (),
        rerun(2, sha=FORK),
        Expect([("launch", "fork all campaign")], [], LAUNCHED),
    ),
    Case(
        "a fork approval by a prefix is refused",
        (),
        rerun(2, sha=FORK[:12]),
        Expect([], ["refused"], r"invalid: `sha=c{12}` is not a full commit SHA"),
    ),
    Case(
        "a fork approval of a head that moved is refused",
        (),
        rerun(2, sha=FORK2),
        Expect([], ["refused"], r"invalid: the head moved from d{12} to c{12}"),
    ),
    Case(
        "a plain rerun of a fork head first seen after the comment (Actions: no record of heads, asks for sha=)",
        (),
        rerun(2, written_at=WRITTEN),
        {
            "sqlite": Expect([], ["refused"], r"invalid: the head of this fork pull request is c{12}, but when the "
                                              r"comment was written \(.*\) the bot had recorded no head"),
            "runs": Expect([], ["refused"], PLAIN_FORK_RERUN_REFUSED),
        },
    ),
    Case(
        "a plain rerun of the fork head that was the head when the comment was written (Actions: asks for sha=)",
        (Pushed(FORK2, WRITTEN - timedelta(minutes=3), "opened"), Pushed(FORK, WRITTEN - timedelta(minutes=2))),
        rerun(2, written_at=WRITTEN),
        {
            "sqlite": Expect([("launch", "fork all campaign")], [], LAUNCHED),
            "runs": Expect([], ["refused"], PLAIN_FORK_RERUN_REFUSED),
        },
    ),
    Case(
        "A-B-A: the author pushes BAD, then GOOD, the maintainer reviews GOOD and comments a plain rerun, the "
        "author pushes BAD again before the comment is handled: BAD is not approved",
        (
            Pushed(FORK2, WRITTEN - timedelta(minutes=3), "opened"),
            Pushed(FORK, WRITTEN - timedelta(minutes=2)),
            Pushed(FORK2, WRITTEN + timedelta(minutes=1)),
        ),
        rerun(2, written_at=WRITTEN),
        {
            "sqlite": Expect([], ["refused"], r"invalid: the head of this fork pull request is d{12}, but when the "
                                              r"comment was written \(.*\) the bot had recorded c{12} as its head"),
            "runs": Expect([], ["refused"], PLAIN_FORK_RERUN_REFUSED),
        },
    ),
    Case(
        "the reviewed head pushed away and back after the comment is not approved by a plain rerun either",
        (
            Pushed(FORK, WRITTEN - timedelta(minutes=2), "opened"),
            Pushed(FORK2, WRITTEN + timedelta(minutes=1)),
            Pushed(FORK, WRITTEN + timedelta(minutes=2)),
        ),
        rerun(2, written_at=WRITTEN),
        {
            "sqlite": Expect([], ["refused"], r"invalid: the head of this fork pull request moved after the comment "
                                              r"was written \(.*\): to d{12} at .* \(pull_request synchronize\)"),
            "runs": Expect([], ["refused"], PLAIN_FORK_RERUN_REFUSED),
        },
    ),
    Case(
        "a fork's new head supersedes its live campaign and asks for approval",
        (label(2, FORK, approve=True),),
        NeedsApproval(2, FORK2, "new head of a fork pull request"),
        Expect([("end", "fork all campaign", "superseded")], ["refused"], f"needs approval: {FORK2}"),
    ),
    Case(
        "a refusal within the window (Actions: answered every time)",
        (REFUSE,),
        REFUSE,
        {
            "sqlite": Expect([], [], r"refused again, not answered \(one answer per 600 s\)"),
            "runs": Expect([], ["refused"], "refused: @reader"),
        },
    ),
    Case(
        "a base without a config records the campaign and ends it as a config error",
        (),
        label(3, LEGACY, "legacy"),
        Expect([("end", "legacy all campaign", "config_error")], [], r"config error: campaign kvp-"),
    ),
    Case(
        "unknown rows are refused before anything is recorded",
        (),
        rerun(rows=("nope",)),
        Expect([], ["refused"], r"invalid: unknown rows \['nope'\]"),
    ),
    Case("status is answered", (label(),), Status(1, "maintainer"), Expect([], ["status"], "status$")),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_decision_table(case: Case, mode: Mode) -> None:
    for intent in case.setup:
        mode.act(intent)
    mode.effects.clear()
    replied = len(mode.replies())
    outcome = mode.act(case.intent)
    expect = case.expect[mode.name] if isinstance(case.expect, dict) else case.expect
    assert re.match(expect.outcome, outcome), outcome
    assert mode.effects == expect.effects
    assert [reply["kind"] for reply in mode.replies()[replied:]] == expect.replies


def test_a_b_a_approves_nothing_and_the_reply_names_the_current_head_by_the_one_hint_writer(mode: Mode) -> None:
    """The swapped-back head is neither run nor approved; the answer is the `sha=` command of the current head,
    written by `approval_command`, and commenting it back approves exactly that head."""
    for step in (Pushed(FORK2, WRITTEN - timedelta(minutes=3), "opened"), Pushed(FORK, WRITTEN - timedelta(minutes=2)),
                 Pushed(FORK2, WRITTEN + timedelta(minutes=1))):
        mode.act(step)
    replied = len(mode.replies())
    mode.effects.clear()
    mode.act(rerun(2, written_at=WRITTEN))
    [reply] = mode.replies()[replied:]
    assert reply["kind"] == "refused" and mode.effects == []
    assert not mode.new_ledger().is_approved(2, FORK2) and not mode.new_ledger().is_approved(2, FORK)
    [hinted] = re.findall(r"`([^`]*)`", reply["context"]["fix"])
    assert hinted == approval_command("/parity", FORK2)
    [command] = parse_commands(hinted)
    assert isinstance(command, ParsedCommand)
    outcome = mode.act(rerun(2, sha=command.sha, written_at=WRITTEN + timedelta(minutes=6)))
    assert re.match(LAUNCHED, outcome) and mode.effects == [("launch", "fork2 all campaign")]


# ----------------------------------------------------------------- what only one ledger remembers


def test_the_hint_for_a_new_fork_head_when_commented_back_launches_exactly_that_head(mode: Mode) -> None:
    """The one writer of hints (`approval_command`) names all 40 hex digits, so the hinted command is accepted."""
    mode.github.pulls[2] = mode.github.pulls[2].model_copy(update={"head_sha": FORK2})
    mode.act(NeedsApproval(2, FORK2, "new head of a fork pull request"))
    [reply] = mode.replies()
    [hinted] = re.findall(r"`([^`]*)`", reply["context"]["fix"])
    [command] = parse_commands(hinted)
    assert isinstance(command, ParsedCommand) and command.sha == FORK2
    mode.effects.clear()
    outcome = mode.act(rerun(2, rows=command.rows, sha=command.sha, written_at=WRITTEN))
    assert re.match(LAUNCHED, outcome) and mode.effects == [("launch", "fork2 all campaign")]
    assert len(mode.replies()) == 1, "accepted, not refused"


def test_only_the_store_keeps_a_fork_approval(mode: Mode) -> None:
    """A push of an approved head starts by itself in the service; in Actions-only mode it never dispatches."""
    mode.act(rerun(2, sha=FORK))
    assert mode.new_ledger().is_approved(2, FORK) is (mode.name == "sqlite")
    assert not mode.new_ledger().is_approved(2, FORK2)


def test_only_the_store_answers_a_label_with_a_completed_campaign(mode: Mode, tmp_path: Path) -> None:
    """The service remembers completed campaigns; a completed workflow run is not in the runs ledger."""
    mode.act(label())
    [campaign] = mode.new_ledger().live(1)
    if mode.name == "sqlite":
        store = Store(mode.settings.db_path)
        for state in (S.DISPATCHED, S.RUNNING, S.COMPLETED):
            store.transition(campaign.id, state, f"test: {state}")
        store.close()
    else:
        [run_id] = mode.github.runs
        mode.github.complete(run_id, "success")
    mode.effects.clear()
    outcome = mode.act(label())
    if mode.name == "sqlite":
        assert outcome == f"duplicate of {campaign.id}" and mode.effects == []
    else:
        assert re.match(LAUNCHED, outcome) and mode.effects == [("launch", "head all campaign")]


def test_a_ledger_only_records_and_launching_is_what_publishes(mode: Mode) -> None:
    """Recording a campaign writes nothing to GitHub in either mode (issue 39: the service's ledger used to open
    the check run while recording); launching it shows it, through the publisher alone."""
    ledger = mode.new_ledger()
    request = CampaignRequest(
        pr_number=1, head_sha=HEAD, base_sha=BASE, relationship="ancestor", rows=None, rows_key="vllm-agg",
        requested_by="maintainer", trigger="label", config_text=CONFIG_TOML,
        config_source=f".github/kv-parity.toml @ {TIP} (base branch tip)", config_sha=TIP, rerun=False,
    )
    campaign = ledger.create(request)
    assert mode.publisher.calls == [], "recording published something"
    assert (campaign.head_sha, campaign.base_sha, campaign.config_sha) == (HEAD, BASE, TIP)
    ledger.launch(campaign)
    assert [(call["method"], call["campaign"]) for call in mode.publisher.calls] == [("queued", campaign.id)]
