"""The fast lane (`pytest -m "not slow"`) compiles nothing and runs no campaign: every test file that builds the
fixture harness, runs a campaign or starts `kv-parity` itself is in tests/conftest.py's SLOW_FILES."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import SLOW_FILES

TESTS = Path(__file__).resolve().parent
BUILDS_OR_RUNS = frozenset({"init_fixture_repo", "run_campaign", "build_artifact", "start_build", "prepare_demo",
                            "run_bisect"})
"""Calls that make a fixture repository to build, build an arm, or run a campaign."""
SLOW_FIXTURES = frozenset({"harness", "kv_parity", "installed_kv_parity"})
"""Fixtures that compile the fixture harness (HarnessBuilder) or start a `kv-parity` process."""


def builds_or_runs(source: str) -> set[str]:
    """The names in `source` that make its file slow: calls of BUILDS_OR_RUNS, tests taking SLOW_FIXTURES."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name in BUILDS_OR_RUNS:
                found.add(name)
        elif isinstance(node, ast.FunctionDef):
            found |= {arg.arg for arg in node.args.args if arg.arg in SLOW_FIXTURES}
    return found


def test_every_file_that_builds_or_runs_a_campaign_is_slow() -> None:
    unmarked = {path.name: sorted(found) for path in sorted(TESTS.glob("test_*.py"))
                if path.name not in SLOW_FILES and (found := builds_or_runs(path.read_text(encoding="utf-8")))}
    assert not unmarked, f"add these to tests/conftest.py SLOW_FILES (the fast lane would build or run): {unmarked}"


def test_the_finder_sees_a_build_a_campaign_and_a_fixture() -> None:
    source = '''
def test_a(harness): ...
def test_b(tmp_path):
    runners.demo.init_fixture_repo(tmp_path)
    run_campaign(request)
'''
    assert builds_or_runs(source) == {"harness", "init_fixture_repo", "run_campaign"}
    assert builds_or_runs("def test_c(tmp_path):\n    assert parse(tmp_path)\n") == set()
