"""Campaign configs the end-to-end tests commit as their base's, written once.

Tests that need "a base carrying the demo's first row, and a comment-only head" commit `one_row_config`'s text:
the same bytes in every test and worker (the trace is the session's one file), so the same trees, so the session
build cache (tests/conftest.py) compiles that base and that head once between them, not once per test file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runners.schema.config import CampaignConfig, SlurmRowConfig

from runners.demo import demo_config


def quick(config: CampaignConfig) -> CampaignConfig:
    """A short performance gate whose verdict is decided by the plumbing, not by this machine's noise.

    Ten pairs make the dependence diagnostics and a 1.05 threshold a coin toss between two runs, and these tests
    compare two runs; loosening both keeps every verdict kind deterministic for identical revisions. The suite's
    own workers load this 2-core machine, so competing load is not on trial here either (tests/test_perf.py
    tries that rule on its own). Beside four workers an A/A pair's ratio reached 3.7 and the upper bound X(9) of
    ten 2.198 (a 2.0 threshold made the Slurm service test INCONCLUSIVE in CI), so the threshold is 10.
    """
    diagnostics = config.perf.diagnostics.model_copy(update={
        "max_abs_autocorr": 1.0, "min_trend_p": 1e-9, "min_order_effect_p": 1e-9, "min_telemetry_p": 1e-9})
    invalidation = config.perf.invalidation.model_copy(update={"max_interference_ms": 1e6})
    perf = config.perf.model_copy(update={"pairs": 10, "warmups_per_arm": 1, "threshold": 10.0,
                                          "diagnostics": diagnostics, "invalidation": invalidation})
    return config.model_copy(update={"perf": perf})


def one_row_config(trace: Path, *, pairs: int | None = None,
                   row_slurm: SlurmRowConfig | None = None) -> CampaignConfig:
    """The demo profile's first row and every fixture, the quick gate, the trace at `trace`; `pairs` (a row
    that runs for minutes) or `row_slurm` (the row's own `[rows.slurm]`) make a config, and so a tree, of their
    own."""
    config = quick(demo_config())
    perf = config.perf.model_copy(update={"pairs": pairs}) if pairs else config.perf
    rows = [config.rows[0].model_copy(update={"slurm": row_slurm})]
    return config.model_copy(update={"rows": rows, "perf": perf,
                                     "trace": config.trace.model_copy(update={"path": str(trace)})})


def config_text(config: CampaignConfig) -> str:
    """The config as the TOML a base commits at runners.schema.config.DEFAULT_CONFIG_PATH."""
    return "\n".join(to_toml(config.model_dump(mode="json"))) + "\n"


def to_toml(data: dict[str, Any], prefix: str = "") -> list[str]:
    """Just enough TOML for a dumped CampaignConfig: scalars and arrays first, then (arrays of) tables."""
    lines: list[str] = []
    tables: list[tuple[str, Any]] = []
    for key, value in data.items():
        if value is None:
            continue
        if isinstance(value, dict) or (isinstance(value, list) and value and isinstance(value[0], dict)):
            tables.append((key, value))
        else:
            lines.append(f"{key} = {json.dumps(value)}")
    for key, value in tables:
        name = f"{prefix}{key}"
        for item in value if isinstance(value, list) else [value]:
            lines += [f"[[{name}]]" if isinstance(value, list) else f"[{name}]", *to_toml(item, f"{name}.")]
    return lines
