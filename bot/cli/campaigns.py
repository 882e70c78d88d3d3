"""Campaigns run from this machine: `campaign`, `profile`, `demo` and `bisect` (here, or on Slurm with
`--backend slurm`), and `cache`, the build cache they share."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bot.exit_codes import EXIT_FOR_CONCLUSION, EXIT_REFUSED, EXIT_UNDECIDED, EXIT_USAGE
from runners.demo import SCENARIOS, demo_config, prepare_demo
from runners.exec.build_cache import (
    BUILD_CACHE_ENV,
    BuildCache,
    BuildCacheError,
    configured_dir,
    human_bytes,
    parse_size,
)
from runners.exec.sandbox import add_sandbox_argument
from runners.exec.sandbox import check as sandbox_check
from runners.exec.untrusted import UntrustedFileError, refuse_symlinks
from runners.pipeline.campaign import CampaignRequest, run_campaign
from runners.pipeline.slurm import SlurmOptions
from runners.progress import JsonlProgress, ProgressSink
from runners.schema.config import DEFAULT_CONFIG_PATH, CampaignConfig, ConfigError, parse_rows
from runners.schema.report import CampaignReport
from runners.stages.revisions import resolve_config
from runners.terminal import Verbosity, terminal_progress


def _config_for(args: argparse.Namespace) -> tuple[CampaignConfig, str]:
    """Explicit file or profile if given; otherwise the config committed at --config-ref (default the base
    revision), never the head. --config-source renames where it came from in the report."""
    config, source = resolve_config(Path(args.repo), args.config, args.profile, args.config_ref or args.base)
    return config, args.config_source or source


def _verbosity(args: argparse.Namespace) -> Verbosity:
    return "quiet" if args.quiet else "verbose" if args.verbose else "normal"


def _add_verbosity(parser: argparse.ArgumentParser) -> None:
    loudness = parser.add_mutually_exclusive_group()
    loudness.add_argument("--verbose", action="store_true", help="print every progress event (each pair)")
    loudness.add_argument("--quiet", action="store_true", help="print only the verdicts and the report path")


def _finish(report: CampaignReport, out: Path) -> int:
    from bot.publish.artifact import write_artifact

    written = write_artifact(report, out)
    try:
        refuse_symlinks(out)
    except UntrustedFileError as exc:
        print(f"kv-parity: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    assert report.verdicts is not None
    print(report.verdicts.summary)
    print(f"open {out / 'report.html'} (charts and evidence; report.md and report.json beside it, "
          f"{len(written)} artifact files in all)")
    undecided = report.verdicts.undecided
    return EXIT_UNDECIDED[undecided] if undecided else EXIT_FOR_CONCLUSION[report.verdicts.conclusion]


def _build_cache(args: argparse.Namespace) -> Path | None:
    """`--build-cache` when given, else $KV_PARITY_BUILD_CACHE, else no cache (a one-off run builds both arms)."""
    return Path(args.build_cache) if args.build_cache else configured_dir()


def add_slurm_arguments(parser: argparse.ArgumentParser) -> None:
    """`--backend slurm` and where its jobs go (the service takes the same from its settings)."""
    parser.add_argument("--backend", choices=("local", "slurm"), default="local",
                        help="run here (local) or submit the split pipeline to Slurm with sbatch")
    group = parser.add_argument_group("slurm (with --backend slurm)")
    group.add_argument("--partition")
    group.add_argument("--account")
    group.add_argument("--qos")
    group.add_argument("--constraint", help="node features each row job needs")
    group.add_argument("--row-time-limit", default=SlurmOptions.model_fields["row_time_limit"].default)
    group.add_argument("--node-scratch", default=SlurmOptions.model_fields["node_scratch"].default,
                       help="node-local directory binaries and trace are staged in")
    group.add_argument("--work-dir", help="shared directory for the plan, builds and row results "
                                          "(default: beside --out)")


def _slurm_options(args: argparse.Namespace) -> SlurmOptions:
    return SlurmOptions(partition=args.partition, account=args.account, qos=args.qos, constraint=args.constraint,
                        row_time_limit=args.row_time_limit, node_scratch=args.node_scratch)


def _slurm_campaign(args: argparse.Namespace, spec_fields: dict[str, object], out: Path) -> int:
    """The same campaign as the split pipeline on Slurm: this process plans, submits, follows and merges."""
    import uuid

    from runners.pipeline.slurm import CampaignSpec, run_on_slurm

    spec = CampaignSpec.model_validate({"campaign_id": uuid.uuid4().hex[:12], **spec_fields})
    work = Path(args.work_dir) if args.work_dir else out.parent / f"{out.name}.slurm"
    cache = _build_cache(args)
    report = run_on_slurm(spec, work.resolve(), out.resolve(), _slurm_options(args), args.sandbox,
                          terminal_progress(_verbosity(args)), build_cache=cache.absolute() if cache else None)
    return _finish(report, out)


def cmd_campaign(args: argparse.Namespace, *, profile_only: bool = False) -> int:
    profile_only = profile_only or args.profile_only
    if getattr(args, "backend", "local") == "slurm":
        if args.config:
            raise ConfigError("--backend slurm reads the config as the service does: committed at --config-ref "
                              "(default --base) or a shipped --profile; --config FILE is not supported")
        return _slurm_campaign(args, {
            "repo": Path(args.repo).resolve(), "base_sha": args.base, "head_sha": args.head,
            "config_ref": args.config_ref or args.base, "profile": args.profile, "rows": parse_rows(args.rows),
            "mode": "profile" if profile_only else "campaign", "trace": args.trace,
            **({"campaign_id": args.campaign_id} if args.campaign_id else {})}, Path(args.out))
    config, source = _config_for(args)
    out = Path(args.out)
    progress: ProgressSink = terminal_progress(_verbosity(args))
    if args.progress_jsonl:
        progress = JsonlProgress(Path(args.progress_jsonl), echo=progress)
    request = CampaignRequest(
        repo=Path(args.repo), base=args.base, head=args.head, config=config, config_source=source, out_dir=out,
        rows=parse_rows(args.rows), trace_path=Path(args.trace) if args.trace else None, keep_work=args.keep_work,
        sandbox=sandbox_check(args.sandbox),
        config_ref=args.config_ref, profile_only=profile_only, build_cache=_build_cache(args),
        **({"campaign_id": args.campaign_id} if args.campaign_id else {}),
    )
    return _finish(run_campaign(request, progress), out)


def cmd_profile(args: argparse.Namespace) -> int:
    return cmd_campaign(args, profile_only=True)


def cmd_demo(args: argparse.Namespace) -> int:
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="kv-parity-demo-"))
    print(f"demo scenario {args.scenario!r} in {out}", file=sys.stderr)
    repo, base, head, trace = prepare_demo(out, args.scenario)
    if args.backend == "slurm":
        return _slurm_campaign(args, {"repo": repo, "base_sha": base, "head_sha": head, "config_ref": base,
                                      "profile": "demo", "rows": parse_rows(args.rows), "trace": trace},
                               out / "campaign")
    request = CampaignRequest(repo=repo, base=base, head=head, config=demo_config(), config_source="profile:demo",
                              out_dir=out / "campaign", trace_path=trace, rows=parse_rows(args.rows),
                              sandbox=sandbox_check(args.sandbox), build_cache=_build_cache(args))
    return _finish(run_campaign(request, terminal_progress(_verbosity(args))), out / "campaign")


def cmd_bisect(args: argparse.Namespace) -> int:
    """Probe first-parent commits between --good and --bad by the predeclared rule (runners/pipeline/bisect.py); writes
    bisect.json, bisect.md and every probe's campaign artifact; the last line printed is the culprit or the range.
    Exit 0 a culprit, 4 only a range (an undecided probe, or bad does not fail), 2 unusable arguments."""
    from bot.publish.artifact import write_artifact
    from bot.publish.bisect_render import bisect_markdown
    from runners.pipeline.bisect import BisectError, BisectRequest, parse_target, run_bisect

    repo = Path(args.repo)
    if args.backend == "slurm" and args.config:
        raise ConfigError("--backend slurm reads the config as the service does: committed at --config-ref "
                          "(default --good) or a shipped --profile; --config FILE is not supported")
    config, source = resolve_config(repo, args.config, args.profile, args.config_ref or args.good)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="kv-parity-bisect-"))
    progress: ProgressSink = terminal_progress(_verbosity(args))
    if args.progress_jsonl:
        progress = JsonlProgress(Path(args.progress_jsonl), echo=progress)
    try:
        request = BisectRequest(
            repo=repo, good=args.good, bad=args.bad, config=config, config_source=args.config_source or source,
            out_dir=out, rows=parse_rows(args.rows), target=parse_target(args.target), config_ref=args.config_ref,
            trace_path=Path(args.trace) if args.trace else None, sandbox=sandbox_check(args.sandbox),
            build_cache=_build_cache(args), **({"bisect_id": args.bisect_id} if args.bisect_id else {}),
            run_probe=_slurm_probes(args, out) if args.backend == "slurm" else run_campaign,
        )
        config.select_rows(request.rows)
        bisect = run_bisect(request, write_artifact, progress)
    except BisectError as exc:
        print(f"kv-parity bisect: {exc}", file=sys.stderr)
        return EXIT_USAGE
    (out / "bisect.json").write_text(bisect.model_dump_json(indent=2) + "\n", encoding="utf-8")
    (out / "bisect.md").write_text(bisect_markdown(bisect), encoding="utf-8")
    try:
        refuse_symlinks(out)
    except UntrustedFileError as exc:
        print(f"kv-parity bisect: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    attempts = sum(len(probe.attempts) for probe in bisect.probes)
    print(f"{bisect.result.reason} ({len(bisect.probes)} probes, {attempts} campaigns)")
    print(f"open {out / 'bisect.md'} (every probe's report under {out / 'probes'})")
    print(bisect.result.last_line)
    return 0 if bisect.result.outcome == "culprit" else EXIT_UNDECIDED["inconclusive"]


def _slurm_probes(
    args: argparse.Namespace, out: Path
) -> Callable[[CampaignRequest, ProgressSink | None], CampaignReport]:
    """Each bisect probe as the split pipeline's Slurm jobs: the campaign `kv-parity campaign --backend slurm` runs,
    its work directory per probe under --work-dir (default beside --out)."""
    from runners.pipeline.slurm import CampaignSpec, run_on_slurm

    root = Path(args.work_dir) if args.work_dir else out.parent / f"{out.name}.slurm"

    def run(campaign: CampaignRequest, progress: ProgressSink | None) -> CampaignReport:
        spec = CampaignSpec(campaign_id=campaign.campaign_id, repo=campaign.repo, base_sha=campaign.base,
                            head_sha=campaign.head, config_ref=campaign.config_ref or campaign.base,
                            profile=args.profile, rows=campaign.rows, trace=campaign.trace_path)
        return run_on_slurm(spec, (root / campaign.campaign_id).resolve(), campaign.out_dir, _slurm_options(args),
                            args.sandbox, progress, build_cache=campaign.build_cache)

    return run


def cmd_cache(args: argparse.Namespace) -> int:
    """The build cache's entries and bound; `--max-size` keeps a new bound in the cache and prunes to it now,
    `--shared` / `--no-shared` keeps whether it is shared across nodes (every key then holds the build host)."""
    directory = _build_cache(args)
    if directory is None:
        print(f"kv-parity cache: no cache named: pass --build-cache DIR or set ${BUILD_CACHE_ENV}", file=sys.stderr)
        return EXIT_USAGE
    cache = BuildCache(directory)
    try:
        deleted = cache.set_limit(args.max_size) if args.max_size is not None else []
        if args.shared is not None:
            cache.declare_shared(args.shared)
        usage = cache.usage()
    except BuildCacheError as exc:
        print(f"kv-parity cache: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for entry in deleted:
        print(f"deleted {entry.name[:12]} ({entry.arm or 'unreadable'}, {human_bytes(entry.bytes)})")
    print(usage.summary())
    return 0


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _add_campaign_arguments(campaign: argparse.ArgumentParser) -> None:
    """The options `campaign` and `profile` share."""
    campaign.add_argument("--repo", required=True, help="local git repository holding both revisions")
    campaign.add_argument("--base", required=True, help="baseline revision (ref or SHA; pinned to a SHA)")
    campaign.add_argument("--head", required=True, help="candidate revision (ref or SHA; pinned to a SHA)")
    source = campaign.add_mutually_exclusive_group()
    source.add_argument("--config", help=f"campaign config TOML (default: {DEFAULT_CONFIG_PATH} in the base)")
    source.add_argument("--profile", help="a shipped profile: dynamo or demo")
    campaign.add_argument(
        "--config-ref", help="trusted revision the config and determinism patch are read at (default: --base)"
    )
    campaign.add_argument(
        "--config-source", help="where the config came from, as the report should say (default: file or ref)"
    )
    campaign.add_argument("--rows", help="comma-separated row ids (default: every row)")
    campaign.add_argument("--out", required=True, help="output directory for the report artifact")
    campaign.add_argument("--trace", help="trace path overriding the config's (its checksum is still verified)")
    campaign.add_argument("--campaign-id", help="id recorded in the report (default: random)")
    campaign.add_argument("--progress-jsonl", help="also append progress events to this file")
    campaign.add_argument("--keep-work", action="store_true", help="keep worktrees' binaries and traces")
    campaign.add_argument("--profile-only", action="store_true",
                          help="correctness, then regression attribution instead of the performance gate "
                               "(what `kv-parity profile` does)")
    _add_build_cache_argument(campaign)
    _add_verbosity(campaign)
    add_sandbox_argument(campaign)


def _add_build_cache_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--build-cache", metavar="DIR",
                        help="reuse each arm's build from, and store it in, this directory (this user's, mode "
                             "0700; created if missing) when the same arm's build would be the same; a candidate's "
                             f"build never serves a baseline (default: ${BUILD_CACHE_ENV}, else no cache)")


def add_campaign_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`campaign`, `profile`, `demo` and `bisect`."""
    campaign = sub.add_parser("campaign", help="run a full local campaign between two revisions")
    _add_campaign_arguments(campaign)
    campaign.set_defaults(func=cmd_campaign)
    add_slurm_arguments(campaign)
    profile = sub.add_parser(
        "profile", help="correctness, then regression attribution (instructions, stacks, flame graphs) per row"
    )
    _add_campaign_arguments(profile)
    profile.set_defaults(func=cmd_profile)

    demo = sub.add_parser("demo", help="a full local campaign on the bundled demo harness")
    demo.add_argument("--out", help="output directory (default: a new temporary directory)")
    demo.add_argument("--scenario", default="identical", choices=sorted(SCENARIOS))
    demo.add_argument("--rows", help="comma-separated row ids (default: every row)")
    _add_build_cache_argument(demo)
    _add_verbosity(demo)
    add_sandbox_argument(demo)
    add_slurm_arguments(demo)
    demo.set_defaults(func=cmd_demo)

    bisect = sub.add_parser("bisect", help="find the first-parent commit between good and bad that FAILs the gates")
    bisect.add_argument("--repo", default=".", help="local git repository holding both revisions (default: .)")
    bisect.add_argument("--good", required=True, help="a revision that passes (every probe's baseline)")
    bisect.add_argument("--bad", required=True, help="a later revision that FAILs, on good's first-parent line")
    bisect_source = bisect.add_mutually_exclusive_group()
    bisect_source.add_argument("--config", help=f"campaign config TOML (default: {DEFAULT_CONFIG_PATH} at good)")
    bisect_source.add_argument("--profile", help="a shipped profile: dynamo or demo")
    bisect.add_argument("--config-ref", help="trusted revision the config and patches are read at (default: --good)")
    bisect.add_argument("--config-source", help="where the config came from, as the reports should say")
    bisect.add_argument("--rows", help="comma-separated row ids (default: every row)")
    bisect.add_argument("--target", help="comma-separated gates whose FAIL makes a probe bad: semantic, "
                                         "performance, sizes (default: the gates --bad FAILs)")
    bisect.add_argument("--out", help="output directory (default: a new temporary directory)")
    bisect.add_argument("--trace", help="trace path overriding the config's (its checksum is still verified)")
    bisect.add_argument("--bisect-id", help="id recorded in bisect.json, prefixing every probe's campaign id")
    bisect.add_argument("--progress-jsonl", help="also append progress events to this file")
    _add_build_cache_argument(bisect)
    _add_verbosity(bisect)
    add_sandbox_argument(bisect)
    add_slurm_arguments(bisect)
    bisect.set_defaults(func=cmd_bisect)


def add_cache_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cache = sub.add_parser("cache", help="show the build cache's entries and bound, or set the bound and sharing")
    cache.add_argument("--build-cache", metavar="DIR",
                       help=f"the cache campaigns use with the same option (default: ${BUILD_CACHE_ENV})")
    cache.add_argument("--max-size", type=_size, metavar="SIZE",
                       help="keep the cache's entries under SIZE (bytes, or with K, M, G or T: powers of 1024), "
                            "deleting the least recently used now and after every store (default bound 10G)")
    cache.add_argument("--shared", action=argparse.BooleanOptionalAction, default=None,
                       help="declare the cache shared across nodes (kept in the cache): every build's key then "
                            "holds the host's machine and CPU, so no build serves another CPU (a build asking for "
                            "`native` holds it anyway)")
    cache.set_defaults(func=cmd_cache)
