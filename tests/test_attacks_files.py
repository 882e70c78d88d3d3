"""Attacks on the files the trusted side writes, reads and uploads, run for real (issue 18, items 1 and 6).

A candidate harness built with `PLANT_LINKS` (tests/fixtures/replay_harness/lib/bench/src/attack.rs) plants, in
every directory it can write and before writing anything, a symbolic link to a victim file outside under every
name the bot writes (perf-script text, perf.data, callgrind captures, flame graphs, reports). Root following
one of them would overwrite the victim. The campaigns below run that harness sandboxed under a performance FAIL
and under a profile: the victim must be byte-identical afterwards, the links must really have been planted,
and the campaign must still reach its verdicts. A second harness exports a symbol whose name holds control
characters: the size gate and attribution must complete with every name shown escaped.
"""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from bot.cli.campaigns import _finish
from bot.cli.distributed import merge_main
from bot.cli.main import main as cli_main
from runners.demo import FIXTURE_DIR, commit_change, init_fixture_repo
from runners.exec.untrusted import symlinks_under
from runners.pipeline.campaign import CampaignRequest, run_campaign
from runners.schema.config import CampaignConfig
from runners.schema.report import CampaignReport, PerfVerdict, ProcessRecord
from runners.stages.determinism import _read_canonical
from runners.stages.sizes import ELF_MAX_BYTES, ElfError, text_size
from runners.stages.symbols import attribute_sizes, demangle
from tests.conftest import HarnessBuilder
from tests.report_factory import make_report

ROOT = Path(__file__).resolve().parents[1]
ROW = "vllm-agg"
ATTACK_RS = "lib/bench/src/attack.rs"
HOSTILE_NAME_RUST = r"kvp_hostile\nline\r\t\x1b[31m\u{85}\u{202e}end"
HOSTILE_NAME_SHOWN = r"kvp_hostile\nline\r\t\x1b[31m\x85\u202eend"
"""How the bot shows the exported name: every non-printable character as its escape."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def victim(tmp_path: Path) -> Path:
    """A root-only file outside every sandbox: what a followed link would overwrite."""
    directory = tmp_path / "victim"
    directory.mkdir(mode=0o700)
    path = directory / "root-only.txt"
    path.write_text("root's own file: must never change\n")
    return path


def _tolerant(config: CampaignConfig) -> CampaignConfig:
    """A short performance gate that decides on a loaded shared machine: these tests are about files, not the
    gate, so interference and the diagnostics do not block the row before its FAIL triggers attribution. Twenty
    pairs: the exact lower bound is then the sixth smallest ratio, so the FAIL holds with up to five pairs a
    loaded machine spoils (at ten it was the second, and a `.ci/run` with 23 core-s stolen by the host spoiled
    two)."""
    perf = config.perf.model_copy(update={
        "pairs": 20, "warmups_per_arm": 1,
        "invalidation": config.perf.invalidation.model_copy(update={"max_interference_ms": 1e9}),
        "diagnostics": config.perf.diagnostics.model_copy(update={
            "max_abs_autocorr": 1.0, "min_trend_p": 1e-9, "min_order_effect_p": 1e-9, "min_telemetry_p": 1e-9}),
    })
    return config.model_copy(update={"perf": perf})


def _attack_repo(tmp_path: Path, knobs: dict[str, str | float],
                 files: dict[str, str] | None = None) -> tuple[Path, str]:
    """The fixture repository with the attacking candidate on a branch; (repo, head SHA)."""
    repo = tmp_path / "repo"
    init_fixture_repo(repo)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-b", "attack"], check=True)
    head = commit_change(repo, "perf: tidy the replay loop", knobs=knobs, files=files)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "main"], check=True)
    return repo, head


def _planted(work: Path, victim: Path) -> list[Path]:
    return [link for link in symlinks_under(work) if os.readlink(link) == str(victim)]


def _assert_contained(report: CampaignReport, out: Path, victim: Path, digest: str) -> None:
    """The victim is untouched, the attack really ran in the attribution's own directories, and nothing the bot
    keeps is a link."""
    assert victim.is_file() and not victim.is_symlink()
    assert _sha256(victim) == digest, "a trusted process followed a planted link"
    planted = _planted(out / "work", victim)
    assert any(link.parent.parent.name == f"attribution-{ROW}" for link in planted), planted
    assert {"candidate.0.perf-script.txt", "candidate.callgrind.out", "differential.flame.svg"} <= {
        link.name for link in planted}
    for kept in ("attribution", "evidence"):
        if (out / kept).exists():
            assert symlinks_under(out / kept) == []
    row = report.rows[0]
    assert row.attribution is not None
    for name in row.attribution.files:
        path = out / "attribution" / ROW / name
        assert path.is_file() and not path.is_symlink(), name
    assert report.stopped is None, report.stopped
    assert report.verdicts is not None


def test_planted_links_under_a_performance_fail_change_no_file_outside(
    tmp_path: Path, victim: Path, campaign_config: CampaignConfig, demo_trace: Path
) -> None:
    digest = _sha256(victim)
    repo, head = _attack_repo(tmp_path, {"HOT_SPOT_WORK": 4.0, "PLANT_LINKS": str(victim)})
    report = run_campaign(CampaignRequest(
        repo=repo, base="main", head=head, config=_tolerant(campaign_config), config_source="test",
        out_dir=tmp_path / "out", rows=[ROW], trace_path=demo_trace, keep_work=True))
    row = report.rows[0]
    assert row.perf_verdict == PerfVerdict.FAIL, row.perf_reason
    assert row.attribution is not None and row.attribution.trigger == "performance FAIL"
    assert row.attribution.instructions is not None, row.attribution.skipped
    assert row.attribution.instructions.movers[0].name == "dynamo_bench::hotspot::hot_spot"
    assert row.attribution.samples is not None, row.attribution.skipped
    _assert_contained(report, tmp_path / "out", victim, digest)


def _hostile_attack_rs() -> str:
    source = (FIXTURE_DIR / ATTACK_RS).read_text(encoding="utf-8")
    assert source.count("#[no_mangle]\n") == 1
    return source.replace("#[no_mangle]\n", f'#[export_name = "{HOSTILE_NAME_RUST}"]\n')


def test_kv_parity_profile_with_planted_links_and_a_control_character_symbol_completes_contained(
    tmp_path: Path, victim: Path, demo_trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kv-parity profile --keep-work`: the kept work directory holds the harness's links, so the artifact is
    refused naming one (exit 1) after report.json was written with every verdict."""
    digest = _sha256(victim)
    repo, head = _attack_repo(tmp_path, {"PLANT_LINKS": str(victim)}, {ATTACK_RS: _hostile_attack_rs()})
    out = tmp_path / "out"
    code = cli_main(["profile", "--repo", str(repo), "--base", "main", "--head", head, "--profile", "demo",
                     "--rows", ROW, "--out", str(out), "--trace", str(demo_trace), "--keep-work", "--quiet"])
    assert code == 1
    assert f"holds {len(symlinks_under(out))} symbolic link(s), refusing to hand it on: '{out / 'work'}" in \
        capsys.readouterr().err
    report = CampaignReport.model_validate_json((out / "report.json").read_bytes())
    _assert_contained(report, out, victim, digest)
    assert report.sizes is not None and report.sizes.attribution is not None
    sizes = report.sizes.attribution
    assert sizes.symbols_read, sizes.note
    assert HOSTILE_NAME_SHOWN in {delta.name for delta in sizes.growing}
    assert "kvp_named_work" in {delta.name for delta in sizes.shrinking}
    attribution = report.rows[0].attribution
    assert attribution is not None and attribution.trigger == "requested"
    assert attribution.instructions is not None and attribution.samples is not None, attribution.skipped
    for table in (attribution.instructions, attribution.samples):
        for row in [*table.movers, *table.new_functions, *table.generic_movers]:
            assert row.name.isprintable(), row.name
    for name in ("baseline.flame.svg", "candidate.flame.svg", "differential.flame.svg"):
        ET.parse(tmp_path / "out" / "attribution" / ROW / name)


