"""Issues and their comments: post (at most once), edit, list, read and minimize comments; keep a labelled issue.

Creating a comment or an issue looks for the one a failed POST may have made before posting again.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Sequence

from github.IssueComment import IssueComment

from bot.core.repo_values import CommentInfo
from bot.github.errors import GitHubError, GitHubNotFoundError
from bot.github.models import IssueInfo, MinimizeClassifier
from bot.github.transport import GitHubTransport

log = logging.getLogger(__name__)


def _comment_info(comment: IssueComment) -> CommentInfo:
    return CommentInfo(
        id=comment.id,
        node_id=comment.node_id,
        body=comment.body,
        author_login=comment.user.login,
        author_id=comment.user.id,
        html_url=comment.html_url,
        created_at=comment.created_at,
    )


class IssuesAndComments(GitHubTransport):
    """Comments on pull requests and issues (the status and result comments, replies), and the tracking issue."""

    def _comment(self, comment_id: int) -> IssueComment:
        return IssueComment(self._requester, url=f"{self._repo.url}/issues/comments/{comment_id}")

    def create_comment(self, number: int, body: str) -> CommentInfo:
        """Post a comment, at most once: a POST that failed retryably (5xx, no answer, rate limit) may have
        been acted on, so before posting again the issue's comments are searched for the one it would have
        made (`_posted_before`), and that one is returned if GitHub did create it."""
        tried = False

        def attempt() -> CommentInfo:
            nonlocal tried
            if tried:
                existing = self._posted_before(number, body)
                if existing is not None:
                    log.info("comment on #%d was created by a POST that failed; using comment %d", number, existing.id)
                    return existing
            tried = True
            return _comment_info(self._repo.get_issue(number).create_comment(body))

        return self._call(f"comment on #{number}", attempt)

    def _posted_before(self, number: int, body: str) -> CommentInfo | None:
        """The bot's own comment (by user id) on the issue with this body, or with the same opening hidden
        marker when the marker names a campaign (`<!-- kv-parity:... campaign=... -->`)."""
        me = self.identity().id
        marker = body.split("\n", 1)[0]
        specific = marker.startswith("<!-- kv-parity:") and marker.endswith("-->") and "campaign" in marker
        for comment in self._repo.get_issue(number).get_comments():
            if comment.user.id != me:
                continue
            if comment.body == body or (specific and comment.body.split("\n", 1)[0] == marker):
                return _comment_info(comment)
        return None

    def edit_comment(self, comment_id: int, body: str) -> CommentInfo:
        def edit() -> CommentInfo:
            comment = self._comment(comment_id)
            comment.edit(body)
            return _comment_info(comment)

        return self._call(f"edit comment {comment_id}", edit)

    def list_comments(self, number: int) -> list[CommentInfo]:
        return self._call(
            f"list comments of #{number}",
            lambda: [_comment_info(comment) for comment in self._repo.get_issue(number).get_comments()],
        )

    def comment(self, comment_id: int) -> CommentInfo | None:
        """One issue comment by id, as it reads now; None when it was deleted."""
        try:
            return self._call(f"GET comment {comment_id}", lambda: _comment_info(self._comment(comment_id)))
        except GitHubNotFoundError:
            return None

    def minimize_comment(self, node_id: str, classifier: MinimizeClassifier = "OUTDATED") -> None:
        """Fold an outdated bot report away (GraphQL only; REST cannot minimize)."""
        _, data = self._call(
            f"minimize comment {node_id}",
            lambda: self._requester.graphql_named_mutation(
                "minimizeComment",
                {"subjectId": node_id, "classifier": classifier},
                "minimizedComment { isMinimized }",
            ),
        )
        if not (data.get("minimizedComment") or {}).get("isMinimized"):
            raise GitHubError(f"comment {node_id} was not minimized", body=data)

    def ensure_label(self, name: str, color: str, description: str) -> None:
        """The label, created when the repository lacks it (creating an issue with an unknown label would create
        it without a description, or drop it when the token may not)."""
        url = f"{self._repo.url}/labels/{urllib.parse.quote(name, safe='')}"
        try:
            self._call(f"GET label {name!r}", lambda: self._requester.requestJsonAndCheck("GET", url))
        except GitHubNotFoundError:
            self._call(f"create label {name!r}",
                       lambda: self._repo.create_label(name=name, color=color, description=description))

    def open_issues(self, label: str) -> list[IssueInfo]:
        """Open issues (not pull requests) carrying the label, oldest first (the first hundred: one is kept open)."""
        query = urllib.parse.urlencode({"state": "open", "labels": label, "sort": "created", "direction": "asc",
                                        "per_page": "100"})
        url = f"{self._repo.url}/issues?{query}"
        _, data = self._call(f"list open issues labelled {label!r}",
                             lambda: self._requester.requestJsonAndCheck("GET", url))
        return [IssueInfo(number=int(item["number"]), title=str(item["title"]), body=str(item.get("body") or ""),
                          author_id=int(item["user"]["id"]), html_url=str(item["html_url"]))
                for item in data if "pull_request" not in item]

    def create_issue(self, title: str, body: str, labels: Sequence[str]) -> IssueInfo:
        """Open an issue, at most once: a retried POST first looks for the one a failed POST may have made (the
        bot's own open issue with this title and first label)."""
        tried = False

        def attempt() -> IssueInfo:
            nonlocal tried
            if tried and labels:
                me = self.identity().id
                made = [i for i in self.open_issues(labels[0]) if i.author_id == me and i.title == title]
                if made:
                    return made[-1]
            tried = True
            issue = self._repo.create_issue(title=title, body=body, labels=list(labels))
            return IssueInfo(number=issue.number, title=issue.title, body=issue.body or "",
                             author_id=issue.user.id, html_url=issue.html_url)

        return self._call(f"create issue {title!r}", attempt)
