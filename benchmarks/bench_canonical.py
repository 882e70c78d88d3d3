"""Canonicalize-and-digest throughput and peak RSS on a realistic 5,000-request canonical line.

Why: every determinism repetition and parity comparison canonicalizes a full report line, so the encoder
choice in runners/stages/canonical.py is decided by measurement. Variants, each in a fresh process:

- stdlib:       json.loads + json.dumps(sort_keys=True, separators=(",", ":")) + hashlib.sha256
- orjson:       orjson.loads + orjson.dumps(OPT_SORT_KEYS) + hashlib.sha256 (the encoder alone)
- canonicalize: runners.stages.canonical.canonicalize (orjson, uuid sort, exclusions, section digests), bytes in memory
- canonicalize-file: the same, the bytes kept in a new file (determinism's first repetition of each arm)
- canonicalize-digests: the same, digests only (every later determinism repetition)

Peak RSS: the parent starts one *measurer* process per variant; the measurer runs the worker as its only
child and reads resource.getrusage(RUSAGE_CHILDREN).ru_maxrss, which is then exactly that worker's peak
(in the parent itself it would be the maximum over every variant run so far). The worker also reports
its own ru_maxrss after imports and reading the line, so "work" is the memory the operation itself added.

    .venv/bin/python benchmarks/bench_canonical.py [--requests 5000] [--repeat 5] [--line FILE]

`--line` measures a canonical line a harness wrote instead of the generated one (its first line), e.g. the
fixture's 5,000-request line kept by benchmarks/bench_real_size.py under its work directory.

Each pass is timed by the wall clock and by the process's CPU time: on a node shared with other work the wall
clock measures the share of a core the pass got, the CPU time (median, "per CPU second") the work itself.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

VARIANTS = ("stdlib", "orjson", "canonicalize", "canonicalize-file", "canonicalize-digests")
WORKERS = 4
POOLS = ("prefill", "decode")


def _ms(rng: random.Random, high: float) -> float:
    """Virtual-time floats as the harness prints them: accumulated f64 sums, full shortest-repr digits."""
    return rng.uniform(0.0, high) + rng.random() / 7.0


def _route(rng: random.Random, pool: str, input_tokens: int) -> dict[str, Any]:
    overlap_blocks = rng.randint(0, input_tokens // 64)
    return {
        "best_available_overlap_blocks": overlap_blocks + rng.randint(0, 3),
        "candidates": [
            {
                "dp_rank": 0,
                "logit": rng.uniform(-50.0, 5.0),
                "overlap_blocks": rng.randint(0, overlap_blocks + 2),
                "potential_decode_blocks": rng.randint(0, 6000),
                "potential_prefill_blocks": rng.randint(0, 200),
                "worker_id": worker,
            }
            for worker in range(WORKERS // 2)
        ],
        "dp_rank": 0,
        "logical_worker_id": rng.randrange(WORKERS // 2),
        "outcome": "immediate",
        "overlap_regret_blocks": rng.randint(0, 3),
        "placement_replica_id": None,
        "pool": pool,
        "queue_entered_at_ms": None,
        "queue_wait_ms": None,
        "released_at_ms": None,
        "reported_overlap_tokens": overlap_blocks * 64,
        "scheduler_id": 0,
        "selected_overlap_blocks": overlap_blocks,
        "tie_break_ordinal": rng.randint(0, 1),
        "worker_active_blocks": rng.randint(0, 5500),
        "worker_active_prefill_tokens": rng.randint(0, 8192),
        "worker_running_requests": rng.randint(0, 16),
        "worker_waiting_requests": rng.randint(0, 4),
    }


def _admission(rng: random.Random, ordinal: int, pool: str, at_ms: float) -> dict[str, Any]:
    return {
        "active_blocks_after": rng.randint(0, 5500),
        "active_blocks_before": rng.randint(0, 5500),
        "admission_ordinal": ordinal,
        "at_ms": at_ms,
        "batch_tokens": rng.randint(0, 8192),
        "dp_rank": 0,
        "is_readmission": False,
        "new_blocks": rng.randint(0, 120),
        "num_computed_tokens": rng.randint(0, 8000),
        "pool": pool,
        "pool_admission_ordinal": ordinal // 2,
        "reused_blocks": rng.randint(0, 100),
        "reused_input_tokens": rng.randint(0, 6400),
        "running_requests_after": rng.randint(1, 16),
        "running_requests_before": rng.randint(0, 15),
        "scheduled_tokens": rng.randint(0, 8192),
        "step_ordinal": rng.randint(0, 400000),
        "waiting_requests_after": rng.randint(0, 8),
        "waiting_requests_before": rng.randint(0, 8),
        "worker_id": rng.randrange(WORKERS // 2),
    }


def _request(rng: random.Random, index: int) -> dict[str, Any]:
    arrival = index * 10.375
    input_tokens = rng.randint(200, 16000)
    output_tokens = rng.randint(1, 1000)
    prefill_admit = arrival + _ms(rng, 50.0)
    decode_admit = prefill_admit + _ms(rng, 900.0)
    terminal = decode_admit + _ms(rng, 9000.0)
    return {
        "admission_count": 2,
        "admission_history": [
            _admission(rng, 0, "prefill", prefill_admit),
            _admission(rng, 1, "decode", decode_admit),
        ],
        "arrival_time_ms": arrival,
        "decode_admit_ms": decode_admit,
        "decode_reused_input_tokens": input_tokens,
        "decode_route_overlap_tokens": 0,
        "decode_worker_idx": rng.randrange(WORKERS // 2),
        "destination_activated_ms": decode_admit,
        "destination_reserved_ms": decode_admit - _ms(rng, 15.0),
        "dispatched_at_ms": arrival,
        "e2e_latency_ms": terminal - arrival,
        "first_admit_ms": prefill_admit,
        "first_token_ms": decode_admit - _ms(rng, 2.0),
        "input_length": input_tokens,
        "itl_ms": _ms(rng, 20.0),
        "last_token_ms": terminal,
        "output_length": output_tokens,
        "prefill_admit_ms": prefill_admit,
        "prefill_route_overlap_tokens": rng.randint(0, input_tokens),
        "prefill_worker_idx": rng.randrange(WORKERS // 2),
        "pressure_record_ordinals": [],
        "readmission_count": 0,
        "requested_output_length": output_tokens,
        "reused_input_tokens": rng.randint(0, input_tokens),
        "routing_history": [_route(rng, pool, input_tokens) for pool in POOLS],
        "session_id": None,
        "source_held_ms": decode_admit - _ms(rng, 15.0),
        "source_released_ms": decode_admit,
        "terminal_status": "completed",
        "terminal_time_ms": terminal,
        "ttft_ms": _ms(rng, 2000.0),
        "ttst_ms": _ms(rng, 30.0),
        "turn_index": None,
        "uuid": f"00000000-0000-0000-0000-{index:012x}",
    }


def generate_line(requests: int, seed: int = 20261129) -> bytes:
    """A deterministic disaggregated vLLM report line of the harness's shape, per_request in uuid order."""
    rng = random.Random(seed)
    pressure = [
        {
            "at_ms": _ms(rng, 50000.0),
            "dp_rank": 0,
            "kind": "vllm_preemption",
            "logical_available_blocks_before": None,
            "pool": "decode",
            "pressure_ordinal": ordinal,
            "readmitted_at_ms": _ms(rng, 50000.0),
            "request_active_blocks_before": rng.randint(1, 200),
            "request_uuid": f"00000000-0000-0000-0000-{rng.randrange(requests):012x}",
            "required_blocks_before": None,
            "state_after": {"active_blocks": 5369, "running_requests": 15, "waiting_requests": 1},
            "state_before": {"active_blocks": 5500, "running_requests": 16, "waiting_requests": 0},
            "worker_id": rng.randrange(WORKERS // 2),
        }
        for ordinal in range(14)
    ]
    report = {
        "coverage": {
            "capture_canonical_evidence": True,
            "capture_per_request": True,
            "capture_planner_details": False,
            "kv_ingest": {
                "batches": 241055,
                "blake3_256": hashlib.sha256(b"kv").hexdigest(),
                "blocks": 1957760,
                "encoding": "dynamo.offline-kv-ingest.v1",
                "events": 302100,
                "kind_counts": {"removed": 149500, "stored": 152600},
                "pool_counts": {"decode": 150550, "prefill": 151550},
                "tier_counts": {"device": 302100},
            },
            "per_request_records": requests,
            "pressure": {"records": pressure, "sglang_retractions_total": 0, "vllm_preemptions_total": 14},
        },
        "metadata": {
            "engine_config": {
                pool: {"block_size": 64, "engine_type": "vllm", "num_gpu_blocks": 5500, "worker_type": pool}
                for pool in POOLS
            },
            "replay_bench": True,
            "result_exclusions": [
                "/summary/wall_time_ms",
                "/summary/processed_tokens_per_s",
                "/summary/processed_output_tokens_per_s",
            ],
            "router": {
                "config": {"overlap_score_weight": 1.0, "router_queue_threshold": None},
                "mode": "kv_router",
            },
            "schema_version": "dynamo.offline-replay.v1",
        },
        "per_request": [_request(rng, index) for index in range(requests)],
        "planner": None,
        "summary": {
            "completed_requests": requests,
            "mean_ttft_ms": 1733.2,
            "num_requests": requests,
            "processed_output_tokens_per_s": 3837.9,
            "processed_tokens_per_s": 192608.0,
            "wall_time_ms": 51873.2,
        },
    }
    return json.dumps(report, sort_keys=True, separators=(",", ":")).encode()


def _run_variant(variant: str, line: bytes, scratch: Path) -> str:
    """One canonicalize-and-digest pass; imports happen before the clock starts. `scratch` is a path that does
    not exist yet (the file variant's output)."""
    if variant == "stdlib":
        document = json.loads(line)
        encoded = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(encoded).hexdigest()
    if variant == "orjson":
        import orjson

        return hashlib.sha256(orjson.dumps(orjson.loads(line), option=orjson.OPT_SORT_KEYS)).hexdigest()
    from runners.schema.config import PROTOCOL_EXCLUSIONS
    from runners.stages.canonical import canonicalize

    keep = {"canonicalize": True, "canonicalize-file": scratch, "canonicalize-digests": False}[variant]
    return canonicalize(line, PROTOCOL_EXCLUSIONS, keep=keep).digest


def _worker(variant: str, path: Path, repeat: int) -> None:
    if variant != "stdlib":
        import orjson  # noqa: F401  (imports are not part of the measured pass)
    if variant.startswith("canonicalize"):
        import runners.stages.canonical  # noqa: F401
    line = path.read_bytes()
    floor_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    seconds, cpu_seconds, digest = [], [], ""
    scratch = path.with_name("kept.canonical.json")
    for _ in range(repeat):
        started, cpu_started = time.perf_counter(), time.process_time()
        digest = _run_variant(variant, line, scratch)
        seconds.append(time.perf_counter() - started)
        cpu_seconds.append(time.process_time() - cpu_started)
        scratch.unlink(missing_ok=True)
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "digest": digest, "floor_kib": floor_kib}))


