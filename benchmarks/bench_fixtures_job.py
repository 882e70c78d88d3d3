"""What the Actions path's `stage6-fixtures` job costs against a row job of the same campaign.

One full demo campaign (identical revisions, the demo profile's default gate: 5 warmups per arm, 60 pairs) is
built once with `kv-parity build`; then, on this node, `kv-parity row --row vllm-agg` and
`kv-parity row --row stage6-fixtures` run from that manifest, each timed from the call to its result file
(staging and re-hashing included), interleaved `--repeat` times. Competing load on a shared machine would block
the row before its 60 pairs (and end it early), so the interference bound is lifted: this measures cost, not
the gate.

    .venv/bin/python benchmarks/bench_fixtures_job.py [--out DIR] [--repeat N]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bot.cli.distributed import build_main, row_main
from runners.demo import prepare_demo
from runners.pipeline.distributed.common import FIXTURES_ROW, MANIFEST_NAME
from runners.schema.config import PROFILES_DIR

ROW = "vllm-agg"


def timed_row(manifest: Path, row: str, trace: Path, out: Path) -> float:
    """Wall seconds of one `kv-parity row` job; a job that does not write its result is an error."""
    shutil.rmtree(out, ignore_errors=True)
    started = time.monotonic()
    code = row_main(["--manifest", str(manifest), "--row", row, "--out", str(out), "--trace", str(trace)])
    seconds = time.monotonic() - started
    if code != 0:
        raise SystemExit(f"kv-parity row --row {row} exited {code}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="kv-parity-fixtures-job-"))
    repo, base, head, trace = prepare_demo(out, "identical")
    build, config = out / "build", out / "demo-unblocked.toml"
    demo = (PROFILES_DIR / "demo.toml").read_text(encoding="utf-8")
    config.write_text(demo.replace("[perf]\n", "[perf]\ninvalidation = { max_interference_ms = 1e9 }\n", 1),
                      encoding="utf-8")
    if build_main(["--repo", str(repo), "--base", base, "--head", head, "--config", str(config), "--trace",
                   str(trace), "--out", str(build)]) != 0:
        raise SystemExit("kv-parity build failed")
    manifest = build / MANIFEST_NAME
    rows, fixtures = [], []
    for _ in range(args.repeat):
        rows.append(timed_row(manifest, ROW, trace, out / "row"))
        fixtures.append(timed_row(manifest, FIXTURES_ROW, trace, out / "fixtures"))
    row, fixture = statistics.median(rows), statistics.median(fixtures)
    print(f"row job {ROW}: {', '.join(f'{s:.2f}' for s in rows)} s; fixtures job: "
          f"{', '.join(f'{s:.2f}' for s in fixtures)} s")
    print(f"| `{FIXTURES_ROW}` job (5 fixtures: 4 run, scale-to-zero UNSUPPORTED) | {fixture:.2f} s median | "
          f"{fixture / row:.3f}x the {row:.1f} s `{ROW}` row job (median of {args.repeat}, interleaved) |")


if __name__ == "__main__":
    main()
