"""Shared fixtures: real builds of fixture-harness variants, the generated demo trace, demo row args."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest

from runners.demo import Knob, commit_change, demo_config, init_fixture_repo
from runners.demo_trace import generate_demo_trace
from runners.exec.build_cache import BUILD_CACHE_ENV, CampaignCache
from runners.exec.sandbox import Sandbox
from runners.schema.config import CampaignConfig
from runners.stages.build import build_artifact
from tests import installed
from tests.installed import KvParity

SLOW_FILES = frozenset({
    "test_actions_backend.py", "test_attacks_containment.py", "test_attacks_fetch.py", "test_attacks_files.py",
    "test_attribution.py", "test_bisect.py", "test_bot_fixture_e2e.py", "test_browser.py", "test_build_cache.py",
    "test_campaign.py", "test_cli.py",
    "test_coverage.py", "test_declared_exclusions.py", "test_distributed.py", "test_fixture_knobs.py",
    "test_fixture_noise.py", "test_html_report.py", "test_independent_harness.py", "test_installed.py",
    "test_instructions.py", "test_lifecycles.py", "test_main_tracking.py", "test_operability.py", "test_pages.py",
    "test_perf.py", "test_publish.py", "test_publish_security.py", "test_real_shapes.py",
    "test_real_size_canonical.py", "test_requests_e2e.py", "test_sandbox.py", "test_server_e2e.py", "test_slurm.py",
    "test_split_build.py", "test_symbols.py", "test_workflow_replay.py", "test_workflows.py", "test_accept_e2e.py",
})
"""Files whose tests build the fixture harness, run campaigns or services end to end, Slurm, Chromium or an
installed wheel (each over 5 s of the suite): `pytest -m "not slow"` runs the rest, the developer's fast lane.
tests/test_fast_lane.py finds the files that build or run campaigns and fails unless they are here."""


LONGEST_FILES = (
    "test_slurm.py", "test_campaign.py", "test_bisect.py", "test_perf.py", "test_split_build.py",
    "test_distributed.py", "test_build_cache.py", "test_instructions.py", "test_declared_exclusions.py",
    "test_workflow_replay.py", "test_server_e2e.py", "test_attacks_files.py", "test_pages.py", "test_installed.py",
    "test_sandbox.py", "test_bot_fixture_e2e.py", "test_html_report.py", "test_independent_harness.py",
    "test_attacks_fetch.py", "test_real_shapes.py", "test_accept_e2e.py", "test_publish.py",
    "test_attacks_containment.py", "test_cli.py", "test_render_hostile.py", "test_browser.py",
    "test_main_tracking.py", "test_actions_backend.py", "test_attribution.py", "test_requests_e2e.py",
    "test_operability.py", "test_event_cli.py", "test_verify.py", "test_accept_actions.py",
    "test_accept_decisions.py", "test_symbols.py", "test_publish_security.py", "test_service_limits.py",
    "test_dependence.py",
)
"""Every file over about 10 s, handed to the workers longest first (a four-worker suite's per-file durations,
2026-12-06, by the method of benchmarks/JOURNAL.md "Fifth pass"; test_slurm.py is mostly waits on one cluster and
must stay on one worker); the short rest follow in collection order and fill the gaps, so the workers end
together, not behind a long file started last (test_workflow_replay.py's 34 s once started at 411 s of 452)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
    rank = {name: place for place, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its own order


KNOB_OVERRIDES_MARKER = b"kv-parity fixture knob overrides"
KNOB_OVERRIDES_BYTES = 1024
"""The fixture's override block (variant.rs `OVERRIDES`): this marker, then NUL-padded JSON the harness reads."""
COMPILED_KNOBS = frozenset({"TEXT_BLOAT"})
"""Knobs that decide what code is compiled (variant.rs): a variant setting one is a build of its own."""


def with_knob_overrides(binary: Path, knobs: dict[str, Knob], out: Path) -> None:
    """Write a copy of a pristine fixture build to `out` carrying `knobs` in its override block."""
    data = bytearray(binary.read_bytes())
    if data.count(KNOB_OVERRIDES_MARKER) != 1:
        raise ValueError(f"{binary} holds the knob override marker {data.count(KNOB_OVERRIDES_MARKER)} times")
    start = data.index(KNOB_OVERRIDES_MARKER) + len(KNOB_OVERRIDES_MARKER)
    block = slice(start, start + KNOB_OVERRIDES_BYTES)
    if any(data[block]):
        raise ValueError(f"{binary} already carries knob overrides")
    text = json.dumps(knobs, sort_keys=True, separators=(",", ":")).encode()
    if len(text) >= KNOB_OVERRIDES_BYTES:
        raise ValueError(f"knob overrides of {len(text)} bytes do not fit the block's {KNOB_OVERRIDES_BYTES}")
    data[block] = text.ljust(KNOB_OVERRIDES_BYTES, b"\0")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    out.chmod(0o755)


class HarnessBuilder:
    """Release builds of fixture variants: one real `cargo build` per distinct tree in the whole session.

    Variants are trees the tests wrote, so they are trusted as a merge base is: each is built as the baseline arm
    through the session build cache (`shared_build_cache`), under a lock per variant, so the workers build it once
    between them and a campaign whose baseline is the same tree reuses it (and the other way round). A variant
    that only sets knobs the harness reads at run time is a copy of the fixture's own build carrying them in its
    override block (variant.rs): the same code, a different binary, and no compile."""

    def __init__(self, root: Path, build_cache: Path | None) -> None:
        self.root = root
        self.build_cache = build_cache
        self._cache: dict[str, Path] = {}

    def binary(self, files: dict[str, str] | None = None, **knobs: Knob) -> Path:
        """`files` replaces whole fixture files (relative path -> content) on top of the knobs."""
        key = hashlib.sha256(json.dumps([knobs, files], sort_keys=True).encode()).hexdigest()[:12]
        if key not in self._cache:
            if knobs and not files and not COMPILED_KNOBS & knobs.keys():
                default = self.binary()
                self._cache[key] = self.root / "bin" / key / default.name
                with_knob_overrides(default, knobs, self._cache[key])
            else:
                self._cache[key] = self._build(key, files, knobs)
        return self._cache[key]

    def _build(self, key: str, files: dict[str, str] | None, knobs: dict[str, Knob]) -> Path:
        repo = self.root / f"variant-{key}"
        init_fixture_repo(repo)
        sha = commit_change(repo, f"variant {knobs}", knobs=knobs, files=files)
        sandbox = Sandbox.default()
        cache = CampaignCache.for_campaign(self.build_cache, f"harness-variant-{key}", sandbox.kind)
        with self._one_builder(key):
            artifact = build_artifact(repo, "baseline", sha, demo_config().build, self.root / "bin" / key,
                                      sandbox=sandbox, cache=cache)
        return self.root / "bin" / key / artifact.binary_name

    @contextmanager
    def _one_builder(self, key: str) -> Iterator[None]:
        """Other workers wanting the same variant wait here, then find it in the cache."""
        if self.build_cache is None:
            yield
            return
        locks = self.build_cache.parent / "harness-variant-locks"
        locks.mkdir(exist_ok=True)
        with (locks / key).open("w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield


def session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's directory, above each xdist worker's own: what is kept there all workers share."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


@pytest.fixture(scope="session", autouse=True)
def shared_build_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path | None]:
    """One build cache for every campaign of the session ($KV_PARITY_BUILD_CACHE is CampaignRequest's default,
    inherited by `kv-parity` subprocesses), shared by its xdist workers (entries are written with O_EXCL and a
    rename, so two workers storing one key is safe): the fixture's base tree is built once, not once per test or
    worker, and so is a candidate tree several tests pull (as a candidate: runners/exec/build_cache.py). Tests of an
    arm's own build opt out with `build_cache=None` or a cache of their own. A variable set before the session
    wins (empty: no cache, as benchmarks/bench_build_cache.py compares)."""
    if BUILD_CACHE_ENV in os.environ:
        yield None
        return
    directory = session_root(tmp_path_factory) / "build-cache"
    os.environ[BUILD_CACHE_ENV] = str(directory)
    yield directory
    del os.environ[BUILD_CACHE_ENV]


@pytest.fixture(scope="session")
def scipy_stats() -> ModuleType:
    """scipy.stats, the reference the exact order statistics are checked against. A fixture, not a module import,
    so only the worker that runs those checks pays its 0.9 s. A runtime dependency: missing, it fails, not skips."""
    import scipy.stats

    return scipy.stats


@pytest.fixture(scope="session")
def harness(tmp_path_factory: pytest.TempPathFactory, shared_build_cache: Path | None) -> HarnessBuilder:
    return HarnessBuilder(tmp_path_factory.mktemp("harness"), shared_build_cache)


@pytest.fixture(scope="session")
def campaign_config() -> CampaignConfig:
    return demo_config()


@pytest.fixture(scope="session")
def demo_trace(tmp_path_factory: pytest.TempPathFactory, campaign_config: CampaignConfig) -> Path:
    """One file for the whole session, its workers included: a config naming it is the same text in every worker,
    so the trees committing that config are the same and the session build cache builds them once
    (tests/configs.py). Written once, under a lock, and renamed into place whole."""
    root = session_root(tmp_path_factory)
    path = root / "demo-trace.jsonl"
    with (root / "demo-trace.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            partial = root / f"demo-trace.{os.getpid()}.partial"
            digest = generate_demo_trace(partial, rows=campaign_config.trace.offset + campaign_config.trace.count)
            assert digest == campaign_config.trace.sha256
            partial.rename(path)
    return path


@pytest.fixture(scope="session")
def demo_row_args(campaign_config: CampaignConfig, demo_trace: Path) -> list[str]:
    """Argv after the binary for the demo's first (aggregated) row."""
    row = campaign_config.rows[0]
    return [str(demo_trace), *campaign_config.harness.common_args, *row.args]


@pytest.fixture()
def fixture_repo(tmp_path: Path) -> Iterator[Path]:
    repo = tmp_path / "repo"
    init_fixture_repo(repo)
    yield repo


@pytest.fixture(scope="session")
def kv_parity() -> KvParity:
    """The `kv-parity` the end-to-end tests run: the installed venv .ci/run provides ($KV_PARITY_INSTALLED_VENV),
    else this checkout's."""
    return installed.provided() or installed.checkout()


@pytest.fixture(scope="session")
def installed_kv_parity(tmp_path_factory: pytest.TempPathFactory) -> KvParity:
    """A non-editable install: the provided one, else one built from a commit of the working tree per session."""
    return installed.provided() or installed.build_installed(tmp_path_factory.mktemp("installed"))
