"""Time from a `merge_group` delivery to its concluded kv-parity check run in carry mode, against the named
alternative of the same service answering a `/parity status` comment (one delivery that ends in one GitHub write:
the floor of anything the worker publishes).

The real service runs in this process over HTTP against the GitHub stand-in (a real git repository behind it),
with the real publisher and App credentials, so the carried check run is a real create + update. Before timing,
each of the group's pull requests gets a real campaign (the stand-in runner, a passing report), so every one
carries. The group is a real queue: one `gh-readonly-queue/main/pr-<n>-<sha>` branch per pull request, each on the
one before, and the event names the last. Measured from just before the signed POST to the moment the stand-in
holds a completed check run on the group's commit (polled every 2 ms), `--rounds` times per setting; with the
gateway's production pacing (0.25 s between requests, 1 s between writes) and without.

    .venv/bin/python benchmarks/bench_merge_queue.py [--rounds 10] [--pulls 1 5]

Figures go in benchmarks/README.md, never in assertions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot.core.campaign import CampaignState  # noqa: E402
from bot.modes.wiring import default_publisher  # noqa: E402
from bot.service.app import create_app  # noqa: E402
from bot.settings import Settings  # noqa: E402
from bot.store.campaigns import Store  # noqa: E402
from tests.fakes.github_api import FakeGitHub  # noqa: E402
from tests.webhooks import (  # noqa: E402
    CONFIG_TOML,
    REPO,
    SECRET,
    comment_event,
    commit,
    git,
    merge_group_event,
    post,
    pull_request_event,
    register_test_app,
    serve_app,
    stand_in_runner,
    wait_until,
)


def _history(repo: Path, pulls: int) -> tuple[str, list[str], str]:
    """main with the config; one branch per pull request; the queue: (main's tip, heads, the group's commit)."""
    git(repo, "init", "--quiet", "-b", "main")
    tip = commit(repo, {".github/kv-parity.toml": CONFIG_TOML}, "config")
    heads = []
    for number in range(1, pulls + 1):
        git(repo, "checkout", "--quiet", "-b", f"feature-{number}", tip)
        heads.append(commit(repo, {f"src/f{number}.rs": f"{number}\n"}, f"pull request {number}"))
    group = tip
    for number, head in enumerate(heads, start=1):
        git(repo, "checkout", "--quiet", "-B", f"gh-readonly-queue/main/pr-{number}-{tip}", group)
        git(repo, "merge", "--quiet", "--no-ff", "-m", f"Merge pull request #{number}", head)
        group = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "--quiet", "main")
    return tip, heads, group


def _completed_on(fake: FakeGitHub, sha: str, after: int) -> bool:
    return any(r["head_sha"] == sha and r["status"] == "completed" and r["id"] > after for r in fake.check_runs(REPO))


def _newest(fake: FakeGitHub) -> int:
    return max((r["id"] for r in fake.check_runs(REPO)), default=0)


def _measure(pulls: int, rounds: int, paced: bool) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="bench-merge-queue-") as tmp, FakeGitHub() as fake:
        work = Path(tmp)
        repo = work / "repo"
        repo.mkdir()
        tip, heads, group = _history(repo, pulls)
        fake.add_token("ghp_unused", "kv-parity-bot")
        fake.add_repo(REPO, repo)
        for number, head in enumerate(heads, start=1):
            fake.add_pull(REPO, number, head, f"feature-{number}", "main")
        fake.set_permission(REPO, "maintainer", "write")
        os.environ["PYTHONPATH"] = str(ROOT)
        settings = Settings.model_validate({
            "webhook_secret": SECRET, "api_base_url": fake.url, "repo": REPO, "db_path": work / "bot.sqlite3",
            "work_dir": work / "work", "local_repo_path": repo, "sandbox": "none", "poll_interval_seconds": 0.05,
            "local_campaign_argv": stand_in_runner(work / "runs.jsonl"),
            **({} if paced else {"api_seconds_between_requests": 0, "api_seconds_between_writes": 0}),
            **register_test_app(fake, work),
        })
        app = create_app(settings, publisher_factory=default_publisher)
        store = Store(settings.db_path)
        figures: dict[str, list[float]] = {"carry": [], "status reply": []}
        with serve_app(app) as url:
            for number, head in enumerate(heads, start=1):
                label = pull_request_event("labeled", number=number, head_sha=head, base_sha=tip,
                                           label="kv-parity", labels=("kv-parity",))
                post(url, "pull_request", label, delivery=f"label-{number}")

            def finished() -> bool:
                done = [
                    c for n in range(1, pulls + 1) for c in store.for_pr(REPO, n) if c.state == CampaignState.COMPLETED
                ]
                return len(done) == pulls and all(store.publications(c.id) == [("finished", "done")] for c in done)

            wait_until(finished, "every pull request's campaign published", 600)
            for round_ in range(rounds):
                before = _newest(fake)
                event = merge_group_event("checks_requested", head_sha=group, base_sha=tip, number=pulls)
                started = time.perf_counter()
                post(url, "merge_group", event, delivery=f"queue-{round_}")
                while not _completed_on(fake, group, before):
                    time.sleep(0.002)
                figures["carry"].append(time.perf_counter() - started)
                outcome = wait_until(
                    lambda r=round_: (s := store.delivery_status(f"queue-{r}")) and s[0] != "pending" and s, "handled"
                )
                assert "carried success" in str(outcome[1]), outcome

                replies = len(fake.comments(REPO, 1))
                started = time.perf_counter()
                post(url, "issue_comment", comment_event("/parity status"), delivery=f"status-{round_}")
                while len(fake.comments(REPO, 1)) == replies:
                    time.sleep(0.002)
                figures["status reply"].append(time.perf_counter() - started)
        store.close()
        return figures


def _line(label: str, values: list[float]) -> str:
    ordered = sorted(values)
    return (f"{label:<44} median {statistics.median(ordered) * 1000:8.1f} ms   min {ordered[0] * 1000:8.1f} ms   "
            f"max {ordered[-1] * 1000:8.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--pulls", type=int, nargs="+", default=[1, 5], help="pull requests in the merge group")
    args = parser.parse_args()
    for paced in (False, True):
        for pulls in args.pulls:
            figures: dict[str, Any] = _measure(pulls, args.rounds, paced)
            pacing = "production pacing" if paced else "no pacing"
            print(f"-- {pulls} pull request(s) in the group, {pacing}, {args.rounds} rounds")
            print(_line("merge_group delivery -> concluded check run", figures["carry"]))
            print(_line("/parity status delivery -> reply (floor)", figures["status reply"]))
            ratio = statistics.median(figures["carry"]) / statistics.median(figures["status reply"])
            print(f"ratio carry / status reply (medians): x{ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
