"""`kv-parity plan` (trusted, runs no pull-request code): what the campaign compares, fixed before any build.

It reads the config at --config-ref with `git show` (never the head), pins both SHAs and their relationship,
makes the Stage 6 fixture traces, and writes PLAN/plan.json and the row matrix. Every later job names the plan
bytes it followed.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic import Field, ValidationError

from runners.pipeline.campaign import fixtures_not_run
from runners.pipeline.distributed.artifacts import (
    FixtureInput,
    campaign_matrix,
    materialise_fixture_traces,
    write_matrix,
)
from runners.pipeline.distributed.common import EXIT_OK, EXIT_USAGE, DistributedError, StrictModel, write_json
from runners.schema.config import (
    CAMPAIGN_MODES,
    DEFAULT_CONFIG_PATH,
    PROFILES_DIR,
    CampaignConfig,
    CampaignMode,
    ConfigError,
    parse_config,
    parse_rows,
)
from runners.schema.report import Arm
from runners.stages.revisions import RevisionError, relationship, resolve_sha, show_file

PLAN_SCHEMA = "kv-parity.plan.v1"
PLAN_NAME = "plan.json"


class Plan(StrictModel):
    """What the campaign will compare, fixed before any pull-request code runs."""

    schema_version: str = PLAN_SCHEMA
    campaign_id: str
    base_sha: str
    head_sha: str
    config_ref: str
    config_source: str
    config_text: str
    config_sha256: str
    config: CampaignConfig
    rows: list[str]
    unselected_rows: list[str]
    relationship: str
    merge_base: str | None
    mode: CampaignMode = "campaign"
    """`profile` (`/parity profile`): rows check correctness and are profiled; no performance gate, no fixtures."""
    fixtures: list[FixtureInput] = Field(default_factory=list)
    """Stage 6 fixtures this campaign runs, their traces made here in PLAN/fixtures/ (none when not run)."""
    fixtures_not_run: str | None = None
    """Why the campaign runs no Stage 6 fixtures (the single-machine rule: full campaigns only)."""

    def sha(self, arm: Arm) -> str:
        return self.base_sha if arm == "baseline" else self.head_sha


def make_plan(repo: Path, config_ref: str, base: str, head: str, rows: list[str] | None, campaign_id: str,
              profile: str | None = None, mode: CampaignMode = "campaign", out: Path | None = None) -> Plan:
    """Pin the revisions and read the config from the trusted ref (or a shipped profile); runs no PR code.
    With `out`, a full campaign's fixture traces are made there (generator, or the file at the config ref)."""
    ref_sha = resolve_sha(repo, config_ref)
    if profile is not None:
        path = PROFILES_DIR / f"{profile}.toml"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"no shipped profile {profile!r}") from exc
        source = f"profile:{profile}"
    else:
        try:
            text = show_file(repo, ref_sha, DEFAULT_CONFIG_PATH).decode("utf-8")
        except (RevisionError, UnicodeDecodeError) as exc:
            raise ConfigError(f"no readable campaign config at {DEFAULT_CONFIG_PATH} in {ref_sha[:12]}: {exc}") \
                from exc
        source = f"{DEFAULT_CONFIG_PATH}@{ref_sha}"
    config = parse_config(text, source)
    selected = config.select_rows(rows)
    base_sha, head_sha = resolve_sha(repo, base), resolve_sha(repo, head)
    related, merge_base = relationship(repo, base_sha, head_sha)
    skip = fixtures_not_run(config, mode == "profile", rows)
    fixtures = materialise_fixture_traces(config, repo, ref_sha, out) if skip is None and out is not None else []
    return Plan(campaign_id=campaign_id, base_sha=base_sha, head_sha=head_sha, config_ref=ref_sha,
                config_source=source, config_text=text, config_sha256=hashlib.sha256(text.encode()).hexdigest(),
                config=config, rows=[row.id for row in selected],
                unselected_rows=[row.id for row in config.rows if row not in selected],
                relationship=related, merge_base=merge_base, mode=mode, fixtures=fixtures, fixtures_not_run=skip)


def plan_main(argv: Sequence[str]) -> int:
    """`kv-parity plan`: PLAN/plan.json (+ `matrix=` / `row_count=` for $GITHUB_OUTPUT); runs no PR code."""
    parser = argparse.ArgumentParser(prog="kv-parity plan", description=plan_main.__doc__)
    parser.add_argument("--repo", default=".", help="git repository holding both revisions (default: .)")
    parser.add_argument("--config-ref", required=True, help=f"trusted revision whose {DEFAULT_CONFIG_PATH} is used")
    parser.add_argument("--profile", help="a shipped profile instead of the committed config (demo, tests)")
    parser.add_argument("--base", required=True, help="baseline SHA")
    parser.add_argument("--head", required=True, help="candidate SHA")
    parser.add_argument("--rows", help="comma-separated row ids (default: every row)")
    parser.add_argument("--campaign-id", required=True)
    parser.add_argument("--out", required=True, help="plan directory")
    parser.add_argument("--github-output", help="append `matrix=` and `row_count=` lines to this file")
    parser.add_argument("--mode", default="campaign",
                        help=f"{' or '.join(CAMPAIGN_MODES)} (the workflow's `mode` input; profile: correctness and "
                             "attribution per row, no performance gate)")
    args = parser.parse_args(list(argv))
    if args.mode not in CAMPAIGN_MODES:
        print(f"kv-parity plan: mode {args.mode!r} is not one of {', '.join(CAMPAIGN_MODES)}: dispatch the "
              "workflow with mode=campaign (the default) or mode=profile", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.out)
    try:
        plan = make_plan(Path(args.repo), args.config_ref, args.base, args.head, parse_rows(args.rows),
                         args.campaign_id, args.profile, args.mode, out)
    except (ConfigError, RevisionError) as exc:
        print(f"kv-parity plan: {exc}", file=sys.stderr)
        return EXIT_USAGE
    write_json(out / PLAN_NAME, plan.model_dump_json(indent=2))
    write_matrix(out, campaign_matrix(plan.config, plan.rows, bool(plan.fixtures)), args.github_output)
    fixtures = f"; Stage 6 fixtures {', '.join(f.id for f in plan.fixtures)}" if plan.fixtures else ""
    print(f"campaign {plan.campaign_id} ({plan.mode}): baseline {plan.base_sha[:12]}, candidate "
          f"{plan.head_sha[:12]}, rows {', '.join(plan.rows)}{fixtures}")
    for item in plan.fixtures:
        if item.problem is not None:
            print(f"fixture {item.id} will stop: {item.problem}")
    return EXIT_OK


def load_plan(directory: Path) -> tuple[Plan, str]:
    """The plan and the SHA-256 of its bytes (every build.json names the plan it followed)."""
    path = directory / PLAN_NAME
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DistributedError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        plan = Plan.model_validate_json(data)
    except ValidationError as exc:
        raise DistributedError(f"{path}: invalid plan: {exc}") from exc
    if plan.schema_version != PLAN_SCHEMA:
        raise DistributedError(f"{path}: plan schema {plan.schema_version!r}, this kv-parity reads {PLAN_SCHEMA!r}")
    return plan, hashlib.sha256(data).hexdigest()
