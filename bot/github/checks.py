"""Check runs: create and update the bot's own, and find check runs by name on a commit or in a suite."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from bot.core.repo_values import CheckRunInfo
from bot.github.errors import GitHubNotFoundError
from bot.github.models import CheckAction, CheckConclusion, CheckOutput, CheckStatus
from bot.github.transport import GitHubTransport


def _check_run_info(data: Mapping[str, Any]) -> CheckRunInfo:
    app = data.get("app") or {}
    return CheckRunInfo(
        id=int(data["id"]),
        name=str(data["name"]),
        head_sha=str(data["head_sha"]),
        status=str(data["status"]),
        conclusion=data.get("conclusion"),
        external_id=data.get("external_id") or None,
        app_slug=app.get("slug"),
        html_url=str(data.get("html_url") or ""),
    )


class CheckRuns(GitHubTransport):
    """The check runs the bot writes where people read its verdicts, and the reads of check runs by name."""

    def create_check_run(
        self,
        head_sha: str,
        name: str,
        external_id: str,
        status: CheckStatus = "queued",
        output: CheckOutput | None = None,
        actions: Sequence[CheckAction] = (),
        details_url: str | None = None,
        conclusion: CheckConclusion | None = None,
    ) -> int:
        """Create a check run; with `conclusion` (and status `completed`) it is created already concluded."""
        kwargs: dict[str, Any] = {
            "name": name,
            "head_sha": head_sha,
            "external_id": external_id,
            "status": status,
        }
        if conclusion is not None:
            kwargs["conclusion"] = conclusion
        if output is not None:
            kwargs["output"] = output.model_dump(exclude_none=True)
        if actions:
            kwargs["actions"] = [action.model_dump() for action in actions]
        if details_url is not None:
            kwargs["details_url"] = details_url
        run = self._call(f"create check run {name!r}", lambda: self._repo.create_check_run(**kwargs))
        return run.id

    def check_run_of(self, head_sha: str, name: str, external_id: str) -> int | None:
        """The id of the check run of this name and external id on a commit (the first made, should there be more),
        or None: what the publisher looks for before it creates one. Every run of the name counts, not only the
        newest (`filter=all`): an older campaign of the same head keeps its own."""
        url = f"{self._repo.url}/commits/{urllib.parse.quote(head_sha, safe='')}/check-runs"

        def fetch() -> int | None:
            _, data = self._requester.requestJsonAndCheck(
                "GET", url, parameters={"check_name": name, "filter": "all", "per_page": 100}
            )
            ids = [int(run["id"]) for run in data.get("check_runs", []) if run.get("external_id") == external_id]
            return min(ids) if ids else None

        return self._call(f"GET check run {external_id!r} of {head_sha}", fetch)

    def update_check_run(
        self,
        check_run_id: int,
        *,
        status: CheckStatus | None = None,
        conclusion: CheckConclusion | None = None,
        output: CheckOutput | None = None,
        actions: Sequence[CheckAction] | None = None,
        details_url: str | None = None,
    ) -> None:
        """Change only what is given; ``actions=[]`` removes the buttons."""
        kwargs: dict[str, Any] = {}
        if status is not None:
            kwargs["status"] = status
        if conclusion is not None:
            kwargs["conclusion"] = conclusion
        if output is not None:
            kwargs["output"] = output.model_dump(exclude_none=True)
        if actions is not None:
            kwargs["actions"] = [action.model_dump() for action in actions]
        if details_url is not None:
            kwargs["details_url"] = details_url
        self._call(
            f"update check run {check_run_id}",
            lambda: self._repo.get_check_run(check_run_id).edit(**kwargs),
        )


    def check_runs_of(self, ref: str, check_name: str) -> list[CheckRunInfo]:
        """The check runs of this name on a commit, newest first (GitHub's `filter=latest` keeps the newest run of
        each name per App)."""
        url = f"{self._repo.url}/commits/{urllib.parse.quote(ref, safe='')}/check-runs"

        def fetch() -> list[CheckRunInfo]:
            _, data = self._requester.requestJsonAndCheck(
                "GET", url, parameters={"check_name": check_name, "filter": "latest", "per_page": 100}
            )
            return [_check_run_info(run) for run in data.get("check_runs", [])]

        return self._call(f"GET check runs {check_name!r} of {ref}", fetch)

    def suite_check_runs(self, check_suite_id: int, check_name: str) -> list[CheckRunInfo]:
        """The check runs of this name in one check suite (what GitHub's Re-run buttons act on); none for a suite
        GitHub does not know."""
        url = f"{self._repo.url}/check-suites/{check_suite_id}/check-runs"

        def fetch() -> list[CheckRunInfo]:
            _, data = self._requester.requestJsonAndCheck(
                "GET", url, parameters={"check_name": check_name, "per_page": 100}
            )
            return [_check_run_info(run) for run in data.get("check_runs", [])]

        try:
            return self._call(f"GET check runs {check_name!r} of suite {check_suite_id}", fetch)
        except GitHubNotFoundError:
            return []  # a suite GitHub does not know (or no longer shows) holds nothing of ours
