"""What importing scipy.stats for the dependence diagnostics costs a row job and a campaign, as ratios against the
same commands on the tree before scipy came back (the hand-written runners/rank_tests.py).

`--after` (default: the commit that deleted runners/rank_tests.py) and `--before` (default: its parent) are
exported with `git archive` and each put first on `sys.path` of the commands it runs, from this venv, so the two
differ in that one commit. One demo build (identical revisions, the demo profile's 5 warmups per arm and 60 pairs,
the interference bound lifted: this measures cost, not the gate) gives the manifest; then, in turn:

- `kv-parity row --row vllm-agg` from that manifest (staging, re-hashing, the row's 132 sandboxed processes, the
  verdict: one scipy import), and
- `kv-parity campaign --rows vllm-agg` with `--build-cache` warm (pin, preflight, sizes, the row, the report),

each command alternating after-before, `--repeat` times, after one unmeasured campaign that fills the cache. A
figure is the CPU (user + system) of the command and every process it waited for, and its wall time; the ratio is
taken pair by pair (after/before) and its median printed, so a drift of the machine's speed between pairs
cancels out.

    .venv/bin/python benchmarks/bench_scipy_cost.py [--repeat N] [--after REV] [--before REV] [--only COMMAND]
"""

from __future__ import annotations

import argparse
import io
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from bot.cli.distributed import build_main
from runners.demo import prepare_demo
from runners.pipeline.distributed.common import MANIFEST_NAME
from runners.schema.config import PROFILES_DIR

ROOT = Path(__file__).resolve().parent.parent
ROW = "vllm-agg"
LAUNCH = "import sys; sys.path.insert(0, sys.argv.pop(1)); from bot.cli.main import main; sys.exit(main(sys.argv[1:]))"


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


def export(rev: str, into: Path) -> Path:
    """The tree of `rev`, unpacked from git (no worktree is registered)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "bot", "runners"], capture_output=True,
                             check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def _has_rank_tests(rev: str) -> bool:
    return _git("ls-tree", "--name-only", rev, "runners/rank_tests.py") == "runners/rank_tests.py"


DECIDED = {"row": {0}, "campaign": {0, 1, 3, 4}}
"""Exit codes that mean the command did its work: a campaign exits 1, 3 or 4 for a FAIL, BLOCKED or INCONCLUSIVE
verdict (a loaded machine makes the gate inconclusive; its cost is what is measured)."""


def run(tree: Path, args: list[str], out: Path) -> tuple[float, float]:
    """CPU seconds (the command and everything it waited for) and wall seconds of one `kv-parity` command."""
    shutil.rmtree(out, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", LAUNCH, str(tree), *args], capture_output=True, text=True,
                          check=False, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in DECIDED[args[0]]:
        raise SystemExit(f"kv-parity {args[0]} under {tree} exited {done.returncode}: {done.stderr[-2000:]}")
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--after", help="the tree with scipy (default: the commit that deleted rank_tests.py)")
    parser.add_argument("--before", help="the tree to compare against (default: --after's parent)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--only", choices=["row job", "campaign"], help="measure one command alone")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="kv-parity-scipy-cost-"))
    after_sha = _git("rev-parse", args.after or _git("rev-list", "-n1", "HEAD", "--", "runners/rank_tests.py"))
    before_sha = _git("rev-parse", args.before or f"{after_sha}^")
    if _has_rank_tests(after_sha) or not _has_rank_tests(before_sha):
        raise SystemExit(f"{after_sha[:12]} must be without runners/rank_tests.py and {before_sha[:12]} with it")
    after, before = export(after_sha, out / "after-tree"), export(before_sha, out / "before-tree")
    for tree in (after, before):
        probe = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import runners; "
                                "print(runners.__file__)", str(tree)], capture_output=True, text=True, check=True)
        if not probe.stdout.startswith(str(tree)):
            raise SystemExit(f"{tree} does not shadow the installed tree: runners from {probe.stdout.strip()}")
    repo, base, head, trace = prepare_demo(out, "identical")
    config = out / "demo-unblocked.toml"
    demo = (PROFILES_DIR / "demo.toml").read_text(encoding="utf-8")
    config.write_text(demo.replace("[perf]\n", "[perf]\ninvalidation = { max_interference_ms = 1e9 }\n", 1),
                      encoding="utf-8")
    cache = out / "build-cache"
    if build_main(["--repo", str(repo), "--base", base, "--head", head, "--config", str(config), "--trace",
                   str(trace), "--out", str(out / "build")]) != 0:
        raise SystemExit("kv-parity build failed")
    commands = {
        "row job": ["row", "--manifest", str(out / "build" / MANIFEST_NAME), "--row", ROW, "--trace", str(trace),
                    "--out", str(out / "row")],
        "campaign": ["campaign", "--repo", str(repo), "--base", base, "--head", head, "--config", str(config),
                     "--rows", ROW, "--trace", str(trace), "--build-cache", str(cache), "--quiet", "--out",
                     str(out / "campaign")],
    }
    if args.only != "row job":
        run(after, commands["campaign"], out / "after")  # fills the build cache: every measured campaign reuses it
    print(f"after: {after_sha[:12]} (scipy.stats); before: {before_sha[:12]} (runners/rank_tests.py); "
          f"{args.repeat} pairs each")
    print("| command | CPU after (s) | CPU before (s) | CPU after/before | wall after/before |")
    print("|---|---|---|---|---|")
    for name, command in commands.items():
        if args.only not in (None, name):
            continue
        pairs = [(run(after, command, out / "after"), run(before, command, out / "before"))
                 for _ in range(args.repeat)]
        cpu = statistics.median(a[0] / b[0] for a, b in pairs)
        wall = statistics.median(a[1] / b[1] for a, b in pairs)
        print(f"| {name} | {statistics.median(a[0] for a, _ in pairs):.2f} | "
              f"{statistics.median(b[0] for _, b in pairs):.2f} | x{cpu:.3f} | x{wall:.3f} |")


if __name__ == "__main__":
    main()
