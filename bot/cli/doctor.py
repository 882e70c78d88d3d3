"""`kv-parity doctor`: is this node fit to measure, for the CPUs a row would pin? (pyperf's `system show`).

Every check reads the kernel's own files under a root (`/sys`, `/proc`; tests pass a fake tree) and says what it
read and what to change. A fact the machine does not expose (a VM without cpufreq) is UNKNOWN with "cannot be
read here: ...", never guessed. The doctor decides nothing about a verdict: the performance gate's own
per-sample interference rules do that; the doctor tells the operator, before the first sample, why a node
would be noisy, and campaigns record it beside each row.

Exit status (`kv-parity doctor`): 0 every check PASS, 1 the worst is WARN or UNKNOWN (measurements may be
noisier than they need be, or a fact could not be read), 2 a FAIL (the node cannot run a row as configured:
the sandbox does not work, a CPU cannot be pinned, or other work owns the CPU) or unusable arguments.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from bot.exit_codes import EXIT_FOR_STATUS, EXIT_USAGE
from runners.exec.placement import parse_cpu_list
from runners.exec.sandbox import add_sandbox_argument
from runners.stages.doctor import render_text, run_doctor

CPU_LIST = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")
MAX_CPU = 8191
"""The kernel's largest CPU number (NR_CPUS is at most 8192); a bigger --cpus is a typo, not a node."""


def doctor_main(argv: Sequence[str]) -> int:
    """`kv-parity doctor`: check this node for the CPUs a row would pin; exit 0 PASS, 1 WARN/UNKNOWN, 2 FAIL."""
    parser = argparse.ArgumentParser(prog="kv-parity doctor", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpus", help="CPUs to check, kernel cpulist syntax (default: the CPU a row would pin)")
    parser.add_argument("--json", help="also write the result (a DoctorReport) to this file")
    add_sandbox_argument(parser)
    args = parser.parse_args(list(argv))
    cpus: list[int] | None = None
    if args.cpus is not None:
        if not CPU_LIST.fullmatch(args.cpus):
            print(f"kv-parity doctor: --cpus {args.cpus!r} is not a CPU list (expected e.g. 2,4-5)", file=sys.stderr)
            return EXIT_USAGE
        highest = max(int(number) for number in re.findall(r"\d+", args.cpus))
        if highest > MAX_CPU:
            print(f"kv-parity doctor: --cpus names cpu {highest}; Linux numbers CPUs 0-{MAX_CPU}", file=sys.stderr)
            return EXIT_USAGE
        cpus = parse_cpu_list(args.cpus)
        if not cpus:
            print(f"kv-parity doctor: --cpus {args.cpus!r} names no CPU (a range runs low-high)", file=sys.stderr)
            return EXIT_USAGE
    report = run_doctor(cpus, sandbox=args.sandbox)
    print(render_text(report))
    if args.json:
        try:
            Path(args.json).write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            print(f"kv-parity doctor: cannot write {args.json}: {exc.strerror}", file=sys.stderr)
            return EXIT_USAGE
    return EXIT_FOR_STATUS[report.status]
