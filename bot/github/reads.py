"""What the bot reads of the repository: pull requests, merge bases, permissions, refs, commits, files."""

from __future__ import annotations

import base64
import urllib.parse

from github.File import File

from bot.core.repo_values import COMPARE_FILES_LIMIT, CommitInfo, MergeBase, PullInfo
from bot.github.errors import GitHubError, GitHubNotFoundError
from bot.github.models import PullRef
from bot.github.transport import GitHubTransport

BASE_ROLES = frozenset({"admin", "maintain", "write", "triage", "read", "none"})


class RepositoryReads(GitHubTransport):
    """What the bot reads of the repository: pull requests, merge bases, permissions, refs, commits, files."""

    def pull(self, number: int) -> PullInfo:
        def fetch() -> PullInfo:
            pr = self._repo.get_pull(number)
            head_repo = pr.head.repo
            head_repo_name = head_repo.full_name if head_repo is not None else None
            return PullInfo(
                number=pr.number,
                state=pr.state,
                head_sha=pr.head.sha,
                head_ref=pr.head.ref,
                head_repo_full_name=head_repo_name,
                base_ref=pr.base.ref,
                base_sha=pr.base.sha,
                is_fork=head_repo_name is None or head_repo_name.lower() != pr.base.repo.full_name.lower(),
                author_login=pr.user.login,
                labels=[label.name for label in pr.labels],
                html_url=pr.html_url,
            )

        return self._call(f"GET pull #{number}", fetch)

    def merge_base(self, base_ref: str, head_sha: str) -> MergeBase:
        def fetch() -> MergeBase:
            comparison = self._repo.compare(base_ref, head_sha)
            return MergeBase.model_validate(
                {
                    "sha": comparison.merge_base_commit.sha,
                    "base_tip_sha": comparison.base_commit.sha,
                    "status": comparison.status,
                    "ahead_by": comparison.ahead_by,
                    "behind_by": comparison.behind_by,
                    "changed_files": _changed_paths(comparison.files),
                }
            )

        return self._call(f"compare {base_ref}...{head_sha}", fetch)

    def permission(self, login: str) -> str:
        """The user's role: admin, maintain, write, triage, read or none.

        Custom roles are reported as the base level they build on. A 404 (unknown user) is "none".
        """
        url = f"{self._repo.url}/collaborators/{urllib.parse.quote(login, safe='')}/permission"
        try:
            _, data = self._call(
                f"GET permission of {login}", lambda: self._requester.requestJsonAndCheck("GET", url)
            )
        except GitHubNotFoundError:
            return "none"
        role = data.get("role_name")
        return role if role in BASE_ROLES else str(data["permission"])

    def matching_refs(self, prefix: str) -> list[tuple[str, str]]:
        """(ref, commit SHA) of every branch or tag whose name starts with `prefix`
        (e.g. `heads/gh-readonly-queue/main/`)."""
        url = f"{self._repo.url}/git/matching-refs/{urllib.parse.quote(prefix, safe='/')}"

        def fetch() -> list[tuple[str, str]]:
            _, data = self._requester.requestJsonAndCheck("GET", url)
            return [(str(ref["ref"]), str(ref["object"]["sha"])) for ref in data or []]

        return self._call(f"GET refs matching {prefix}", fetch)

    def commits_between(self, base: str, head: str) -> list[str]:
        """The SHAs of the commits in `head` that `base` lacks (GitHub's comparison, every page)."""

        def fetch() -> list[str]:
            return [commit.sha for commit in self._repo.compare(base, head).commits]

        return self._call(f"commits of {base}...{head}", fetch)

    def read_file(self, path: str, ref: str) -> bytes | None:
        """The file's bytes at ``ref``; None when the path (or the ref) does not exist."""
        try:
            content = self._call(f"GET {path}@{ref}", lambda: self._repo.get_contents(path, ref=ref))
        except GitHubNotFoundError:
            return None
        if isinstance(content, list):
            raise GitHubError(f"{path}@{ref} is a directory, not a file")
        if content.encoding == "base64":
            return content.decoded_content
        # Files over 1 MB come without inline content; the blob API serves up to 100 MB.
        blob = self._call(f"GET blob {content.sha}", lambda: self._repo.get_git_blob(content.sha))
        return base64.b64decode(blob.content)


    def default_branch(self) -> str:
        return self._call("GET repository", lambda: str(self._repo.default_branch))

    def commit(self, ref: str) -> CommitInfo:
        url = f"{self._repo.url}/commits/{urllib.parse.quote(ref, safe='')}"
        _, data = self._call(f"GET commit {ref}", lambda: self._requester.requestJsonAndCheck("GET", url))
        return CommitInfo(sha=str(data["sha"]), parents=[str(parent["sha"]) for parent in data.get("parents", [])])

    def pulls_of_commit(self, sha: str) -> list[PullRef]:
        def fetch() -> list[PullRef]:
            return [PullRef(number=pull.number, title=pull.title, html_url=pull.html_url,
                            merged=pull.merged_at is not None)
                    for pull in self._repo.get_commit(sha).get_pulls()]

        return self._call(f"GET pulls of {sha[:12]}", fetch)


def _changed_paths(files: list[File]) -> tuple[str, ...] | None:
    """Both names of every changed file (a rename moves a path out of, or into, what a config watches), or None
    when the list may be cut at GitHub's limit."""
    if len(files) >= COMPARE_FILES_LIMIT:
        return None
    paths = {file.filename for file in files} | {file.previous_filename for file in files if file.previous_filename}
    return tuple(sorted(paths))
