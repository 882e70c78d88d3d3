"""The trusted side's reads of sandbox-written paths: links, FIFOs, oversize files and linked parents refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from runners.exec import untrusted


def test_a_regular_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "out.jsonl").write_bytes(b'{"a":1}\n')
    assert untrusted.read_text(tmp_path / "out.jsonl", root=tmp_path) == '{"a":1}\n'


def test_a_symlink_is_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("root only")
    (tmp_path / "out").symlink_to(secret)
    with pytest.raises(untrusted.UntrustedFileError, match="symbolic link"):
        untrusted.read_bytes(tmp_path / "out")


def test_a_linked_parent_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "out").write_text("planted")
    sandbox_dir = tmp_path / "sandbox"
    sandbox_dir.mkdir()
    (sandbox_dir / "sub").symlink_to(elsewhere)
    with pytest.raises(untrusted.UntrustedFileError, match="sub is a symbolic link"):
        untrusted.read_bytes(sandbox_dir / "sub" / "out", root=sandbox_dir)


def test_a_fifo_does_not_block_the_reader(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "out")
    with pytest.raises(untrusted.UntrustedFileError, match="not a regular file"):
        untrusted.read_bytes(tmp_path / "out")


def test_an_oversize_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").write_bytes(b"x" * 101)
    with pytest.raises(untrusted.UntrustedFileError, match="over the 100-byte bound"):
        untrusted.read_bytes(tmp_path / "out", max_bytes=100)


def test_copy_out_copies_content_and_never_overwrites(tmp_path: Path) -> None:
    (tmp_path / "src").write_text("evidence")
    untrusted.copy_out(tmp_path / "src", tmp_path / "dst")
    assert (tmp_path / "dst").read_text() == "evidence"
    assert not (tmp_path / "dst").is_symlink()
    with pytest.raises(FileExistsError):
        untrusted.copy_out(tmp_path / "src", tmp_path / "dst")


def test_symlinks_under_finds_every_link(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "link").symlink_to("/etc/passwd")
    (tmp_path / "dirlink").symlink_to(tmp_path / "a")
    (tmp_path / "plain").write_text("x")
    assert untrusted.symlinks_under(tmp_path) == [tmp_path / "a" / "link", tmp_path / "dirlink"]


def test_a_socket_is_refused_not_raised_raw(tmp_path: Path) -> None:
    import socket

    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "out"))
        with pytest.raises(untrusted.UntrustedFileError, match="out cannot be opened"):
            untrusted.read_bytes(tmp_path / "out")
