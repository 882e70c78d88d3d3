"""Every exit status `kv-parity` returns, defined once: the contract with whoever runs it (a person, a workflow
step, a Slurm job script, the service's local backend). Below both the command line that returns them (`bot.cli`)
and the backend that reads one (`bot.dispatch.local`). Never 0 on a failure."""

from __future__ import annotations

EXIT_OK = 0
EXIT_REFUSED = 1
"""Evidence that must not be used or handed on: a checksum mismatch, row results that do not belong together, an
artifact directory holding a symbolic link."""
EXIT_GITHUB = 1
"""GitHub refused a call (`publish`, `event`, `track`)."""
EXIT_DISAGREES = 1
"""`verify`: the report disagrees with its recomputation."""
EXIT_NOTHING_FOUND = 1
"""`history`: nothing recorded matches."""
EXIT_USAGE = 2
"""Unusable arguments, config, settings or input: nothing was run (a campaign leaves no report)."""
EXIT_NOT_DISPATCHED = 3
"""`publish`: the report does not belong to the dispatched campaign or to the pull request's head, so nothing was
published and maintainers must look (a build script of the pull request may have rewritten it)."""

EXIT_FOR_CONCLUSION = {"success": 0, "failure": 1, "action_required": 3, "neutral": 4}
"""A campaign's exit status by the check conclusion it reached (`campaign`, `profile`, `demo`), keyed by the
`CheckConclusion` values (string enums), so `kv-parity --help` does not load the report schema to know them."""
EXIT_UNDECIDED = {"blocked": 3, "inconclusive": 4}
"""No decision: the exit code says why, whatever check conclusion the repository chose for it."""
EXIT_FOR_STATUS = {"PASS": 0, "UNKNOWN": 1, "WARN": 1, "FAIL": 2}
"""`doctor`: its worst check, keyed by the `DoctorStatus` values."""
