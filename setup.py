"""The build hook pyproject.toml cannot express: the wheel records the commit it was built from.

`kv-parity --version` and every report's `tool_version` name that commit (runners/build_info.py). A wheel is
usually built from a git checkout (pip clones `kv-parity-bot @ git+…@<sha>` first), so `git rev-parse HEAD` of
the source is the truth at build time; an editable install writes nothing and reads git at run time instead.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

BUILD_INFO = Path("runners") / "_build_info.json"
"""Where the built package holds the record (runners/build_info.py reads it through importlib.resources)."""


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


class BuildPyWithBuildInfo(build_py):
    """build_py, then `_build_info.json` beside the built `runners` package (never into the source tree)."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        commit = _git("rev-parse", "--verify", "HEAD^{commit}")
        changes = _git("status", "--porcelain", "--untracked-files=no") if commit else None
        record = {"commit": commit, "modified": bool(changes)}
        target = Path(self.build_lib) / BUILD_INFO
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(record) + "\n", encoding="utf-8")

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / BUILD_INFO)]


setup(cmdclass={"build_py": BuildPyWithBuildInfo})
