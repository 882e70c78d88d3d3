"""Just enough of a GitHub Actions runner to run kv-parity-campaign.yml's jobs for real on this machine.

The workflow's own `run:` scripts execute with bash as the runner would (`bash -e`, a fresh $GITHUB_OUTPUT per
step, $RUNNER_TEMP emptied per job), `${{ }}` expressions are evaluated for the handful of contexts the
workflow uses, and the actions it pins are stood in for by what they do here: checkout fetches exactly the
requested commit (depth 1) from the origin repository, upload/download-artifact copy directories through a
per-run artifact store with ids and immutable names, setup-python and the pip install are no-ops (kv-parity
is already on PATH from this checkout). What this proves is that the jobs, in their order and with their
inputs, outputs and artifacts, drive the real `kv-parity` CLI to a report; not how GitHub schedules them.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
IDENTIFIER = re.compile(r"(?<![\w'.-])([A-Za-z_][\w-]*(?:\.[\w-]+)+)")
PROJECTION = re.compile(r"(?<![\w'.-])([A-Za-z_][\w-]*(?:\.[\w-]+)+)\.\*\.([\w-]+)")
"""`github.event.pull_request.labels.*.name`: the named property of every element (GitHub's object filter)."""


def _contains(search: Any, item: Any) -> bool:
    """GitHub's `contains`: an element of an array, or a substring of a string, ignoring case for strings."""
    if isinstance(search, list):
        return any(str(element).lower() == str(item).lower() for element in search)
    return str(item).lower() in str(search).lower()


@dataclass
class Job:
    name: str
    outputs: dict[str, str]
    result: str
    step_outputs: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass
class LocalRun:
    workflow: Path
    origin: Path
    root: Path
    inputs: dict[str, str]
    variables: dict[str, str]
    run_id: str = "4242"
    token: str = "ghs_local_run_token"
    """What `${{ github.token }}` evaluates to (register it with the GitHub stand-in to let publish through)."""
    api_url: str = "http://127.0.0.1:9"
    """$GITHUB_API_URL of every step: the GitHub stand-in, or a port nothing listens on."""
    bin_dir: Path = field(default_factory=lambda: Path(sys.executable).parent)
    """First on every step's PATH: where `kv-parity` and `python` are (an installed venv's, or this checkout's)."""
    event_name: str = "workflow_dispatch"
    """`github.event_name` and $GITHUB_EVENT_NAME (the trigger workflow acts on the event it was started by)."""
    event: dict[str, Any] = field(default_factory=dict)
    """`github.event`, also written to $GITHUB_EVENT_PATH."""
    jobs: dict[str, Job] = field(default_factory=dict)
    artifacts: dict[str, int] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------ expressions

    def _lookup(self, path: str, scope: dict[str, Any]) -> Any:
        head, *rest = path.split(".")
        value: Any = scope.get(head)
        for part in rest:
            value = value.get(part, "") if isinstance(value, dict) else ""
        return "" if value is None else value

    def evaluate(self, expression: str, scope: dict[str, Any]) -> Any:
        """GitHub's expression subset the workflows use: context paths, object filters (`labels.*.name`), ||, &&,
        ==, !=, !, fromJSON, contains, literals."""
        text = expression.replace("!cancelled()", "True").replace("||", " or ").replace("&&", " and ")
        text = re.sub(r"!(?!=)", " not ", text).replace("fromJSON(", "_json(").replace("contains(", "_contains(")
        text = PROJECTION.sub(lambda m: f"_each({m.group(1)!r}, {m.group(2)!r})", text)
        text = IDENTIFIER.sub(lambda m: f"_get({m.group(1)!r})", text)

        def each(path: str, key: str) -> list[Any]:
            found = self._lookup(path, scope)
            return [element.get(key, "") for element in found] if isinstance(found, list) else []

        names = {"_get": lambda p: self._lookup(p, scope), "_json": json.loads, "True": True, "_each": each,
                 "_contains": _contains}
        value = eval(text, {"__builtins__": {}}, names)  # noqa: S307 - our own workflow file, in a test
        return value

    def substitute(self, value: Any, scope: dict[str, Any]) -> Any:
        if isinstance(value, str):
            whole = EXPRESSION.fullmatch(value.strip())
            if whole:
                return self.evaluate(whole.group(1), scope)
            return EXPRESSION.sub(lambda m: str(self.evaluate(m.group(1), scope)), value)
        if isinstance(value, dict):
            return {key: self.substitute(item, scope) for key, item in value.items()}
        if isinstance(value, list):
            return [self.substitute(item, scope) for item in value]
        return value

    # ------------------------------------------------------------------ actions

    def _checkout(self, options: dict[str, Any], workspace: Path) -> None:
        target = workspace / options["path"]
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        depth = int(options.get("fetch-depth", 1))
        branches = ["+refs/heads/*:refs/remotes/origin/*"] if depth == 0 else []
        steps = (
            ["init", "--quiet"],
            ["remote", "add", "origin", f"file://{self.origin}"],
            ["fetch", "--quiet", *(["--depth", str(depth)] if depth else []), "origin", options["ref"], *branches],
            ["checkout", "--quiet", "--detach", options["ref"]],
        )
        for argv in steps:
            subprocess.run(["git", "-C", str(target), *argv], check=True, capture_output=True)

    def _upload(self, options: dict[str, Any]) -> dict[str, str]:
        name = options["name"]
        if name in self.artifacts:
            raise AssertionError(f"artifact {name!r} uploaded twice (upload-artifact v4 refuses a second upload)")
        artifact_id = len(self.artifacts) + 1
        source = Path(options["path"])
        if not source.is_dir() or not any(source.iterdir()):
            raise AssertionError(f"upload of {name!r}: {source} is empty (if-no-files-found: error)")
        shutil.copytree(source, self.root / "artifacts" / str(artifact_id))
        self.artifacts[name] = artifact_id
        return {"artifact-id": str(artifact_id)}

    def _download(self, options: dict[str, Any]) -> None:
        target = Path(options["path"])
        if "artifact-ids" in options:
            shutil.copytree(self.root / "artifacts" / str(options["artifact-ids"]), target, dirs_exist_ok=True)
        elif "name" in options:
            shutil.copytree(self.root / "artifacts" / str(self.artifacts[options["name"]]), target,
                            dirs_exist_ok=True)
        else:
            for name, artifact_id in self.artifacts.items():
                if fnmatch.fnmatchcase(name, options["pattern"]):
                    shutil.copytree(self.root / "artifacts" / str(artifact_id), target / name)

    # ------------------------------------------------------------------ jobs

    def run_job(self, name: str, job: dict[str, Any], matrix: dict[str, Any] | None = None) -> Job:
        base_scope: dict[str, Any] = {
            "inputs": self.inputs,
            "vars": self.variables,
            "github": {"run_id": self.run_id, "token": self.token, "repository": "acme/widgets",
                       "event_name": self.event_name, "event": self.event},
            "needs": {n: {"outputs": j.outputs, "result": j.result} for n, j in self.jobs.items()},
            "matrix": matrix or {},
        }
        label = name if matrix is None else f"{name} ({matrix.get('row')})"
        workspace = self.root / "runner" / "work"
        temp = self.root / "runner" / ("temp-" + re.sub(r"[^\w-]", "_", label))
        temp.mkdir(parents=True)  # empty at the job's start, as the runner's; kept afterwards for inspection
        workspace.mkdir(parents=True, exist_ok=True)
        base_scope["runner"] = {"temp": str(temp)}
        env = {**self.substitute(self.workflow_env, base_scope), **self.substitute(job.get("env", {}), base_scope)}
        record = Job(label, {}, "success")
        for index, step in enumerate(job.get("steps", [])):
            # A step that failed ends the replay (`_run` raises), so every recorded step's outcome is success; one
            # skipped by its `if` is not recorded, and its `outcome` reads as "" (GitHub's "skipped" is no match).
            steps = {k: {"outputs": v, "outcome": "success"} for k, v in record.step_outputs.items()}
            scope = {**base_scope, "env": env, "steps": steps}
            if "if" in step and not self.substitute("${{ " + step["if"] + " }}", scope):
                continue
            step_env = {**env, **self.substitute(step.get("env", {}), scope)}
            uses = str(step.get("uses", ""))
            options = self.substitute(step.get("with", {}), scope)
            outputs: dict[str, str] = {}
            if uses.startswith("actions/checkout@"):
                self._checkout(options, workspace)
            elif uses.startswith("actions/upload-artifact@"):
                outputs = self._upload({**options, "path": str(workspace / options["path"])})
            elif uses.startswith("actions/download-artifact@"):
                self._download({**options, "path": str(workspace / options["path"])})
            elif uses.startswith("actions/setup-python@"):
                pass
            elif "pip install" in step.get("run", ""):
                self.log.append(f"{label}: skipped `{step['run'].strip()}` (kv-parity is on PATH: {self.bin_dir})")
            else:
                outputs = self._run(label, step["run"], step_env, workspace, temp, index)
            record.step_outputs[step.get("id", f"#{index}")] = outputs
        scope = {**base_scope, "steps": {k: {"outputs": v} for k, v in record.step_outputs.items()}}
        record.outputs = {k: str(v) for k, v in self.substitute(job.get("outputs", {}), scope).items()}
        return record

    def _run(self, label: str, script: str, env: dict[str, str], workspace: Path, temp: Path,
             index: int) -> dict[str, str]:
        output_file = temp / f"_github_output_{index}"
        output_file.touch()
        event_file = self.root / "event.json"
        event_file.write_text(json.dumps(self.event), encoding="utf-8")
        environ = {
            "PATH": os.pathsep.join([str(self.bin_dir), os.environ.get("PATH", "")]),
            "HOME": os.environ.get("HOME", "/root"),
            "RUNNER_TEMP": str(temp),
            "GITHUB_WORKSPACE": str(workspace),
            "GITHUB_OUTPUT": str(output_file),
            "GITHUB_REPOSITORY": "acme/widgets",
            "GITHUB_RUN_ID": self.run_id,
            "GITHUB_API_URL": self.api_url,
            "GITHUB_ACTIONS": "true",
            "GITHUB_EVENT_NAME": self.event_name,
            "GITHUB_EVENT_PATH": str(event_file),
            **{k: str(v) for k, v in env.items()},
        }
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], env=environ,
                              cwd=workspace, capture_output=True, text=True, check=False, timeout=1800)
        self.log.append(f"{label}$ {script.strip()}\n{done.stdout}{done.stderr}")
        if done.returncode != 0:
            raise StepFailed(label, script, done.returncode, done.stdout + done.stderr)
        outputs: dict[str, str] = {}
        for line in output_file.read_text().splitlines():
            if "=" in line:
                key, value = line.split("=", 1)
                outputs[key] = value
        return outputs

    @property
    def workflow_env(self) -> dict[str, Any]:
        env: dict[str, Any] = self.definition.get("env", {})
        return env

    @property
    def definition(self) -> dict[str, Any]:
        data: dict[str, Any] = yaml.safe_load(self.workflow.read_text(encoding="utf-8"))
        return data

    def run(self) -> dict[str, Job]:
        """Every job in dependency order; a matrix job once per matrix entry (named after its row)."""
        jobs: dict[str, dict[str, Any]] = self.definition["jobs"]
        pending = dict(jobs)
        while pending:
            ready = [n for n, j in pending.items() if set(_needs(j)) <= set(self.jobs)]
            assert ready, f"jobs that can never start: {sorted(pending)}"
            for name in ready:
                job = pending.pop(name)
                scope = {  # a job's `if` sees the contexts GitHub gives it: github, inputs, vars, needs
                    "inputs": self.inputs,
                    "vars": self.variables,
                    "github": {"run_id": self.run_id, "repository": "acme/widgets", "event_name": self.event_name,
                               "event": self.event},
                    "needs": {n: {"outputs": j.outputs, "result": j.result} for n, j in self.jobs.items()},
                }
                if "if" in job and not self.substitute("${{ " + job["if"].removeprefix("${{").removesuffix(
                        "}}").strip() + " }}", scope):
                    self.jobs[name] = Job(name, {}, "skipped")
                    continue
                strategy = job.get("strategy", {})
                if "matrix" in strategy:
                    matrix = self.substitute(strategy["matrix"], scope)
                    for entry in matrix["include"]:
                        self.run_job(name, job, entry)
                    self.jobs[name] = Job(name, {}, "success")
                else:
                    self.jobs[name] = self.run_job(name, job)
        return self.jobs


class StepFailed(AssertionError):
    def __init__(self, job: str, script: str, code: int, output: str) -> None:
        super().__init__(f"job {job}: `{script.strip()}` exited {code}:\n{output[-4000:]}")


def _needs(job: dict[str, Any]) -> list[str]:
    needs = job.get("needs", [])
    return [needs] if isinstance(needs, str) else list(needs)
