"""The build cache with real builds: a base tree built once is reused as a baseline, a head built once by its
reruns, and a candidate's build never serves a baseline; a tampered or linked entry is refused and rebuilt; any
change to what determines the build misses; no sandbox ever sees the cache."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from runners.demo import commit_change, init_fixture_repo
from runners.exec import build_cache
from runners.exec.build_cache import BuildCache, BuildCacheError, BuildKey, CacheEntry, CampaignCache
from runners.exec.sandbox import Run, Sandbox, sha256_of
from runners.pipeline.campaign import CampaignRequest, CampaignStop, new_report, prepare
from runners.pipeline.distributed.artifacts import load_manifest
from runners.schema.config import CampaignConfig
from runners.schema.report import Arm, Artifact, CampaignReport
from runners.stages.build import CANDIDATE_AWAITS_SIZE_GATE, StartedBuild, build_artifact, finish_build, start_build
from runners.stages.revisions import worktree

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (the bubblewrap package)")

BUILD_RS = "lib/bench/build.rs"


class RecordingSandbox(Sandbox):
    """The real bubblewrap sandbox, noting every start: which cargo command ran in which worktree."""

    def __init__(self) -> None:
        super().__init__("bwrap")
        self.starts: list[Run] = []

    def run(self, run: Run, *, timeout: float | None = None, text: bool = True) -> subprocess.CompletedProcess[str]:
        self.starts.append(run)
        return super().run(run, timeout=timeout, text=text)

    def cargo(self, tree: str, command: str) -> list[Run]:
        """Starts of `cargo <command>` for the worktree named `tree` (the fetch names it by manifest path)."""
        return [run for run in self.starts if run.argv[:2] == ["cargo", command]
                and any(tree in word for word in (*run.argv, str(run.cwd)))]


@dataclass
class Built:
    report: CampaignReport
    sandbox: RecordingSandbox

    def artifact(self, arm: Arm) -> Artifact:
        return self.report.artifact(arm)


def prepared(repo: Path, base: str, head: str, config: CampaignConfig, trace: Path, out: Path, cache: Path | None,
             campaign_id: str) -> Built:
    """The campaign's build stage (pin, trace, both builds, preflight, sizes) with a recording sandbox."""
    sandbox = RecordingSandbox()
    request = CampaignRequest(repo=repo, base=base, head=head, config=config, config_source="test", out_dir=out,
                              trace_path=trace, sandbox=sandbox, build_cache=cache, campaign_id=campaign_id)
    report = new_report(request)
    (out / "work").mkdir(parents=True)
    prepare(request, report, out / "work", None)
    return Built(report, sandbox)


@pytest.fixture()
def cache_dir(tmp_path: Path) -> Path:
    """This test's own cache, laid out as the service's: beside the campaigns' directories."""
    return tmp_path / "state" / "build-cache"


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory, campaign_config: CampaignConfig,
           shared_build_cache: Path | None) -> Iterator[tuple[Path, str]]:
    """A cache of this module's own holding one real baseline build of the fixture, by another campaign; yields
    (cache dir, the entry's digest). The entry is the session cache's (tests/conftest.py), where most suites have
    it already, copied: the fixture's base is not compiled once more for this module."""
    root = tmp_path_factory.mktemp("stored")
    repo = root / "repo"
    sha = init_fixture_repo(repo)
    directory = root / "build-cache"
    artifact = build_baseline(repo, sha, campaign_config, root / "first", shared_build_cache or directory, "c-stored")
    assert artifact.build_cache is not None
    digest = artifact.build_cache.key_sha256
    if shared_build_cache is not None:
        directory.mkdir(mode=0o700)
        shutil.copytree(shared_build_cache / digest, directory / digest)
    yield directory, digest


def build_baseline(repo: Path, sha: str, config: CampaignConfig, out: Path, cache: Path, campaign_id: str,
                   sandbox: Sandbox | None = None, patches: dict[str, str] | None = None) -> Artifact:
    with worktree(repo, sha, out / "tree-baseline") as tree:
        use = CampaignCache(BuildCache(cache), campaign_id, patches or {})
        return build_artifact(tree, "baseline", sha, config.build, out / "bin", sandbox=sandbox or Sandbox("bwrap"),
                              cache=use)


def entry(directory: Path, digest: str) -> CacheEntry:
    return CacheEntry.model_validate_json((directory / digest / "entry.json").read_bytes())


