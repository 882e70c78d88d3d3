"""The build cache's bound: every store deletes the least recently used entries until the rest fit, a reuse
counts as a use, the entry just stored stays, and `kv-parity cache` shows the entries and sets the bound. Entries
here are stored through the cache's own `store` from small files; the real builds are tests/test_build_cache.py's.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from bot.cli import main as cli_main
from runners.build_cache import (
    DEFAULT_MAX_BYTES,
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
from runners.report import Arm, Artifact, BuildSettings

BINARY_BYTES = 4096


def stored(cache: BuildCache, tmp_path: Path, number: int, arm: Arm = "baseline", used_unix: int = 0) -> str:
    """Store entry `number` (a binary of BINARY_BYTES) and date its last use `used_unix`; returns its name."""
    binary = tmp_path / f"binary-{number}"
    binary.write_bytes(bytes([number]) * BINARY_BYTES)
    key = BuildKey(arm=arm, tree=f"{number:040x}", patches={},
                   settings=BuildSettings(rustc="rustc 1.0", cargo="cargo 1.0", rustflags_env=""),
                   build_command=["cargo", "build"], features=[], feature_closure=[], no_default_features=False,
                   package="dynamo-bench", bench_target="offline_replay_bench", workspace_dir=".")
    artifact = Artifact(arm=arm, sha=f"{number:040x}", features=[], feature_closure=[], no_default_features=False,
                        build_command=["cargo", "build"], binary_name=binary.name,
                        binary_sha256=hashlib.sha256(binary.read_bytes()).hexdigest(), binary_size=BINARY_BYTES,
                        text_size=0, build_seconds=1.0)
    cache.store(key, artifact, binary, f"c-{number}")
    name = key.digest()
    if used_unix:
        os.utime(cache.directory / name, (used_unix, used_unix))
    return name


def key_of(cache: BuildCache, name: str) -> BuildKey:
    return CacheEntry.model_validate_json((cache.directory / name / "entry.json").read_bytes()).key


def names(cache: BuildCache) -> list[str]:
    """The entries, least recently used first."""
    return [entry.name for entry in cache.usage().entries]


def test_every_store_deletes_the_least_recently_used_until_the_rest_fit_and_a_reuse_is_a_use(
        tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "cache")
    one, two, three = (stored(cache, tmp_path, number, used_unix=1000 * number) for number in (1, 2, 3))
    assert names(cache) == [one, two, three] and cache.usage().max_bytes == DEFAULT_MAX_BYTES
    entry_bytes = cache.usage().entries[0].bytes
    assert entry_bytes > BINARY_BYTES, "the entry's binary and its entry.json"

    with cache.lookup(key_of(cache, one)) as found:
        assert found.entry is not None
    assert names(cache) == [two, three, one], "a reuse makes the entry the most recently used"

    bound = 2 * entry_bytes + 100  # two entries, whichever arm their entry.json names
    deleted = cache.set_limit(bound)
    assert [entry.name for entry in deleted] == [two] and names(cache) == [three, one]
    assert (cache.directory / LIMIT).is_file() and cache.usage().max_bytes == bound

    four = stored(cache, tmp_path, 4, arm="candidate")
    assert names(cache) == [one, four], "the store deleted the least recently used, three"
    usage = cache.usage()
    assert [entry.arm for entry in usage.entries] == ["baseline", "candidate"]
    assert usage.summary() == (f"build cache {cache.directory}: 2 entries (1 baseline, 1 candidate), "
                               f"{human_bytes(sum(entry.bytes for entry in usage.entries))} of {human_bytes(bound)}")


def test_the_entry_just_stored_stays_even_alone_over_the_bound(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "cache")
    first = stored(cache, tmp_path, 1)
    assert [entry.name for entry in cache.set_limit(1)] == [first] and names(cache) == []
    second = stored(cache, tmp_path, 2)
    assert names(cache) == [second], "nothing else to delete; the newest entry is kept for the next campaign"
    assert "1 entry (1 baseline, 0 candidate), " in cache.usage().summary()


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
    assert out[0].startswith(f"deleted {old[:12]} (baseline, ") and out[1].endswith("of 6.0 KiB")
    assert names(cache) == [new]


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
