"""The service's metrics (issue 38) without a running service: a real SQLite store and build cache, the exposition
parsed with prometheus_client's own text parser. Stage and row times come from the progress events' own clock, so
their sums are exact here; tests/test_operability.py scrapes a running service."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bot.core.campaign import Campaign, CampaignRequest, CampaignState
from bot.metrics import ServiceMetrics
from bot.queue import queue_snapshot
from bot.settings import Settings
from bot.store.campaigns import Store
from runners.exec.build_cache import BuildCache
from runners.progress import ProgressEvent
from runners.schema.report import BuildCacheRecord
from tests.report_factory import make_report
from tests.test_build_cache_bound import stored
from tests.webhooks import CONFIG_TOML

S = CampaignState
LABELLED = CONFIG_TOML.replace(
    'id = "vllm-disagg"', 'id = "vllm-disagg"\nrunner_labels = ["self-hosted", "gpu"]'
)
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture()
def settings(tmp_path: Path) -> Settings:
    return Settings(webhook_secret="s", token="t", local_repo_path=tmp_path, db_path=tmp_path / "db.sqlite3",
                    work_dir=tmp_path / "work")


@pytest.fixture()
def store(settings: Settings) -> Store:
    return Store(settings.db_path)


def samples(metrics: ServiceMetrics) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for s in family.samples
    }


def campaign(store: Store, pr: int, rows: list[str] | None = None) -> Campaign:
    return store.create_campaign(CampaignRequest(
        pr_number=pr, head_sha=f"{pr:040x}", base_sha="b" * 40, relationship="ancestor", rows=rows,
        rows_key=",".join(sorted(rows or [])), requested_by="maintainer", trigger="label", config_text=LABELLED,
        config_source="test", config_sha=None, rerun=False,
    ), "acme/widgets", delivery_id=f"d-{pr}", backend="local")


def test_stages_and_rows_are_timed_by_the_progress_events_clock(store: Store, settings: Settings) -> None:
    metrics = ServiceMetrics(store, settings, "local", clock=lambda: 1000.0)
    run = campaign(store, 1)
    events = [("build", None, 100), ("build", None, 110), ("determinism", "a", 130), ("performance", "a", 150),
              ("determinism", "b", 160), ("done", None, 210)]
    metrics.progress(run, [ProgressEvent(stage=stage, row=row, unix=at) for stage, row, at in events[:3]])
    metrics.progress(run, [ProgressEvent(stage=stage, row=row, unix=at) for stage, row, at in events[3:]])
    found = samples(metrics)

    def timed(kind: str, **labels: str) -> tuple[float | None, float | None]:
        key = frozenset({"backend": "local", **labels}.items())
        return (found.get((f"kv_parity_{kind}_duration_seconds_count", key)),
                found.get((f"kv_parity_{kind}_duration_seconds_sum", key)))

    assert timed("stage", stage="build") == (1, 30)
    assert timed("stage", stage="determinism") == (2, 20 + 50)
    assert timed("stage", stage="performance") == (1, 10)
    assert timed("stage", stage="done") == (None, None), "the final event opens nothing"
    assert timed("row", row="a") == (1, 30) and timed("row", row="b") == (1, 50)


def test_an_ending_without_a_report_drops_the_open_stage_and_a_report_closes_it(
    store: Store, settings: Settings
) -> None:
    metrics = ServiceMetrics(store, settings, "local", clock=lambda: 500.0)
    cancelled, completed = campaign(store, 1), campaign(store, 2)
    metrics.progress(cancelled, [ProgressEvent(stage="performance", row="a", unix=100)])
    metrics.ended(cancelled, None)
    metrics.progress(completed, [ProgressEvent(stage="report", unix=400)])
    report = make_report("pass")
    cache = [BuildCacheRecord(key_sha256="1" * 64, reused_from="kvp-earlier"), BuildCacheRecord(key_sha256="2" * 64)]
    report = report.model_copy(update={"artifacts": [
        artifact.model_copy(update={"build_cache": record}) for artifact, record in zip(report.artifacts, cache,
                                                                                         strict=True)]})
    metrics.ended(completed, report)
    found = samples(metrics)
    local = ("backend", "local")
    assert found.get(("kv_parity_stage_duration_seconds_count", frozenset({local, ("stage", "performance")}))) is None
    assert found[("kv_parity_stage_duration_seconds_sum", frozenset({local, ("stage", "report")}))] == 100
    arms = [artifact.arm for artifact in report.artifacts]
    assert found[("kv_parity_build_cache_lookups_total", frozenset({("arm", arms[0]), ("outcome", "hit")}))] == 1
    assert found[("kv_parity_build_cache_lookups_total", frozenset({("arm", arms[1]), ("outcome", "miss")}))] == 1


def test_the_queue_is_counted_per_runner_labels_and_its_oldest_wait(store: Store, settings: Settings) -> None:
    metrics = ServiceMetrics(store, settings, "local", clock=lambda: float(10**10))
    running, both, gpu_only = campaign(store, 1), campaign(store, 2), campaign(store, 3, rows=["vllm-disagg"])
    store.transition(running.id, S.DISPATCHED, "dispatched")
    found = samples(metrics)

    def queue(labels: str) -> tuple[float | None, float | None]:
        key = frozenset({"backend": "local", "runner_labels": labels}.items())
        return found.get(("kv_parity_queue_length", key)), found.get(("kv_parity_queue_oldest_age_seconds", key))

    created = {c.id: c.created_at.timestamp() for c in (both, gpu_only)}
    oldest = pytest.approx(10**10 - created[both.id], abs=1e-6)  # the store keeps times as REAL: microseconds
    assert queue("self-hosted") == (1, oldest)
    assert queue("self-hosted,gpu") == (2, oldest)
    assert found[("kv_parity_campaigns", frozenset({("state", "dispatched"), ("backend", "local")}))] == 1
    assert found[("kv_parity_campaigns", frozenset({("state", "requested"), ("backend", "local")}))] == 2
    live = queue_snapshot(store, 10**10).live
    assert [(entry.position, entry.rows, entry.runner_labels) for entry in live] == [
        (0, ["vllm-agg", "vllm-disagg"], ["self-hosted", "self-hosted,gpu"]),
        (1, ["vllm-agg", "vllm-disagg"], ["self-hosted", "self-hosted,gpu"]),
        (2, ["vllm-disagg"], ["self-hosted,gpu"]),
    ]
    assert [entry.estimated_start for entry in live] == [None, None, None], "nothing ended to estimate from"


def test_the_estimate_is_the_running_campaigns_rest_plus_a_typical_run_per_campaign_ahead(
    store: Store, settings: Settings
) -> None:
    ended = [campaign(store, n) for n in (1, 2, 3)]
    for done in ended:
        store.transition(done.id, S.DISPATCHED, "dispatched")
        store.transition(done.id, S.RUNNING, "started")
        store.transition(done.id, S.COMPLETED, "report written")
    runs = store.recent_run_seconds("local", 20)
    assert len(runs) == 3 and all(run >= 0 for run in runs)
    running, first, second = campaign(store, 4), campaign(store, 5), campaign(store, 6)
    store.transition(running.id, S.DISPATCHED, "dispatched")
    [started] = [w.started for w in store.live_campaigns() if w.campaign_id == running.id]
    assert started is not None
    typical = sorted(runs)[1]
    now = started + typical / 2
    live = {entry.campaign.id: entry for entry in queue_snapshot(store, now).live}
    assert live[first.id].estimated_start == pytest.approx(now + typical / 2)
    assert live[second.id].estimated_start == pytest.approx(now + typical / 2 + typical)
    late = queue_snapshot(store, started + typical * 3).live
    assert [entry.estimated_start for entry in late][1:] == pytest.approx(
        [started + typical * 3, started + typical * 4]), "a run past its typical time: the next starts at once"


def test_the_build_cache_is_measured_as_kv_parity_cache_shows_it(
    store: Store, settings: Settings, tmp_path: Path
) -> None:
    metrics = ServiceMetrics(store, settings, "local")
    assert not any(name.startswith("kv_parity_build_cache") for name, _ in samples(metrics)), "no cache yet"
    cache = BuildCache(settings.build_cache)
    cache.set_limit(1 << 30)
    stored(cache, tmp_path, 1)
    stored(cache, tmp_path, 2, arm="candidate")
    usage = cache.usage()
    found = samples(metrics)
    assert found[("kv_parity_build_cache_entries", frozenset())] == 2
    assert found[("kv_parity_build_cache_bytes", frozenset())] == sum(entry.bytes for entry in usage.entries) > 0
    assert found[("kv_parity_build_cache_max_bytes", frozenset())] == 1 << 30
