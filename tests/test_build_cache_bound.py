"""The build cache's bound: every store deletes the least recently used entries until the rest fit, a reuse
counts as a use, the entry just stored stays, and `kv-parity cache` shows the entries and sets the bound. Entries
here are stored through the cache's own `store` from small files; the real builds are tests/test_build_cache.py's.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import platform
import time
from pathlib import Path

import pytest

from bot.cli.main import main as cli_main
from runners.exec import build_cache
from runners.exec.build_cache import (
    ENTRY_SHARE_OF_BOUND,
    LIMIT,
    STAGING,
    STALE_STAGING_SECONDS,
    BuildCache,
    BuildCacheError,
    BuildKey,
    CacheEntry,
    CampaignCache,
    human_bytes,
    parse_size,
)
from runners.schema.report import Arm, Artifact, BuildSettings

BINARY_BYTES = 4096


def stored(cache: BuildCache, tmp_path: Path, number: int, arm: Arm = "baseline", used_unix: int = 0,
           binary_bytes: int = BINARY_BYTES) -> str:
    """Store entry `number` (a binary of `binary_bytes`) and date its last use `used_unix`; returns its name, or
    the refusal `store` returned, as `refused: <why>`."""
    binary = tmp_path / f"binary-{number}"
    binary.write_bytes(bytes([number]) * binary_bytes)
    key = BuildKey(arm=arm, tree=f"{number:040x}", patches={},
                   settings=BuildSettings(rustc="rustc 1.0", cargo="cargo 1.0", rustflags_env=""),
                   build_command=["cargo", "build"], features=[], feature_closure=[], no_default_features=False,
                   package="dynamo-bench", bench_target="offline_replay_bench", workspace_dir=".")
    artifact = Artifact(arm=arm, sha=f"{number:040x}", features=[], feature_closure=[], no_default_features=False,
                        build_command=["cargo", "build"], binary_name=binary.name,
                        binary_sha256=hashlib.sha256(binary.read_bytes()).hexdigest(), binary_size=binary_bytes,
                        text_size=0, build_seconds=1.0)
    refused = cache.store(key, artifact, binary, f"c-{number:02d}")
    if refused is not None:
        return f"refused: {refused}"
    name = key.digest()
    if used_unix:
        os.utime(cache.directory / name, (used_unix, used_unix))
    return name


def key_of(cache: BuildCache, name: str) -> BuildKey:
    return CacheEntry.model_validate_json((cache.directory / name / "entry.json").read_bytes()).key


def names(cache: BuildCache) -> list[str]:
    """The entries, least recently used first."""
    return [entry.name for entry in cache.usage().entries]


def total(cache: BuildCache) -> int:
    return sum(entry.bytes for entry in cache.usage().entries)


def entry_bytes(tmp_path: Path) -> int:
    """What one `stored` entry takes (its binary and its entry.json), measured in a cache of its own."""
    probe = BuildCache(tmp_path / "probe")
    stored(probe, tmp_path, 99)
    return probe.usage().entries[0].bytes


def test_pruning_deletes_candidates_before_baselines_least_recently_used_first_and_a_reuse_is_a_use(
        tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "cache")
    size = entry_bytes(tmp_path)
    assert size > BINARY_BYTES, "the entry's binary and its entry.json"
    cache.set_limit(8 * size + 64)  # eight entries, each within its eighth of the bound
    b1, b2, b3, b4 = (stored(cache, tmp_path, n, "baseline", used_unix=1000 * n) for n in (1, 2, 3, 4))
    c5, c6, c7, c8 = (stored(cache, tmp_path, n, "candidate", used_unix=1000 * n) for n in (5, 6, 7, 8))
    assert names(cache) == [b1, b2, b3, b4, c5, c6, c7, c8] and cache.usage().max_bytes == 8 * size + 64

    with cache.lookup(key_of(cache, b1)) as found:
        assert found.entry is not None
    assert names(cache) == [b2, b3, b4, c5, c6, c7, c8, b1], "a reuse makes the entry the most recently used"

    b9 = stored(cache, tmp_path, 9, "baseline", used_unix=9000)
    assert names(cache) == [b2, b3, b4, c6, c7, c8, b9, b1], "the least recently used candidate went, not b2"
    deleted = cache.set_limit(5 * size + 64)
    assert [entry.name for entry in deleted] == [c6, c7, c8], "every candidate before any baseline"
    assert names(cache) == [b2, b3, b4, b9, b1] and total(cache) <= 5 * size + 64
    deleted = cache.set_limit(3 * size + 64)
    assert [entry.name for entry in deleted] == [b2, b3], "then the least recently used baselines"
    usage = cache.usage()
    assert usage.summary() == (f"build cache {cache.directory}: 3 entries (3 baseline, 0 candidate), "
                               f"{human_bytes(total(cache))} of {human_bytes(3 * size + 64)}")


def test_one_oversized_entry_is_refused_and_evicts_nothing(tmp_path: Path) -> None:
    """The attack: one entry nearly the size of the bound. Stored, pruning it to the bound would have deleted
    every baseline and still left the cache over the bound (the entry just stored is never deleted)."""
    cache = BuildCache(tmp_path / "cache")
    bound = 64 * entry_bytes(tmp_path)
    cache.set_limit(bound)
    baselines = [stored(cache, tmp_path, n, "baseline", used_unix=1000 * n) for n in (1, 2, 3)]
    outcome = stored(cache, tmp_path, 4, "candidate", binary_bytes=bound - 1000)
    assert outcome.startswith("refused: the entry would take ")
    assert f"more than 1/{ENTRY_SHARE_OF_BOUND} of the build cache's bound of {human_bytes(bound)}" in outcome
    assert "(`kv-parity cache --max-size`) caches it" in outcome and str(cache.directory) not in outcome, "published"
    assert names(cache) == baselines and total(cache) <= bound
    assert not [path for path in cache.directory.iterdir() if path.name.startswith(STAGING)], "nothing half-written"
    just_fits = bound // ENTRY_SHARE_OF_BOUND - (entry_bytes(tmp_path) - BINARY_BYTES) - 64
    assert not stored(cache, tmp_path, 5, "candidate", binary_bytes=just_fits).startswith("refused")


def test_the_cache_keeps_to_its_bound_and_never_deletes_the_entry_just_stored(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "cache")
    first = stored(cache, tmp_path, 1)
    assert [entry.name for entry in cache.set_limit(1)] == [first] and names(cache) == []
    assert stored(cache, tmp_path, 2).startswith("refused: "), "no entry fits an eighth of one byte"
    cache.set_limit(8 * entry_bytes(tmp_path) + 64)
    kept = [stored(cache, tmp_path, n, used_unix=1000 * n) for n in range(3, 12)]
    assert names(cache) == kept[1:], "the ninth store deleted the oldest, never itself"
    assert total(cache) <= cache.usage().max_bytes


def test_pruning_deletes_a_planted_link_itself_never_what_it_points_to(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "cache")
    kept = stored(cache, tmp_path, 1, used_unix=2000)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "binary").write_bytes(b"\0" * 10 * BINARY_BYTES)
    link = cache.directory / ("f" * 64)
    link.symlink_to(victim)
    os.utime(link, (1000, 1000), follow_symlinks=False)
    assert [(entry.name, entry.arm) for entry in cache.usage().entries] == [(link.name, None), (kept, "baseline")]
    assert "2 entries (1 baseline, 0 candidate, 1 unreadable)" in cache.usage().summary()

    deleted = cache.set_limit(cache.usage().entries[1].bytes)
    assert [entry.name for entry in deleted] == [link.name]
    assert not os.path.lexists(link) and (victim / "binary").is_file() and names(cache) == [kept]


def test_a_store_deletes_what_a_writer_killed_an_hour_ago_left_and_nothing_being_written(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "cache")
    stored(cache, tmp_path, 1)
    abandoned, writing = cache.directory / f"{STAGING}abandoned", cache.directory / f"{STAGING}writing"
    for staging in (abandoned, writing):
        staging.mkdir(mode=0o700)
        (staging / "binary").write_bytes(b"\0" * BINARY_BYTES)
    old = time.time() - STALE_STAGING_SECONDS - 60
    os.utime(abandoned, (old, old))
    assert len(cache.usage().entries) == 1, "a staging name is not an entry"
    stored(cache, tmp_path, 2)
    assert not abandoned.exists() and (writing / "binary").is_file()


@pytest.mark.parametrize(("content", "why"), [
    ('{"max_bytes": 0}', "greater than 0"),
    ('{"max_bytes": 1, "extra": 2}', "Extra inputs are not permitted"),
    ("10G", "Invalid JSON"),
])
def test_a_bound_that_is_not_one_stops_a_campaign_before_it_builds(tmp_path: Path, content: str, why: str) -> None:
    directory = tmp_path / "cache"
    BuildCache(directory).check()
    (directory / LIMIT).write_text(content, encoding="utf-8")
    with pytest.raises(BuildCacheError, match=rf"{LIMIT} is not a bound \(.*{why}.*\); set one with `kv-parity "
                                              r"cache --max-size SIZE`"):
        CampaignCache.for_campaign(directory, "c-bad-bound", "bwrap")


def test_a_linked_bound_is_refused_not_followed(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    BuildCache(directory).check()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"max_bytes": 1}', encoding="utf-8")
    (directory / LIMIT).symlink_to(elsewhere)
    with pytest.raises(BuildCacheError, match="cannot be opened"):
        BuildCache(directory).check()


@pytest.mark.parametrize(("text", "size"), [("1000", 1000), ("1000B", 1000), ("10K", 10 << 10), ("512MiB", 512 << 20),
                                            ("10G", 10 << 30), ("2 tb", 2 << 40)])
def test_sizes_read_as_powers_of_1024(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["0", "-1", "1.5G", "10X", "G", "", "10iB"])
def test_a_size_that_is_not_one_names_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match="expected a positive whole number of bytes, or one with K, M, G or T"):
        parse_size(text)


def test_kv_parity_cache_shows_the_cache_and_sets_its_bound(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    cache = BuildCache(tmp_path / "cache")
    old = stored(cache, tmp_path, 1, used_unix=1000)
    new = stored(cache, tmp_path, 2, arm="candidate", used_unix=2000)
    capsys.readouterr()

    assert cli_main(["cache", "--build-cache", str(cache.directory)]) == 0
    assert capsys.readouterr().out == f"{cache.usage().summary()}\n"
    assert "2 entries (1 baseline, 1 candidate)" in cache.usage().summary() and "of 10.0 GiB" in cache.usage().summary()

    assert cli_main(["cache", "--build-cache", str(cache.directory), "--max-size", "6K"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"deleted {new[:12]} (candidate, ") and out[1].endswith("of 6.0 KiB")
    assert names(cache) == [old], "the candidate went first, though the baseline was used longer ago"

    assert cli_main(["cache", "--build-cache", str(cache.directory), "--shared"]) == 0
    assert capsys.readouterr().out.endswith("of 6.0 KiB, shared across nodes (every key holds the build host)\n")
    assert json.loads((cache.directory / LIMIT).read_text()) == {"max_bytes": 6 << 10, "shared": True}
    assert cli_main(["cache", "--build-cache", str(cache.directory), "--no-shared", "--max-size", "7K"]) == 0
    assert capsys.readouterr().out.endswith("of 7.0 KiB\n")
    assert json.loads((cache.directory / LIMIT).read_text()) == {"max_bytes": 7 << 10}


@pytest.mark.parametrize(("argv", "message"), [
    (["--max-size", "0"], "argument --max-size: size '0': expected a positive whole number"),
    (["--max-size", "ten"], "argument --max-size: size 'ten'"),
])
def test_kv_parity_cache_refuses_a_bad_size(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                            message: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli_main(["cache", "--build-cache", str(tmp_path / "cache"), *argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "cache").exists(), "nothing was created"


def test_kv_parity_cache_without_a_cache_says_how_to_name_one(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("KV_PARITY_BUILD_CACHE", raising=False)
    assert cli_main(["cache"]) == 2
    assert capsys.readouterr().err == ("kv-parity cache: no cache named: pass --build-cache DIR or set "
                                       "$KV_PARITY_BUILD_CACHE\n")


# --- a file system without flock ------------------------------------------------------------------------------


def test_a_cache_that_cannot_be_locked_is_a_stop_naming_it_not_a_bare_os_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An NFS mount without a lock service answers flock with ENOLCK (others with EOPNOTSUPP): the kernel's
    answer is stood in for here, as no file system on this machine refuses flock."""
    cache = BuildCache(tmp_path / "cache")
    key = BuildKey(arm="baseline", tree="0" * 40, patches={}, settings=BuildSettings(rustc="r", cargo="c",
                   rustflags_env=""), build_command=[], features=[], feature_closure=[], no_default_features=False,
                   package="p", bench_target="b", workspace_dir=".")

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with pytest.raises(BuildCacheError) as refused, cache.building(key):
        pytest.fail("the build went ahead without the lock")
    message = str(refused.value)
    assert message.startswith(f"build cache {cache.directory} cannot be locked (flock on .locks/{key.digest()[:12]}: "
                              f"{os.strerror(errno.ENOLCK)}): its file system does not support flock")
    assert "put the cache on a file system that does" in message and "or run without a build cache" in message


