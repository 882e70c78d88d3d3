"""Structured logs (issue 38): JSON lines parsed back with what each concerns, the text form for a terminal, which
failures are one line, and which repository and pull request a stored delivery is about."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from bot.github.errors import GitHubNotFoundError, GitHubRetryLaterError, GitHubUnavailableError
from bot.logs import ContextFilter, TextFormatter, delivery_concerns, json_formatter, log_context, log_failure


@pytest.fixture()
def captured() -> Iterator[tuple[logging.Logger, io.StringIO, logging.Handler]]:
    """A logger of its own writing through the service's filter into a buffer (no global configuration)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    logger = logging.getLogger("kv-parity-test-logs")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield logger, stream, handler
    finally:
        logger.removeHandler(handler)


def test_json_lines_carry_what_they_concern_and_a_traceback_stays_on_its_line(
    captured: tuple[logging.Logger, io.StringIO, logging.Handler],
) -> None:
    logger, stream, handler = captured
    handler.setFormatter(json_formatter())
    logger.info("outside")
    with log_context(delivery_id="d-1", repo="acme/widgets", pr=7):
        logger.info("handling %s", "d-1")
        with log_context(campaign_id="kvp-1", pr=None):
            logger.warning("inner")
            try:
                raise RuntimeError("boom\nsecond line")
            except RuntimeError:
                logger.exception("failed")
        logger.info("explicit", extra={"campaign_id": "kvp-2"})
    logger.info("after")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["message"] for line in lines] == ["outside", "handling d-1", "inner", "failed", "explicit", "after"]
    fields = ("delivery_id", "campaign_id", "repo", "pr")
    assert [{key: line.get(key) for key in fields} for line in lines] == [
        dict.fromkeys(fields),
        {"delivery_id": "d-1", "campaign_id": None, "repo": "acme/widgets", "pr": 7},
        {"delivery_id": "d-1", "campaign_id": "kvp-1", "repo": "acme/widgets", "pr": 7},
        {"delivery_id": "d-1", "campaign_id": "kvp-1", "repo": "acme/widgets", "pr": 7},
        {"delivery_id": "d-1", "campaign_id": "kvp-2", "repo": "acme/widgets", "pr": 7},
        dict.fromkeys(fields),
    ]
    assert {line["level"] for line in lines} == {"INFO", "WARNING", "ERROR"}
    assert all(line["logger"] == "kv-parity-test-logs" and line["time"] for line in lines)
    assert lines[3]["exc_info"].startswith("Traceback") and "RuntimeError: boom\nsecond line" in lines[3]["exc_info"]


def test_text_lines_name_what_they_concern_in_brackets(
    captured: tuple[logging.Logger, io.StringIO, logging.Handler],
) -> None:
    logger, stream, handler = captured
    handler.setFormatter(TextFormatter())
    logger.info("plain")
    with log_context(delivery_id="d-1", campaign_id="kvp-1", repo="acme/widgets", pr=7):
        logger.info("handled")
    plain, handled = stream.getvalue().splitlines()
    assert plain.endswith("INFO kv-parity-test-logs: plain")
    assert handled.endswith("handled [delivery_id=d-1 campaign_id=kvp-1 repo=acme/widgets pr=7]")


@pytest.mark.parametrize(
    "error",
    [
        GitHubRetryLaterError("update check run 3: wait", status=403, body=None, retry_after=90, not_before=1e10),
        GitHubUnavailableError("GET pull #1: HTTP 502 Bad Gateway", status=502),
    ],
    ids=["retry-later", "unavailable"],
)
def test_an_expected_github_failure_is_one_warning_line(
    captured: tuple[logging.Logger, io.StringIO, logging.Handler], error: Exception
) -> None:
    logger, stream, handler = captured
    handler.setFormatter(TextFormatter())
    log_failure(logger, error, "campaign %s: publishing %s failed", "kvp-1", "finished")
    [line] = stream.getvalue().splitlines()
    assert f"WARNING kv-parity-test-logs: campaign kvp-1: publishing finished failed: {type(error).__name__}: " in line


@pytest.mark.parametrize("error", [GitHubNotFoundError("compare: HTTP 404", status=404), KeyError("state")])
def test_an_unexpected_failure_keeps_its_traceback(
    captured: tuple[logging.Logger, io.StringIO, logging.Handler], error: Exception
) -> None:
    logger, stream, handler = captured
    handler.setFormatter(TextFormatter())
    try:
        raise error
    except Exception as exc:
        log_failure(logger, exc, "delivery %s failed", "d-1")
    text = stream.getvalue()
    assert text.splitlines()[0].endswith("ERROR kv-parity-test-logs: delivery d-1 failed")
    assert "Traceback (most recent call last)" in text and type(error).__name__ in text


@pytest.mark.parametrize(
    ("payload", "concerns"),
    [
        ({"action": "labeled", "pull_request": {"number": 7}, "repository": {"full_name": "a/b"}}, ("a/b", 7)),
        ({"action": "created", "issue": {"number": 8, "pull_request": {}}, "repository": {"full_name": "a/b"}},
         ("a/b", 8)),
        ({"action": "rerequested", "check_run": {"pull_requests": [{"number": 9}]}, "repository": {"full_name": "a/b"}},
         ("a/b", 9)),
        ({"action": "requested", "check_suite": {"pull_requests": []}, "repository": {"full_name": "a/b"}},
         ("a/b", None)),
        ({"ref": "refs/heads/main", "repository": {"full_name": "a/b"}}, ("a/b", None)),
        ({"action": "checks_requested", "merge_group": {"head_sha": "0" * 40}, "repository": {"full_name": "a/b"}},
         ("a/b", None)),
        ({"zen": "Keep it logically awesome."}, (None, None)),
    ],
    ids=["pull_request", "issue_comment", "check_run", "check_suite", "push", "merge_group", "ping"],
)
def test_a_delivery_names_its_repository_and_pull_request_whatever_its_event(
    payload: dict[str, object], concerns: tuple[str | None, int | None]
) -> None:
    assert delivery_concerns(json.dumps(payload).encode()) == {"repo": concerns[0], "pr": concerns[1]}


def test_a_payload_that_is_not_json_concerns_nothing() -> None:
    assert delivery_concerns(b"\xff not json") == {}
    assert delivery_concerns(b'{"repository": "not an object"}') == {}