def entry_key(directory: Path, digest: str) -> BuildKey:
    return entry(directory, digest).key


def seeded(stored: tuple[Path, str], cache: Path) -> CacheEntry:
    """`cache` (made here, the service's mode) holding a copy of the module's stored entry: a base tree another
    campaign built, without building it again."""
    directory, digest = stored
    cache.mkdir(parents=True)
    cache.chmod(0o700)
    shutil.copytree(directory / digest, cache / digest)
    return entry(cache, digest)


# --- reuse ----------------------------------------------------------------------------------------------------


def test_each_arm_is_reused_only_as_that_arm_so_a_rerun_builds_nothing_and_a_candidate_never_serves_a_base(
        stored: tuple[Path, str], tmp_path: Path, campaign_config: CampaignConfig, demo_trace: Path,
        cache_dir: Path) -> None:
    """The cache holds the base tree another campaign built (`first`: it fetched, compiled and stored it).
    Another repository, another commit SHA for the same tree, and a candidate whose tree equals that base: the
    baseline is reused; the candidate is built all the same (a baseline's entry serves no candidate) and stored
    as a candidate. A rerun at the same head then builds nothing. Once the base's own entry is gone, the
    candidate's build of that very tree does not serve it as a baseline (pull-request code produced it)."""
    first = seeded(stored, cache_dir)
    repo = tmp_path / "repo"
    base_sha = init_fixture_repo(repo)
    same_tree = commit_change(repo, "an empty commit: the base's tree")
    second = prepared(repo, base_sha, same_tree, campaign_config, demo_trace, tmp_path / "c2", cache_dir,
                      "c-second")
    baseline, candidate = second.artifact("baseline"), second.artifact("candidate")
    assert baseline.build_cache is not None and baseline.build_cache.reused_from == first.campaign_id
    assert baseline.build_cache.key_sha256 == stored[1]
    assert baseline.sha == base_sha != first.artifact.sha
    assert baseline.binary_sha256 == first.artifact.binary_sha256
    assert not second.sandbox.cargo("tree-baseline", "build") and not second.sandbox.cargo("tree-baseline", "fetch")
    assert second.sandbox.cargo("tree-candidate", "build"), "a baseline's entry does not serve a candidate"
    assert candidate.build_cache is not None and candidate.build_cache.reused_from is None
    candidate_key = entry_key(cache_dir, candidate.build_cache.key_sha256)
    assert candidate_key.arm == "candidate" and candidate_key.tree == entry_key(cache_dir, stored[1]).tree
    assert sorted(path.name for path in cache_dir.iterdir() if not path.name.startswith(".")) == sorted(
        [stored[1], candidate.build_cache.key_sha256])
    binary = tmp_path / "c2" / "work" / "bin" / baseline.binary_name
    assert sha256_of(binary) == baseline.binary_sha256 and (binary.stat().st_mode & 0o777) == 0o555
    assert f"reused from campaign {first.campaign_id}" in baseline.build_cache.summary()

    rerun = prepared(repo, base_sha, same_tree, campaign_config, demo_trace, tmp_path / "c3", cache_dir, "c-rerun")
    assert not rerun.sandbox.cargo("tree-", "build") and not rerun.sandbox.cargo("tree-", "fetch")
    again = rerun.artifact("candidate")
    assert again.build_cache is not None and again.build_cache.reused_from == "c-second"
    assert again.binary_sha256 == candidate.binary_sha256

    shutil.rmtree(cache_dir / stored[1])
    merged = look_up_baseline(repo, same_tree, campaign_config, tmp_path / "merged", cache_dir, "c-merged",
                              RecordingSandbox())
    assert isinstance(merged, StartedBuild), "a candidate's build of the same tree never serves a baseline"
    assert merged.key is not None and merged.key.tree == candidate_key.tree and merged.key.arm == "baseline"


