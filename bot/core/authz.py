"""Who may ask the bot for work: the permission of the sender (who labelled, commented or clicked).

Never the pull request's author: an author without write access must not be able to run code on the
bot's machines by opening a pull request, and a maintainer's label on someone else's pull request is what
authorises it. Fork approvals pin one head SHA; they live in the store (`Store.approve_head`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

PERMISSION_ORDER: tuple[str, ...] = ("none", "read", "triage", "write", "maintain", "admin")


def permission_rank(permission: str) -> int:
    """Position in none < read < triage < write < maintain < admin; anything unknown counts as none."""
    try:
        return PERMISSION_ORDER.index(permission.lower())
    except ValueError:
        return 0


def is_sufficient(permission: str, minimum: str) -> bool:
    return permission_rank(permission) >= permission_rank(minimum)


class PermissionSource(Protocol):
    def permission(self, login: str) -> str: ...


def cached_lookup(source: PermissionSource) -> Callable[[str], str]:
    """A permission lookup that asks the API at most once per login (one lookup serves one event)."""
    seen: dict[str, str] = {}

    def lookup(login: str) -> str:
        if login not in seen:
            seen[login] = source.permission(login)
        return seen[login]

    return lookup
