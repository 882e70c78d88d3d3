"""Files the code reads at run time from its own distribution: templates, profiles, the demo harness.

Always through the import system (`importlib.util.find_spec`, which locates a package without running it), never
a path built from this module's location, so an installed wheel (pyproject.toml maps templates/ and
tests/fixtures/ into it as package data) and an editable checkout find the same files. tests/test_installed.py
checks that every one of them is in the wheel.
"""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path


def package_dir(package: str, *parts: str) -> Path:
    """A directory shipped in `package`, as a path on disk: Jinja2's loader, copytree and glob need one. pip
    installs wheels unpacked, so this is a plain directory; anything else is named as a broken install."""
    where = "/".join((package, *parts))
    advice = ("reinstall kv-parity-bot: script/bootstrap in a checkout (an editable install made before "
              "pyproject.toml mapped it), or pip install 'kv-parity-bot @ git+…@<sha>'")
    # Found, never imported: a data package's __init__ is not run, so no bytecode of it is written or read.
    spec = find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise FileNotFoundError(f"{where} is not installed: {advice}")
    found = Path(locations[0]).joinpath(*parts)
    if not found.is_dir():
        raise FileNotFoundError(f"{where} is not installed as a directory: {advice}")
    return found
