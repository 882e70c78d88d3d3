"""Reading what pull-request code could have written, without letting it choose what the bot opens.

A directory handed to the sandbox is the sandbox's: anything in it may be a symlink to a root-only file, a FIFO
that blocks the reader, or a file grown to fill the disk. The trusted side reads such paths only through these
functions: the last component is opened with `O_NOFOLLOW | O_NONBLOCK`, every parent below the trusted root is
checked not to be a link, the result must be a regular file, and it is read up to a bound. Nothing is ever moved
out of a sandbox directory in place (a rename would carry an attacker's inode into a trusted directory): it is
copied, by content. Writing never goes into a sandbox directory at all.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

DEFAULT_MAX_BYTES = 256 << 20
"""Above any output a harness legitimately writes (a 5,000-request canonical line is a few MB)."""


_CHUNK_LIMIT = 64 << 20
"""Largest single read: a small output is read in one call, a large capture is streamed."""


class UntrustedFileError(RuntimeError):
    """A file the sandbox could have written is not a plain, bounded regular file: the message names it."""


def _check_parents(path: Path, root: Path | None) -> None:
    if root is None:
        return
    root = root.resolve()
    relative = path.relative_to(root) if path.is_absolute() else path
    current = root
    for part in relative.parts[:-1]:
        current = current / part
        if current.is_symlink():
            raise UntrustedFileError(f"{current} is a symbolic link; refusing to read through it")


def _open_regular(path: Path, max_bytes: int, root: Path | None) -> int:
    """A read-only descriptor of `path`, checked to be a regular file (never a link) within the bound."""
    _check_parents(path, root)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as error:
        if error.errno == errno.ELOOP:  # the last component is a symlink
            raise UntrustedFileError(f"{path} is a symbolic link; refusing to follow it") from error
        raise UntrustedFileError(f"{path} cannot be opened: {error.strerror}") from error  # a socket, say
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UntrustedFileError(f"{path} is not a regular file (mode {stat.filemode(info.st_mode)})")
    if info.st_size > max_bytes:
        os.close(fd)
        raise UntrustedFileError(f"{path} is {info.st_size} bytes, over the {max_bytes}-byte bound")
    return fd


def _chunks(fd: int, path: Path, max_bytes: int) -> Iterator[bytes]:
    """The file's content in chunks (the whole file in one read when it fits the first), refusing it once it has
    grown past the bound while being read."""
    remaining = max_bytes + 1
    size = min(os.fstat(fd).st_size + 1, _CHUNK_LIMIT)
    while remaining > 0:
        chunk = os.read(fd, min(remaining, max(size, 1 << 20)))
        if not chunk:
            return
        remaining -= len(chunk)
        if remaining <= 0:
            raise UntrustedFileError(f"{path} grew past the {max_bytes}-byte bound while it was read")
        yield chunk


def read_bytes(path: Path, *, max_bytes: int = DEFAULT_MAX_BYTES, root: Path | None = None) -> bytes:
    """The bytes of `path`, which must be a regular file (never followed if a link) of at most `max_bytes`.

    `root` is the trusted directory `path` lies in (the process's output dir's parent, say): no component
    between it and the file may be a link either."""
    fd = _open_regular(path, max_bytes, root)
    try:
        return b"".join(_chunks(fd, path, max_bytes))
    finally:
        os.close(fd)


def read_text(path: Path, *, max_bytes: int = DEFAULT_MAX_BYTES, root: Path | None = None) -> str:
    """`read_bytes` decoded as UTF-8 (a decoding error is the caller's malformed-output failure)."""
    return read_bytes(path, max_bytes=max_bytes, root=root).decode("utf-8")


def copy_out(source: Path, destination: Path, *, max_bytes: int = DEFAULT_MAX_BYTES,
             root: Path | None = None) -> None:
    """Copy a sandbox-written file into a trusted directory by content, streamed (a profiler's capture may be
    larger than memory should hold); `destination` must not exist yet, and is removed if the source is refused
    half way."""
    fd = _open_regular(source, max_bytes, root)
    try:
        out = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            with os.fdopen(out, "wb") as handle:
                for chunk in _chunks(fd, source, max_bytes):
                    handle.write(chunk)
        except UntrustedFileError:
            destination.unlink()
            raise
    finally:
        os.close(fd)


def symlinks_under(top: Path) -> list[Path]:
    """Every symbolic link at or below `top` (walked without following links): an uploaded artifact holds none."""
    found: list[Path] = [top] if top.is_symlink() else []
    if found:
        return found
    for current, dirs, files in os.walk(top, followlinks=False):
        for name in (*dirs, *files):
            candidate = Path(current) / name
            if candidate.is_symlink():
                found.append(candidate)
    return sorted(found)


def refuse_symlinks(top: Path) -> None:
    """Raise naming the links when `top`, a directory about to be uploaded or merged, holds any:
    upload-artifact and copytree follow links, so one planted link would carry whatever it points at."""
    links = symlinks_under(top)
    if links:
        shown = ", ".join(repr(str(link)) for link in links[:10])
        more = f" (+{len(links) - 10} more)" if len(links) > 10 else ""
        raise UntrustedFileError(f"{top} holds {len(links)} symbolic link(s), refusing to hand it on: {shown}{more}")


def main(argv: list[str] | None = None) -> int:
    """`python -m runners.exec.untrusted DIR...`: the workflow's check before each upload-artifact. Exit 1 naming
    every link found (names printed escaped, never as raw text a runner could read as a command), 2 for a
    directory that does not exist, 0 when none holds a link."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m runners.exec.untrusted", description=main.__doc__)
    parser.add_argument("directories", nargs="+", type=Path, help="directories about to be uploaded")
    args = parser.parse_args(argv)
    code = 0
    for top in args.directories:
        if not top.is_dir() or top.is_symlink():
            print(f"refusing to upload {str(top)!r}: not a directory", file=sys.stderr)
            code = max(code, 2)
            continue
        try:
            refuse_symlinks(top)
        except UntrustedFileError as exc:
            print(f"refusing to upload: {exc}", file=sys.stderr)
            code = max(code, 1)
    return code


if __name__ == "__main__":
    sys.exit(main())