def test_a_control_character_symbol_in_one_binary_is_sized_and_shown_escaped(harness: HarnessBuilder) -> None:
    """Before: c++filt returned more lines than names and the campaign crashed in prepare."""
    baseline = harness.binary()
    candidate = harness.binary(files={ATTACK_RS: _hostile_attack_rs()})
    attribution = attribute_sizes(baseline, candidate)
    assert attribution.symbols_read
    assert [d.name for d in attribution.growing if d.name.startswith("kvp_")] == [HOSTILE_NAME_SHOWN]


def test_demangling_keeps_one_name_per_symbol_whatever_the_names_hold() -> None:
    names = ["_ZN4core3fmt5write17h1234567890abcdefE", "evil\n_ZN4core3fmt5write17h1234567890abcdefE",
             "tab\there", "nel\x85x", "bidi\u202eevil", "--kv-parity-end-of-name--", "plain"]
    shown = demangle(names)
    assert shown == ["core::fmt::write", r"evil\n_ZN4core3fmt5write17h1234567890abcdefE", r"tab\there",
                     r"nel\x85x", r"bidi\u202eevil", "--kv-parity-end-of-name--", "plain"]


def _elf_copy(binary: Path) -> bytearray:
    data = bytearray(binary.read_bytes())
    assert data[:4] == b"\x7fELF" and data[4] == 2, "the fixture is a 64-bit ELF"
    return data