def test_two_campaigns_that_need_the_same_base_at_once_compile_it_once(
        tmp_path: Path, campaign_config: CampaignConfig, cache_dir: Path) -> None:
    """Both look the base up before either has stored it, so both miss. The first to compile holds the key; the
    other waits, then reuses what it stored: one compile where there were two (at a suite's start, three)."""
    repo = tmp_path / "repo"
    sha = init_fixture_repo(repo)
    sandbox = RecordingSandbox()
    with worktree(repo, sha, tmp_path / "a" / "tree-a") as tree_a, \
            worktree(repo, sha, tmp_path / "b" / "tree-b") as tree_b:
        started = [start_build(tree, "baseline", sha, campaign_config.build, tmp_path / name / "bin",
                               sandbox=sandbox, cache=CampaignCache(BuildCache(cache_dir), f"c-{name}"))
                   for name, tree in (("a", tree_a), ("b", tree_b))]
        assert all(isinstance(start, StartedBuild) for start in started), "neither found the base stored"
        with ThreadPoolExecutor(max_workers=2) as pool:
            artifacts = list(pool.map(finish_build, started))
    records = [artifact.build_cache for artifact in artifacts]
    assert all(record is not None for record in records)
    [builder] = [name for name, record in zip("ab", records, strict=True) if record and record.reused_from is None]
    [reuser] = [record for record in records if record and record.reused_from is not None]
    assert reuser.reused_from == f"c-{builder}"
    assert len(sandbox.cargo("tree-a", "build")) + len(sandbox.cargo("tree-b", "build")) == 1
    assert artifacts[0].binary_sha256 == artifacts[1].binary_sha256


# --- what the key holds ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("change", ["determinism patch", "harness patch", "RUSTFLAGS", "cargo config", "features",
                                    "toolchain", "toolchain file", "tree", "build command"])
def test_any_change_to_what_determines_the_build_misses(stored: tuple[Path, str], change: str) -> None:
    directory, digest = stored
    key = entry_key(directory, digest)
    settings = key.settings
    changed = {
        "determinism patch": key.model_copy(update={"patches": {**key.patches, "determinism": "1" * 64}}),
        "harness patch": key.model_copy(update={"patches": {**key.patches, "harness": "2" * 64}}),
        "RUSTFLAGS": key.model_copy(update={"settings": settings.model_copy(
            update={"rustflags_env": "-C debuginfo=1"})}),
        "cargo config": key.model_copy(update={"settings": settings.model_copy(
            update={"cargo_config_sha256": {**settings.cargo_config_sha256, ".cargo/config.toml": "3" * 64}})}),
        "features": key.model_copy(update={"feature_closure": [*key.feature_closure, "test-support"]}),
        "toolchain": key.model_copy(update={"settings": settings.model_copy(
            update={"rustc": settings.rustc.replace("rustc ", "rustc 0.0.0-other ", 1)})}),
        "toolchain file": key.model_copy(update={"settings": settings.model_copy(
            update={"toolchain_file_sha256": {"rust-toolchain.toml": "4" * 64}})}),
        "tree": key.model_copy(update={"tree": "5" * 40}),
        "build command": key.model_copy(update={"build_command": [*key.build_command, "--locked"]}),
    }[change]
    cache = BuildCache(directory)
    with cache.lookup(key) as same:
        assert same.entry is not None
    assert changed.digest() != digest
    with cache.lookup(changed) as other:
        assert other.entry is None and other.discarded is None


def look_up_baseline(repo: Path, sha: str, config: CampaignConfig, out: Path, cache: Path, campaign_id: str,
                     sandbox: Sandbox, patches: dict[str, str] | None = None,
                     shared: bool = False) -> StartedBuild | Artifact:
    """A baseline build up to its compile (`start_build`): the cache's answer, an artifact on a hit. A miss is
    what a build then compiles (the tampered-entry test compiles one for real), so none is compiled here."""
    with worktree(repo, sha, out / "tree-baseline") as tree:
        started = start_build(tree, "baseline", sha, config.build, out / "bin", sandbox=sandbox,
                              cache=CampaignCache(BuildCache(cache), campaign_id, patches or {}, shared))
    if isinstance(started, StartedBuild):
        shutil.rmtree(started.build.cargo_home)
    return started


