"""Deterministic synthetic Mooncake-format trace for the kv-parity-bot demo.

Why this exists: the demo (and anything we publish with it) never ships the
real Mooncake trace. The bot only needs a trace with the same *shape* to
exercise the replay harness: JSONL rows with ``timestamp`` (ms, increasing),
``input_length``, ``output_length`` and ``hash_ids`` (one id per 512-token
block), with enough prefix sharing for KV-aware routing to matter and enough
load for the capacity edge to be reachable. This module generates such a
trace from a seed, byte-for-byte reproducibly (stdlib only, no global state),
so the demo can regenerate it anywhere and pin it by its SHA-256.

Shape of the generated workload:

* a few shared "system prompt" prefix families (a long one, a medium one and
  a one-block one) that most conversations start with, like the real trace;
* multi-turn sessions: each turn repeats the session's whole previous context
  (same hash_ids) and appends new blocks, so later turns hit the prefix cache;
* Poisson-like arrivals (mean gap ~177 ms, integer ms, non-decreasing);
* ``input_length`` consistent with ``len(hash_ids) * 512`` (the last block is
  partially filled), output lengths between 10 and 500 tokens.
"""

from __future__ import annotations

import hashlib
import json
import math
import pathlib
import random
from dataclasses import dataclass

TRACE_BLOCK_SIZE = 512
MEAN_GAP_MS = 177.0
MIN_OUTPUT, MAX_OUTPUT = 10, 500
MAX_CONTEXT_BLOCKS = 96

# (weight, prefix length in blocks) of the shared system-prompt families.
_PREFIX_FAMILIES = ((0.45, 1), (0.30, 12), (0.15, 6), (0.10, 0))


@dataclass
class _Session:
    id: str
    context: list[int]
    turns_left: int


def _output_length(rng: random.Random) -> int:
    # Log-normal around ~150 tokens, clipped to [MIN_OUTPUT, MAX_OUTPUT].
    value = round(math.exp(rng.gauss(5.0, 0.8)))
    return max(MIN_OUTPUT, min(MAX_OUTPUT, value))


def generate_demo_trace(path: pathlib.Path, rows: int = 1000, seed: int = 20261129) -> str:
    """Write a deterministic Mooncake-format JSONL trace and return its SHA-256 hex.

    The same ``rows`` and ``seed`` always produce the same bytes.
    """
    if rows < 1:
        raise ValueError("rows must be at least 1")
    rng = random.Random(seed)
    next_id = 0

    def fresh(n: int) -> list[int]:
        nonlocal next_id
        ids = list(range(next_id, next_id + n))
        next_id += n
        return ids

    families = [(weight, fresh(length)) for weight, length in _PREFIX_FAMILIES]
    sessions: list[_Session] = []  # active multi-turn conversations
    session_count = 0
    timestamp = 0.0
    lines = []
    for index in range(rows):
        if index > 0:
            timestamp += rng.expovariate(1.0 / MEAN_GAP_MS)
        if sessions and rng.random() < 0.55:
            session = sessions[rng.randrange(len(sessions))]
            session.context = session.context + fresh(rng.randint(1, 4))
            session.turns_left -= 1
        else:
            pick = rng.random()
            prefix: list[int] = families[-1][1]
            for weight, ids in families:
                if pick < weight:
                    prefix = ids
                    break
                pick -= weight
            session = _Session(
                id=f"session-{session_count:05d}",
                context=prefix + fresh(rng.randint(2, 24)),
                turns_left=rng.randint(0, 6),
            )
            session_count += 1
            sessions.append(session)
        hash_ids = session.context[:MAX_CONTEXT_BLOCKS]
        input_length = (len(hash_ids) - 1) * TRACE_BLOCK_SIZE + rng.randint(1, TRACE_BLOCK_SIZE)
        row = {
            "timestamp": int(timestamp),
            "input_length": input_length,
            "output_length": _output_length(rng),
            "hash_ids": hash_ids,
            "session_id": session.id,
        }
        lines.append(json.dumps(row))
        if session.turns_left <= 0 or len(session.context) >= MAX_CONTEXT_BLOCKS:
            sessions.remove(session)
    data = ("\n".join(lines) + "\n").encode("utf-8")
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


if __name__ == "__main__":
    import sys

    target = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "demo_trace.jsonl")
    print(generate_demo_trace(target))
