"""Check runs: create and update the bot's own, and find check runs by name on a commit or in a suite."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from typing import Any

from github.CheckRun import CheckRun
from github.PaginatedList import PaginatedList

from bot.core.repo_values import CheckRunInfo
from bot.github.errors import GitHubNotFoundError
from bot.github.models import CheckAction, CheckConclusion, CheckOutput, CheckStatus
from bot.github.transport import GitHubTransport


def _check_run_info(run: CheckRun) -> CheckRunInfo:
    """What the bot reads of a listed check run (every field is in the list's own payload: no further request)."""
    return CheckRunInfo(
        id=run.id,
        name=run.name,
        head_sha=run.head_sha,
        status=run.status,
        conclusion=run.conclusion,
        external_id=run.external_id or None,
        app_slug=run.app.slug if run.app is not None else None,
        html_url=run.html_url or "",
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

        def fetch() -> int | None:
            runs = self._listed(f"commits/{urllib.parse.quote(head_sha, safe='')}",
                                {"check_name": name, "filter": "all"})
            ids = [run.id for run in runs if run.external_id == external_id]
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

        def fetch() -> list[CheckRunInfo]:
            listed = self._listed(f"commits/{urllib.parse.quote(ref, safe='')}",
                                  {"check_name": check_name, "filter": "latest"})
            return [_check_run_info(run) for run in listed]

        return self._call(f"GET check runs {check_name!r} of {ref}", fetch)

    def suite_check_runs(self, check_suite_id: int, check_name: str) -> list[CheckRunInfo]:
        """The check runs of this name in one check suite (what GitHub's Re-run buttons act on); none for a suite
        GitHub does not know."""

        def fetch() -> list[CheckRunInfo]:
            return [_check_run_info(run)
                    for run in self._listed(f"check-suites/{check_suite_id}", {"check_name": check_name})]

        try:
            return self._call(f"GET check runs {check_name!r} of suite {check_suite_id}", fetch)
        except GitHubNotFoundError:
            return []  # a suite GitHub does not know (or no longer shows) holds nothing of ours

    def _listed(self, owner: str, parameters: dict[str, str]) -> list[CheckRun]:
        """Every page of `<owner>/check-runs` (a commit with more check runs than one page holds, 100, hides none),
        followed by PyGithub through GitHub's `Link` headers."""
        pages: PaginatedList[CheckRun] = PaginatedList(
            CheckRun, self._requester, f"{self._repo.url}/{owner}/check-runs", {**parameters, "per_page": "100"},
            list_item="check_runs",
        )
        return list(pages)
