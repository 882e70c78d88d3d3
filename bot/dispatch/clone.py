"""What the backends that run campaigns from the service's own clone share (`local` and `slurm`): each campaign's
commits fetched into that clone by SHA, the campaign's own clone borrowing its objects, and the sandbox they
refuse to start without. A shared piece at the bottom of `bot.dispatch`, so no backend imports another.
"""

from __future__ import annotations

import logging
import re
import subprocess
from pathlib import Path

from bot.core.campaign import Campaign
from bot.dispatch.base import StartError
from bot.settings import SettingsError
from runners.exec.sandbox import SandboxKind, SandboxUnavailable, check
from runners.stages.revisions import GIT, RevisionError, shared_clone

log = logging.getLogger(__name__)

SHA = re.compile(r"^[0-9a-f]{40}$")
UNSANDBOXED = (
    'sandbox = "none": campaigns run pull-request code UNSANDBOXED, as the service\'s user; a build script can '
    "read the service's files and forge results. Set sandbox = \"bwrap\" for anything but trusted code."
)


class SandboxRequired(SettingsError):
    """The local backend was asked for without a working sandbox and without the explicit opt-out."""


def require_sandbox(kind: SandboxKind) -> None:
    """Refuse (SandboxRequired) unless `kind` works here; `none` is accepted, with a warning in the log."""
    if kind == "none":
        log.warning(UNSANDBOXED)
        return
    try:
        check(kind)
    except SandboxUnavailable as exc:
        raise SandboxRequired(
            f"backend 'local' runs pull-request code and needs a working sandbox ({kind}): {exc}. "
            'Setting sandbox = "none" runs it unsandboxed instead (unsafe: it can read the service\'s secrets).'
        ) from exc


class ServiceClone:
    """The service's clone of the repository (`local_repo_path`), which campaigns read and never write."""

    def __init__(self, repo: Path, fetch_remote: str = "origin") -> None:
        self.repo = repo
        self.fetch_remote = fetch_remote

    def _git(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*GIT, "-C", str(self.repo), *args],
            capture_output=True,
            text=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )

    def _ensure_commits(self, shas: list[str]) -> None:
        """Both revisions must be in the clone; fetch them by SHA from the remote when they are not."""
        missing = [sha for sha in shas if self._git("cat-file", "-e", f"{sha}^{{commit}}").returncode != 0]
        if not missing:
            return
        fetched = self._git("fetch", "--no-tags", "--quiet", self.fetch_remote, *missing)
        still = [sha for sha in missing if self._git("cat-file", "-e", f"{sha}^{{commit}}").returncode != 0]
        if still:
            raise StartError(
                f"commits {[s[:12] for s in still]} are not in {self.repo} and fetching them from "
                f"{self.fetch_remote!r} failed: {fetched.stderr.strip()[-500:]}"
            )

    def fresh_clone(self, dest: Path) -> None:
        """The campaign's own clone, read through alternates from the service's clone (which it never writes)."""
        try:
            shared_clone(self.repo, dest)
        except RevisionError as exc:
            raise StartError(str(exc)) from exc

    def pinned(self, campaign: Campaign) -> Path:
        """The campaign's artifact directory, once every SHA it names is a full SHA present in the clone."""
        if campaign.artifact_dir is None:
            raise StartError(f"campaign {campaign.id} has no artifact directory")
        shas = [campaign.base_sha, campaign.head_sha, *([campaign.config_sha] if campaign.config_sha else [])]
        for sha in shas:
            if not SHA.match(sha):
                raise StartError(f"{sha!r} is not a full commit SHA")
        self._ensure_commits(shas)
        return campaign.artifact_dir
