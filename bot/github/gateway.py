"""The bot's only door to GitHub: one repository, PyGithub underneath, one retry policy on top.

Keeping every call here means retry/backoff, error translation and logging are decided once, and
the rest of the bot deals in small frozen models (`bot.github.models`) instead of live PyGithub objects
(which fetch, and can fail, lazily on attribute access). GitHubGateway is composed by concern on one
transport (`bot.github.transport`: clients, the retry policy of `bot.github.retry`, identity): repository
reads, check runs, issues and comments, and Actions calls, each in a module of its own.
"""

from __future__ import annotations

from bot.github.actions import ActionsCalls
from bot.github.checks import CheckRuns
from bot.github.issues import IssuesAndComments
from bot.github.reads import RepositoryReads


class GitHubGateway(RepositoryReads, CheckRuns, IssuesAndComments, ActionsCalls):
    """The bot's only door to GitHub, for one repository: every call under the transport's retry policy."""
