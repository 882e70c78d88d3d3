"""Memory of `kv-parity serve` under unauthenticated bulk: N concurrent 25 MB bodies with a wrong signature.

The service runs under uvicorn in its own process (the same server as bench_webhook_ack.py); this process
sends the bodies at once and reads the server's peak resident set (VmHWM from /proc) before and after, and
counts the answers (401 for a body that was read and refused, 503 for one refused for want of a slot).

    .venv/bin/python benchmarks/bench_unauth_bodies.py [--clients 16] [--megabytes 25]

Figures go in notes, never in assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_webhook_ack import _wait_ready  # noqa: E402
from tests.webhooks import free_port  # noqa: E402


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc status")


async def _flood(url: str, clients: int, body: bytes) -> collections.Counter[int | str]:
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=clients), timeout=120) as client:

        async def one() -> int | str:
            headers = {
                "Content-Type": "application/json",
                "X-GitHub-Event": "issue_comment",
                "X-GitHub-Delivery": str(uuid.uuid4()),
                "X-Hub-Signature-256": "sha256=" + "0" * 64,
            }
            try:
                return (await client.post(url, content=body, headers=headers)).status_code
            except httpx.TransportError as exc:
                return type(exc).__name__

        return collections.Counter(await asyncio.gather(*(one() for _ in range(clients))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--megabytes", type=int, default=25)
    args = parser.parse_args()
    body = b"{" + b" " * (args.megabytes * 1024 * 1024 - 100) + b"}"
    with tempfile.TemporaryDirectory(prefix="bench-unauth-") as tmp:
        port = free_port()
        environ = {**os.environ, "PYTHONPATH": str(ROOT)}
        bench = ROOT / "benchmarks" / "bench_webhook_ack.py"
        server = subprocess.Popen(
            [sys.executable, str(bench), "--serve", "bot", "--port", str(port), "--work", tmp], env=environ
        )
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_ready(base)
            before = _peak_rss_mb(server.pid)
            answers = asyncio.run(_flood(base + "/webhook", args.clients, body))
            after = _peak_rss_mb(server.pid)
            healthy = httpx.get(base + "/healthz", timeout=10).status_code
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"{args.clients} concurrent {args.megabytes} MB bodies with a wrong signature")
    print(f"peak RSS before {before:.1f} MB, after {after:.1f} MB (+{after - before:.1f} MB)")
    print(f"answers {dict(answers)}; /healthz afterwards {healthy}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
