"""A real campaign against a harness the engine's authors did not write (issue 11, item 4).

tests/fixtures/independent_harness/ is a zero-dependency Rust workspace written from the reference document
(docs: dynamo-offline-replay.md) and the protocol alone, without reading the bundled fixture
(tests/fixtures/replay_harness) or its trace generator. It is committed into a temporary git repository twice
(a comment-only change), and run_campaign drives it end to end: build, preflight, determinism, parity,
lifecycle coverage and a short paired performance gate.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from runners.pipeline.campaign import CampaignRequest, run_campaign
from runners.schema.config import parse_config
from runners.schema.report import FixtureStatus, PerfVerdict, SemanticVerdict

from runners.verify import verify_report

HARNESS_DIR = Path(__file__).resolve().parent / "fixtures" / "independent_harness"
GIT_IDENTITY = ("-c", "user.name=kv-parity test", "-c", "user.email=test@kv-parity.invalid")
TRACE_ROWS = 300
TRACE_SHA256 = "be5878e42a2e08cd822f21c74d6e49fed6aa123d11ba4680b95dd9ba1c9569fa"
FIXTURE_TRACE = "traces/fixture-60.jsonl"
FIXTURE_TRACE_SHA256 = "d517c7ca1959b689ee7257a2daa3395e80cafa06a9f2f770e671b9dddef5c958"

pytestmark = pytest.mark.skipif(shutil.which("cargo") is None, reason="cargo is needed to build the harness")


def generate_trace(path: Path, rows: int = TRACE_ROWS, seed: int = 20261201) -> str:
    """Mooncake rows with shared prefixes: 8 prefix families of up to 6 blocks, unique tails; returns SHA-256."""
    state = seed

    def rnd(n: int) -> int:
        nonlocal state
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return (state >> 33) % n

    families = [list(range(f * 100, f * 100 + 6)) for f in range(8)]
    next_id, timestamp, lines = 1000, 0, []
    for _ in range(rows):
        timestamp += rnd(400)
        family = families[rnd(len(families))]
        shared = family[: 1 + rnd(len(family))]
        tail = list(range(next_id, next_id + 1 + rnd(4)))
        next_id += len(tail)
        ids = shared + tail
        row = {"timestamp": timestamp, "input_length": len(ids) * 512 - rnd(300),
               "output_length": 8 + rnd(120), "hash_ids": ids}
        lines.append(json.dumps(row, separators=(",", ":")) + "\n")
    data = "".join(lines).encode()
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "core.hooksPath=/dev/null", *GIT_IDENTITY, "-C", str(repo), *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def init_harness_repo(repo: Path) -> str:
    """A fresh repository holding the independent harness and a Stage 6 fixture trace on `main`; returns the base
    SHA (fixture traces are read from the trusted base revision)."""
    shutil.copytree(HARNESS_DIR, repo, ignore=shutil.ignore_patterns("target"))
    (repo / FIXTURE_TRACE).parent.mkdir(parents=True)
    generate_trace(repo / FIXTURE_TRACE, rows=60)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base: independent replay harness")
    return _git(repo, "rev-parse", "HEAD")


def commit_comment_change(repo: Path) -> str:
    """A candidate on branch `feature` that only rewords a comment; returns its SHA."""
    _git(repo, "checkout", "-q", "-b", "feature")
    path = repo / "lib" / "mocker" / "src" / "sim.rs"
    path.write_text(path.read_text(encoding="utf-8") + "// Reworded: behaviour unchanged.\n", encoding="utf-8")
    _git(repo, "commit", "-q", "-am", "refactor: reword a comment")
    head = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "main")
    return head


CONFIG = """
schema_version = 1

[build]
command = ["cargo", "build", "--release", "-p", "dynamo-bench", "--no-default-features",
           "--features", "replay-bench", "--bench", "offline_replay_bench"]
features = ["replay-bench"]

[trace]
path = "independent-trace.jsonl"
sha256 = "{sha256}"
offset = 0
count = {rows}

[harness]
timing_field = "replay_execution_ms"
common_args = ["--router-mode", "kv-router", "--arrival-speedup-ratio", "20", "--trace-block-size", "512"]

# Bands measured with this harness on the generated trace: 4 preemptions and 231 requests with reuse
# (aggregated); 3 readmitted preemptions, 183 requests with reuse on the prefill or decode side and a handoff per
# request (disaggregated).
[[rows]]
id = "vllm-agg"
args = ["--serving-mode", "aggregated", "--num-workers", "4", "--engine-type", "vllm", "--block-size", "64",
        "--num-gpu-blocks", "400", "--max-num-seqs", "16", "--max-num-batched-tokens", "8192"]
