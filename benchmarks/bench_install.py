"""What set-up costs (issue 19): script/bootstrap when everything is present, and the non-editable install.

The bootstrap's idempotent no-op (`script/bootstrap --test` on a bootstrapped checkout) is measured against
the README's previous first half on the same venv, `pip install -q -e '.[dev]'`, which re-resolved every
dependency each time. The install is tests/installed.py's per-session one (a commit of the working tree, then
`pip install --no-deps "kv-parity-bot @ git+file://…@<sha>"` into a fresh venv: the wheel build is most of it),
against the same with its dependencies resolved and installed, as .ci/run does. `--fresh` times what a fresh
clone's bootstrap does instead: a new venv and `pip install --no-compile -e '.[dev]'`, by the pip Python ships
against by a pip upgraded first (script/bootstrap's choice), alternated.

    .venv/bin/python benchmarks/bench_install.py [--repeat 5] [--fresh]

Figures go in notes, never in assertions.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.installed import DISTRIBUTION, build_installed, snapshot_commit  # noqa: E402


def timed(action: Callable[[], object], repeat: int) -> list[float]:
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - start)
    return seconds


def quiet(*argv: str) -> None:
    subprocess.run(argv, cwd=ROOT, check=True, capture_output=True)


def with_dependencies(root: Path) -> None:
    source = root / "source"
    commit = snapshot_commit(source)
    quiet(sys.executable, "-m", "venv", str(root / "venv"))
    python = str(root / "venv" / "bin" / "python")
    quiet(python, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    quiet(python, "-m", "pip", "install", "--quiet", f"{DISTRIBUTION} @ git+file://{source}@{commit}")


def fresh_editable(root: Path, upgrade: bool) -> None:
    """A fresh clone's venv step: a new venv, then the editable dev install (after upgrading pip, if asked)."""
    quiet(sys.executable, "-m", "venv", str(root))
    python = str(root / "bin" / "python")
    if upgrade:
        quiet(python, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    quiet(python, "-m", "pip", "install", "--quiet", "--no-compile", "-e", ".[dev]")


def report(name: str, seconds: list[float]) -> float:
    median = statistics.median(seconds)
    print(f"{name}: median {median:.2f} s over {len(seconds)} ({', '.join(f'{s:.2f}' for s in seconds)})")
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--fresh", action="store_true", help="time a fresh venv's editable install only")
    args = parser.parse_args()
    if args.fresh:
        with tempfile.TemporaryDirectory(prefix="bench-install-") as scratch:
            runs = iter(range(10 ** 6))
            figures: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(args.repeat):
                for upgrade in (False, True):
                    figures[upgrade] += timed(lambda u=upgrade: fresh_editable(Path(scratch) / f"v{next(runs)}", u), 1)
            shipped = report("fresh venv + pip install -e '.[dev]' (the pip Python ships)", figures[False])
            upgraded = report("fresh venv + pip upgrade + pip install -e '.[dev]' (script/bootstrap)", figures[True])
            print(f"  upgraded / shipped: {upgraded / shipped:.3f}")
        return
    noop = report("script/bootstrap --test (all present)", timed(lambda: quiet("script/bootstrap", "--test"),
                                                                  args.repeat))
    old = report("pip install -q -e '.[dev]' (existing venv)",
                 timed(lambda: quiet(".venv/bin/python", "-m", "pip", "install", "-q", "-e", ".[dev]"), args.repeat))
    print(f"  no-op bootstrap / previous README first half: {noop / old:.3f}")
    with tempfile.TemporaryDirectory(prefix="bench-install-") as scratch:
        runs = iter(range(10 ** 6))
        built = report("commit + git+file install --no-deps (tests/installed.py)",
                       timed(lambda: build_installed(Path(scratch) / f"n{next(runs)}"), max(1, args.repeat // 2)))
        full = report("commit + venv + git+file install with dependencies (.ci/run)",
                      timed(lambda: with_dependencies(Path(scratch) / f"d{next(runs)}"), 1))
        print(f"  --no-deps / with dependencies: {built / full:.3f}")


if __name__ == "__main__":
    main()
