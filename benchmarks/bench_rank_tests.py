"""The dependence diagnostics' rank tests: runners/rank_tests.py against scipy.stats, the alternative it replaced.

Two figures, each the minimum over `--repeat` runs: the CPU a fresh process spends to import what it needs and
compute one series' checks (what every row job, campaign and `kv-parity verify` pays once), and the time of the
checks alone on an already-imported module. The series is the protocol's 60 pairs of lognormal ratios with
elapsed times; both implementations get the same numbers and must agree on every p-value.

    .venv/bin/python benchmarks/bench_rank_tests.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from typing import Any

SERIES = """
import numpy as np
rng = np.random.default_rng(7)
logs = [float(v) for v in rng.normal(0.0, 0.02, 60)]
index = [float(i) for i in range(60)]
elapsed = [float(v) for v in np.cumsum(rng.uniform(0.1, 0.2, 60))]
first, second = logs[::2], logs[1::2]
"""

OURS = SERIES + """
from runners.rank_tests import kendall_tau_b, mann_whitney_u
def checks():
    return [kendall_tau_b(index, logs).p_value, kendall_tau_b(elapsed, logs).p_value,
            mann_whitney_u(first, second).p_value]
"""

SCIPY = SERIES + """
from scipy import stats
def checks():
    return [float(stats.kendalltau(index, logs).pvalue), float(stats.kendalltau(elapsed, logs).pvalue),
            float(stats.mannwhitneyu(first, second, alternative="two-sided").pvalue)]
"""

TIMED = """
import json, resource, time
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
exec(compile(PROGRAM, "bench", "exec"))
values = checks()
started = time.perf_counter()
for _ in range(200):
    checks()
print(json.dumps({"cpu_s": cpu(), "call_ms": (time.perf_counter() - started) / 200 * 1000, "p": values}))
"""


def measure(program: str) -> dict[str, Any]:
    """One fresh interpreter: its whole CPU (start-up, imports, the first checks) and the per-call time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    completed = subprocess.run([sys.executable, "-c", f"PROGRAM = {program!r}\n{TIMED}"], capture_output=True,
                               text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = json.loads(completed.stdout)
    # The per-call loop is part of the child's CPU; the process figure is what it spent before that loop.
    whole = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    result["process_cpu_s"] = whole - result["call_ms"] * 200 / 1000
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    runs = {"rank_tests": [measure(OURS) for _ in range(args.repeat)],
            "scipy.stats": [measure(SCIPY) for _ in range(args.repeat)]}
    ours, theirs = runs["rank_tests"][0]["p"], runs["scipy.stats"][0]["p"]
    if any(abs(a - b) > 1e-9 * max(abs(b), 1e-300) for a, b in zip(ours, theirs, strict=True)):
        raise SystemExit(f"the p-values differ: {ours} against {theirs}")
    print("| implementation | process CPU to the first checks (s) | one series' checks (ms) |")
    print("|---|---|---|")
    for name, results in runs.items():
        process = min(r["process_cpu_s"] for r in results)
        call = min(r["call_ms"] for r in results)
        print(f"| {name} | {process:.3f} | {call:.3f} |")


if __name__ == "__main__":
    main()