[rows.expect]
pressure = [2, 8]
reused_requests = [220, 240]
placements = {{ aggregated = {{ immediate = {rows}, queued = 0 }} }}
active_workers = {{ aggregated = 4 }}
handoffs = 0

[[rows]]
id = "vllm-disagg"
args = ["--serving-mode", "disagg", "--num-prefill-workers", "2", "--num-decode-workers", "2",
        "--engine-type", "vllm", "--block-size", "64", "--num-gpu-blocks", "200", "--max-num-seqs", "16",
        "--max-num-batched-tokens", "8192", "--kv-bytes-per-token", "131072", "--kv-transfer-bandwidth", "100",
        "--kv-transfer-timing-mode", "full-prompt"]
[rows.expect]
pressure = [1, 6]
handoff = true
reused_requests = [175, 190]
handoffs = {rows}
placements = {{ prefill = {{ immediate = {rows}, queued = 0 }}, decode = {{ immediate = {rows}, queued = 0 }} }}
active_workers = {{ prefill = 2, decode = 2 }}

# The gate's plumbing on a harness it was not written for, not its power: ten pairs (two batches of five when a
# diagnostic breaches), a verdict that must not be FAIL on a comment-only change.
[perf]
warmups_per_arm = 2
pairs = 10

# Stage 6 on a 60-row trace committed at the base. Measured: 54 of 60 requests queue at threshold 0.8 of 400
# blocks on one worker; 200 blocks with 8 sequences give 3 preemptions, each re-admitted. No handoff_ordering
# fixture: the engine's assertion needs a per-request `kv_transfer_ms` the reference never names.
[[fixtures]]
id = "router-queueing"
kind = "router_queueing"
trace = {{ path = "{fixture_trace}", sha256 = "{fixture_sha256}" }}
queue_threshold = 0.8
args = ["--arrival-speedup-ratio", "20", "--serving-mode", "aggregated", "--num-workers", "1", "--engine-type",
        "vllm", "--block-size", "64", "--num-gpu-blocks", "400", "--router-queue-threshold", "0.8"]

[[fixtures]]
id = "preemption-edge"
kind = "preemption_edge"
trace = {{ path = "{fixture_trace}", sha256 = "{fixture_sha256}" }}
pressure = [1, 3]
args = ["--arrival-speedup-ratio", "20", "--serving-mode", "aggregated", "--num-workers", "1", "--engine-type",
        "vllm", "--block-size", "64", "--num-gpu-blocks", "200", "--max-num-seqs", "8"]
"""


def test_trace_generator_is_deterministic(tmp_path: Path) -> None:
    assert generate_trace(tmp_path / "a.jsonl") == generate_trace(tmp_path / "b.jsonl") == TRACE_SHA256
    assert generate_trace(tmp_path / "f.jsonl", rows=60) == FIXTURE_TRACE_SHA256
    rows = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert len(rows) == TRACE_ROWS and all("hash_ids" in r and "output_length" in r for r in rows)


def test_campaign_against_independent_harness(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    init_harness_repo(repo)
    head = commit_comment_change(repo)
    trace = tmp_path / "independent-trace.jsonl"
    digest = generate_trace(trace)
    config = parse_config(CONFIG.format(sha256=digest, rows=TRACE_ROWS, fixture_trace=FIXTURE_TRACE,
                                        fixture_sha256=FIXTURE_TRACE_SHA256), "test_independent_harness")

    report = run_campaign(CampaignRequest(repo=repo, base="main", head=head, config=config,
                                          config_source="test_independent_harness", out_dir=tmp_path / "out",
                                          trace_path=trace))

    assert report.stopped is None, report.stopped
    assert [row.row.id for row in report.rows] == ["vllm-agg", "vllm-disagg"]
    for row in report.rows:
        assert row.semantic == SemanticVerdict.PASS, (row.row.id, row.semantic_reasons)
        assert row.parity is not None and row.parity.identical
        assert row.perf_verdict != PerfVerdict.FAIL, (row.row.id, row.perf_reason)
    assert {f.id: f.status for f in report.fixtures} == {"router-queueing": FixtureStatus.PASS,
                                                          "preemption-edge": FixtureStatus.PASS}, report.fixtures
    assert verify_report(report) == []
