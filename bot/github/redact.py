"""The last line of defence: no configured secret and nothing shaped like a credential leaves for GitHub.

The sandbox keeps secrets away from pull-request code and the renderers publish no raw output of it, but a
secret that got into a report anyway (a reason built from an exception, a path, a config error) must still
never reach a public comment. Every string the publisher sends (check-run title, summary and text, every
comment body, tracking issue) and report.md pass through `Redactor.redact`; `RedactingGateway` (and, for the
side-run publisher, `RedactingSideRunGateway`) wraps the gateway so no publishing path can skip it.

Matching survives the renderers' escaping: a secret is also found with a backslash or zero-width space
between any two of its characters and with its whitespace collapsed, since `md()` does exactly that, and in
its HTML-escaped forms (`&lt;`, `&amp;`, `&#39;`/`&#x27;`, `&#34;`/`&quot;`), since report.html and the served
pages escape it that way.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from markupsafe import escape
from pydantic import BaseModel, SecretStr

from bot.core.repo_values import BotIdentity, CommentInfo
from bot.github.models import CheckAction, CheckConclusion, CheckOutput, CheckStatus, IssueInfo, PullRef

REDACTED = "[redacted]"
MIN_SECRET_LENGTH = 6
"""Shorter configured values are not redacted on their own: they would blank ordinary words. Such a value is
not a credential anyway (GitHub tokens, webhook secrets and keys are far longer)."""
SECRET_ENV = ("KV_PARITY_TOKEN", "GITHUB_TOKEN", "GH_TOKEN", "KV_PARITY_WEBHOOK_SECRET")
"""Environment variables that hold credentials wherever the publisher runs (service or Actions job)."""

_GAP = "(?:\\\\|\u200b)*"
"""What the renderers may insert between two characters of a secret: backslash escapes, zero-width spaces."""
_UNDERSCORE = "\\\\?_"
SHAPES: tuple[re.Pattern[str], ...] = (
    re.compile(
        r"-----BEGIN[A-Z \\]*PRIVATE" + _GAP + r" KEY-----.*?(?:-----END[A-Z \\]*PRIVATE KEY-----|\Z)",
        re.DOTALL,
    ),
    re.compile(r"\bgh[pousr]" + _UNDERSCORE + r"[A-Za-z0-9]{20,}"),
    re.compile(r"\bgithub" + _UNDERSCORE + "pat" + _UNDERSCORE + r"[A-Za-z0-9_\\]{20,}"),
)
"""Credential shapes redacted whether configured or not: PEM private keys (to their end, or to the end of
the text when cut off) and GitHub token formats (ghp_, gho_, ghu_, ghs_, ghr_, github_pat_)."""


def _pattern(secret: str) -> str:
    """A regex for `secret` as it may appear after escaping and whitespace collapsing."""
    parts: list[str] = []
    for char in secret.strip():
        parts.append(r"\s+" if char.isspace() else re.escape(char))
    collapsed = re.sub(r"(?:\\s\+)+", r"\\s+", _GAP.join(parts))
    return collapsed


def _html_forms(secret: str) -> set[str]:
    """How Jinja2/markupsafe and `html.escape` write `secret` into a page, where that differs from it."""
    return {str(escape(secret)), html.escape(secret, quote=True)} - {secret}


class Redactor:
    """Replaces configured secret values and credential shapes by `[redacted]`."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values = {value.strip() for value in secrets if len(value.strip()) >= MIN_SECRET_LENGTH}
        values |= {escaped for value in values for escaped in _html_forms(value)}
        # Longest first, so a whole key is replaced before one of its lines is.
        ordered = sorted(values, key=len, reverse=True)
        self._secret: re.Pattern[str] | None = (
            re.compile("|".join(_pattern(value) for value in ordered)) if ordered else None
        )
        self.count = len(ordered)

    def redact(self, text: str) -> str:
        if self._secret is not None:
            text = self._secret.sub(REDACTED, text)
        for shape in SHAPES:
            text = shape.sub(REDACTED, text)
        return text

    def optional(self, text: str | None) -> str | None:
        return None if text is None else self.redact(text)


def _key_values(path: Path) -> list[str]:
    """The private key's contents and each of its lines (a single line can leak on its own)."""
    try:
        content = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [content, *content.splitlines()]


