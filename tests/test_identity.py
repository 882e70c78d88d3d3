"""The bot knows itself by numeric user id, in each of its three modes, through the real gateway and the stand-in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from bot.core.repo_values import BotIdentity
from bot.github.gateway import GitHubGateway
from bot.github.models import ACTIONS_BOT, AppAuth, TokenAuth
from tests.fakes.github_api import FakeGitHub, user_id
from tests.webhooks import REPO, rsa_key_pair


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


def _gateway(fake: FakeGitHub, auth: TokenAuth | AppAuth, bot_login: str | None = None) -> GitHubGateway:
    return GitHubGateway(
        REPO, auth, fake.url, bot_login=bot_login, seconds_between_requests=None, seconds_between_writes=None
    )


def test_token_mode_is_the_token_owner(fake: FakeGitHub) -> None:
    fake.reset()
    fake.add_token("ghp_x", "kv-parity-bot")
    gateway = _gateway(fake, TokenAuth(token=SecretStr("ghp_x")))
    assert gateway.identity() == BotIdentity(login="kv-parity-bot", id=user_id("kv-parity-bot"))
    assert gateway.identity().id == user_id("kv-parity-bot")
    assert len(fake.calls_to("GET", r"^/user$")) == 1, "looked up once"


def test_app_mode_is_the_apps_bot_user_not_the_app_id(fake: FakeGitHub, tmp_path: Path) -> None:
    fake.reset()
    private, public = rsa_key_pair()
    fake.register_app(4242, public, "kv-parity")
    fake.add_repo(REPO)
    fake.add_installation(77, 4242, [REPO])
    gateway = _gateway(fake, AppAuth(app_id=4242, private_key=SecretStr(private), installation_id=77))
    me = gateway.identity()
    assert me == BotIdentity(login="kv-parity[bot]", id=user_id("kv-parity[bot]"))
    assert me.id != 4242 and me.id != user_id("kv-parity"), "a human owning the slug is someone else"
    assert [c.path for c in fake.calls if c.path.startswith("/users/")] == ["/users/kv-parity[bot]"]


def test_actions_mode_is_github_actions_without_a_call(fake: FakeGitHub) -> None:
    fake.reset()
    gateway = _gateway(fake, TokenAuth(token=SecretStr("ghs_unused")), bot_login="github-actions[bot]")
    assert gateway.identity() == ACTIONS_BOT == BotIdentity(login="github-actions[bot]", id=41898282)
    assert fake.calls == []


def test_comments_carry_their_authors_id(fake: FakeGitHub, tmp_path: Path) -> None:
    fake.reset()
    fake.add_token("ghp_x", "kv-parity-bot")
    fake.add_repo(REPO)
    fake.add_pull(REPO, 1, "a" * 40, "feature", "main")
    gateway = _gateway(fake, TokenAuth(token=SecretStr("ghp_x")))
    created = gateway.create_comment(1, "hello")
    assert created.author_id == user_id("kv-parity-bot") == gateway.identity().id
    [listed] = gateway.list_comments(1)
    assert (listed.author_login, listed.author_id) == ("kv-parity-bot", created.author_id)
