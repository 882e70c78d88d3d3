"""Which kv-parity produced a report: the version and the commit it was built from.

A wheel carries `runners/_build_info.json`, written by setup.py's build hook from `git rev-parse HEAD` of the
source it was built from (pip clones `kv-parity-bot @ git+…@<sha>` before building, so that is the pinned
commit). An editable install or a bare checkout has no such file and is still being edited, so the commit is
read from git at run time, once per process. `kv-parity --version` prints `describe()`, and every report's
`tool_version` holds the same text.
"""

from __future__ import annotations

import subprocess
from functools import cache
from importlib.resources import files
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from runners import __version__

BUILD_INFO_FILE = "_build_info.json"


class BuildInfo(BaseModel):
    """What the build hook records (setup.py), or what git says of an editable checkout."""

    model_config = ConfigDict(extra="forbid")

    commit: str | None = Field(pattern=r"^[0-9a-f]{40}$")
    """None when the source was not a git checkout (e.g. a wheel built from an unpacked sdist)."""
    modified: bool
    """Tracked files differed from the commit when it was built (or, editable, right now)."""
    editable: bool = False


def _git(source: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@cache
def build_info() -> BuildInfo:
    package = files("runners")
    recorded = package / BUILD_INFO_FILE
    if recorded.is_file():
        return BuildInfo.model_validate_json(recorded.read_text(encoding="utf-8"))
    source = Path(str(package))
    commit = _git(source, "rev-parse", "--verify", "HEAD^{commit}")
    changes = _git(source, "status", "--porcelain", "--untracked-files=no") if commit else None
    return BuildInfo(commit=commit, modified=bool(changes), editable=True)


def describe() -> str:
    """`0.1.0 (commit <40 hex>)`, with what else is true of it: uncommitted changes, an editable checkout, or
    why the commit is unknown."""
    info = build_info()
    if info.commit is None:
        where = "source is not a git checkout" if info.editable else "built outside a git checkout"
        return f"{__version__} (commit unknown: {where})"
    notes = [note for note, applies in (("with uncommitted changes", info.modified),
                                        ("editable checkout", info.editable)) if applies]
    return f"{__version__} (commit {info.commit}{', ' + ', '.join(notes) if notes else ''})"
