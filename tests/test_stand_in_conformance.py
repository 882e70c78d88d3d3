"""The GitHub stand-in is held to GitHub's published OpenAPI description (tests/fakes/openapi.py): what it
accepts and what it answers is checked on every request of every test, and a departure fails the test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.github_api import FakeGitHub
from tests.fakes.openapi import INSTALL, OPENAPI_VERSION, SPEC_ENV, SpecMissing, github_openapi
from tests.webhooks import loopback

REPO = "octo-org/kv-store"
AUTH = {"Authorization": "token ghp_t"}


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        server.add_token("ghp_t", "maintainer")
        server.add_repo(REPO)
        yield server


def test_an_undeclared_query_parameter_fails_naming_it(fake: FakeGitHub) -> None:
    loopback().get(f"{fake.url}/repos/{REPO}", params={"expand": "all"}, headers=AUTH)
    with pytest.raises(AssertionError, match="query parameter 'expand' is not one GitHub declares"):
        fake.check_conformance()


def test_a_request_field_githubs_schema_does_not_name_fails(fake: FakeGitHub) -> None:
    loopback().patch(f"{fake.url}/repos/{REPO}/issues/comments/1", json={"body": "x", "pinned": True}, headers=AUTH)
    assert fake.violations == [], "a request the stand-in refuses (404 here) is not held against it"
    fake.add_pull(REPO, 7, "a" * 40, "feature", "main", base_sha="b" * 40)
    loopback().post(f"{fake.url}/repos/{REPO}/issues/7/comments", json={"body": "x", "pinned": True}, headers=AUTH)
    with pytest.raises(AssertionError, match=r"request body: \(root\): .*properties not in GitHub's schema: pinned"):
        fake.check_conformance()


def test_answers_are_completed_from_githubs_example_and_then_conform(fake: FakeGitHub) -> None:
    """The stand-in models the fields the bot reads; GitHub's documented example supplies the rest."""
    repo = loopback().get(f"{fake.url}/repos/{REPO}", headers=AUTH).json()
    assert repo["full_name"] == REPO and "stargazers_count" in repo
    user = loopback().get(f"{fake.url}/user", headers=AUTH).json()
    assert user["login"] == "maintainer" and user["user_view_type"] == "private"
    fake.check_conformance()


def test_a_path_outside_githubs_api_is_refused_and_not_held_against_it(fake: FakeGitHub) -> None:
    assert loopback().get(f"{fake.url}/repos/{REPO}/nonsense", headers=AUTH).status_code == 404
    fake.check_conformance()


def test_the_missing_description_names_the_install_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(SPEC_ENV, str(tmp_path / "absent.json"))
    with pytest.raises(SpecMissing, match=rf"@octokit/openapi@{OPENAPI_VERSION}\) is not at .*absent\.json; install "
                                          rf"it with `script/bootstrap --test`"):
        github_openapi.__wrapped__()
    assert INSTALL == "script/bootstrap --test"