# --- the build host -------------------------------------------------------------------------------------------

X86 = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz
flags\t\t: fpu sse2 avx avx2 avx512f

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz
flags\t\t: avx512f sse2 fpu avx avx2
"""
ARM = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd sve
CPU implementer\t: 0x41
CPU part\t: 0xd40
"""


def test_host_facts_name_the_machine_and_every_kind_of_core(tmp_path: Path) -> None:
    x86, arm, hybrid, other = (tmp_path / name for name in ("x86", "arm", "hybrid", "other"))
    x86.write_text(X86)
    arm.write_text(ARM)
    hybrid.write_text(X86 + "\n" + X86.replace("8375C", "E-core").replace("avx512f", "avx_vnni"))
    other.write_text(X86.replace("avx512f", ""))
    facts = build_cache.host_facts(x86)
    assert facts.machine == platform.machine()
    assert facts.cpu_model == "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "the cores' order of flags is one set"
    assert build_cache.host_facts(arm).cpu_model == "cpu implementer 0x41 cpu part 0xd40"
    assert " | " in build_cache.host_facts(hybrid).cpu_model
    digests = {build_cache.host_facts(path).cpu_flags_sha256 for path in (x86, arm, hybrid, other)}
    assert len(digests) == 4, "another set of instructions is another host"
    missing = build_cache.host_facts(tmp_path / "none")
    assert missing.cpu_model.startswith("unknown (") and platform.node() in missing.cpu_model


