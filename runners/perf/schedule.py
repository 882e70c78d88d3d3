"""Stage 7's run order: a balanced schedule of arm orders drawn from a seed derived from the campaign seed and the
row, persisted before the first sample so anyone can rederive it (`kv-parity verify` does)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from runners.schema.report import Arm, PairPlan


def schedule_seed(base_seed: int, row_id: str) -> int:
    """The row's run-order seed: the campaign seed mixed with the row id, reproducible anywhere."""
    return int.from_bytes(hashlib.sha256(f"{base_seed}:{row_id}".encode()).digest()[:8], "big")


def make_schedule(seed: int, pairs: int) -> list[PairPlan]:
    """Balanced arm orders (pairs/2 each) in a random order drawn from numpy's default generator."""
    if pairs % 2:
        raise ValueError("a balanced schedule needs an even number of pairs")
    orders = ["baseline_first"] * (pairs // 2) + ["candidate_first"] * (pairs // 2)
    permutation = np.random.default_rng(seed).permutation(pairs)
    return [PairPlan.model_validate({"pair": i, "order": orders[int(j)]}) for i, j in enumerate(permutation)]


def persist_schedule(workdir: Path, row_id: str, base_seed: int, seed: int, plan: list[PairPlan]) -> Path:
    """Write the schedule (and how to rederive it) before the first sample runs."""
    path = workdir / f"schedule-{row_id}.json"
    document = {
        "row": row_id,
        "base_seed": base_seed,
        "schedule_seed": seed,
        "derivation": "schedule_seed = first 8 bytes (big-endian) of sha256('<base_seed>:<row>'); orders = "
        "numpy.random.default_rng(schedule_seed).permutation over pairs/2 baseline_first then "
        "pairs/2 candidate_first",
        "schedule": [p.model_dump() for p in plan],
    }
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    temporary.replace(path)
    return path


def arm_order(plan: PairPlan) -> tuple[Arm, Arm]:
    return ("baseline", "candidate") if plan.order == "baseline_first" else ("candidate", "baseline")
