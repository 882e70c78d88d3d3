"""What finding `/parity` commands with a CommonMark tokenizer costs (issue 34 item 4), against the line
classifier it replaced (`bot/core/commands.py` at commit 8f2d4c9: regular expressions and tag counting).

Two comments: a typical review comment (a few paragraphs, a list, a code block, a quote, the command: about
350 characters) and a large one (logs folded in `<details>` as code blocks, and prose, up to GitHub's
65,536-character limit).
Each parser runs on each comment in this process, alternately, `--repeat` rounds of `--calls` calls; the
figure is the median CPU time per call and the ratio new / old. The first parse of a fresh process (markdown-it
imported, its parser built) is measured apart: the service pays it once, Actions-only mode (`kv-parity event`,
one process per event) on every comment event.

    .venv/bin/python benchmarks/bench_commands.py [--repeat 7] [--calls 200]

Figures go in benchmarks/README.md, never in assertions.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot.core.commands import parse_commands  # noqa: E402

OLD_COMMIT = "8f2d4c9"
"""The last commit with the line classifier."""
GITHUB_COMMENT_LIMIT = 65_536

TYPICAL = """Thanks, this looks right to me. Two things before it goes in:

- the `warmup` loop still allocates per request (see `replay.rs`, line 120);
- please add the new row to the config, as in:

```toml
[[rows]]
id = "vllm-disagg"
```

> Could we also run the disagg rows?

Yes, asking for them now.

/parity rerun rows=vllm-agg,vllm-disagg
"""


def _large() -> str:
    log = "\n".join(f"[{i:05d}] replay worker {i % 8} finished request {i} in {i % 97}.{i % 10} ms" for i in range(40))
    block = (f"<details><summary>run log</summary>\n\n```\n{log}\n```\n\n</details>\n\n"
             "The numbers above are from `kv-parity campaign`, with **two** rows and *one* warmup.\n\n")
    body = ""
    while len(body) + len(block) < GITHUB_COMMENT_LIMIT - 200:
        body += block
    return body + "/parity rerun\n"


def _old_parser() -> Callable[[str], list[object]]:
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{OLD_COMMIT}:bot/core/commands.py"],
                            capture_output=True, text=True, check=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "old_commands.py"
        path.write_text(source, encoding="utf-8")
        spec = importlib.util.spec_from_file_location("old_commands", path)
        assert spec is not None and spec.loader is not None
        module: ModuleType = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
        spec.loader.exec_module(module)
    parse: Callable[[str], list[object]] = module.parse_commands
    return parse


def _per_call(parse: Callable[[str], list[object]], body: str, calls: int) -> float:
    """CPU seconds per call (this process's own: on a node shared with other work the wall clock would measure
    the share of a core the parser got)."""
    started = time.process_time()
    for _ in range(calls):
        parse(body)
    return (time.process_time() - started) / calls


COLD = """
import time
from bot.core.commands import parse_commands
started = time.process_time()
parse_commands("/parity rerun")
print(time.process_time() - started)
"""
"""The first parse of a fresh process: markdown-it imported and its parser built (the module itself is already
imported, as the decision core imports it)."""


def _cold(repeat: int) -> float:
    times = []
    for _ in range(repeat):
        done = subprocess.run([sys.executable, "-c", COLD], capture_output=True, text=True, check=True, cwd=ROOT)
        times.append(float(done.stdout))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    old = _old_parser()
    new: Callable[[str], list[object]] = parse_commands  # type: ignore[assignment]
    for name, body, calls in (("typical", TYPICAL, args.calls), ("large", _large(), max(args.calls // 50, 2))):
        assert [type(found).__name__ for found in new(body)] == ["ParsedCommand"], name
        timings: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(args.repeat):
            for label, parse in (("old", old), ("new", new)):
                timings[label].append(_per_call(parse, body, calls))
        medians = {label: statistics.median(values) for label, values in timings.items()}
        print(f"{name:8} {len(body):6d} chars: old {medians['old'] * 1e6:9.1f} us, new {medians['new'] * 1e6:9.1f} us,"
              f" new/old x{medians['new'] / medians['old']:.1f}")
    print(f"first parse in a fresh process (markdown-it imported, parser built): {_cold(args.repeat) * 1e3:.1f} ms CPU "
          "(median)")


if __name__ == "__main__":
    main()