@pytest.mark.parametrize(("texts", "native"), [
    (["-C target-cpu=native"], True),
    (["-Ctarget-cpu=native -Copt-level=3"], True),
    (["", '[build]\nrustflags = ["-C", "target-cpu=native"]\n'], True),
    (['{"command": ["cargo", "rustc", "--", "-C", "tune-cpu=native"]}'], True),
    (["-C target-cpu=x86-64-v3", '[build]\nrustflags = ["-C", "target-feature=+avx2"]'], False),
    (['{"features": ["native-tls", "non_native"]}'], False),
])
def test_a_build_asks_for_native_when_any_input_names_it(texts: list[str], native: bool) -> None:
    assert build_cache.asks_for_native(*texts) is native


def test_the_key_holds_the_host_for_a_native_build_or_in_a_shared_cache(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    local = CampaignCache.for_campaign(directory, "c-local", "bwrap")
    assert local is not None and not local.shared
    assert local.host_for("-C opt-level=3", "[build]\n") is None
    assert local.host_for("-C target-cpu=native") == build_cache.host_facts()
    BuildCache(directory).declare_shared(True)
    shared = CampaignCache.for_campaign(directory, "c-shared", "bwrap")
    assert shared is not None and shared.shared and shared.host_for("") == build_cache.host_facts()
    assert json.loads((directory / LIMIT).read_text()) == {"shared": True}, "the bound is still the default"
    assert BuildCache(directory).usage().max_bytes == build_cache.DEFAULT_MAX_BYTES


def test_an_entry_built_on_another_cpu_never_serves_this_host(tmp_path: Path) -> None:
    """Two nodes sharing one cache, each building the base with `target-cpu=native`: each finds only its own."""
    cache = BuildCache(tmp_path / "cache")
    cache.declare_shared(True)
    other_cpu = tmp_path / "cpuinfo"
    other_cpu.write_text(X86)
    here, there = build_cache.host_facts(), build_cache.host_facts(other_cpu)
    assert here != there
    name = stored(cache, tmp_path, 1)
    key = key_of(cache, name)
    built_there = key.model_copy(update={"host": there})
    entry = CacheEntry.model_validate_json((cache.directory / name / "entry.json").read_bytes())
    (cache.directory / name / "entry.json").chmod(0o644)
    (cache.directory / name / "entry.json").write_text(entry.model_copy(update={"key": built_there}).model_dump_json())
    (cache.directory / name).rename(cache.directory / built_there.digest())
    with cache.lookup(key.model_copy(update={"host": here})) as found:
        assert found.entry is None and found.discarded is None, "a miss: this host builds its own"
    with cache.lookup(built_there) as found:
        assert found.entry is not None and found.entry.key.host == there
