"""What a details page costs next to the result comment, for the largest factory report.

Serving a campaign page (`bot.pages.details.PageViews.campaign`: the kept public report read from SQLite, parsed,
rendered by `report_html(public=True)`, navigation added, redacted) against rendering the Markdown result
comment (`render.result_comment`) of the same report; also what keeping the page costs when the campaign
finishes (`page_report`: public copy + redaction + JSON) and the page's size in bytes. Medians of --repeat runs,
reported as ratios to the comment.

    .venv/bin/python benchmarks/bench_pages.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.core.campaign import CampaignRequest  # noqa: E402
from bot.pages.details import Pages, PageViews, page_report  # noqa: E402
from bot.publish.render import result_comment  # noqa: E402
from bot.publish.views import Links  # noqa: E402
from bot.settings import Settings  # noqa: E402
from bot.store.campaigns import Store  # noqa: E402
from tests.report_factory import OUTCOMES, make_report  # noqa: E402


def _median_seconds(action: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    name, report = max(
        ((outcome, make_report(outcome)) for outcome in OUTCOMES), key=lambda item: len(item[1].model_dump_json())
    )
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.model_validate(
            {
                "webhook_secret": "bench-webhook-secret",
                "token": "bench-token-value",
                "local_repo_path": tmp,
                "db_path": Path(tmp) / "bot.sqlite3",
                "public_url": "https://kv-parity.example.com",
            }
        )
        store = Store(settings.db_path, power_safe=False)
        campaign = store.create_campaign(
            CampaignRequest(
                pr_number=1,
                head_sha="c" * 40,
                base_sha="b" * 40,
                relationship="ancestor",
                rows=None,
                rows_key="",
                requested_by="bench",
                trigger="label",
                config_text="",
                config_source="bench",
                config_sha=None,
                rerun=False,
            ),
            "acme/widgets",
            delivery_id="bench",
            backend="local",
        )
        store.record_campaign_page(campaign.id, private=False, with_page=True)
        pages = Pages(store, settings, environ={})
        kept = page_report(report, pages.redactor).model_dump_json()
        store.keep_page_report(campaign.id, kept)
        views = PageViews(pages)
        links = Links(check_run_url="https://github.com/acme/widgets/runs/1")
        comment = _median_seconds(lambda: result_comment(report, links), args.repeat)
        served = _median_seconds(lambda: views.campaign(campaign.id), args.repeat)
        keeping = _median_seconds(lambda: page_report(report, pages.redactor).model_dump_json(), args.repeat)
        size = len(views.campaign(campaign.id).encode())
        store.close()
    print(f"largest factory report: {name} ({len(report.model_dump_json())} B of JSON, kept copy {len(kept)} B)")
    print(f"result comment (Markdown): {comment * 1000:.1f} ms")
    print(f"details page served:       {served * 1000:.1f} ms  ({served / comment:.2f}x the comment)")
    print(f"page kept at finish:       {keeping * 1000:.1f} ms  ({keeping / comment:.2f}x the comment)")
    print(f"page size: {size} B")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