def test_a_rustflags_change_misses_the_entry_it_would_reuse(
        stored: tuple[Path, str], tmp_path: Path, campaign_config: CampaignConfig,
        monkeypatch: pytest.MonkeyPatch) -> None:
    directory, digest = stored
    repo = tmp_path / "repo"
    sha = init_fixture_repo(repo)
    sandbox = RecordingSandbox()
    same = look_up_baseline(repo, sha, campaign_config, tmp_path / "same", directory, "c-same", sandbox)
    assert isinstance(same, Artifact) and same.build_cache is not None
    assert same.build_cache.reused_from == entry(directory, digest).campaign_id
    assert not sandbox.cargo("tree-baseline", "fetch")
    monkeypatch.setenv("RUSTFLAGS", "-C debuginfo=1")
    flagged = look_up_baseline(repo, sha, campaign_config, tmp_path / "flagged", directory, "c-flagged", sandbox)
    assert isinstance(flagged, StartedBuild) and flagged.key is not None and flagged.key.digest() != digest
    assert flagged.settings.rustflags_env == "-C debuginfo=1" == flagged.key.settings.rustflags_env
    assert sandbox.cargo("tree-baseline", "fetch"), "a miss goes on to fetch and compile"


def test_a_patch_applied_is_part_of_the_key(stored: tuple[Path, str], tmp_path: Path,
                                            campaign_config: CampaignConfig) -> None:
    directory, digest = stored
    repo = tmp_path / "repo"
    sha = init_fixture_repo(repo)
    key = entry_key(directory, digest)
    patches = {**key.patches, "determinism": "6" * 64}
    patched = look_up_baseline(repo, sha, campaign_config, tmp_path / "patched", directory, "c-patched",
                               RecordingSandbox(), patches)
    assert isinstance(patched, StartedBuild) and patched.key is not None and patched.key.patches == patches


# --- refused entries ------------------------------------------------------------------------------------------


def test_a_tampered_cached_binary_is_detected_deleted_and_rebuilt(
        stored: tuple[Path, str], tmp_path: Path, campaign_config: CampaignConfig, cache_dir: Path) -> None:
    repo = tmp_path / "repo"
    sha = init_fixture_repo(repo)
    first = seeded(stored, cache_dir)
    binary = cache_dir / stored[1] / "binary"
    binary.chmod(0o755)
    binary.write_bytes(binary.read_bytes() + b"\0tampered")
    binary.chmod(0o555)
    tampered = sha256_of(binary)
    sandbox = RecordingSandbox()
    again = build_baseline(repo, sha, campaign_config, tmp_path / "b", cache_dir, "c-b", sandbox)
    assert again.build_cache is not None and again.build_cache.reused_from is None
    assert again.build_cache.discarded is not None and tampered in again.build_cache.discarded
    assert first.artifact.binary_sha256 in again.build_cache.discarded
    assert first.campaign_id in again.build_cache.discarded
    assert sandbox.cargo("tree-baseline", "build"), "rebuilt"
    assert "refused and deleted" in again.build_cache.summary()
    assert sha256_of(binary) == again.binary_sha256, "the fresh build replaced the deleted entry"
    third = build_baseline(repo, sha, campaign_config, tmp_path / "c", cache_dir, "c-c")
    assert third.build_cache is not None and third.build_cache.reused_from == "c-b"


def test_a_link_planted_for_an_entry_is_refused_and_removed_never_followed(
        stored: tuple[Path, str], tmp_path: Path) -> None:
    directory, digest = stored
    key = entry_key(directory, digest)
    cache = tmp_path / "build-cache"
    cache.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(directory / digest, elsewhere)  # a whole, valid entry: only where it lives is wrong
    (cache / digest).symlink_to(elsewhere)
    with BuildCache(cache).lookup(key) as found:
        assert found.entry is None and found.discarded is not None and "link" in found.discarded
    assert not os.path.lexists(cache / digest)
    assert (elsewhere / "binary").is_file() and (elsewhere / "entry.json").is_file(), "the link was not followed"


def test_a_link_planted_inside_an_entry_is_refused(stored: tuple[Path, str], tmp_path: Path) -> None:
    directory, digest = stored
    key = entry_key(directory, digest)
    cache = tmp_path / "build-cache"
    cache.mkdir(mode=0o700)
    shutil.copytree(directory / digest, cache / digest)
    target = tmp_path / "real-binary"
    (cache / digest / "binary").rename(target)
    (cache / digest / "binary").symlink_to(target)
    with BuildCache(cache).lookup(key) as found:
        assert found.entry is None and found.discarded is not None and "binary" in found.discarded
    assert not os.path.lexists(cache / digest) and target.is_file()


