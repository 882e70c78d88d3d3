"""Local backend: the real campaign as a subprocess on this machine (demos, tests, single-node users).

argv contract (a list, never a shell): `<prefix> --sandbox bwrap|none --repo <clone> --base <sha> --head <sha>
--config <file> [--config-ref <sha>] --config-source <text> [--rows a,b] [--profile-only] [--build-cache <dir>]
--out <dir> --campaign-id <id> --progress-jsonl <file>`; `--profile-only` (a `/parity profile` request) checks
correctness and attributes where the time goes instead of sampling; `--build-cache` is the service's cache of
builds (`build_cache_dir`), shared by its campaigns. `--config-ref` is the base branch tip the config
was read at (the determinism patch is read there too), `--config-source` what the report says about it (never
the temporary file). The prefix defaults to `kv-parity campaign` and `settings.local_campaign_argv` replaces it.
Exit 2 means a usage/config error and no report; any other exit must leave `<out>/report.json`, which is
validated with `CampaignReport`.

Containment (issue 9): the campaign builds and runs pull-request code, so it gets nothing of the service's.
- Its environment is allow-listed (`CAMPAIGN_ENV`): never `KV_PARITY_*` (webhook secret, key path, token),
  `GITHUB_*` / `ACTIONS_*`, or anything else the service happens to hold.
- It works in a fresh clone of its own (`<work>/repo`: objects borrowed read-only from the service's clone,
  its own `.git` with hooks switched off), so a hook or config written into one campaign's `.git` never runs
  in another's, nor in the service's clone.
- The backend refuses to exist without a working sandbox (`runners.exec.sandbox.check`), unless the operator set
  `sandbox = "none"`, which is logged as a warning at start and for every campaign and passed to the runner.

The process gets its own session (process group), so cancel kills everything it started, and the service
dying does not kill it: a restarted service adopts a still-running campaign by pid + start time.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from bot.core.campaign import Campaign
from bot.dispatch.base import PollResult, RunHandle, StartError
from bot.dispatch.clone import UNSANDBOXED, ServiceClone, require_sandbox
from bot.exit_codes import EXIT_USAGE
from runners.exec.sandbox import SandboxKind
from runners.progress import ProgressEvent
from runners.schema.bisect_rule import BisectReport
from runners.schema.config import format_rows
from runners.schema.report import CampaignReport

log = logging.getLogger(__name__)

TAIL_BYTES = 2000
HANDLE_FILE = "handle.json"
CLONE_DIR = "repo"
"""The campaign's own clone, beside its config, progress file and report."""
CAMPAIGN_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "RUSTUP_HOME", "CARGO_HOME", "PYTHONPATH")
"""The only variables a campaign process inherits: what finds the toolchain, the locale and the runner's own
code. The service's secrets live in KV_PARITY_* variables and files it alone reads."""
def campaign_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed part of `environ` that a campaign process gets."""
    return {name: environ[name] for name in CAMPAIGN_ENV if name in environ}


def default_argv_prefix() -> list[str]:
    """`kv-parity campaign`, preferring the script next to this interpreter (the service's own venv)."""
    sibling = Path(sys.executable).with_name("kv-parity")
    found = str(sibling) if sibling.is_file() else shutil.which("kv-parity")
    if found is None:
        raise StartError("`kv-parity` not found next to the interpreter nor on PATH; set local_campaign_argv")
    return [found, "campaign"]


def campaign_argv(
    prefix: list[str],
    repo: Path,
    campaign: Campaign,
    config_file: Path,
    out_dir: Path,
    progress: Path,
    sandbox: SandboxKind = "bwrap",
    build_cache: Path | None = None,
) -> list[str]:
    """The full argv of one campaign run (see the module docstring for the contract)."""
    argv = [
        *prefix,
        "--sandbox",
        sandbox,
        "--repo",
        str(repo),
        "--base",
        campaign.base_sha,
        "--head",
        campaign.head_sha,
        "--config",
        str(config_file),
    ]
    if campaign.config_sha:
        argv += ["--config-ref", campaign.config_sha]
    argv += ["--config-source", campaign.config_source]
    if campaign.rows:
        argv += ["--rows", format_rows(campaign.rows)]
    if campaign.mode == "profile":
        argv.append("--profile-only")
    if build_cache is not None:
        argv += ["--build-cache", str(build_cache)]
    return argv + ["--out", str(out_dir), "--campaign-id", campaign.id, "--progress-jsonl", str(progress)]


def default_bisect_prefix() -> list[str]:
    """`kv-parity bisect`, from the same installation as `kv-parity campaign`."""
    return [default_argv_prefix()[0], "bisect"]


def bisect_argv(
    prefix: list[str],
    repo: Path,
    campaign: Campaign,
    config_file: Path,
    out_dir: Path,
    progress: Path,
    sandbox: SandboxKind = "bwrap",
    build_cache: Path | None = None,
) -> list[str]:
    """The argv of a `/parity bisect` run: `kv-parity bisect` from the merge base (good) to the head (bad), with
    the config read at the base branch's tip; its bisect.json lands in `out_dir`."""
    argv = [*prefix, "--sandbox", sandbox, "--repo", str(repo), "--good", campaign.base_sha, "--bad",
            campaign.head_sha, "--config", str(config_file)]
    if campaign.config_sha:
        argv += ["--config-ref", campaign.config_sha]
    argv += ["--config-source", campaign.config_source]
    if campaign.rows:
        argv += ["--rows", format_rows(campaign.rows)]
    if build_cache is not None:
        argv += ["--build-cache", str(build_cache)]
    return argv + ["--out", str(out_dir), "--bisect-id", campaign.id, "--progress-jsonl", str(progress), "--quiet"]


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks) from /proc, or None when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], fields[19]


