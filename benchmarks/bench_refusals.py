"""Cost of a flood of unauthorised `/parity` comments on one pull request, with the refusal window (one
permission lookup and one public answer per person, PR and window) against without it (window 0: every
comment asks GitHub and is answered, which is what the bot did before).

The real service runs in this process over HTTP against the GitHub stand-in, with the gateway's production
pacing (0.25 s between requests, 1 s between writes), and the real publisher, so the refusal replies are real
comment POSTs. Measured: worker time from the first delivery queued to the last one handled, GitHub calls
made, and public replies posted.

    .venv/bin/python benchmarks/bench_refusals.py [--count 60]

Figures go in benchmarks/README.md, never in assertions.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot.modes.wiring import default_publisher  # noqa: E402
from bot.service.app import create_app  # noqa: E402
from bot.settings import Settings  # noqa: E402
from bot.store.campaigns import Store  # noqa: E402
from tests.fakes.github_api import FakeGitHub  # noqa: E402
from tests.webhooks import REPO, SECRET, comment_event, post, register_test_app, serve_app, wait_until  # noqa: E402


def _flood(count: int, window: float, body: str = "/parity rerun") -> tuple[float, int, int]:
    """(seconds to handle every delivery, GitHub API calls, replies posted) for `count` comments by a reader."""
    with tempfile.TemporaryDirectory() as tmp, FakeGitHub() as fake:
        work = Path(tmp)
        fake.add_repo(REPO)
        fake.add_pull(REPO, 1, "a" * 40, "feature", "main")
        fake.set_permission(REPO, "reader", "read")
        settings = Settings.model_validate(
            {
                "webhook_secret": SECRET,
                "api_base_url": fake.url,
                "repo": REPO,
                "db_path": work / "bot.sqlite3",
                "work_dir": work / "work",
                "local_repo_path": work,
                "local_campaign_argv": ["false"],
                "sandbox": "none",
                "poll_interval_seconds": 0.05,
                "refusal_window_seconds": window,
                **register_test_app(fake, work),
            }
        )
        app = create_app(settings, publisher_factory=default_publisher)
        store = Store(settings.db_path)
        with serve_app(app) as url:
            # Warm the gateway (installation token, bot identity) outside the measurement.
            post(url, "issue_comment", comment_event("no command here"), delivery="warm")
            wait_until(lambda: (s := store.delivery_status("warm")) and s[0] == "done", "warm-up", 60)
            calls_before = len(fake.calls)
            started = time.perf_counter()
            for n in range(count):
                post(url, "issue_comment", comment_event(body, sender="reader"), delivery=f"d{n}")
            wait_until(
                lambda: all((s := store.delivery_status(f"d{n}")) and s[0] == "done" for n in range(count)),
                "every delivery handled",
                600,
            )
            elapsed = time.perf_counter() - started
        replies = [c for c in fake.comments(REPO, 1) if "Not starting" in c["body"] or "refused" in c["body"].lower()]
        return elapsed, len(fake.calls) - calls_before, len(replies)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=60)
    args = parser.parse_args()
    with_window = _flood(args.count, 600.0)
    without = _flood(args.count, 0.0)
    floor = _flood(args.count, 600.0, body="LGTM, no command")
    print(f"{args.count} comments by a reader on one pull request")
    print(f"{'':28}{'seconds':>10}{'API calls':>12}{'replies':>10}")
    rows = (
        ("commands, window 600 s", with_window),
        ("commands, no window (before)", without),
        ("no command (floor)", floor),
    )
    for name, (seconds, calls, replies) in rows:
        print(f"{name:28}{seconds:>10.2f}{calls:>12}{replies:>10}")
    print(f"time ratio window / no window: {with_window[0] / without[0]:.3f}")
    print(f"time ratio window / floor: {with_window[0] / floor[0]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
