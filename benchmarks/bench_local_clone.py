"""What the local backend's per-campaign clone costs (issue 9: no shared writable .git between campaigns).

Each campaign now starts from its own clone of the service's repository. The backend makes it with
`git clone --shared --no-checkout --template=` (objects borrowed through alternates, its own .git); the
alternative that copies every object, `git clone --no-local --no-checkout`, is measured beside it, on a
synthetic repository whose size is chosen on the command line (written with `git fast-import`, so making it
is cheap). The runner's own `git worktree add` of one revision is measured too, for scale: it is what a
campaign does next in either case.

    .venv/bin/python benchmarks/bench_local_clone.py [--files 20000] [--commits 300] [--repeat 5]

Figures go in notes, never in assertions.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot.dispatch.local import LocalBackend  # noqa: E402


def make_repo(path: Path, files: int, commits: int) -> str:
    """`files` files of ~2 KiB in 100 directories, then `commits` commits each changing 50 of them."""
    subprocess.run(["git", "init", "--quiet", "-b", "main", str(path)], check=True)
    stream: list[bytes] = []
    mark = 0

    def blob(data: bytes) -> int:
        nonlocal mark
        mark += 1
        stream.append(b"blob\nmark :%d\ndata %d\n%s\n" % (mark, len(data), data))
        return mark

    contents = {f"src/d{i % 100}/f{i}.rs": blob((f"// file {i}\n" * 128).encode()) for i in range(files)}
    for number in range(commits):
        changed = contents if number == 0 else {
            name: blob((f"// file {name} rev {number}\n" * 100).encode())
            for name in list(contents)[(number * 50) % files:(number * 50) % files + 50]
        }
        message = f"commit {number}".encode()
        stream.append(b"commit refs/heads/main\ncommitter Bench <b@example.com> %d +0000\ndata %d\n%s\n"
                      % (1700000000 + number, len(message), message))
        stream += [b"M 100644 :%d %s\n" % (ref, name.encode()) for name, ref in changed.items()]
        stream.append(b"\n")
    subprocess.run(["git", "-C", str(path), "fast-import", "--quiet"], input=b"".join(stream), check=True)
    subprocess.run(["git", "-C", str(path), "gc", "--quiet"], check=True)
    return subprocess.run(["git", "-C", str(path), "rev-parse", "main"], capture_output=True, text=True,
                          check=True).stdout.strip()


def timed(action: Callable[[], object], reset: Callable[[], object], repeat: int) -> list[float]:
    seconds = []
    for _ in range(repeat):
        reset()
        start = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - start)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kv-parity-clone-") as tmp:
        root = Path(tmp)
        service = root / "service"
        head = make_repo(service, args.files, args.commits)
        size = sum(p.stat().st_size for p in (service / ".git").rglob("*") if p.is_file())
        backend = LocalBackend(service, argv_prefix=["true"], sandbox="none")
        target = root / "campaign" / "repo"

        def reset() -> None:
            shutil.rmtree(root / "campaign", ignore_errors=True)
            (root / "campaign").mkdir()

        shared = timed(lambda: backend._fresh_clone(target), reset, args.repeat)
        full = timed(lambda: subprocess.run(["git", "clone", "--quiet", "--no-local", "--no-checkout",
                                             str(service), str(target)], check=True), reset, args.repeat)
        worktree = timed(lambda: subprocess.run(["git", "-C", str(target), "worktree", "add", "--quiet",
                                                 "--detach", str(root / "campaign" / "wt"), head], check=True),
                         lambda: (reset(), backend._fresh_clone(target)), args.repeat)
    print(f"repository: {args.files} files, {args.commits} commits, .git {size / 2**20:.1f} MiB")
    for name, samples in (("clone --shared (the backend)", shared), ("clone --no-local", full),
                          ("worktree add of the head", worktree)):
        print(f"  {name:30s} median {statistics.median(samples) * 1000:8.1f} ms  "
              f"(min {min(samples) * 1000:.1f}, max {max(samples) * 1000:.1f})")
    print(f"  --shared / --no-local: {statistics.median(shared) / statistics.median(full):.3f}; "
          f"--shared / worktree add: {statistics.median(shared) / statistics.median(worktree):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
