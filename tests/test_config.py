"""Campaign config: shipped profiles and errors that name the offending key."""

from __future__ import annotations

import pytest
from runners.schema.config import PROTOCOL_EXCLUSIONS, ConfigError, format_rows, load_profile, parse_config, parse_rows

MINIMAL = """
[build]
command = ["cargo", "build", "--release", "-p", "dynamo-bench", "--no-default-features",
           "--features", "replay-bench", "--bench", "offline_replay_bench"]
features = ["replay-bench"]

[trace]
path = "t.jsonl"
sha256 = "%s"
offset = 0
count = 10

[[rows]]
id = "r1"
args = []
expect = { pressure = [1, 3] }
""" % ("a" * 64)


def test_dynamo_profile_reproduces_the_reference_seed_matrix() -> None:
    config = load_profile("dynamo")
    assert [row.id for row in config.rows] == ["vllm-agg", "vllm-disagg", "sglang-agg", "sglang-disagg"]
    assert config.build.features == ["replay-bench"] and config.build.no_default_features
    assert config.trace.count == 5000 and config.trace.offset == 0
    assert config.trace.slice_sha256 == "3892ae19ae480b643155f0c6b9d798591cbe2e73bec6a0fa5ae3d3bc0332fb8a"
    assert tuple(config.harness.exclusions) == PROTOCOL_EXCLUSIONS
    common = config.harness.common_args
    assert common[common.index("--arrival-speedup-ratio") + 1] == "4"
    assert common[common.index("--trace-block-size") + 1] == "512"

    def value(row_id: str, flag: str) -> str:
        args = next(row.args for row in config.rows if row.id == row_id)
        return args[args.index(flag) + 1]

    assert [value(r, "--num-gpu-blocks") for r in ("vllm-agg", "vllm-disagg", "sglang-agg", "sglang-disagg")] \
        == ["6144", "5500", "1536", "11264"]
    assert [value(r, "--block-size") for r in ("vllm-agg", "vllm-disagg", "sglang-agg", "sglang-disagg")] \
        == ["64", "64", "512", "512"]
    assert value("sglang-disagg", "--kv-bytes-per-token") == "262144"
    assert value("vllm-disagg", "--kv-bytes-per-token") == "1"
    assert value("vllm-disagg", "--kv-transfer-bandwidth") == "100"
    assert value("sglang-agg", "--max-num-batched-tokens") == "32768"
    assert value("vllm-agg", "--max-num-seqs") == "16"


def test_demo_profile_loads() -> None:
    assert load_profile("demo").rows


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda t: t.replace('count = 10', 'count = 0'), "trace.count"),
        (lambda t: t.replace('sha256 = "' + "a" * 64, 'sha256 = "xyz'), "trace.sha256"),
        (lambda t: t.replace('pressure = [1, 3]', 'pressure = [0, 3]'), "rows.0.expect.pressure"),
        (lambda t: t.replace('args = []', 'args = ["--timings-jsonl", "x"]'), "rows.0.args"),
        (lambda t: t.replace('id = "r1"', 'id = "R 1"'), "rows.0.id"),
        (lambda t: t.replace('"replay-bench", "--bench"', '"replay-bench,extra", "--bench"'), "build"),
        (lambda t: t + '\n[harness]\nexclusions = ["/summary/duration_ms"]\n', "harness.exclusions"),
        (lambda t: t + '\n[perf]\npairs = 61\n', "perf.pairs"),
        (lambda t: t + '\n[perf]\nsurprise = 1\n', "perf.surprise"),
        (lambda t: t.replace("[build]", "[build"), "not valid TOML"),
        (lambda t: t + '\n[checks]\nundecided_conclusion = "skipped"\n', "checks.undecided_conclusion"),
    ],
)
def test_bad_config_names_the_key(edit, expected) -> None:  # type: ignore[no-untyped-def]
    text = edit(MINIMAL)
    parse_config(MINIMAL, "ok.toml")
    with pytest.raises(ConfigError) as info:
        parse_config(text, "bad.toml")
    assert "bad.toml" in str(info.value)
    assert expected in str(info.value)


def test_an_undecided_campaign_blocks_a_required_check_unless_the_config_says_otherwise() -> None:
    assert parse_config(MINIMAL, "x").checks.undecided_conclusion == "action_required"
    chosen = parse_config(MINIMAL + '\n[checks]\nundecided_conclusion = "neutral"\n', "x")
    assert chosen.checks.undecided_conclusion == "neutral"


def test_unknown_rows_are_named() -> None:
    config = parse_config(MINIMAL, "x")
    with pytest.raises(ConfigError, match=r"unknown rows \['nope'\]"):
        config.select_rows(["nope"])


def test_unknown_profile_lists_shipped_ones() -> None:
    with pytest.raises(ConfigError, match="dynamo"):
        load_profile("nope")


@pytest.mark.parametrize("text", [None, "", ",", " , "])
def test_no_rows_named_means_every_row(text: str | None) -> None:
    assert parse_rows(text) is None
    assert format_rows(parse_rows(text)) == ""


def test_rows_text_reads_back_in_order_without_blanks() -> None:
    rows = parse_rows(" vllm-agg,,sglang-agg ")
    assert rows == ["vllm-agg", "sglang-agg"]
    assert parse_rows(format_rows(rows)) == rows
    assert format_rows(("a", "b")) == "a,b"
