"""What issue 18's sandbox hardening costs per sandboxed start and per build, as ratios against before.

Why: every regression test, preflight and cargo start now passes through the exec shim (rlimits, closing
descriptors, the seccomp filter: one system-python start); a performance sample gets the same natively (bwrap
--seccomp from a memfd, prlimit); and the dependency fetch gets its own network namespace behind pasta with the
fence routes. The named alternative per start is the same bwrap + setpriv argv without the hardening (what every
start was before); for the fetch it is the same start without a network (pasta attach and fence are the whole
difference). A sample's interference (CPU time /proc/stat sees on its core beyond its own rusage, which the
invalidation rule bounds at 25 ms) is measured for both. Starts alternate between the kinds so load drifts hit all.

    .venv/bin/python benchmarks/bench_sandbox_hardening.py [--starts 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from runners.exec.placement import cpu_busy_ms
from runners.exec.sandbox import SYSTEM_PYTHON, Run, Sandbox
from runners.stages.build import build_artifact

from runners.demo import commit_change, demo_config, init_fixture_repo


def without_shim(argv: list[str], command: list[str]) -> list[str]:
    """The argv as it was before the shim: bwrap + setpriv straight into the command."""
    start = argv.index(str(SYSTEM_PYTHON))
    return argv[:start] + command


def sample_argv(sandbox: Sandbox, command: list[str], hardened: bool) -> tuple[list[str], dict[str, str]]:
    """A sampled start's argv (fresh per start: the filter's memfd is rewound), or the same before issue 18."""
    argv, env = sandbox.command(Run(argv=command, proc=True, as_pid_1=True))
    if hardened:
        return argv, env
    kept = [word for i, word in enumerate(argv) if word != "--seccomp" and argv[i - 1] != "--seccomp"]
    return kept[:kept.index("prlimit")] + command, env


def sampled(argv: list[str], env: dict[str, str], cpu: int) -> tuple[float, float]:
    """(wall seconds, interference ms) of one start pinned to `cpu`, as the sampler measures it."""
    busy = cpu_busy_ms(cpu)
    started = time.perf_counter()
    pid = os.posix_spawn("/usr/bin/taskset", ["taskset", "-c", str(cpu), *argv], env)
    _, _, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - started
    return wall, cpu_busy_ms(cpu) - busy - (usage.ru_utime + usage.ru_stime) * 1000


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=30)
    args = parser.parse_args()
    sandbox = Sandbox()
    command = ["/bin/true"]
    hardened, env = sandbox.command(Run(argv=command, proc=True))
    before = without_shim(hardened, command)
    shim, plain, networked, offline = [], [], [], []
    samples: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    cpu = max(os.sched_getaffinity(0))
    for _ in range(args.starts):
        for kind in (True, False):
            samples[kind].append(sampled(*sample_argv(sandbox, command, kind), cpu))
        shim.append(timed(hardened, env))
        plain.append(timed(before, env))
        started = time.perf_counter()
        sandbox.run(Run(argv=command, network=True, proc=True), timeout=120)
        networked.append(time.perf_counter() - started)
        started = time.perf_counter()
        sandbox.run(Run(argv=command, proc=True), timeout=120)
        offline.append(time.perf_counter() - started)
    med = statistics.median
    for hardened, label in ((True, "hardened"), (False, "before")):
        print(f"sampled start, {label}: {med(w for w, _ in samples[hardened]) * 1000:.1f} ms wall, "
              f"{med(i for _, i in samples[hardened]):.1f} ms interference (median of {args.starts})")
    print(f"per start (median of {args.starts}): hardened {med(shim) * 1000:.1f} ms, before (no shim) "
          f"{med(plain) * 1000:.1f} ms, ratio {med(shim) / med(plain):.2f}x, +{(med(shim) - med(plain)) * 1000:.1f} ms")
    print(f"networked start (pasta + fence) {med(networked) * 1000:.1f} ms against the same start offline "
          f"{med(offline) * 1000:.1f} ms: +{(med(networked) - med(offline)) * 1000:.1f} ms")
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "repo"
        init_fixture_repo(repo)
        sha = commit_change(repo, "bench", touch_comment=True)
        started = time.perf_counter()
        build_artifact(repo, "candidate", sha, demo_config().build, Path(scratch) / "bin")
        seconds = time.perf_counter() - started
    # A build is five sandboxed cargo starts (fetch, metadata, rustc -vV, cargo -vV, build), one of them networked.
    added = 5 * (med(shim) - med(plain)) + (med(networked) - med(offline))
    print(f"per build: fixture build {seconds:.2f} s, of which the hardening adds about {added * 1000:.0f} ms "
          f"({seconds / (seconds - added):.3f}x against the build without it)")


if __name__ == "__main__":
    main()
