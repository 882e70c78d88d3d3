"""`kv-parity bisect`: find the first-parent commit between a good and a bad revision that made the campaign FAIL.

Every probe is a whole campaign (`runners.pipeline.campaign.run_campaign`, or the same campaign as Slurm jobs with
`--backend slurm`) of one commit against `good`, under the
campaign config's own predeclared gates: determinism, parity with coverage, the paired performance gate and the
size gate. A semantic change is therefore found exactly as a slowdown is. The search is an ordinary binary search
over the first-parent commits after `good` up to `bad`; what makes it honest is the rule, fixed before the first
probe and stored in `bisect.json`:

- **The target.** The bad endpoint is probed first. Without `--target`, the gates it FAILs are the target; a
  probe is BAD when one of the target gates FAILs, GOOD when every target gate PASSes (semantic PASS or
  PASS_WITH_SEMANTIC_EXCEPTIONS), UNDECIDED otherwise (INCONCLUSIVE, BLOCKED, NOT_RUN). A performance target
  cannot be decided on a commit whose semantic gate FAILs (the protocol measures performance only once
  correctness holds), so such a probe is UNDECIDED for it.
- **One rerun.** An UNDECIDED probe is run once more as a fresh campaign; the rerun's state is the probe's. The
  first attempt is kept in the report, never pooled with the second (no adaptive re-sampling of one probe).
- **Then stop.** A probe still UNDECIDED ends the search: the result is the narrowest range the decided probes
  bound (`range: <last good>..<first bad>`), never a guess.

Builds are reused through the build cache: `good` is the baseline arm of every probe, so it is built once, and a
rerun finds its candidate built. The search assumes what every bisection assumes: once a commit is bad, later
ones are too (a later revert shows up as a range or a wrong culprit, and the stored probes show which).

The rule's pure functions and bisect.json's models are in `runners.schema.bisect_rule`, which `runners.verify` replays.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from runners import build_info
from runners.exec.build_cache import configured_dir
from runners.exec.sandbox import Sandbox
from runners.pipeline.campaign import CampaignRequest, run_campaign
from runners.progress import ProgressSink, emit
from runners.schema.bisect_rule import (
    GATES,
    BisectReport,
    Gate,
    conclude,
    search,
)
from runners.schema.config import CampaignConfig
from runners.schema.report import CampaignReport
from runners.stages.revisions import RevisionError, git, resolve_sha

NOT_ATTRIBUTED: Final = ("regression attribution of a performance FAIL: not run in a bisect probe (profile the "
                          "culprit with `kv-parity profile`)")


class BisectError(ValueError):
    """A bisect that cannot start: revisions that do not resolve or do not form a first-parent range."""



# --- running it -----------------------------------------------------------------------------------------


def first_parent_commits(repo: Path, good: str, bad: str) -> list[str]:
    """The first-parent commits after `good` up to `bad`, oldest first; BisectError unless `good` is on `bad`'s
    first-parent history (a bisect compares each commit with `good`, so the chain must reach it)."""
    if good == bad:
        raise BisectError(f"good and bad are the same commit {good}: nothing to bisect")
    try:
        listed = git(repo, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}").split()
        reaches = bool(listed) and git(repo, "rev-parse", f"{listed[0]}^1") == good
    except RevisionError as exc:
        raise BisectError(f"cannot list the commits from {good[:12]} to {bad[:12]}: {exc}") from exc
    if not reaches:
        raise BisectError(
            f"good {good} is not on the first-parent history of bad {bad}: a bisect probes the first-parent "
            "commits after good (a branch that merged its base in has its merge base off that history; name a "
            "good commit on it)")
    return listed


ProbeRunner = Callable[[CampaignRequest, ProgressSink | None], CampaignReport]
"""Runs one probe: a whole campaign of one commit against good, returning its report."""


@dataclass
class BisectRequest:
    repo: Path
    good: str
    bad: str
    config: CampaignConfig
    config_source: str
    out_dir: Path
    rows: list[str] | None = None
    target: list[Gate] | None = None
    """None: the gates the bad endpoint FAILs."""
    config_ref: str | None = None
    """Trusted revision the determinism and harness patches are read at (None: good)."""
    trace_path: Path | None = None
    sandbox: Sandbox = field(default_factory=Sandbox.default)
    build_cache: Path | None = field(default_factory=configured_dir)
    """None: `<out>/build-cache`, so the good build is reused by every probe all the same."""
    bisect_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    run_probe: ProbeRunner = run_campaign
    """What runs one probe's campaign: here (`run_campaign`), or the same campaign as Slurm jobs
    (`kv-parity bisect --backend slurm`); the rule and bisect.json are the same either way."""

    def __post_init__(self) -> None:
        self.repo = self.repo.resolve()
        self.out_dir = self.out_dir.resolve()


def parse_target(text: str | None) -> list[Gate] | None:
    """`--target semantic,performance`: the gates named, in GATES order; None (the bad endpoint decides) when
    empty; BisectError naming an unknown gate."""
    names = [name.strip() for name in (text or "").split(",") if name.strip()]
    unknown = [name for name in names if name not in GATES]
    if unknown:
        raise BisectError(f"unknown gates {unknown} in --target; choose from {', '.join(GATES)}")
    return [gate for gate in GATES if gate in names] or None


ProbeWriter = Callable[[CampaignReport, Path], object]
"""Writes one probe's campaign artifact into its directory (the CLI: `bot.publish.artifact.write_artifact`)."""


