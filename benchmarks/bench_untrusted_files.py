"""What issue 18's file containment costs on the fixture, against the way it was done before.

1. Attribution capture (per profiled run): before, `perf record` and `perf script` ran as root outside the
   sandbox, perf.data in a directory the bot owned; now both run inside the sandbox as its user, perf.data in
   the process's own directory, and the bot keeps the `perf script` text from the pipe. Both styles run
   alternately on the same binary. The callgrind capture's copy out (`runners.exec.untrusted.copy_out`) is timed
   on its own.
2. Reading a sandbox output (per sample / per determinism process): `untrusted.read_bytes` (O_NOFOLLOW, fstat,
   bounded chunks) against `Path.read_bytes` on a canonical line the fixture wrote.
3. Size attribution (per campaign): bounded symbol-table reading and one c++filt call with a separator line
   after every name, against the unbounded read and a newline-joined c++filt call.

    .venv/bin/python benchmarks/bench_untrusted_files.py [--reps 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection
from runners.exec import untrusted
from runners.exec.placement import perf_placement
from runners.exec.sandbox import check
from runners.stages.attribution import PERF_FREQUENCY_HZ, sandbox_launcher
from runners.stages.build import build_artifact
from runners.stages.symbols import attribute_sizes

from runners.demo import commit_change, demo_config, init_fixture_repo
from runners.demo_trace import generate_demo_trace


def _build(root: Path, name: str, knobs: dict[str, float]) -> Path:
    repo = root / name
    init_fixture_repo(repo)
    sha = commit_change(repo, name, knobs=knobs)
    artifact = build_artifact(repo, "candidate", sha, demo_config().build, root / "bin" / name)
    return root / "bin" / name / artifact.binary_name


def _timed(argv: list[str], env: dict[str, str] | None) -> float:
    started = time.monotonic()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.monotonic() - started


def _median_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.1f} ms"


def bench_capture(binary: Path, args: list[str], root: Path, reps: int) -> None:
    perf = shutil.which("perf")
    valgrind = shutil.which("valgrind")
    assert perf and valgrind, "perf and valgrind are needed"
    sandbox = check("bwrap")
    launch = sandbox_launcher(sandbox, perf_placement().cpu_set)
    record = ["record", "-q", "--all-user", "-e", "cpu-clock", "-F", str(PERF_FREQUENCY_HZ), "--call-graph",
              "dwarf,16384"]
    script = ["script", "-F", "comm,ip,sym", "--no-demangle"]
    before: list[float] = []
    after: list[float] = []
    for rep in range(reps):
        trusted, own = root / f"before-{rep}", root / f"after-{rep}"
        trusted.mkdir()
        own.mkdir()
        harness, env = launch([str(binary), *args, "--iterations", "1", "--timings-jsonl",
                               str(trusted / "t.jsonl")], [trusted])
        old = [([perf, *record, "-o", str(trusted / "perf.data"), "--", *harness], env),
               ([perf, *script, f"--input={trusted / 'perf.data'}"], None)]
        new = [launch([perf, *record, "-o", str(own / "perf.data"), "--", str(binary), *args, "--iterations", "1",
                       "--timings-jsonl", str(own / "t.jsonl")], [own]),
               launch([perf, *script, f"--input={own / 'perf.data'}"], [own], [binary])]
        styles = [(old, before), (new, after)]
        for steps, into in styles if rep % 2 == 0 else styles[::-1]:
            into.append(sum(_timed(argv, step_env) for argv, step_env in steps))
    own = root / "callgrind"
    own.mkdir()
    argv, env = launch([valgrind, "--tool=callgrind", f"--callgrind-out-file={own / 'callgrind.out'}",
                        str(binary), *args, "--iterations", "1"], [own])
    callgrind = _timed(argv, env)
    started = time.monotonic()
    untrusted.copy_out(own / "callgrind.out", root / "kept.callgrind.out", root=root)
    callgrind_copy = time.monotonic() - started
    print(f"| perf capture, before (record + script as root outside the sandbox) | {_median_ms(before)} | |")
    print(f"| perf capture, now (record + script inside the sandbox) | {_median_ms(after)} | "
          f"{statistics.median(after) / statistics.median(before):.3f}x before |")
    print(f"| callgrind run / its capture copy ({(own / 'callgrind.out').stat().st_size / 1e3:.0f} kB) | "
          f"{callgrind:.2f} s / {callgrind_copy * 1000:.2f} ms | {callgrind_copy / callgrind:.2%} |")


def bench_reads(binary: Path, args: list[str], root: Path) -> None:
    out = root / "read" / "canonical.jsonl"
    out.parent.mkdir()
    subprocess.run([str(binary), *args, "--iterations", "1", "--canonical-reports-jsonl", str(out)], check=True,
                   capture_output=True)
    timings: dict[str, list[float]] = {"plain": [], "untrusted": []}
    for _ in range(2000):
        for name, read in (("plain", out.read_bytes), ("untrusted", lambda: untrusted.read_bytes(out, root=root))):
            started = time.perf_counter()
            read()
            timings[name].append(time.perf_counter() - started)
    plain, checked = (statistics.median(timings[name]) * 1e6 for name in ("plain", "untrusted"))
    print(f"| read a {out.stat().st_size / 1e3:.0f} kB canonical line: Path.read_bytes / untrusted.read_bytes | "
          f"{plain:.1f} µs / {checked:.1f} µs | {checked / plain:.2f}x |")


def _old_attribute_sizes(baseline: Path, candidate: Path) -> None:
    """Before: every symbol read without bounds, one c++filt call with the names joined by newlines."""
    for binary in (baseline, candidate):
        with binary.open("rb") as handle:
            table = ELFFile(handle).get_section_by_name(".symtab")
            assert isinstance(table, SymbolTableSection)
            names = [s.name for s in table.iter_symbols() if s.name and s["st_size"] > 0
                     and s["st_info"]["type"] in ("STT_FUNC", "STT_OBJECT") and s["st_shndx"] != "SHN_UNDEF"]
        subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True, text=True, check=True)


def bench_sizes(baseline: Path, candidate: Path, reps: int) -> None:
    old, new = [], []
    for rep in range(reps):
        pair = [(old, _old_attribute_sizes), (new, attribute_sizes)]
        for into, run in pair if rep % 2 == 0 else pair[::-1]:
            started = time.monotonic()
            run(baseline, candidate)
            into.append(time.monotonic() - started)
    print(f"| size attribution of the fixture pair: before / now | {_median_ms(old)} / {_median_ms(new)} | "
          f"{statistics.median(new) / statistics.median(old):.3f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kv-parity-untrusted-"))
    config = demo_config()
    trace = root / "trace.jsonl"
    generate_demo_trace(trace, rows=config.trace.offset + config.trace.count)
    baseline = _build(root, "baseline", {})
    candidate = _build(root, "hot-spot", {"HOT_SPOT_WORK": 1.0})
    row = [str(trace), *config.harness.common_args, *config.rows[0].args]
    print("| quantity | value | ratio |")
    print("|---|---|---|")
    (root / "capture").mkdir()
    bench_capture(candidate, row, root / "capture", args.reps)
    bench_reads(candidate, row, root)
    bench_sizes(baseline, candidate, args.reps)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
