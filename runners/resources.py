"""Files the code reads at run time from its own distribution: templates, profiles, the demo harness.

Always through `importlib.resources`, never a path built from this module's location, so an installed wheel
(pyproject.toml maps templates/ and tests/fixtures/ into it as package data) and an editable checkout find
the same files. tests/test_installed.py checks that every one of them is in the wheel.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def package_dir(package: str, *parts: str) -> Path:
    """A directory shipped in `package`, as a path on disk: Jinja2's loader, copytree and glob need one. pip
    installs wheels unpacked, so this is a plain directory; anything else is named as a broken install."""
    where = "/".join((package, *parts))
    advice = ("reinstall kv-parity-bot: script/bootstrap in a checkout (an editable install made before "
              "pyproject.toml mapped it), or pip install 'kv-parity-bot @ git+…@<sha>'")
    try:
        found = files(package).joinpath(*parts)
    except ModuleNotFoundError as exc:
        raise FileNotFoundError(f"{where} is not installed: {advice}") from exc
    if not isinstance(found, Path) or not found.is_dir():
        raise FileNotFoundError(f"{where} is not installed as a directory: {advice}")
    return found