def _start_token(pid: int) -> str | None:
    stat = _proc_stat(pid) if Path("/proc/self/stat").exists() else None
    return stat[1] if stat else None


def group_running(pgid: int) -> bool:
    """A process of group `pgid` is still running (a zombie has already died and does not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not Path("/proc/self/stat").exists():
        return True
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            text = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def process_alive(pid: int, token: str | None) -> bool:
    """The process we started is still there (not a zombie, not another process that reused the pid)."""
    if Path("/proc/self/stat").exists():
        stat = _proc_stat(pid)
        return stat is not None and stat[0] != "Z" and (token is None or stat[1] == token)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(max(path.stat().st_size - TAIL_BYTES, 0))
            return handle.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


class LocalBackend:
    name = "local"

    def __init__(
        self,
        repo: Path,
        *,
        argv_prefix: list[str] | None = None,
        fetch_remote: str = "origin",
        cancel_grace_seconds: float = 10.0,
        sandbox: SandboxKind = "bwrap",
        build_cache: Path | None = None,
        bisect_prefix: list[str] | None = None,
    ) -> None:
        require_sandbox(sandbox)
        self.bisect_prefix = bisect_prefix
        self.sandbox: SandboxKind = sandbox
        self.build_cache = build_cache
        self.clone = ServiceClone(repo, fetch_remote)
        self.argv_prefix = argv_prefix
        self.cancel_grace_seconds = cancel_grace_seconds
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._offsets: dict[str, int] = {}

    # ------------------------------------------------------------------ start

    def start(self, campaign: Campaign, config_text: str) -> RunHandle:
        """Write the config, spawn the runner in its own session, and leave a handle file for `adopt`."""
        out_dir = self.clone.pinned(campaign)
        work = out_dir.parent
        work.mkdir(parents=True, exist_ok=True)
        config_file, progress, log_path = (
            work / "campaign.toml",
            work / "progress.jsonl",
            work / "campaign.log",
        )
        config_file.write_text(config_text, encoding="utf-8")
        clone = work / CLONE_DIR
        self.clone.fresh_clone(clone)
        if campaign.purpose == "bisect":
            prefix = self.bisect_prefix if self.bisect_prefix is not None else default_bisect_prefix()
            argv = bisect_argv(prefix, clone, campaign, config_file, out_dir, progress, self.sandbox, self.build_cache)
        else:
            prefix = self.argv_prefix if self.argv_prefix is not None else default_argv_prefix()
            argv = campaign_argv(prefix, clone, campaign, config_file, out_dir, progress, self.sandbox,
                                 self.build_cache)
        if self.sandbox == "none":
            log.warning("campaign %s: %s", campaign.id, UNSANDBOXED)
        try:
            with log_path.open("ab") as log_file:
                process = subprocess.Popen(
                    argv,
                    cwd=work,
                    env=campaign_environment(os.environ),
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except OSError as exc:
            raise StartError(f"cannot start {argv[0]!r}: {exc.strerror or exc}") from exc
        self._children[campaign.id] = process
        self._offsets[campaign.id] = 0
        handle = RunHandle(
            backend=self.name,
            ref=str(process.pid),
            token=_start_token(process.pid),
            out_dir=str(out_dir),
            progress_path=str(progress),
        )
        staging = work / f"{HANDLE_FILE}.tmp"
        staging.write_text(handle.model_dump_json(), encoding="utf-8")
        staging.replace(work / HANDLE_FILE)
        log.info("campaign %s started as pid %d: %s", campaign.id, process.pid, argv)
        return handle

    def adopt(self, campaign: Campaign) -> RunHandle | None:
        """The handle of a run started just before the service died, before the store recorded it."""
        if campaign.artifact_dir is None:
            return None
        try:
            return RunHandle.model_validate_json((campaign.artifact_dir.parent / HANDLE_FILE).read_text())
        except (OSError, ValidationError):
            return None

    # ------------------------------------------------------------------ poll

    def _read_progress(self, campaign_id: str, handle: RunHandle) -> list[ProgressEvent]:
        """Complete new lines of the progress file; a half-written last line waits for the next poll."""
        if handle.progress_path is None:
            return []
        offset = self._offsets.get(campaign_id, 0)
        try:
            with open(handle.progress_path, "rb") as source:
                source.seek(offset)
                chunk = source.read()
        except FileNotFoundError:
            return []
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._offsets[campaign_id] = offset + len(complete)
        events = []
        for line in complete.splitlines():
            try:
                events.append(ProgressEvent.model_validate_json(line))
            except ValidationError as exc:
                log.warning("campaign %s: unreadable progress line %r: %s", campaign_id, line[:200], exc)
        return events

    def poll(self, campaign: Campaign, handle: RunHandle) -> PollResult:
        pid = int(handle.ref)
        process = self._children.get(campaign.id)
        progress = self._read_progress(campaign.id, handle)
        if process is not None and process.pid == pid:
            code = process.poll()
            if code is None:
                return PollResult(running=True, progress=progress)
            del self._children[campaign.id]
            self._end_group(pid)  # whatever the runner left behind
            exit_code: int | None = code
        elif process_alive(pid, handle.token):
            return PollResult(running=True, progress=progress)
        else:
            exit_code = None  # adopted after a restart: the exit status went to whoever reaped it
        progress += self._read_progress(campaign.id, handle)
        self._offsets.pop(campaign.id, None)
        return self._outcome(campaign, handle, exit_code, progress)

    def _outcome(
        self, campaign: Campaign, handle: RunHandle, code: int | None, progress: list[ProgressEvent]
    ) -> PollResult:
        log_tail = _tail(Path(handle.out_dir).parent / "campaign.log")
        if code is not None and code < 0:
            return PollResult(False, progress, error=f"runner killed by signal {-code}\n{log_tail}", exit_code=code)
        if code == EXIT_USAGE:
            return PollResult(
                False, progress, error=f"runner exited 2 (usage or config error)\n{log_tail}", exit_code=code
            )
        status = "exited" if code is None else f"exited {code}"
        if campaign.purpose == "bisect":
            return self._bisect_outcome(campaign, handle, code, progress, status, log_tail)
        report_path = Path(handle.out_dir) / "report.json"
        try:
            text = report_path.read_text(encoding="utf-8")
        except OSError:
            return PollResult(
                False, progress, error=f"runner {status} without {report_path}\n{log_tail}", exit_code=code
            )
        try:
            report = CampaignReport.model_validate_json(text)
        except ValidationError as exc:
            return PollResult(
                False, progress, error=f"runner {status}; {report_path} is invalid: {exc}", exit_code=code
            )
        if report.campaign_id != campaign.id:
            return PollResult(
                False,
                progress,
                exit_code=code,
                error=f"{report_path} is for campaign {report.campaign_id!r}, not {campaign.id!r}",
            )
        return PollResult(False, progress, report=report, exit_code=code)

    @staticmethod
    def _bisect_outcome(campaign: Campaign, handle: RunHandle, code: int | None, progress: list[ProgressEvent],
                        status: str, log_tail: str) -> PollResult:
        """A bisect run's end: its bisect.json, validated and named by this campaign's id (as `--bisect-id`)."""
        path = Path(handle.out_dir) / "bisect.json"
        try:
            bisect = BisectReport.model_validate_json(path.read_bytes())
        except OSError:
            return PollResult(False, progress, error=f"bisect {status} without {path}\n{log_tail}", exit_code=code)
        except ValidationError as exc:
            return PollResult(False, progress, error=f"bisect {status}; {path} is invalid: {exc}", exit_code=code)
        if bisect.bisect_id != campaign.id:
            return PollResult(False, progress, exit_code=code,
                              error=f"{path} is for bisect {bisect.bisect_id!r}, not {campaign.id!r}")
        return PollResult(False, progress, bisect=bisect, exit_code=code)

    # ------------------------------------------------------------------ cancel

    @staticmethod
    def _kill_group(pgid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)

    def _end_group(self, pgid: int) -> None:
        """SIGKILL to the group, then wait until none of it runs: SIGKILL is final but not instant, and the next
        campaign must never start (or pin its CPUs) beside this one's leftovers. One stuck in the kernel past the
        grace period is logged, not waited for."""
        self._kill_group(pgid, signal.SIGKILL)
        deadline = time.monotonic() + self.cancel_grace_seconds
        while group_running(pgid):
            if time.monotonic() > deadline:
                log.warning("process group %d still has a process %.0f s after SIGKILL", pgid,
                            self.cancel_grace_seconds)
                return
            time.sleep(0.01)

    def cancel(self, campaign: Campaign, handle: RunHandle) -> None:
        """SIGTERM to the process group, SIGKILL after the grace period; returns once none of the group runs."""
        pid = int(handle.ref)
        process = self._children.pop(campaign.id, None)
        self._offsets.pop(campaign.id, None)
        if process is None and not process_alive(pid, handle.token):
            return
        self._kill_group(pid, signal.SIGTERM)
        if process is not None:
            try:
                process.wait(timeout=self.cancel_grace_seconds)
            except subprocess.TimeoutExpired:
                self._kill_group(pid, signal.SIGKILL)
                process.wait()
            self._end_group(pid)
            return
        deadline = time.monotonic() + self.cancel_grace_seconds
        while process_alive(pid, handle.token) and time.monotonic() < deadline:
            time.sleep(0.05)
        self._end_group(pid)