def _child(mode: str, variant: str, path: Path, repeat: int) -> dict[str, Any]:
    """Run this script in a fresh process in `mode` and return the JSON it prints."""
    argv = [sys.executable, __file__, mode, variant, str(path), "--repeat", str(repeat)]
    completed = subprocess.run(argv, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(completed.stdout)
    return result


def _measure(variant: str, path: Path, repeat: int) -> None:
    """The worker is this process's only child, so RUSAGE_CHILDREN's ru_maxrss is its peak alone."""
    result = _child("--worker", variant, path, repeat)
    result["peak_kib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--line", type=Path, default=None, help="a harness-written canonical line to measure")
    parser.add_argument("--worker", nargs=2, metavar=("VARIANT", "FILE"))
    parser.add_argument("--measure", nargs=2, metavar=("VARIANT", "FILE"))
    args = parser.parse_args()
    if args.worker:
        _worker(args.worker[0], Path(args.worker[1]), args.repeat)
        return
    if args.measure:
        _measure(args.measure[0], Path(args.measure[1]), args.repeat)
        return
    line = args.line.read_bytes().splitlines()[0] if args.line else generate_line(args.requests)
    size_mb = len(line) / 1e6
    source = str(args.line) if args.line else f"generated, {args.requests} requests"
    print(f"line: {source}, {len(line):,} bytes ({size_mb:.1f} MB), repeat {args.repeat}")
    digests: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "canonical.jsonl"
        path.write_bytes(line + b"\n")
        for variant in VARIANTS:
            result = _child("--measure", variant, path, args.repeat)
            median = statistics.median(result["seconds"])
            digests[variant] = result["digest"]
            best = min(result["seconds"])
            cpu = statistics.median(result["cpu_seconds"])
            peak, floor = result["peak_kib"] / 1024, result["floor_kib"] / 1024
            print(
                f"{variant:>20}: median {median * 1000:7.1f} ms  {size_mb / median:6.1f} MB/s  "
                f"(best {size_mb / best:6.1f}; per CPU second {size_mb / cpu:6.1f})  peak RSS {peak:6.1f} MiB  "
                f"(after imports+read {floor:5.1f}, work {peak - floor:5.1f})"
            )
    same = "identical" if digests["stdlib"] == digests["orjson"] else "DIFFERENT"
    print(f"stdlib vs orjson digest of this line: {same} (never mix them: one encoder only)")
    kept = {digests[variant] for variant in VARIANTS if variant.startswith("canonicalize")}
    if len(kept) != 1:
        raise SystemExit(f"the canonicalize variants gave different digests: {sorted(kept)}")


if __name__ == "__main__":
    main()
