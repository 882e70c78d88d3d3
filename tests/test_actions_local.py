"""The local Actions runner's expression evaluator (tests/actions_local.py): `contains()` and the `labels.*.name`
object filter, which the trigger workflow's pre-filter rests on, checked against what GitHub documents for them
(case-insensitive; an element of an array or a substring of a string; the filter yields every element's property)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.actions_local import LocalRun

TRIGGER = Path(__file__).resolve().parent.parent / ".github" / "workflows" / "kv-parity-trigger.yml"


def _run(tmp_path: Path) -> LocalRun:
    return LocalRun(TRIGGER, tmp_path / "origin", tmp_path / "runner", inputs={}, variables={})


def _scope(event: dict[str, Any], variables: dict[str, str] | None = None, event_name: str = "") -> dict[str, Any]:
    return {"github": {"event": event, "event_name": event_name}, "vars": variables or {}}


LABELLED = "contains(github.event.pull_request.labels.*.name, 'kv-parity')"


@pytest.mark.parametrize(("labels", "expected"), [
    ([{"name": "KV-Parity"}], True),
    ([{"name": "documentation"}, {"name": "kv-parity"}], True),
    ([], False),
    ([{"name": "kv-parity-later"}], False),
    ([{"color": "ededed"}], False),
])
def test_contains_over_the_label_names_is_element_equality_ignoring_case(
    tmp_path: Path, labels: list[dict[str, str]], expected: bool,
) -> None:
    event = {"pull_request": {"labels": labels}}
    assert _run(tmp_path).evaluate(LABELLED, _scope(event)) is expected


def test_the_object_filter_yields_every_elements_property_and_nothing_without_a_list(tmp_path: Path) -> None:
    run = _run(tmp_path)
    labels = [{"name": "a"}, {"name": "B"}, {"color": "c"}]
    expression = "github.event.pull_request.labels.*.name"
    assert run.evaluate(expression, _scope({"pull_request": {"labels": labels}})) == ["a", "B", ""]
    assert run.evaluate(expression, _scope({"pull_request": {}})) == []
    assert run.evaluate(LABELLED, _scope({})) is False


@pytest.mark.parametrize(("body", "expected"), [
    ("/parity run", True),
    ("please /PARITY accept perf max=1.1 why", True),
    ("looks good to me", False),
    ("", False),
])
def test_contains_over_a_string_is_a_substring_ignoring_case(tmp_path: Path, body: str, expected: bool) -> None:
    expression = "contains(github.event.comment.body, '/parity')"
    assert _run(tmp_path).evaluate(expression, _scope({"comment": {"body": body}})) is expected


def _trigger_if() -> str:
    definition = yaml.safe_load(TRIGGER.read_text(encoding="utf-8"))
    condition: str = definition["jobs"]["event"]["if"]
    return condition


@pytest.mark.parametrize(("labels", "variables", "expected"), [
    ([{"name": "kv-parity"}], {}, True),
    ([], {}, False),
    ([{"name": "perf-check"}], {"KV_PARITY_LABEL": "perf-check"}, True),
    ([{"name": "kv-parity"}], {"KV_PARITY_LABEL": "perf-check"}, False),
    ([], {"KV_PARITY_WATCHED_PATHS": "true"}, True),
])
def test_the_trigger_pre_filter_runs_a_push_only_where_the_label_or_watched_paths_say_so(
    tmp_path: Path, labels: list[dict[str, str]], variables: dict[str, str], expected: bool,
) -> None:
    """The workflow's own `if` on a push to a pull request (`synchronize`): the label decides, under its
    configured name, unless the repository watches paths (then `kv-parity event` decides)."""
    event = {"action": "synchronize", "pull_request": {"number": 1, "labels": labels}}
    scope = _scope(event, variables, event_name="pull_request_target")
    assert bool(_run(tmp_path).evaluate(_trigger_if(), scope)) is expected


@pytest.mark.parametrize(("body", "variables", "expected"), [
    ("/parity run", {}, True),
    ("lgtm", {}, False),
    ("!kv run", {"KV_PARITY_COMMAND_WORD": "!kv"}, True),
])
def test_the_trigger_pre_filter_runs_a_comment_only_where_it_names_the_command_word(
    tmp_path: Path, body: str, variables: dict[str, str], expected: bool,
) -> None:
    event = {"issue": {"number": 1, "pull_request": {"url": "https://api.github.com/repos/acme/widgets/pulls/1"}},
             "comment": {"body": body}}
    scope = _scope(event, variables, event_name="issue_comment")
    assert bool(_run(tmp_path).evaluate(_trigger_if(), scope)) is expected