@pytest.mark.parametrize("problem", ["a link", "open to others"])
def test_a_cache_directory_that_is_not_ours_alone_stops_the_campaign(
        tmp_path: Path, campaign_config: CampaignConfig, demo_trace: Path, problem: str) -> None:
    real = tmp_path / "real-cache"
    real.mkdir(mode=0o700)
    cache = tmp_path / "cache"
    if problem == "a link":
        cache.symlink_to(real)
    else:
        cache.mkdir()
        cache.chmod(0o755)
    with pytest.raises(BuildCacheError, match="link|mode 0755"):
        BuildCache(cache).check()
    repo = tmp_path / "repo"
    init_fixture_repo(repo)
    request = CampaignRequest(repo=repo, base="main", head="main", config=campaign_config, config_source="test",
                              out_dir=tmp_path / "out", trace_path=demo_trace, build_cache=cache)
    work = tmp_path / "out" / "work"
    work.mkdir(parents=True)
    with pytest.raises(CampaignStop) as stop:
        prepare(request, new_report(request), work, None)
    assert stop.value.record.stage == "build" and stop.value.record.blocking
    assert "build cache" in stop.value.record.reason


def test_an_unsandboxed_campaign_uses_no_cache(tmp_path: Path, cache_dir: Path) -> None:
    assert CampaignCache.for_campaign(cache_dir, "c-none", "none") is None
    assert not cache_dir.exists()
    use = CampaignCache.for_campaign(cache_dir, "c-bwrap", "bwrap")
    assert use is not None
    assert (cache_dir.stat().st_mode & 0o777) == 0o700


# --- containment ----------------------------------------------------------------------------------------------


def test_the_cache_directory_is_never_visible_inside_a_sandbox(
        stored: tuple[Path, str], tmp_path: Path, campaign_config: CampaignConfig, demo_trace: Path) -> None:
    """The candidate's build.rs looks for the cache (beside the campaign's own directory, as the service lays
    them out) and fails the build if it sees it; it also checks its own manifest is visible, so the probe ran.
    The cache already holds the baseline's entry, which the campaign reuses: the probe runs while it exists."""
    state = tmp_path / "state"
    cache = state / "build-cache"
    first = seeded(stored, cache)
    repo = tmp_path / "repo"
    base = init_fixture_repo(repo)
    probe = """
fn main() {
    let own = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("Cargo.toml");
    assert!(own.is_file(), "the probe cannot see its own manifest");
    match std::fs::symlink_metadata(@CACHE@) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        other => panic!("KVP-CACHE-VISIBLE: {:?}", other.map(|m| m.is_dir())),
    }
}
""".replace("@CACHE@", json.dumps(str(cache)))
    head = commit_change(repo, "a build script probing for the cache", files={BUILD_RS: probe})
    built = prepared(repo, base, head, campaign_config, demo_trace, state / "c1" / "out", cache, "c-probe")
    record = built.artifact("baseline").build_cache
    assert record is not None and record.reused_from == first.campaign_id and (cache / record.key_sha256).is_dir()
    assert built.artifact("candidate").binary_sha256 and built.sandbox.cargo("tree-candidate", "build")
    for run in built.sandbox.starts:
        bound = (*run.writable, *run.read_only, *(host for host, _ in run.mounts))
        assert not any(path == cache or path.is_relative_to(cache) or cache.is_relative_to(path) for path in bound)


def _plan(repo: Path, base: str, head: str, campaign_id: str, out: Path) -> Path:
    from bot.cli.main import main as cli_main

    assert cli_main(["plan", "--repo", str(repo), "--config-ref", base, "--profile", "demo", "--base", base,
                     "--head", head, "--rows", "vllm-agg", "--campaign-id", campaign_id, "--out", str(out)]) == 0
    return out


def _arm_build(repo: Path, plan: Path, arm: str, out: Path, cache: Path) -> Artifact:
    from bot.cli.main import main as cli_main
    from runners.pipeline.distributed.build import ArmBuild

    assert cli_main(["build", "--plan", str(plan), "--repo", str(repo), "--arm", arm, "--out", str(out),
                     "--work", str(out.parent / f"work-{out.name}"), "--build-cache", str(cache)]) == 0
    built = ArmBuild.model_validate_json((out / "build.json").read_bytes())
    assert built.stopped is None and built.artifact is not None
    return built.artifact


