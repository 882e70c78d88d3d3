"""The Slurm side of a campaign on Slurm: the commands the pipeline speaks (sbatch, scontrol, sacct, squeue,
scancel), each a list argv (never a shell) that sees only what it needs of the environment, what they answer
parsed, and the batch script the bot writes for each job."""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

JOB_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "RUSTUP_HOME", "CARGO_HOME", "PYTHONPATH", "SLURM_CONF")
"""The only variables `sbatch` sees, and so the only ones a job inherits (`--export=ALL` of this environment):
never the service's KV_PARITY_* secrets."""


class SlurmError(RuntimeError):
    """A Slurm command failed or the campaign's Slurm state cannot be used; the message says which and why."""


@dataclass(frozen=True)
class JobInfo:
    state: str
    reason: str = ""
    node: str = ""
    exit_code: str = ""
    time_limit: str = ""


def _fields(line: str) -> dict[str, str]:
    """`scontrol show job -o` as a dict; a token without `=` belongs to the previous value (spaces in it)."""
    values: dict[str, str] = {}
    key = ""
    for token in line.split():
        name, sep, value = token.partition("=")
        if sep and name.replace("/", "").replace(":", "").isalnum():
            key = name
            values[key] = value
        elif key:
            values[key] += " " + token
    return values


class SlurmClient:
    """The Slurm commands the pipeline uses, each a list argv (never a shell), with SLURM_CONF set."""

    def __init__(self, slurm_conf: Path | None = None, environ: Mapping[str, str] | None = None) -> None:
        base = dict(os.environ if environ is None else environ)
        if slurm_conf is not None:
            base["SLURM_CONF"] = str(slurm_conf)
        self.environ = base
        self._accounting: bool | None = None

    def _run(self, argv: list[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(argv, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL,
                                  env=dict(env or self.environ), timeout=60)
        except FileNotFoundError as exc:
            raise SlurmError(f"{argv[0]} not found: install slurm-client (and see script/slurm-cluster)") from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmError(f"{' '.join(argv[:3])} did not answer within 60 s: is slurmctld up?") from exc

    def sbatch(self, options: list[str], script: Path, cwd: Path) -> str:
        """Submit `script`; the job id. `sbatch` gets only JOB_ENV, so that is all `--export=ALL` exports."""
        env = {name: self.environ[name] for name in JOB_ENV if name in self.environ}
        done = self._run(["sbatch", "--parsable", "--export=ALL", f"--chdir={cwd}", *options, str(script)], env)
        if done.returncode != 0:
            raise SlurmError(f"sbatch {script.name} failed: {done.stderr.strip()[-500:]}")
        return done.stdout.strip().split(";")[0]

    def show(self, job_ids: Sequence[str]) -> dict[str, JobInfo]:
        """The controller's record of each of these jobs it still knows (it forgets one MinJobAge after its
        end), from one `scontrol show job -o` for all of them: a poll is one call, however many jobs are live."""
        if not job_ids:
            return {}
        done = self._run(["scontrol", "show", "job", "-o"])
        if done.returncode != 0:
            raise SlurmError(f"scontrol show job failed: {done.stderr.strip()[-500:]}")
        wanted, known = set(job_ids), {}
        for line in done.stdout.splitlines():
            values = _fields(line)
            if values.get("JobId") in wanted:
                node = values.get("NodeList", "")
                known[values["JobId"]] = JobInfo(
                    state=values.get("JobState", "UNKNOWN"), reason=values.get("Reason", ""),
                    node="" if node == "(null)" else node, exit_code=values.get("ExitCode", ""),
                    time_limit=values.get("TimeLimit", ""))
        return known

    def accounting(self) -> bool:
        """Whether the cluster keeps job accounting (slurmdbd): only then does `sacct` know finished jobs."""
        if self._accounting is None:
            done = self._run(["scontrol", "show", "config"])
            line = next((ln for ln in done.stdout.splitlines() if ln.startswith("AccountingStorageType")), "")
            self._accounting = done.returncode == 0 and not line.rstrip().endswith("accounting_storage/none")
        return self._accounting

    def sacct(self, job_id: str) -> JobInfo | None:
        done = self._run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State,ExitCode,NodeList,Timelimit"])
        if done.returncode != 0 or not done.stdout.strip():
            return None
        state, code, node, limit = (done.stdout.splitlines()[0].split("|") + ["", "", "", ""])[:4]
        return JobInfo(state=state.split()[0], node="" if node == "None assigned" else node, exit_code=code,
                       time_limit=limit)

    def pending_order(self) -> list[str]:
        """Pending job ids in the order the scheduler will consider them (priority, then submission)."""
        done = self._run(["squeue", "-h", "-t", "PENDING", "--sort=-p,i", "-o", "%i"])
        return done.stdout.split() if done.returncode == 0 else []

    def live(self, job_ids: Sequence[str]) -> set[str]:
        """Which of these jobs squeue still lists (pending, running or completing)."""
        done = self._run(["squeue", "-h", "--me", "-o", "%i"])
        if done.returncode != 0:
            raise SlurmError(f"squeue failed: {done.stderr.strip()[-500:]}")
        return set(done.stdout.split()) & set(job_ids)

    def scancel(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            done = self._run(["scancel", *job_ids])
            if done.returncode != 0 and "Invalid job id" not in done.stderr:
                raise SlurmError(f"scancel {' '.join(job_ids)} failed: {done.stderr.strip()[-500:]}")


def job_script(campaign_id: str, role: str, argv: list[str], exit_file: Path) -> str:
    """The batch script: run `argv`, then record its exit status where the bot reads it (no accounting
    needed). Every word is quoted; the words are the bot's own paths and ids, nothing from the pull request."""
    command = " ".join(shlex.quote(word) for word in argv)
    exit_path = shlex.quote(str(exit_file))
    return (
        "#!/bin/bash\n"
        f"# kv-parity-bot campaign {campaign_id}, job {role}: written by the bot, never taken from a pull request.\n"
        f"{command}\n"
        "status=$?\n"
        f'printf "%s\\n" "$status" > {exit_path}.tmp && mv -f {exit_path}.tmp {exit_path}\n'
        'exit "$status"\n'
    )