def secret_values(settings: object, environ: Mapping[str, str] | None = None) -> list[str]:
    """Every secret a publisher must never print: each settings field typed `SecretStr` (webhook secret,
    token, and any added later), the private key file's contents and lines, and credential variables in
    `environ`."""
    values: list[str] = []
    if isinstance(settings, BaseModel):
        for name in type(settings).model_fields:
            value = getattr(settings, name)
            if isinstance(value, SecretStr):
                values.append(value.get_secret_value())
        key_path = getattr(settings, "private_key_path", None)
        if isinstance(key_path, Path):
            values.extend(_key_values(key_path))
    for name in SECRET_ENV:
        if environ and environ.get(name):
            values.append(environ[name])
    return values


class Gateway(Protocol):
    """The GitHub writes and reads the publisher makes (a protocol so tests can record them)."""

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
    ) -> int: ...

    def check_run_of(self, head_sha: str, name: str, external_id: str) -> int | None:
        """The check run of this name and external id on the commit, if there is one."""
        ...

    def update_check_run(
        self,
        check_run_id: int,
        *,
        status: CheckStatus | None = None,
        conclusion: CheckConclusion | None = None,
        output: CheckOutput | None = None,
        actions: Sequence[CheckAction] | None = None,
        details_url: str | None = None,
    ) -> None: ...

    def create_comment(self, number: int, body: str) -> CommentInfo: ...

    def edit_comment(self, comment_id: int, body: str) -> CommentInfo: ...

    def list_comments(self, number: int) -> list[CommentInfo]: ...

    def minimize_comment(self, node_id: str, classifier: Any = "OUTDATED") -> None: ...

    def identity(self) -> BotIdentity: ...


class SideRunGateway(Gateway, Protocol):
    """The publisher's calls plus main-branch tracking's (`bot.github.reads`, `bot.github.issues`): what the
    side-run publisher (`bot.publish.side_runs`) needs."""

    def pulls_of_commit(self, sha: str) -> list[PullRef]: ...

    def ensure_label(self, name: str, color: str, description: str) -> None: ...

    def open_issues(self, label: str) -> list[IssueInfo]: ...

    def create_issue(self, title: str, body: str, labels: Sequence[str]) -> IssueInfo: ...


class RedactingGateway:
    """A gateway whose every outgoing text has passed the redactor; the publisher holds only this one."""

    def __init__(self, inner: Gateway, redactor: Redactor) -> None:
        self.inner = inner
        self.redactor = redactor

    def _output(self, output: CheckOutput | None) -> CheckOutput | None:
        if output is None:
            return None
        return CheckOutput(
            title=self.redactor.redact(output.title),
            summary=self.redactor.redact(output.summary),
            text=self.redactor.optional(output.text),
        )

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
        if conclusion is None:
            return self.inner.create_check_run(
                head_sha, name, external_id, status, self._output(output), actions, details_url
            )
        return self.inner.create_check_run(
            head_sha, name, external_id, status, self._output(output), actions, details_url, conclusion=conclusion
        )

    def check_run_of(self, head_sha: str, name: str, external_id: str) -> int | None:
        return self.inner.check_run_of(head_sha, name, external_id)

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
        self.inner.update_check_run(
            check_run_id,
            status=status,
            conclusion=conclusion,
            output=self._output(output),
            actions=actions,
            details_url=details_url,
        )

    def create_comment(self, number: int, body: str) -> CommentInfo:
        return self.inner.create_comment(number, self.redactor.redact(body))

    def edit_comment(self, comment_id: int, body: str) -> CommentInfo:
        return self.inner.edit_comment(comment_id, self.redactor.redact(body))

    def list_comments(self, number: int) -> list[CommentInfo]:
        return self.inner.list_comments(number)

    def minimize_comment(self, node_id: str, classifier: Any = "OUTDATED") -> None:
        self.inner.minimize_comment(node_id, classifier)

    def identity(self) -> BotIdentity:
        return self.inner.identity()


class RedactingSideRunGateway(RedactingGateway):
    """`RedactingGateway` plus the tracking issue's calls, so the side-run publisher holds no raw gateway: the
    issue's title and body pass the redactor like every other write; the reads pass through."""

    inner: SideRunGateway

    def __init__(self, inner: SideRunGateway, redactor: Redactor) -> None:
        super().__init__(inner, redactor)

    def create_issue(self, title: str, body: str, labels: Sequence[str]) -> IssueInfo:
        return self.inner.create_issue(self.redactor.redact(title), self.redactor.redact(body), labels)

    def open_issues(self, label: str) -> list[IssueInfo]:
        return self.inner.open_issues(label)

    def ensure_label(self, name: str, color: str, description: str) -> None:
        self.inner.ensure_label(name, color, description)

    def pulls_of_commit(self, sha: str) -> list[PullRef]:
        return self.inner.pulls_of_commit(sha)