def test_the_split_arm_build_reuses_a_baseline_another_campaign_built_and_the_manifest_stores_its_candidate(
        stored: tuple[Path, str], tmp_path: Path, cache_dir: Path, demo_trace: Path) -> None:
    """`kv-parity build --plan --arm ARM --build-cache` (the Slurm build jobs, a self-hosted runner with
    $KV_PARITY_BUILD_CACHE) follows the same rule as a single-machine campaign: the candidate is stored only
    where its size gate runs, by `kv-parity manifest --build-cache`, once it passed."""
    first = seeded(stored, cache_dir)
    repo = tmp_path / "repo"
    base = init_fixture_repo(repo)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-b", "head"], check=True)
    head = commit_change(repo, "comment-only change", touch_comment=True)
    plan = _plan(repo, base, head, "c-split", tmp_path / "plan")
    baseline = _arm_build(repo, plan, "baseline", tmp_path / "arm-b", cache_dir)
    candidate = _arm_build(repo, plan, "candidate", tmp_path / "arm-c", cache_dir)
    assert baseline.build_cache is not None and baseline.build_cache.reused_from == first.campaign_id
    assert baseline.sha == base and baseline.binary_sha256 == first.artifact.binary_sha256
    assert candidate.build_cache is not None and candidate.build_cache.reused_from is None
    assert candidate.build_cache.not_stored == CANDIDATE_AWAITS_SIZE_GATE
    assert not (cache_dir / candidate.build_cache.key_sha256).exists(), "not before its size gate"
    from bot.cli.main import main as cli_main

    dist = tmp_path / "dist"
    assert cli_main(["manifest", "--plan", str(plan), "--baseline", str(tmp_path / "arm-b"), "--candidate",
                     str(tmp_path / "arm-c"), "--trace", str(demo_trace), "--out", str(dist), "--build-cache",
                     str(cache_dir)]) == 0
    manifest = load_manifest(dist / "manifest.json")
    assert manifest.report.stopped is None and manifest.report.sizes is not None
    assert manifest.report.sizes.verdict == "PASS"
    record = manifest.report.artifact("candidate").build_cache
    assert record is not None and record.not_stored is None and "built here and stored" in record.summary()
    assert entry_key(cache_dir, candidate.build_cache.key_sha256).arm == "candidate"
    assert entry(cache_dir, candidate.build_cache.key_sha256).campaign_id == "c-split"


def test_slurm_passes_the_cache_to_both_build_jobs(tmp_path: Path) -> None:
    from runners.pipeline.slurm import SlurmCampaign, SlurmOptions

    campaign = SlurmCampaign(tmp_path / "work", SlurmOptions(), build_cache=tmp_path / "cache")
    baseline = campaign._argv("build-baseline", None, None, 1)
    candidate = campaign._argv("build-candidate", None, None, 1)
    assert baseline[baseline.index("--build-cache") + 1] == str(tmp_path / "cache")
    assert candidate[candidate.index("--build-cache") + 1] == str(tmp_path / "cache")
    manifest = campaign._argv("manifest", None, None, 1)
    assert manifest[manifest.index("--build-cache") + 1] == str(tmp_path / "cache"), "it stores the candidate"
    assert "--build-cache" not in SlurmCampaign(tmp_path / "w2", SlurmOptions())._argv("build-baseline", None, None, 1)


# --- what is stored, and under which host ---------------------------------------------------------------------


def test_a_candidate_that_fails_its_size_gate_is_never_stored(
        stored: tuple[Path, str], tmp_path: Path, campaign_config: CampaignConfig, demo_trace: Path,
        cache_dir: Path) -> None:
    """The attack's first half: a bloated candidate used to be stored before the size gate ran, and pruning for
    it deleted baselines. It now never reaches the cache; the baseline's entry is untouched."""
    first = seeded(stored, cache_dir)
    repo = tmp_path / "repo"
    base = init_fixture_repo(repo)
    bloated = commit_change(repo, "64 more kernels", knobs={"TEXT_BLOAT": True})
    built = prepared(repo, base, bloated, campaign_config, demo_trace, tmp_path / "c1", cache_dir, "c-bloat")
    assert built.report.sizes is not None and built.report.sizes.verdict == "FAIL"
    record = built.artifact("candidate").build_cache
    assert record is not None and record.reused_from is None
    assert record.not_stored == "a candidate is stored only once its size gate passed, and the gate is FAIL"
    assert f"built here, not stored (build cache key {record.key_sha256[:12]}): " in record.summary()
    assert sorted(path.name for path in cache_dir.iterdir() if not path.name.startswith(".")) == [stored[1]]
    assert entry(cache_dir, stored[1]).campaign_id == first.campaign_id