def _run_attempt(request: BisectRequest, good: str, commit: str, label: str, write: ProbeWriter,
                 progress: ProgressSink | None) -> tuple[CampaignReport, str]:
    directory = Path("probes") / label
    out = request.out_dir / directory
    campaign = CampaignRequest(
        repo=request.repo, base=good, head=commit, config=request.config, config_source=request.config_source,
        out_dir=out, rows=request.rows, campaign_id=f"{request.bisect_id}-{label}", trace_path=request.trace_path,
        config_ref=request.config_ref or good, sandbox=request.sandbox,
        build_cache=request.build_cache or request.out_dir / "build-cache", attribute_failures=False,
    )
    report = request.run_probe(campaign, progress)
    if not any(row.attribution for row in report.rows):  # the split pipeline's row jobs still attribute
        report.skipped.append(NOT_ATTRIBUTED)
    write(report, out)
    return report, str(directory)


def run_bisect(request: BisectRequest, write: ProbeWriter, progress: ProgressSink | None = None) -> BisectReport:
    """Probe by the rule until it concludes; every attempt's report is kept in the returned report."""
    try:
        good = resolve_sha(request.repo, request.good)
        bad = resolve_sha(request.repo, request.bad)
    except RevisionError as exc:
        raise BisectError(str(exc)) from exc
    commits = first_parent_commits(request.repo, good, bad)
    request.out_dir.mkdir(parents=True, exist_ok=True)
    emit(progress, "bisect", f"{len(commits)} first-parent commits after {good[:12]} up to {bad[:12]}")

    def attempt(number: int, commit: str, rerun: int) -> tuple[CampaignReport, str]:
        label = f"{number:02d}-{commit[:12]}" + (f"-rerun{rerun}" if rerun else "")
        emit(progress, "bisect", f"probe {number}: {commit[:12]} (commit {commits.index(commit) + 1} of "
             f"{len(commits)})" + (" again: the first attempt was undecided" if rerun else ""))
        report, directory = _run_attempt(request, good, commit, label, write, progress)
        emit(progress, "bisect", f"{commit[:12]}: {report.concluded.summary}")
        return report, directory

    rule, probes = search(commits, request.target, attempt)
    result = conclude(good, commits, probes)
    emit(progress, "bisect", result.reason)
    return BisectReport(
        bisect_id=request.bisect_id, created_unix=round(time.time(), 3), tool_version=build_info.describe(),
        good=good, bad=bad, requested={"good": request.good, "bad": request.bad}, commits=commits,
        config=request.config, config_source=request.config_source, rows=request.rows, rule=rule, probes=probes,
        result=result,
    )
