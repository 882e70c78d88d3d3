"""What the build cache saves: a campaign with a warm cache against the same campaign cold and uncached, and
the suite-level effect on a test file (its wall time with the session-wide cache against without it).

    .venv/bin/python benchmarks/bench_build_cache.py [--rows vllm-agg] [--suite tests/test_campaign.py]
                                                     [--only campaigns|together|suite|prune] [--shared-first]

Each campaign is the demo's `identical` scenario in a fresh repository (so new base and head commit SHAs whose
trees are the same), one row, sandboxed: uncached (no cache), cold (an empty cache: it builds and stores both
arms) and warm (the cache the cold one filled: both arms reused, as on a rerun or another pull request whose
head is the same tree). The suite figure runs pytest on the file twice, `KV_PARITY_BUILD_CACHE=` (empty: no
cache) against the conftest's session cache; both start without the session cache holding anything.
`together` starts two such campaigns at once, as two processes (two pull requests on one base, labelled
together), against one empty cache and against none: how many arm builds compiled, and the wall until both
ended. `prune` times a store (a 4 MiB binary) into caches already holding 0, 100 and 500 entries under a bound
they fit: what keeping the bound (every store lists the entries and reads each entry.json) costs as a cache fills,
against the empty cache's store.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from runners.exec.build_cache import BUILD_CACHE_ENV, BuildCache, BuildKey
from runners.exec.sandbox import check
from runners.pipeline.campaign import CampaignRequest, run_campaign
from runners.schema.report import Artifact, BuildSettings

from runners.demo import demo_config, prepare_demo
from runners.progress import ProgressEvent

ROOT = Path(__file__).resolve().parents[1]


def campaign(out: Path, rows: list[str], cache: Path | None) -> tuple[float, float, float, int, str, str]:
    """(campaign wall, build stage wall (first build event to preflight: both arms, fetch included), seconds
    this campaign spent in `cargo build` (both arms), how many arms it compiled, how each arm was served,
    verdicts)."""
    repo, base, head, trace = prepare_demo(out, "identical")
    events: list[ProgressEvent] = []
    started = time.monotonic()
    report = run_campaign(CampaignRequest(repo=repo, base=base, head=head, config=demo_config(),
                                          config_source="bench", out_dir=out / "campaign", rows=rows,
                                          trace_path=trace, sandbox=check("bwrap"), build_cache=cache),
                          events.append)
    wall = time.monotonic() - started
    build_started = next(event.unix for event in events if event.stage == "build")
    stage = next(event.unix for event in events if event.stage == "preflight") - build_started
    seconds, compiled, served = 0.0, 0, []
    for arm in ("baseline", "candidate"):
        artifact = report.artifact(arm)
        record = artifact.build_cache
        if record is None or record.reused_from is None:
            seconds += artifact.build_seconds
            compiled += 1
        served.append(f"{arm}: {record.summary() if record is not None else 'no cache'}")
    verdicts = report.verdicts.summary if report.verdicts else ""
    return wall, stage, seconds, compiled, "; ".join(served), verdicts


def suite(path: str, cache_env: str | None) -> float:
    env = dict(os.environ)
    env.pop(BUILD_CACHE_ENV, None)
    if cache_env is not None:
        env[BUILD_CACHE_ENV] = cache_env
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", path], cwd=ROOT,
                          env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"pytest {path} failed ({'no cache' if cache_env == '' else 'shared cache'}):\n"
                         f"{done.stdout[-3000:]}")
    return wall


def together(rows: list[str], root: Path, cache: Path | None) -> None:
    """Two campaigns started at once: each baseline's service, and the wall until both ended."""
    with ProcessPoolExecutor(max_workers=2, mp_context=get_context("fork")) as pool:
        started = time.monotonic()
        results = list(pool.map(campaign, [root / "first", root / "second"], [rows, rows], [cache, cache]))
        wall = time.monotonic() - started
    compiled = sum(arms for _, _, _, arms, _, _ in results)
    served = " / ".join(served for _, _, _, _, served, _ in results)
    print(f"| {'one empty cache' if cache else 'no cache'} | {wall:.1f} | {compiled} | {served} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", default="vllm-agg")
    parser.add_argument("--suite", default="tests/test_campaign.py")
    parser.add_argument("--only", choices=("campaigns", "together", "suite", "prune"), help="run one part only")
    parser.add_argument("--shared-first", action="store_true",
                        help="run the suite with the shared cache first (swaps the order, to bracket load drift)")
    args = parser.parse_args()
    if args.only in (None, "campaigns"):
        campaigns(args.rows.split(","))
    if args.only in (None, "together"):
        root = Path(tempfile.mkdtemp(prefix="kv-parity-cache-together-"))
        print(f"load average {os.getloadavg()[0]:.1f}\n| two campaigns at once | wall s | arms compiled | "
              "how each arm was served |\n|---|---|---|---|")
        together(args.rows.split(","), root / "uncached", None)
        together(args.rows.split(","), root / "cached", root / "build-cache")
    if args.only in (None, "suite"):
        order = ["shared", "without"] if args.shared_first else ["without", "shared"]
        walls = {name: suite(args.suite, None if name == "shared" else "") for name in order}
        print(f"| {args.suite} ({' then '.join(order)}, load average {os.getloadavg()[0]:.1f}) | without cache "
              f"{walls['without']:.1f} s | shared session cache {walls['shared']:.1f} s | "
              f"ratio {walls['shared'] / walls['without']:.2f} |")
    if args.only in (None, "prune"):
        prune_cost()


