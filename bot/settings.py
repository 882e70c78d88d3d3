"""Bot settings: one validated model, loaded from a TOML file and/or `KV_PARITY_*` environment variables.

Environment variables win over the file so a deployment can keep secrets out of files. Lists (such as
`local_campaign_argv`) are given in the environment as JSON arrays. Unknown keys in the file are errors
(a typo must not silently fall back to a default); unrelated `KV_PARITY_*` variables are ignored because
the runners use that prefix too.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator
from runners.pipeline.slurm import SlurmOptions
from runners.schema.config import DEFAULT_CONFIG_PATH

Permission = Literal["none", "read", "triage", "write", "maintain", "admin"]
ENV_PREFIX = "KV_PARITY_"
SETTINGS_FILE_ENV = "KV_PARITY_SETTINGS"


class SettingsError(ValueError):
    """Settings that cannot be used; the message names the key and the source."""


class Settings(BaseModel):
    """Everything an operator chooses; the defaults are the documented behaviour."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    webhook_secret: SecretStr = Field(min_length=1)
    """Shared secret of the webhook; every delivery's X-Hub-Signature-256 is checked against it."""
    token: SecretStr | None = None
    """Plain token authentication (a PAT or an Actions token); exclusive with the App fields."""
    app_id: int | None = None
    private_key_path: Path | None = None
    installation_id: int | None = None
    api_base_url: str = "https://api.github.com"
    api_seconds_between_requests: float | None = 0.25
    api_seconds_between_writes: float | None = 1.0
    """PyGithub's pacing (GitHub asks integrations to space out mutating calls); 0 in tests."""
    repo: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
    """Only events of this repository are acted on (None: any repository the credentials reach)."""
    bot_login: str | None = None
    """The bot's own login, to ignore its own comments; None asks the API once at start."""

    label: str = "kv-parity"
    command_word: str = "/parity"
    min_permission: Permission = "write"
    refusal_window_seconds: float = Field(600.0, ge=0)
    """A person refused on a pull request is answered publicly once per this window; within it their further
    requests there are only recorded, and their recorded permission stands in for another API lookup (so a
    flood of commands costs no API calls), which also means a permission granted meanwhile counts once the
    window has passed."""
    config_path: str = DEFAULT_CONFIG_PATH
    """Campaign config path, read at the base branch's tip (recorded), never from the head."""
    check_name: str = "kv-parity"

    backend: Literal["local", "actions", "slurm"] = "local"
    deadline_seconds: float = Field(6 * 3600, gt=0)
    """Wall-clock budget of one campaign from its dispatch; past it the campaign is timed_out."""
    max_attempts: int = Field(3, ge=1)
    """How many times a campaign is started from scratch after losing its process to a restart."""
    cancel_grace_seconds: float = Field(10.0, ge=0)
    """Between SIGTERM and SIGKILL of a campaign's process group."""
    poll_interval_seconds: float = Field(1.0, gt=0)
    delivery_max_attempts: int = Field(5, ge=1)
    """A delivery whose handling keeps failing (e.g. GitHub down past the gateway's retries) is retried
    this many times by the worker, then recorded as failed."""

    api_max_retry_wait_seconds: float = Field(10.0, ge=0)
    """Longest wait the gateway sleeps through for GitHub's `Retry-After` / rate-limit reset; a longer one
    puts the delivery back in the queue for that time instead of holding up the single worker."""
    db_busy_timeout_seconds: float = Field(2.0, gt=0)
    """Longest wait for another process's SQLite write lock; past it the webhook answers 503 (GitHub gives a
    delivery 10 s) and /healthz reports the database as not writable."""
    header_timeout_seconds: float = Field(10.0, gt=0)
    """A connection that has not sent complete request headers within this time is closed."""
    body_timeout_seconds: float = Field(10.0, gt=0)
    """Deadline for reading a webhook body (GitHub itself gives up on a delivery after 10 s)."""
    max_unverified_bodies: int = Field(64, ge=1)
    """Webhook bodies read at once before their signature is known; one more is answered 503 at once. Each
    holds at most 256 KiB of memory (the rest is spooled to a temporary file)."""
    max_waiting_connections: int = Field(64, ge=1)
    """Connections still sending their request headers; a new one beyond it evicts the oldest (a slow
    sender), so trickling clients cannot use up the file descriptors legitimate deliveries need."""
    db_path: Path = Path("kv-parity-bot.sqlite3")
    work_dir: Path = Path("kv-parity-work")
    """Per-campaign directories: config written from the base revision, progress file, report, logs."""
    build_cache_dir: Path | None = None
    """Where the local and Slurm backends' campaigns reuse and store builds (runners/exec/build_cache.py; an entry serves
    only the arm that built it, so a candidate's build never serves a merge base); None: `<work_dir>/build-cache`."""
    local_repo_path: Path | None = None
    """Clone the local backend runs campaigns in; missing commits are fetched from `local_fetch_remote`."""
    local_fetch_remote: str = "origin"
    local_campaign_argv: list[str] | None = None
    """Command prefix the local backend runs instead of `kv-parity campaign`; the backend appends
    `--sandbox --repo --base --head --config [--rows] [--build-cache] --out --campaign-id
    --progress-jsonl`. This is how a
    single-node user plugs in a different runner."""
    local_bisect_argv: list[str] | None = None
    """Command prefix the local backend runs for `/parity bisect` instead of `kv-parity bisect`; the backend
    appends `--sandbox --repo --good --bad --config --config-ref --config-source [--rows] [--build-cache] --out
    --bisect-id --progress-jsonl`."""
    tracking_label: str = "kv-parity-regression"
    """Label of the one open issue main-branch tracking opens (or comments on) when a push or the reference
    campaign FAILs (bot.publish.side_runs)."""
    sandbox: Literal["bwrap", "none"] = "bwrap"
    """How the local backend contains pull-request code: `bwrap` (bubblewrap; the service refuses to start
    without a working one) or `none`, which runs it as the service's user, able to read the service's files and
    forge results: only for trusted code, logged as a warning at start and for every campaign."""
    actions_workflow: str = "kv-parity-campaign.yml"
    """Campaign workflow the `actions` backend (and Actions-only mode) dispatches."""
    actions_ref: str = "main"
    """Branch or tag the campaign workflow is dispatched on: a trusted ref, never a pull request's head, since
    the workflow file at that ref is what runs."""
    actions_poll_seconds: float = Field(30.0, ge=0)
    """Least time between two API polls of one campaign's workflow run (each poll costs requests from the
    installation's rate limit)."""
    slurm: SlurmOptions | None = None
    """The `slurm` backend's `[slurm]` table: partition, account, qos, constraint, time limits, node-local
    scratch, SLURM_CONF (docs/operations.md, "Running campaigns on Slurm"); None: every default. Both arms are cloned
    from `local_repo_path`, which, like `work_dir`, must be the same path on every node."""

    public_url: str | None = Field(None, pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$")
    """Base URL at which browsers reach `kv-parity serve` (e.g. `https://kv-parity.example.com`). When set, each
    campaign's report page is served at `{public_url}/c/{token}`, each pull request's list of campaigns at
    `{public_url}/pr/{token}` (with a merge-base timing history per row), and linked as the check run's
    details_url and as "Details" in the comments. None (the default): no page route answers anything but
    404 and no page URL is published."""
    pages_for_private_repositories: bool = False
    """A page is guarded only by its unguessable URL (there is no GitHub login in front of it), so anyone the
    link reaches can read it. By default a private repository (the webhook's `repository.private`) gets no
    page and no link; set true only if the service is reachable solely by people allowed to read the
    repository."""

    log_format: Literal["text", "json"] = "text"
    """`text` for a person at a terminal; `json`: one JSON object per line, with the delivery id, campaign id,
    repository and pull request on every line that concerns them (`kv-parity serve --log-format` overrides it)."""
    metrics_listen: str | None = Field(None, pattern=r"^(\[[0-9A-Fa-f:.]+\]|[^\s:\[\]]+):[0-9]{1,5}$")
    """`HOST:PORT` of a listener of its own serving only `GET /metrics` (e.g. `127.0.0.1:9108`, an address the
    public cannot reach); None: no such listener."""
    metrics_token: SecretStr | None = Field(None, min_length=16)
    """A bearer token: `GET /metrics` is then also served on the public listener, to a scraper sending
    `Authorization: Bearer <token>` (compared in constant time; everyone else gets 404), and `metrics_listen`
    asks for it too. None with no `metrics_listen`: no metrics at all (nothing is counted)."""

    @property
    def metrics_enabled(self) -> bool:
        return self.metrics_listen is not None or self.metrics_token is not None

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        """`metrics_listen` as (host, port), brackets of an IPv6 address removed."""
        if self.metrics_listen is None:
            return None
        host, _, port = self.metrics_listen.rpartition(":")
        return host.strip("[]"), int(port)

    def unserved(self, repo: str) -> str | None:
        """Why an event of `repo` is ignored (`repo` is set to another repository), or None when it is served."""
        if self.repo and repo.lower() != self.repo.lower():
            return f"repository {repo} is not served (settings.repo = {self.repo})"
        return None

    @property
    def build_cache(self) -> Path:
        return self.build_cache_dir if self.build_cache_dir is not None else self.work_dir / "build-cache"

    @model_validator(mode="after")
    def _one_auth_mode(self) -> Settings:
        """Exactly one way to authenticate, so there is never doubt about which identity acts."""
        app = (self.app_id, self.private_key_path, self.installation_id)
        if self.token is not None and any(v is not None for v in app):
            raise ValueError("give either token or app_id/private_key_path/installation_id, not both")
        if self.token is None and not all(v is not None for v in app):
            raise ValueError("authentication needs token, or all of app_id, private_key_path installation_id")
        if self.backend == "local" and self.local_repo_path is None:
            raise ValueError("backend 'local' needs local_repo_path (a clone of the repository)")
        if self.backend == "slurm" and self.local_repo_path is None:
            raise ValueError("backend 'slurm' needs local_repo_path (a clone on the shared file system)")
        return self


def _env_values(environ: Mapping[str, str]) -> dict[str, object]:
    values: dict[str, object] = {}
    for name, field in Settings.model_fields.items():
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is None:
            continue
        if field.annotation is not None and "list" in str(field.annotation):
            try:
                values[name] = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise SettingsError(f"{ENV_PREFIX}{name.upper()} must be a JSON array: {exc}") from exc
        else:
            values[name] = raw
    return values


def load_settings(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from `path` (or $KV_PARITY_SETTINGS) overlaid with `KV_PARITY_<FIELD>` variables."""
    env = os.environ if environ is None else environ
    if path is None and env.get(SETTINGS_FILE_ENV):
        path = Path(env[SETTINGS_FILE_ENV])
    values: dict[str, object] = {}
    source = "environment"
    if path is not None:
        try:
            values = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise SettingsError(f"cannot read settings file {path}: {exc.strerror}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise SettingsError(f"{path}: not valid TOML: {exc}") from exc
        source = f"{path} + environment"
    values.update(_env_values(env))
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in error['loc']) or '(top level)'}: {error['msg']}" for error in exc.errors()
        ]
        raise SettingsError(f"invalid settings ({source}):\n  " + "\n  ".join(problems)) from exc
