"""kv-parity installed the way users install it, shared by the tests that run it (conftest.py's fixtures).

`KV_PARITY_INSTALLED_VENV` names a venv where `kv-parity-bot` was pip-installed non-editable (.ci/run makes one,
with its dependencies, from a commit of the checkout). Without it, `build_installed` makes one per session: the
working tree (uncommitted changes included) committed into a scratch repository, then
`pip install --no-deps "kv-parity-bot @ git+file://…@<sha>"` into a fresh venv, exactly the workflow's form.
Its dependencies come from the checkout's venv through a path entry (a `.pth` line: that directory's own `.pth`
files, the editable finder among them, are not run), so `bot` and `runners` can only come from the wheel.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALLED_VENV_VARIABLE = "KV_PARITY_INSTALLED_VENV"
DISTRIBUTION = "kv-parity-bot"


@dataclass(frozen=True)
class KvParity:
    """Where `kv-parity` (and the `python` it runs with) is, and what its `--version` says."""

    bin_dir: Path
    version: str
    """`kv-parity --version` without the program name: a report's tool_version when this one made it."""
    installed: bool
    """A non-editable install (a wheel), not the checkout."""
    commit: str | None = None
    """The commit it was built from, when this session made it."""

    @property
    def executable(self) -> Path:
        return self.bin_dir / "kv-parity"

    def site_packages(self) -> Path:
        done = subprocess.run([str(self.bin_dir / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                               "['purelib'])"], capture_output=True, text=True, check=True)
        return Path(done.stdout.strip())


def _run(argv: list[str], cwd: Path | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{argv[:4]} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def version_of(bin_dir: Path) -> str:
    out = _run([str(bin_dir / "kv-parity"), "--version"], cwd=bin_dir).strip()
    assert out.startswith("kv-parity "), out
    return out.removeprefix("kv-parity ")


def provided() -> KvParity | None:
    """The installed venv .ci/run provides, if any."""
    venv = os.environ.get(INSTALLED_VENV_VARIABLE)
    if not venv:
        return None
    bin_dir = Path(venv) / "bin"
    assert (bin_dir / "kv-parity").is_file(), f"${INSTALLED_VENV_VARIABLE}={venv} has no bin/kv-parity"
    return KvParity(bin_dir=bin_dir, version=version_of(bin_dir), installed=True)


def clone_files() -> list[str]:
    """The files a fresh clone of the working tree would hold (tracked and untracked-not-ignored, as .ci/run
    copies them; deleted ones left out), never a bytecode cache: the interpreter writes one beside every module it
    imports (templates/__pycache__ too, templates/ being a package), whatever the ignore rules where it runs."""
    listed = _run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"])
    return [name for name in filter(None, listed.split("\0")) if (ROOT / name).is_file() and not is_bytecode(name)]


def is_bytecode(name: str) -> bool:
    """A compiled module or anything in a `__pycache__` directory: output of an import, never a source file."""
    return "__pycache__" in Path(name).parts or name.endswith((".pyc", ".pyo"))


def snapshot_commit(target: Path) -> str:
    """What a fresh clone of the working tree would hold (`clone_files`), committed as the only commit of a new
    repository at `target`; returns its SHA."""
    target.mkdir(parents=True)
    for name in clone_files():
        source = ROOT / name
        if not source.is_symlink():
            destination = target / name
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(source.read_bytes())
            destination.chmod(source.stat().st_mode & 0o777)
    identity = ["-c", "user.name=kv-parity tests", "-c", "user.email=tests@kv-parity.invalid"]
    _run(["git", "-C", str(target), "init", "-q", "-b", "main"])
    _run(["git", "-C", str(target), "add", "-A"])
    _run(["git", "-C", str(target), *identity, "commit", "-q", "-m", "the working tree under test"])
    return _run(["git", "-C", str(target), "rev-parse", "HEAD"]).strip()


def build_installed(root: Path) -> KvParity:
    """A fresh venv with kv-parity-bot pip-installed from a git commit of the working tree (see the module)."""
    source = root / "source"
    commit = snapshot_commit(source)
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    purelib = Path(_run([str(venv / "bin" / "python"), "-c",
                         "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip())
    (purelib / "kv_parity_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet", "--no-deps",
          f"{DISTRIBUTION} @ git+file://{source}@{commit}"])
    bin_dir = venv / "bin"
    return KvParity(bin_dir=bin_dir, version=version_of(bin_dir), installed=True, commit=commit)


def checkout() -> KvParity:
    """The checkout's own `kv-parity` (the editable install this test process runs)."""
    from runners.build_info import describe

    return KvParity(bin_dir=Path(sys.executable).parent, version=describe(), installed=False)