def campaigns(rows: list[str]) -> None:
    root = Path(tempfile.mkdtemp(prefix="kv-parity-cache-bench-"))
    cache = root / "build-cache"
    figures = {name: campaign(root / name, rows, None if name == "uncached" else cache)
               for name in ("uncached", "cold", "warm")}
    print(f"load average {os.getloadavg()[0]:.1f}; rows {','.join(rows)}")
    print("| campaign | wall s | build stage s | cargo build s (both arms) | arms | verdicts |\n"
          "|---|---|---|---|---|---|")
    for name, (wall, stage, build, _, served, verdicts) in figures.items():
        print(f"| {name} | {wall:.1f} | {stage:.1f} | {build:.1f} | {served} | {verdicts} |")
    for index, what in ((0, "campaign wall"), (1, "build stage")):
        cold, warm, uncached = (figures[name][index] for name in ("cold", "warm", "uncached"))
        print(f"{what}: warm / cold {warm / cold:.2f}; warm / uncached {warm / uncached:.2f}; "
              f"cold / uncached (cost of storing) {cold / uncached:.2f}")


def _store(cache: BuildCache, binary: Path, number: int) -> float:
    """Seconds one store of `binary` as entry `number` took (its fsyncs, the rename and the bound's pruning)."""
    key = BuildKey(arm="baseline", tree=f"{number:040x}", patches={},
                   settings=BuildSettings(rustc="rustc", cargo="cargo", rustflags_env=""), build_command=["cargo"],
                   features=[], feature_closure=[], no_default_features=False, package="p", bench_target="b",
                   workspace_dir=".")
    artifact = Artifact(arm="baseline", sha=f"{number:040x}", features=[], feature_closure=[],
                        no_default_features=False, build_command=["cargo"], binary_name=binary.name,
                        binary_sha256=hashlib.sha256(binary.read_bytes()).hexdigest(),
                        binary_size=binary.stat().st_size, text_size=0, build_seconds=0.0)
    started = time.monotonic()
    cache.store(key, artifact, binary, f"c-{number}")
    return time.monotonic() - started


def prune_cost() -> None:
    root = Path(tempfile.mkdtemp(prefix="kv-parity-cache-prune-"))
    small, binary = root / "small", root / "binary"
    small.write_bytes(b"\0" * 4096)
    binary.write_bytes(os.urandom(4 << 20))
    print("| entries already stored | store of a 4 MiB binary, median of 7 (ms) | against the empty cache |\n"
          "|---|---|---|")
    empty = 0.0
    for held in (0, 100, 500):
        cache = BuildCache(root / f"cache-{held}")
        for number in range(held):
            _store(cache, small, number)
        median = statistics.median(_store(cache, binary, held + 1 + trial) for trial in range(7))
        empty = empty or median
        print(f"| {held} | {median * 1000:.1f} | {median / empty:.2f} |")


if __name__ == "__main__":
    main()
