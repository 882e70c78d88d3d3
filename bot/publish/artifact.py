"""The campaign artifact: the complete evidence behind what the check run and the comments summarise.

report.json is the verifiable record; report.md the readable page and report.html the one to look at (charts,
tables; the only places raw output of the code under test is shown); samples.csv every attempted sample;
schedule-<row>.json, digests.txt and each measured row's charts as SVG.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path

from bot.core.attempts import PriorAttempt
from bot.github.redact import Redactor, secret_values
from bot.publish import render
from bot.publish.html_report import report_html, row_charts
from bot.publish.views import Links
from runners.schema.report import CampaignReport

SAMPLE_COLUMNS = (
    "row",
    "kind",
    "pair",
    "order",
    "attempt",
    "position",
    "arm",
    "status",
    "metric_ms",
    "setup_ms",
    "elapsed_s",
    "exit_code",
    "started_unix",
    "ended_unix",
    "cpu_set",
    "affinity_observed",
    "affinity_ok",
    "interference_ms",
    "failure",
    "invalidation",
    "kernel_cpu_ms",
)


def _samples_rows(report: CampaignReport) -> list[dict[str, object]]:
    """Every attempted sample of every row, warmups and invalidated attempts included, in run order."""
    rows: list[dict[str, object]] = []
    for row in report.rows:
        perf = row.performance
        if perf is None:
            continue
        orders = {plan.pair: plan.order for plan in perf.schedule}
        invalid = {(inv.pair, inv.attempt): f"{inv.reason}: {inv.evidence}" for inv in perf.invalidations}
        for sample in [*perf.probes, *perf.warmups, *perf.samples]:
            rows.append(
                {
                    "row": row.row.id,
                    "kind": sample.kind,
                    "pair": sample.pair,
                    "order": orders.get(sample.pair, "") if sample.pair is not None else "",
                    "attempt": sample.attempt,
                    "position": sample.position,
                    "arm": sample.arm,
                    "status": sample.status,
                    "metric_ms": sample.metric_ms,
                    "setup_ms": sample.setup_ms,
                    "elapsed_s": sample.elapsed_s,
                    "exit_code": sample.exit_code,
                    "started_unix": sample.started_unix,
                    "ended_unix": sample.ended_unix,
                    "cpu_set": " ".join(map(str, sample.cpu_set)),
                    "affinity_observed": " ".join(map(str, sample.affinity_observed or [])),
                    "affinity_ok": sample.affinity_ok,
                    "interference_ms": sample.interference_ms,
                    "failure": sample.failure or "",
                    "invalidation": invalid.get((sample.pair, sample.attempt), "")
                    if sample.pair is not None
                    else "",
                    "kernel_cpu_ms": sample.kernel_cpu_ms,
                }
            )
    return rows


def _digests_text(report: CampaignReport) -> str:
    """Every checksum of the campaign, one per line, greppable and diffable between campaigns."""
    lines = [f"# kv-parity digests, campaign {report.campaign_id}"]
    for revision in report.revisions:
        lines.append(f"revision {revision.arm} {revision.sha}")
    if report.determinism_patch_sha256:
        lines.append(f"determinism-patch {report.determinism_patch_sha256}")
    if report.harness_patch_sha256:
        lines.append(f"harness-patch {report.harness_patch_sha256}")
    if report.trace:
        trace = report.trace
        lines.append(f"trace {trace.sha256} {trace.source_path}")
        lines.append(f"trace-slice {trace.slice_sha256} offset={trace.offset} count={trace.count}")
    for artifact in report.artifacts:
        lines.append(
            f"binary {artifact.arm} {artifact.binary_sha256} {artifact.binary_name} "
            f"size={artifact.binary_size} text={artifact.text_size}"
        )
    for row in report.rows:
        if row.determinism:
            for arm, digests in row.determinism.digests.items():
                lines.append(f"row {row.row.id} determinism {arm} {' '.join(digests)}")
        if row.parity:
            parity = row.parity
            lines.append(f"row {row.row.id} canonical baseline {parity.baseline_digest}")
            lines.append(f"row {row.row.id} canonical candidate {parity.candidate_digest}")
            lines.append(f"row {row.row.id} parity {'identical' if parity.identical else 'differ'}")
            for arm, sections in parity.section_digests.items():
                for section, digest in sorted(sections.items()):
                    lines.append(f"row {row.row.id} section {section} {arm} {digest}")
    return "\n".join(lines) + "\n"


def write_report_pages(
    report: CampaignReport,
    out_dir: Path,
    prior_attempts: Sequence[PriorAttempt] = (),
    redactor: Redactor | None = None,
) -> list[Path]:
    """report.md and report.html, the pages people read and look at, both passed through the redactor (they
    show raw output of the code under test, which report.json keeps exactly)."""
    redactor = redactor or Redactor(secret_values(None, os.environ))
    pages = {
        "report.md": render.report_markdown(report, Links(), prior_attempts=prior_attempts),
        "report.html": report_html(report, Links(), prior_attempts=prior_attempts),
    }
    written = []
    for name, text in pages.items():
        path = out_dir / name
        path.write_text(redactor.redact(text), encoding="utf-8")
        written.append(path)
    return written


def write_artifact(
    report: CampaignReport,
    out_dir: Path,
    prior_attempts: Sequence[PriorAttempt] = (),
    redactor: Redactor | None = None,
) -> list[Path]:
    """Write the campaign artifact (report.json, report.md, report.html, samples.csv, schedules, digests, charts).

    Deterministic for a given report, so re-publishing rewrites the same evidence.
    report.md, report.html and the charts, the files that may be shared, pass the redactor (by default: credential
    shapes and the credential variables of this process's environment); report.json stays the exact evidence
    that `kv-parity verify` recomputes.
    """
    redactor = redactor or Redactor(secret_values(None, os.environ))
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def put(name: str, text: str) -> None:
        path = out_dir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)

    put("report.json", report.model_dump_json(indent=2) + "\n")
    written.extend(write_report_pages(report, out_dir, prior_attempts, redactor))
    samples = out_dir / "samples.csv"
    with samples.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=SAMPLE_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(_samples_rows(report))
    written.append(samples)
    for row in report.rows:
        if row.performance is not None:
            perf = row.performance
            schedule = {
                "row": row.row.id,
                "seed": perf.schedule_seed,
                "pairs": [plan.model_dump() for plan in perf.schedule],
            }
            put(f"schedule-{row.row.id}.json", _json(schedule))
    put("digests.txt", _digests_text(report))
    for name, chart in chart_files(report).items():
        put(name, redactor.redact(chart))
    return written


def chart_files(report: CampaignReport) -> dict[str, str]:
    """Each measured row's ratio series and histogram as standalone SVG files: the drawings report.html shows
    inline (one drawing for both), for whoever opens the artifact without the page."""
    files: dict[str, str] = {}
    for row in report.rows:
        perf = row.performance
        if perf is None or not perf.ratios:
            continue
        charts = row_charts(row.row.id, perf, report.perf_threshold)
        for kind, chart in zip(("ratios", "histogram"), charts, strict=False):
            if chart.startswith("<svg"):
                files[f"perf-{row.row.id}-{kind}.svg"] = f"{chart}\n"
    return files


def _json(value: object) -> str:
    return json.dumps(value, indent=2, sort_keys=True) + "\n"
