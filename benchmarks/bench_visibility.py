"""What following repository privacy on every delivery costs the webhook's acknowledgement path.

Every signed delivery is parsed for `repository.private` / `repository.visibility` and compared with the
recorded value (`bot.pages.details.repository_seen`, `Store.record_visibility`); only a change is written. The
alternative it is measured against is the work the acknowledgement already does per delivery: one
power-safe (synchronous=FULL) insert of the delivery itself. Same payload (~2 KB comment), same database.

    .venv/bin/python benchmarks/bench_visibility.py [--repeat 5]

Figures go in notes, never in assertions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot.pages.details import repository_seen  # noqa: E402
from bot.store.campaigns import Store  # noqa: E402
from bot.store.pages import RepositorySeen  # noqa: E402

BODY = json.dumps(
    {
        "action": "created",
        "repository": {"full_name": "acme/widgets", "private": False, "visibility": "public"},
        "comment": {"body": "x" * 2000},
    }
).encode()


def _per_call(step: Callable[[int], object], count: int) -> float:
    started = time.perf_counter()
    for index in range(count):
        step(index)
    return (time.perf_counter() - started) / count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        store = Store(Path(work) / "bot.sqlite3", power_safe=True, busy_timeout=5)
        unchanged: list[float] = []
        changed: list[float] = []
        insert: list[float] = []

        def seen_of(body: bytes) -> RepositorySeen:
            seen = repository_seen(body)
            assert seen is not None
            return seen

        def repeat_visibility(_: int) -> None:
            store.record_visibility(seen_of(BODY), time.time())

        def flip(index: int) -> None:
            store.record_visibility(seen_of(BODY).model_copy(update={"private": index % 2 == 0}), time.time())

        for repeat in range(args.repeat):

            def store_delivery(index: int, batch: int = repeat) -> None:
                store.add_deliveries([(f"d{batch}-{index}", "issue_comment", BODY)])

            unchanged.append(_per_call(repeat_visibility, 2000))
            changed.append(_per_call(flip, 200))
            insert.append(_per_call(store_delivery, 200))
        store.close()
    same, moved, stored = (statistics.median(v) for v in (unchanged, changed, insert))
    print(f"visibility unchanged (parse + read): {same * 1e6:8.1f} us per delivery")
    print(f"visibility changed (parse + write):  {moved * 1e6:8.1f} us per delivery")
    print(f"the delivery's own power-safe insert: {stored * 1e6:8.1f} us per delivery")
    print(f"ratio unchanged / insert: {same / stored:.4f}; changed / insert: {moved / stored:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