def test_a_cache_that_cannot_be_locked_stops_the_campaign_naming_it(
        tmp_path: Path, campaign_config: CampaignConfig, demo_trace: Path, cache_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system without flock (an NFS mount without its lock service answers ENOLCK; stood in for here):
    a recorded, blocking stop of the build stage that names the cache and what to do, before any compile."""
    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    repo = tmp_path / "repo"
    base = init_fixture_repo(repo)
    sandbox = RecordingSandbox()
    request = CampaignRequest(repo=repo, base=base, head=base, config=campaign_config, config_source="test",
                              out_dir=tmp_path / "out", trace_path=demo_trace, sandbox=sandbox, build_cache=cache_dir)
    (tmp_path / "out" / "work").mkdir(parents=True)
    with pytest.raises(CampaignStop) as stop:
        prepare(request, new_report(request), tmp_path / "out" / "work", None)
    assert (stop.value.record.stage, stop.value.record.blocking) == ("build", True)
    assert stop.value.record.reason.startswith(f"build cache {cache_dir} cannot be locked")
    assert "does not support flock" in stop.value.record.reason
    assert not sandbox.cargo("tree-", "build"), "nothing compiled without the lock"


def test_a_native_build_is_keyed_on_its_host_from_rustflags_or_a_cargo_config_of_the_tree(
        stored: tuple[Path, str], tmp_path: Path, campaign_config: CampaignConfig,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`target-cpu=native` builds for the CPU it compiles on: the key holds that CPU, so the entry a node with
    another CPU stored is not this build's (and this one is not the other's)."""
    directory, digest = stored
    repo = tmp_path / "repo"
    sha = init_fixture_repo(repo)
    plain = look_up_baseline(repo, sha, campaign_config, tmp_path / "plain", directory, "c-plain", RecordingSandbox())
    assert isinstance(plain, Artifact) and plain.build_cache is not None and plain.build_cache.host is None

    monkeypatch.setenv("RUSTFLAGS", "-C target-cpu=native")
    flagged = look_up_baseline(repo, sha, campaign_config, tmp_path / "flagged", directory, "c-flag",
                               RecordingSandbox())
    assert isinstance(flagged, StartedBuild) and flagged.key is not None
    assert flagged.key.host == build_cache.host_facts()
    other_cpu = tmp_path / "cpuinfo"
    other_cpu.write_text("model name\t: Another CPU\nflags\t\t: sse2\n")
    monkeypatch.setattr(build_cache, "CPUINFO", other_cpu)
    elsewhere = look_up_baseline(repo, sha, campaign_config, tmp_path / "elsewhere", directory, "c-else",
                                 RecordingSandbox())
    assert isinstance(elsewhere, StartedBuild) and elsewhere.key is not None
    assert elsewhere.key.host is not None and elsewhere.key.host.cpu_model == "Another CPU"
    assert elsewhere.key.digest() != flagged.key.digest()

    monkeypatch.delenv("RUSTFLAGS")
    native_config = commit_change(repo, "build for this CPU", files={
        ".cargo/config.toml": '[build]\nrustflags = ["-C", "target-cpu=native"]\n'})
    configured = look_up_baseline(repo, native_config, campaign_config, tmp_path / "configured", directory,
                                  "c-config", RecordingSandbox())
    assert isinstance(configured, StartedBuild) and configured.key is not None
    assert configured.key.host is not None and configured.key.host.cpu_model == "Another CPU"


def test_a_cache_declared_shared_keys_every_build_on_its_host(
        stored: tuple[Path, str], tmp_path: Path, campaign_config: CampaignConfig, cache_dir: Path) -> None:
    """Slurm's build nodes share one cache: what one node built (keyed without its host before the cache was
    declared shared) is not served to a build that now holds its host."""
    seeded(stored, cache_dir)
    BuildCache(cache_dir).declare_shared(True)
    repo = tmp_path / "repo"
    sha = init_fixture_repo(repo)
    started = look_up_baseline(repo, sha, campaign_config, tmp_path / "b", cache_dir, "c-shared", RecordingSandbox(),
                               shared=True)
    assert isinstance(started, StartedBuild) and started.key is not None
    assert started.key.host == build_cache.host_facts()
    assert started.key.model_copy(update={"host": None}) == entry_key(cache_dir, stored[1])