def test_a_malformed_symbol_table_is_a_clear_size_error(harness: HarnessBuilder, tmp_path: Path) -> None:
    binary = harness.binary()
    data = _elf_copy(binary)
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    for index in range(shnum):
        header = shoff + index * shentsize
        if struct.unpack_from("<I", data, header + 4)[0] == 2:  # SHT_SYMTAB
            struct.pack_into("<Q", data, header + 0x38, 8)  # sh_entsize 8: entries would overlap
    broken = tmp_path / "bad-entsize"
    broken.write_bytes(bytes(data))
    attribution = attribute_sizes(binary, broken)
    assert not attribution.symbols_read
    assert "bad-entsize: malformed .symtab (entry size 8" in attribution.note

    data = _elf_copy(binary)
    struct.pack_into("<H", data, 0x3C, 0xFFFF)  # e_shnum: 65,535 headers, far past the end of the file
    headers = tmp_path / "too-many-sections"
    headers.write_bytes(bytes(data))
    with pytest.raises(ElfError, match="too-many-sections: 65,535 section headers end at byte"):
        text_size(headers)


def test_a_huge_binary_is_refused_unparsed(tmp_path: Path) -> None:
    huge = tmp_path / "huge"
    with huge.open("wb") as handle:
        handle.truncate(ELF_MAX_BYTES + 1)  # sparse: no disk used
    with pytest.raises(ElfError, match="over the 4,294,967,296-byte bound for ELF parsing"):
        text_size(huge)
    assert "over the 4,294,967,296-byte bound" in attribute_sizes(huge, huge).note


def test_a_linked_canonical_output_is_a_product_failure_naming_it(tmp_path: Path, victim: Path) -> None:
    own = tmp_path / "det" / "vllm-agg-candidate-0"
    own.mkdir(parents=True)
    (own / "canonical.jsonl").symlink_to(victim)
    record = ProcessRecord(arm="candidate", purpose="determinism repetition 1", argv=[], cpu_set=[0], exit_code=0,
                           seconds=0.1, stderr_tail="")
    canonical, problem, blocked = _read_canonical(record, own / "canonical.jsonl", [])
    assert canonical is None and not blocked
    assert problem is not None and "canonical.jsonl is a symbolic link; refusing to follow it" in problem


def test_a_planted_link_in_a_row_result_makes_the_upload_refusal_name_it(tmp_path: Path) -> None:
    row_out = tmp_path / "row-out"
    (row_out / "attribution" / ROW).mkdir(parents=True)
    (row_out / f"{ROW}.row.json").write_text("{}\n")
    link = row_out / "attribution" / ROW / "candidate.0.perf-script.txt\n::add-mask::x"
    link.symlink_to("/home/runner/.credentials")
    check = subprocess.run([sys.executable, "-m", "runners.exec.untrusted", str(row_out)], capture_output=True,
                           text=True, check=False)
    assert check.returncode == 1
    assert str(row_out) in check.stderr
    assert repr(str(link)) in check.stderr, check.stderr
    assert "\n::add-mask::" not in check.stderr, "a link's name never reaches the log as raw lines"
    link.unlink()
    clean = subprocess.run([sys.executable, "-m", "runners.exec.untrusted", str(row_out)], capture_output=True,
                           text=True, check=False)
    assert clean.returncode == 0, clean.stderr


def test_merge_refuses_downloaded_results_holding_a_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = tmp_path / "rows" / f"kv-parity-row-{ROW}"
    rows.mkdir(parents=True)
    (rows / "evidence").symlink_to("/etc")
    code = merge_main(["--manifest", str(tmp_path / "manifest.json"), "--out", str(tmp_path / "report"),
                       str(tmp_path / "rows")])
    assert code == 1
    assert repr(str(rows / "evidence")) in capsys.readouterr().err
    assert not (tmp_path / "report").exists()


def test_every_upload_after_pull_request_code_is_checked_for_links_first() -> None:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "kv-parity-campaign.yml").read_text())
    for job in ("build-candidate", "rows", "publish"):
        steps = workflow["jobs"][job]["steps"]
        uploads = [i for i, step in enumerate(steps) if str(step.get("uses", "")).startswith("actions/upload-artifact")]
        assert uploads, job
        for index in uploads:
            directory = steps[index]["with"]["path"].replace("${{ runner.temp }}", "$RUNNER_TEMP")
            check = steps[index - 1]
            assert check.get("run") == f'python -m runners.exec.untrusted "{directory}"', (job, check)
            # An upload that runs after failures (`!cancelled()`) must still never run past a failed check.
            if "cancelled()" in str(steps[index].get("if", "")):
                assert f"steps.{check.get('id')}.outcome == 'success'" in steps[index]["if"], (job, steps[index])


def test_a_campaign_artifact_holding_a_link_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kv-parity campaign`/`profile` finish: the artifact directory is written, then refused (exit 1, never
    the conclusion's exit code) when anything in it is a link."""
    out = tmp_path / "artifact"
    (out / "attribution" / ROW).mkdir(parents=True)
    link = out / "attribution" / ROW / "candidate.flame.svg"
    link.symlink_to("/etc/shadow")
    assert _finish(make_report("pass"), out) == 1
    assert repr(str(link)) in capsys.readouterr().err
    link.unlink()
    assert _finish(make_report("pass"), out) == 0
