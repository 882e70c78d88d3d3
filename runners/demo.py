"""The bundled demo: a real git repository holding the fixture harness, two revisions, a generated trace.

Tests use the same pieces to commit harness variants (entropy leak, semantic change, slowdown, crash, missing
flag) into temporary repositories, so the demo and the test suite exercise one code path.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from runners.demo_trace import generate_demo_trace
from runners.resources import package_dir
from runners.schema.config import CampaignConfig, load_profile

FIXTURE_DIR = package_dir("kv_parity_fixtures", "replay_harness")
VARIANT_FILE = "lib/bench/src/variant.rs"
GIT_IDENTITY = ("-c", "user.name=kv-parity demo", "-c", "user.email=demo@kv-parity.invalid")

Knob = bool | float | str

REAL_HARNESS_SHAPES: dict[str, Knob] = {"REAL_SHAPES": True}
"""The fixture writing the real harness's report shapes (the reference's "Shapes the engine must accept"): no
coverage placement counter, `agg` pools, only the kinds that occurred, `ais_*` keys, no workload request count."""

SCENARIOS: dict[str, tuple[str, dict[str, Knob]]] = {
    "identical": ("refactor: reword the replay loop's comments (no behaviour change)", {}),
    "slowdown": ("perf: extra work in the replay loop (20% slower)", {"WORK_SCALE": 1.2}),
    "semantic-change": ("fix: transfer only destination-missing KV tokens", {"SEMANTIC_CHANGE": True}),
    "entropy-leak": ("refactor: use a HashMap-ordered tie-break", {"ENTROPY_LEAK": True}),
}


def _git(repo: Path, *args: str) -> str:
    completed = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", *GIT_IDENTITY, "-C", str(repo), *args],
                               capture_output=True, text=True, check=True)
    return completed.stdout.strip()


def set_knobs(tree: Path, knobs: dict[str, Knob]) -> None:
    """Rewrite constants in the fixture's variant.rs; an unknown knob is an error, never ignored."""
    path = tree / VARIANT_FILE
    text = path.read_text(encoding="utf-8")
    for name, value in knobs.items():
        rendered = json.dumps(value) if isinstance(value, str) else (
            str(value).lower() if isinstance(value, bool) else repr(float(value)))
        pattern = re.compile(rf"(pub const {name}: [^=]+= ).*?;")
        text, count = pattern.subn(r"\g<1>" + rendered.replace("\\", "\\\\") + ";", text)
        if count != 1:
            raise KeyError(f"knob {name} not found in {VARIANT_FILE}")
    path.write_text(text, encoding="utf-8")


def init_fixture_repo(repo: Path) -> str:
    """A fresh git repository holding the fixture workspace on `main`; returns the base SHA."""
    shutil.copytree(FIXTURE_DIR, repo, ignore=shutil.ignore_patterns("target"))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base: fixture replay harness")
    return _git(repo, "rev-parse", "HEAD")


def commit_change(repo: Path, message: str, knobs: dict[str, Knob] | None = None,
                  files: dict[str, str] | None = None, touch_comment: bool = False) -> str:
    """Commit a variant on the current branch; returns its SHA."""
    if knobs:
        set_knobs(repo, knobs)
    for relative, content in (files or {}).items():
        target = repo / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
    if touch_comment:
        path = repo / VARIANT_FILE
        path.write_text(path.read_text(encoding="utf-8") + "// Reworded: behaviour unchanged.\n", encoding="utf-8")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


def demo_config() -> CampaignConfig:
    return load_profile("demo")


def prepare_demo(out_dir: Path, scenario: str, profile: str = "demo",
                 base_knobs: dict[str, Knob] | None = None) -> tuple[Path, str, str, Path]:
    """Repository, base SHA, head SHA and trace for one demo scenario; `profile` names the trace window
    (`demo-5000`: the protocol's real size), `base_knobs` a harness variant committed on main first (e.g.
    REAL_HARNESS_SHAPES), so both revisions carry it."""
    if scenario not in SCENARIOS:
        raise KeyError(f"unknown scenario {scenario!r}; choose from {sorted(SCENARIOS)}")
    message, knobs = SCENARIOS[scenario]
    repo = out_dir / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    out_dir.mkdir(parents=True, exist_ok=True)
    base = init_fixture_repo(repo)
    if base_knobs:
        base = commit_change(repo, f"base: harness variant {base_knobs}", knobs=base_knobs)
    _git(repo, "checkout", "-q", "-b", f"demo/{scenario}")
    head = commit_change(repo, message, knobs=knobs, touch_comment=not knobs)
    _git(repo, "checkout", "-q", "main")
    config = load_profile(profile)
    trace = out_dir / config.trace.path
    digest = generate_demo_trace(trace, rows=config.trace.offset + config.trace.count)
    if digest != config.trace.sha256:
        raise RuntimeError(
            f"generated demo trace {digest} does not match the {profile} profile's {config.trace.sha256}"
        )
    return repo, base, head, trace
