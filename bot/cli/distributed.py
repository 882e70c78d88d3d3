"""The split pipeline's jobs, as the campaign workflow and the Slurm job scripts run them: `plan`, `build` (both
arms, or one with `--plan`), `manifest`, `row` and `merge` (`runners.pipeline.distributed`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from bot.exit_codes import EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from runners.exec.build_cache import configured_dir
from runners.exec.containment import MeasurementFault
from runners.exec.sandbox import BinaryMismatch, SandboxUnavailable, add_sandbox_argument
from runners.exec.sandbox import check as check_sandbox
from runners.pipeline.campaign import CampaignRequest, CampaignStop
from runners.pipeline.distributed.artifacts import (
    FixturesResult,
    RowResult,
    campaign_matrix,
    load_manifest,
    load_result,
    row_matrix,
    write_matrix,
)
from runners.pipeline.distributed.build import ARM_BUILD_NAME, build_manifest, build_one_arm
from runners.pipeline.distributed.common import (
    FIXTURES_ROW,
    FIXTURES_SUFFIX,
    MANIFEST_NAME,
    REPORT_NAME,
    ROW_SUFFIX,
    DistributedError,
    Refusal,
    refused_upload,
    scratch,
    write_json,
)
from runners.pipeline.distributed.fixtures import run_manifest_fixtures
from runners.pipeline.distributed.manifest import assemble_manifest
from runners.pipeline.distributed.merge import copy_row_evidence, find_results, merge_results
from runners.pipeline.distributed.plan import PLAN_NAME, load_plan, make_plan
from runners.pipeline.distributed.row import run_manifest_row, runnable_row
from runners.schema.config import CAMPAIGN_MODES, DEFAULT_CONFIG_PATH, ConfigError, parse_rows
from runners.schema.report import ARMS
from runners.stages.revisions import RevisionError, resolve_config
from runners.terminal import PlainProgress


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


def arm_build_main(argv: Sequence[str]) -> int:
    """`kv-parity build --plan PLAN --arm ARM`: one revision -> ARM_DIR/<binary> + ARM_DIR/build.json.

    Exits 0 whenever build.json was written (a recorded stop included), 2 for an unusable plan or sandbox.
    Writes nothing to $GITHUB_OUTPUT.
    """
    parser = argparse.ArgumentParser(prog="kv-parity build --plan", description=arm_build_main.__doc__)
    parser.add_argument("--plan", required=True, help="plan directory written by `kv-parity plan`")
    parser.add_argument("--repo", default=".", help="git repository holding the arm's revision")
    parser.add_argument("--arm", required=True, choices=ARMS)
    parser.add_argument("--out", required=True, help="arm directory for the binary and build.json")
    parser.add_argument("--work", help="parent of the scratch directory")
    parser.add_argument("--baseline", help="the baseline's arm directory (candidate only: verifies exceptions)")
    parser.add_argument("--build-cache", metavar="DIR",
                        help="reuse and store this arm's builds here (default: $KV_PARITY_BUILD_CACHE, else none)")
    add_sandbox_argument(parser)
    args = parser.parse_args(list(argv))
    try:
        sandbox = check_sandbox(args.sandbox)
        plan, plan_sha = load_plan(Path(args.plan))
    except (DistributedError, SandboxUnavailable) as exc:
        print(f"kv-parity build: {exc}", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.out).resolve()
    try:
        with scratch(args.work, f"kv-parity-build-{args.arm}-") as work:
            record = build_one_arm(plan, plan_sha, Path(args.repo).resolve(), args.arm, out, work.resolve(),
                                   sandbox, Path(args.baseline) if args.baseline else None,
                                   Path(args.build_cache).absolute() if args.build_cache else configured_dir())
    except (Refusal, DistributedError) as exc:
        print(f"kv-parity build: {exc}", file=sys.stderr)
        return EXIT_REFUSED if isinstance(exc, Refusal) else EXIT_USAGE
    write_json(out / ARM_BUILD_NAME, record.model_dump_json(indent=2))
    if record.stopped is not None:
        print(f"{args.arm} build stopped at {record.stopped.stage}: {record.stopped.reason}")
    else:
        assert record.artifact is not None
        print(f"{args.arm} {record.sha[:12]}: {out / record.artifact.binary_name} "
              f"sha256 {record.artifact.binary_sha256}")
    return EXIT_OK


def build_main(argv: Sequence[str]) -> int:
    """`kv-parity build`: both revisions once -> OUT/manifest.json, OUT/bin/*, OUT/matrix.json.

    Exits 0 whenever a manifest was written, a recorded stop included (merge turns it into the verdict).
    """
    if any(word == "--plan" or word.startswith("--plan=") for word in argv):
        return arm_build_main(argv)
    parser = argparse.ArgumentParser(prog="kv-parity build", description=build_main.__doc__,
                                     epilog="With --plan: `kv-parity build --plan DIR --arm ARM ...` builds one arm "
                                            "(see `kv-parity build --plan x --help`).")
    parser.add_argument("--repo", default=".", help="git repository holding both revisions (default: .)")
    parser.add_argument("--base", required=True, help="baseline revision (pinned to a SHA)")
    parser.add_argument("--head", required=True, help="candidate revision (pinned to a SHA)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--config", help="campaign config TOML file")
    source.add_argument("--profile", help="a shipped profile: dynamo or demo")
    source.add_argument("--config-ref", help=f"revision whose {DEFAULT_CONFIG_PATH} is used "
                        "(default: --base)")
    parser.add_argument("--rows", help="comma-separated row ids (default: every row)")
    parser.add_argument("--trace", help="trace path overriding the config's (its checksum is still verified)")
    parser.add_argument("--campaign-id", help="campaign id (default: random)")
    parser.add_argument("--determinism-patch", help="patch applied identically to both revisions")
    parser.add_argument("--out", required=True, help="directory for the manifest, binaries and matrix")
    parser.add_argument("--work", help="parent of the scratch directory for worktrees and builds")
    parser.add_argument("--keep-work", action="store_true", help="keep the scratch directory")
    parser.add_argument("--github-output", help="append `matrix=` and `row_count=` lines to this file")
    add_sandbox_argument(parser)
    args = parser.parse_args(list(argv))

    out = Path(args.out)
    try:
        sandbox = check_sandbox(args.sandbox)
    except SandboxUnavailable as exc:
        print(f"kv-parity build: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with scratch(args.work, "kv-parity-build-", keep=args.keep_work) as work:
            repo = Path(args.repo)
            config, config_source = resolve_config(repo, args.config, args.profile, args.config_ref or args.base)
            request = CampaignRequest(
                repo=repo, base=args.base, head=args.head, config=config, config_source=config_source,
                out_dir=out, rows=parse_rows(args.rows), trace_path=Path(args.trace) if args.trace else None,
                determinism_patch=Path(args.determinism_patch) if args.determinism_patch else None,
                sandbox=sandbox, config_ref=args.config_ref,
                **({"campaign_id": args.campaign_id} if args.campaign_id else {}),
            )
            manifest = build_manifest(request, work, out, PlainProgress())
    except (ConfigError, RevisionError) as exc:
        print(f"kv-parity build: {exc}", file=sys.stderr)
        return EXIT_USAGE
    write_json(out / MANIFEST_NAME, manifest.model_dump_json(indent=2))
    write_matrix(out, row_matrix(manifest), args.github_output)
    stopped = manifest.report.stopped
    if stopped is not None:
        print(f"build stopped at {stopped.stage}: {stopped.reason}")
        print("no row will run; merge publishes the stop")
    else:
        print(f"campaign {manifest.campaign_id}: {out / MANIFEST_NAME}, rows {', '.join(manifest.rows)}")
    return EXIT_OK


def manifest_main(argv: Sequence[str]) -> int:
    """`kv-parity manifest`: plan + both arm builds -> DIST/manifest.json, DIST/bin/*, DIST/matrix.json.

    Runs no pull-request code. Exits 0 when the manifest was written (a recorded stop included), 1 when an arm
    build was refused (it names the field or both digests), 2 for unreadable input.
    """
    parser = argparse.ArgumentParser(prog="kv-parity manifest", description=manifest_main.__doc__)
    parser.add_argument("--plan", required=True)
    parser.add_argument("--baseline", required=True, help="baseline arm directory (binary + build.json)")
    parser.add_argument("--candidate", required=True, help="candidate arm directory (binary + build.json)")
    parser.add_argument("--trace", help="trace path overriding the config's (its checksum is still verified)")
    parser.add_argument("--out", required=True, help="dist directory")
    parser.add_argument("--build-cache", metavar="DIR",
                        help="store the candidate its build job compiled here once the size gate passed "
                             "(default: $KV_PARITY_BUILD_CACHE, else none)")
    args = parser.parse_args(list(argv))
    out = Path(args.out)
    try:
        plan, plan_sha = load_plan(Path(args.plan))
        trace = Path(args.trace) if args.trace else Path(plan.config.trace.path)
        out.mkdir(parents=True, exist_ok=True)
        manifest = assemble_manifest(plan, plan_sha, {"baseline": Path(args.baseline),
                                                      "candidate": Path(args.candidate)}, trace, out,
                                     Path(args.plan),
                                     Path(args.build_cache).absolute() if args.build_cache else configured_dir())
    except Refusal as exc:
        print(f"kv-parity manifest: refusing: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except DistributedError as exc:
        print(f"kv-parity manifest: {exc}", file=sys.stderr)
        return EXIT_USAGE
    write_json(out / MANIFEST_NAME, manifest.model_dump_json(indent=2))
    write_matrix(out, row_matrix(manifest), None)
    stopped = manifest.report.stopped
    print(f"build stopped at {stopped.stage}: {stopped.reason}" if stopped else
          f"campaign {manifest.campaign_id}: {out / MANIFEST_NAME}, rows {', '.join(manifest.rows)}")
    return EXIT_OK


def row_main(argv: Sequence[str]) -> int:
    """`kv-parity row`: one row on this node -> OUT/<row>.row.json plus the row's kept evidence (with
    `--row stage6-fixtures`: every fixture -> OUT/stage6-fixtures.fixtures.json).

    Exits 0 when a result was written (its verdicts are inside), 1 when a checksum refused the inputs before
    any process ran or a binary's re-hash stopped it, 2 for a manifest or row that cannot be used.
    """
    parser = argparse.ArgumentParser(prog="kv-parity row", description=row_main.__doc__)
    parser.add_argument("--manifest", required=True, help="the build's manifest.json (binaries in its bin/)")
    parser.add_argument("--row", required=True,
                        help=f"row id to run on this node, or {FIXTURES_ROW} for every Stage 6 fixture")
    parser.add_argument("--out", required=True, help="directory for the row result and its evidence")
    parser.add_argument("--trace", help="node-local trace overriding the config's (checksum still verified)")
    parser.add_argument("--work", help="node-local parent of the staging directory")
    parser.add_argument("--keep-work", action="store_true", help="keep staged binaries, trace and outputs")
    add_sandbox_argument(parser)
    args = parser.parse_args(list(argv))

    manifest_path = Path(args.manifest)
    try:
        sandbox = check_sandbox(args.sandbox)
        manifest = load_manifest(manifest_path)
        if args.row != FIXTURES_ROW:
            runnable_row(manifest, args.row)
    except (DistributedError, SandboxUnavailable) as exc:
        print(f"kv-parity row: {exc}", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.out)
    job: Callable[[Path], RowResult | FixturesResult]
    if args.row == FIXTURES_ROW:
        what, target = "the Stage 6 fixtures", out / f"{FIXTURES_ROW}{FIXTURES_SUFFIX}"

        def job(work: Path) -> RowResult | FixturesResult:
            return run_manifest_fixtures(manifest, manifest_path.parent, work, out, PlainProgress(), sandbox)
    else:
        what, target = f"row {args.row}", out / f"{args.row}{ROW_SUFFIX}"
        trace_source = Path(args.trace) if args.trace else Path(manifest.config.trace.path)

        def job(work: Path) -> RowResult | FixturesResult:
            return run_manifest_row(manifest, manifest_path.parent, args.row, trace_source, work, out,
                                    PlainProgress(), sandbox)
    try:
        with scratch(args.work, "kv-parity-row-", keep=args.keep_work) as work:
            result = job(work)
    except Refusal as exc:
        print(f"kv-parity row: refusing to run {what}: {exc}; no harness process was started", file=sys.stderr)
        return EXIT_REFUSED
    except (CampaignStop, BinaryMismatch, MeasurementFault) as exc:
        print(f"kv-parity row: stopped {what}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except DistributedError as exc:
        print(f"kv-parity row: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if refused_upload(out):
        return EXIT_REFUSED
    write_json(target, result.model_dump_json(indent=2))
    print(_outcome(result))
    return EXIT_OK


def _outcome(result: RowResult | FixturesResult) -> str:
    """The one line `kv-parity row` prints for the result it wrote."""
    if isinstance(result, FixturesResult):
        return (f"Stage 6 fixtures on {result.node.hostname}: "
                + ", ".join(f"{f.id} {f.status.value}" for f in result.fixtures))
    doctor = result.report.doctor
    return (f"row {result.report.row.id} on {result.node.hostname}: semantic {result.report.semantic.value}, "
            f"performance {result.report.perf_verdict.value}"
            + (f"; node doctor {doctor.summary}" if doctor is not None else ""))


def merge_main(argv: Sequence[str]) -> int:
    """`kv-parity merge`: manifest + row results -> OUT/report.json with every verdict recomputed.

    Exits 0 when the report was written (its conclusion is inside), 1 when the inputs were refused as not
    belonging together, 2 for unreadable input.
    """
    parser = argparse.ArgumentParser(prog="kv-parity merge", description=merge_main.__doc__)
    parser.add_argument("--manifest", required=True, help="the build's manifest.json")
    parser.add_argument("--out", required=True, help="directory for report.json and the rows' evidence")
    parser.add_argument("results", nargs="*", type=Path,
                        help=f"row and fixtures result files, or directories searched for *{ROW_SUFFIX} and "
                             f"*{FIXTURES_SUFFIX}")
    args = parser.parse_args(list(argv))

    out = Path(args.out)
    if any(refused_upload(given) for given in args.results):
        return EXIT_REFUSED
    try:
        manifest = load_manifest(Path(args.manifest))
        row_paths, fixture_paths = find_results(args.results)
        results = {path: load_result(path, manifest, RowResult) for path in row_paths}
        fixtures = {path: load_result(path, manifest, FixturesResult) for path in fixture_paths}
        report = merge_results(manifest, results, fixtures)
    except Refusal as exc:
        print(f"kv-parity merge: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except DistributedError as exc:
        print(f"kv-parity merge: {exc}", file=sys.stderr)
        return EXIT_USAGE
    out.mkdir(parents=True, exist_ok=True)
    for path in [*results, *fixtures]:
        copy_row_evidence(path, out)
    if refused_upload(out):
        return EXIT_REFUSED
    write_json(out / REPORT_NAME, report.model_dump_json(indent=2))
    print(report.concluded.summary)
    print(f"report: {out / REPORT_NAME}")
    return EXIT_OK
