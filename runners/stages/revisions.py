"""Stage 1: pin immutable revisions and give each its own isolated `git worktree`.

The user's checkout is never touched: no checkout, no stash, no branch switch. Worktrees are detached at the
pinned SHA and removed afterwards, so "return each checkout to its original branch" holds by construction.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from runners.schema.config import (
    DEFAULT_CONFIG_PATH,
    CampaignConfig,
    ConfigError,
    load_config,
    load_profile,
    parse_config,
)


class RevisionError(RuntimeError):
    """A revision that cannot be pinned, checked out or patched; the message says which and why."""


GIT = ("git", "-c", "core.hooksPath=/dev/null")
"""Every git command of the bot: no hook a revision (or a build that reached a `.git`) planted ever runs."""


def git(repo: Path, *args: str) -> str:
    """Run git with an argv list (never a shell) and return stdout; failures carry git's own message."""
    completed = subprocess.run(
        [*GIT, "-C", str(repo), *args], capture_output=True, text=True, check=False
    )
    if completed.returncode != 0:
        raise RevisionError(f"git {' '.join(args)} failed: {completed.stderr.strip() or completed.stdout.strip()}")
    return completed.stdout.strip()


def shared_clone(source: Path, dest: Path) -> None:
    """A clone of its own (objects borrowed read-only from `source` through alternates, its own `.git` without
    template hooks and with hooks pointing nowhere), so nothing done in it reaches `source`; a leftover `dest`
    from an earlier attempt is removed first."""
    if dest.exists():
        shutil.rmtree(dest)
    argv = [*GIT, "clone", "--quiet", "--shared", "--no-checkout", "--template=", "--config", GIT[2], str(source),
            str(dest)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RevisionError(f"cannot clone {source} into {dest}: {done.stderr.strip()[-500:]}")


def show_file(repo: Path, sha: str, path: str) -> bytes:
    """A file's exact bytes at a revision (trusted inputs such as config and patches come from the base)."""
    completed = subprocess.run([*GIT, "-C", str(repo), "show", f"{sha}:{path}"], capture_output=True, check=False)
    if completed.returncode != 0:
        raise RevisionError(f"{path} not found at {sha[:12]}: {completed.stderr.decode(errors='replace').strip()}")
    return completed.stdout


def revision_file(repo: Path, sha: str, path: str) -> bytes | None:
    """A regular file's bytes at `sha` from git objects, never through a checkout; None when the revision has no
    regular file there (absent, a directory, or a committed symlink, which is never followed: a `.cargo` link to
    a root-only file or an exceptions file linked to a host TOML reads as absent)."""
    listed = subprocess.run([*GIT, "-C", str(repo), "ls-tree", "-z", sha, "--", path], capture_output=True,
                            check=False)
    if listed.returncode != 0:
        raise RevisionError(f"git ls-tree {sha[:12]} {path} failed: {listed.stderr.decode(errors='replace').strip()}")
    entry = listed.stdout.split(b"\0", 1)[0]
    if not entry:
        return None
    meta, _, name = entry.partition(b"\t")
    mode, kind, obj = meta.decode().split(" ")
    if kind != "blob" or mode not in ("100644", "100755") or name.decode(errors="replace") != path:
        return None
    blob = subprocess.run([*GIT, "-C", str(repo), "cat-file", "blob", obj], capture_output=True, check=False)
    if blob.returncode != 0:
        raise RevisionError(f"git cat-file {obj} ({path}) failed: {blob.stderr.decode(errors='replace').strip()}")
    return blob.stdout


def git_dir_of(tree: Path) -> Path:
    """The repository's own git directory behind a worktree, resolved before pull-request code touches the tree,
    so later reads go to git's objects and never through a `.git` pointer inside it."""
    return Path(git(tree, "rev-parse", "--path-format=absolute", "--git-common-dir"))


def resolve_sha(repo: Path, rev: str) -> str:
    """Pin a ref or SHA to the full commit SHA it names now; moving branches are never compared."""
    if rev.startswith("-"):
        raise RevisionError(f"revision {rev!r} looks like an option")
    try:
        return git(repo, "rev-parse", "--verify", "--end-of-options", f"{rev}^{{commit}}")
    except RevisionError as exc:
        raise RevisionError(f"cannot resolve revision {rev!r} in {repo}: {exc}") from exc


def relationship(repo: Path, base_sha: str, head_sha: str) -> tuple[str, str | None]:
    """Stage 1.1: how the baseline relates to the candidate, plus their merge base."""
    if base_sha == head_sha:
        return "identical", base_sha
    merge_base = git(repo, "merge-base", base_sha, head_sha) or None
    if merge_base == base_sha:
        return "ancestor", merge_base
    if merge_base == head_sha:
        return "descendant", merge_base
    return ("diverged" if merge_base else "unrelated"), merge_base


@contextmanager
def worktree(repo: Path, sha: str, path: Path) -> Iterator[Path]:
    """A detached worktree at exactly `sha`, removed (with its build target) when the block ends."""
    path = path.resolve()
    if path.exists():
        raise RevisionError(f"worktree path {path} already exists; refusing to reuse a checkout")
    git(repo, "worktree", "add", "--detach", str(path), sha)
    try:
        actual = worktree_head(repo, path)
        if actual != sha:
            raise RevisionError(f"worktree {path} is at {actual}, expected {sha}")
        yield path
    finally:
        # Deleted by hand, then pruned: git never interprets a `.git` pointer a build could have rewritten.
        shutil.rmtree(path, ignore_errors=True)
        git(repo, "worktree", "prune")


def worktree_head(repo: Path, path: Path) -> str:
    """The SHA a worktree's HEAD names, read from the repository's own records, never from inside the tree."""
    current: str | None = None
    for line in git(repo, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            current = line.split(" ", 1)[1]
        elif line.startswith("HEAD ") and current is not None and Path(current).resolve() == path.resolve():
            return line.split(" ", 1)[1]
    raise RevisionError(f"{path} is not a worktree of {repo}")


def apply_patch(tree: Path, patch: Path, purpose: str = "determinism patch") -> str:
    """Apply a trusted patch (Stage 1.3's determinism patch, or the harness patch) to one worktree, the same
    way for both revisions; returns its SHA-256 for the record."""
    try:
        data = patch.read_bytes()
    except OSError as exc:
        raise RevisionError(f"cannot read {purpose} {patch}: {exc.strerror}") from exc
    try:
        git(tree, "apply", "--check", str(patch))
    except RevisionError as exc:
        raise RevisionError(f"{purpose} {patch} does not apply to {tree}: {exc}") from exc
    git(tree, "apply", str(patch))
    return hashlib.sha256(data).hexdigest()


def resolve_config(repo: Path, config: str | None, profile: str | None,
                   config_ref: str) -> tuple[CampaignConfig, str]:
    """An explicit file or profile, else the config committed at `config_ref` (the base), never the head's."""
    if config:
        return load_config(Path(config)), config
    if profile:
        return load_profile(profile), f"profile:{profile}"
    sha = resolve_sha(repo, config_ref)
    try:
        text = show_file(repo, sha, DEFAULT_CONFIG_PATH).decode("utf-8")
    except (RevisionError, UnicodeDecodeError) as exc:
        raise ConfigError(f"no readable campaign config at {DEFAULT_CONFIG_PATH} in {sha[:12]}: {exc}") from exc
    source = f"{DEFAULT_CONFIG_PATH}@{sha}"
    return parse_config(text, source), source
