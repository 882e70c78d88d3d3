"""The Actions backend's calls: dispatch a workflow, follow its run and jobs, cancel it, fetch its artifact."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from datetime import UTC, datetime

import httpx
from github.Artifact import Artifact
from github.PaginatedList import PaginatedList
from github.Requester import Requester
from github.WorkflowJob import WorkflowJob
from github.WorkflowRun import WorkflowRun

from bot.github.errors import ArtifactTooLargeError, GitHubError, GitHubUnavailableError
from bot.github.models import WorkflowJobInfo, WorkflowRunInfo, WorkflowStepInfo
from bot.github.transport import GitHubTransport


def _run_info(run: WorkflowRun) -> WorkflowRunInfo:
    return WorkflowRunInfo(
        id=run.id,
        display_title=run.display_title,
        status=run.status,
        conclusion=run.conclusion,
        html_url=run.html_url,
        created_at=run.created_at,
    )


def _job_info(job: WorkflowJob) -> WorkflowJobInfo:
    return WorkflowJobInfo(
        id=job.id,
        name=job.name,
        status=job.status,
        conclusion=job.conclusion,
        runner_id=job.runner_id,
        runner_name=job.runner_name,
        html_url=job.html_url,
        steps=[
            WorkflowStepInfo(number=step.number, name=step.name, status=step.status, conclusion=step.conclusion)
            for step in job.steps
        ],
    )


class ActionsCalls(GitHubTransport):
    """The Actions backend's calls: dispatch a workflow, follow its run and jobs, cancel it, fetch its
    artifact (dispatches are retried as they are: GitHub returns no id to look one up by)."""

    def dispatch_workflow(self, workflow_file: str, ref: str, inputs: Mapping[str, str]) -> None:
        self._call(
            f"dispatch {workflow_file}@{ref}",
            lambda: self._repo.get_workflow(workflow_file).create_dispatch(ref, dict(inputs), throw=True),
        )

    def find_dispatched_run(
        self, workflow_file: str, created_after: datetime, exclude: Collection[int] = ()
    ) -> int | None:
        """The first ``workflow_dispatch`` run of the workflow created at or after ``created_after``.

        The dispatch API returns no run id, so the run is found by time; GitHub filters at whole
        seconds, hence "at or after", and ``exclude`` skips runs already attributed to an earlier
        dispatch of the same second. Returns None while GitHub has not created the run yet.
        """
        if created_after.tzinfo is None:
            raise ValueError("created_after must be timezone-aware")
        since = created_after.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

        def find() -> int | None:
            runs = self._repo.get_workflow(workflow_file).get_runs(
                event="workflow_dispatch", created=f">={since}"
            )
            candidates = [(run.created_at, run.id) for run in runs if run.id not in exclude]
            return min(candidates)[1] if candidates else None

        return self._call(f"find runs of {workflow_file}", find)

    def workflow_runs(self, workflow_file: str, status: str) -> list[WorkflowRunInfo]:
        """The workflow's ``workflow_dispatch`` runs in one status (GitHub filters one status at a time)."""
        return self._call(
            f"list {status} runs of {workflow_file}",
            lambda: [
                _run_info(run)
                for run in self._repo.get_workflow(workflow_file).get_runs(event="workflow_dispatch", status=status)
            ],
        )

    def workflow_run(self, run_id: int) -> WorkflowRunInfo:
        return self._call(f"GET run {run_id}", lambda: _run_info(self._repo.get_workflow_run(run_id)))

    def workflow_jobs(self, run_id: int) -> list[WorkflowJobInfo]:
        """The jobs of the run's latest attempt."""

        def fetch() -> list[WorkflowJobInfo]:
            jobs: PaginatedList[WorkflowJob] = PaginatedList(
                WorkflowJob,
                self._requester,
                f"{self._repo.url}/actions/runs/{run_id}/jobs",
                {"filter": "latest"},
                list_item="jobs",
            )
            return [_job_info(job) for job in jobs]

        return self._call(f"list jobs of run {run_id}", fetch)

    def cancel_workflow_run(self, run_id: int) -> bool:
        """Ask GitHub to cancel the run; False when it had already completed (GitHub answers 409)."""

        def cancel() -> bool:
            status, headers, body = self._requester.requestJson(
                "POST", f"{self._repo.url}/actions/runs/{run_id}/cancel"
            )
            if status == 202:
                return True
            if status == 409:
                return False
            raise Requester.createException(status, headers, json.loads(body) if body else {})

        return self._call(f"cancel run {run_id}", cancel)

    def download_artifact(self, run_id: int, name: str, max_bytes: int | None = None) -> bytes | None:
        """The artifact's zip archive; None when the run has no live artifact of that name.

        With `max_bytes`, an artifact GitHub reports as larger is refused before the download, and the
        download itself stops once it passes the limit (row jobs run pull-request code and upload evidence).
        """

        def locate() -> str | None:
            artifacts: PaginatedList[Artifact] = PaginatedList(
                Artifact,
                self._requester,
                f"{self._repo.url}/actions/runs/{run_id}/artifacts",
                {"name": name},
                list_item="artifacts",
            )
            live = [artifact for artifact in artifacts if artifact.name == name and not artifact.expired]
            if not live:
                return None
            newest = max(live, key=lambda artifact: artifact.created_at)
            if max_bytes is not None and newest.size_in_bytes > max_bytes:
                raise ArtifactTooLargeError(
                    f"artifact {name!r} of run {run_id} is {newest.size_in_bytes} bytes; the limit is {max_bytes}"
                )
            status, headers, body = self._requester.requestJson(
                "GET", f"{self._repo.url}/actions/artifacts/{newest.id}/zip"
            )
            if status == 302:
                return str(headers["location"])
            if status in (404, 410):
                return None
            raise Requester.createException(status, headers, json.loads(body) if body else {})

        location = self._call(f"locate artifact {name!r} of run {run_id}", locate)
        if location is None:
            return None

        def fetch() -> bytes:
            # A pre-signed URL on another host: our token must not travel there.
            with httpx.stream("GET", location, timeout=self._timeout) as response:
                if response.status_code >= 500:
                    raise GitHubUnavailableError(
                        f"artifact download: HTTP {response.status_code}", status=response.status_code
                    )
                if response.status_code != 200:
                    response.read()
                    raise GitHubError(
                        f"artifact download: HTTP {response.status_code}",
                        status=response.status_code,
                        body=response.text,
                    )
                chunks: list[bytes] = []
                received = 0
                for chunk in response.iter_bytes():
                    received += len(chunk)
                    if max_bytes is not None and received > max_bytes:
                        raise ArtifactTooLargeError(
                            f"artifact {name!r} of run {run_id} passed {max_bytes} bytes while downloading"
                        )
                    chunks.append(chunk)
                return b"".join(chunks)

        return self._call(f"download artifact {name!r}", fetch)
