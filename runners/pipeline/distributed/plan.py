"""`kv-parity plan` (trusted, runs no pull-request code): what the campaign compares, fixed before any build.

It reads the config at --config-ref with `git show` (never the head), pins both SHAs and their relationship,
makes the Stage 6 fixture traces, and writes PLAN/plan.json and the row matrix. Every later job names the plan
bytes it followed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import Field, ValidationError

from runners.pipeline.campaign import fixtures_not_run
from runners.pipeline.distributed.artifacts import (
    FixtureInput,
    materialise_fixture_traces,
)
from runners.pipeline.distributed.common import DistributedError, StrictModel
from runners.schema.config import (
    DEFAULT_CONFIG_PATH,
    PROFILES_DIR,
    CampaignConfig,
    CampaignMode,
    ConfigError,
    parse_config,
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
