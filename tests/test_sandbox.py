"""Pull-request code as an attacker would write it: every attack here must fail against real builds and runs.

Each candidate is the fixture harness plus a `build.rs` (or toolchain file) committed into a temporary git
repository; the campaign builds it with real cargo inside the real bubblewrap sandbox.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from bot.cli.distributed import build_main, row_main
from bot.cli.main import main as cli_main
from bot.exit_codes import EXIT_REFUSED
from bot.publish.publisher import write_artifact
from runners.demo import commit_change
from runners.exec.harness import run_pinned
from runners.exec.sandbox import SANDBOX_UID, BinaryMismatch, Run, Sandbox, SandboxUnavailable, check, sha256_of
from runners.pipeline.campaign import CampaignRequest, CampaignStop, new_report, prepare, run_campaign, run_row
from runners.schema.config import CampaignConfig
from runners.schema.report import GateVerdict, PerfVerdict, SemanticVerdict
from runners.verify import verify_report

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (the bubblewrap package)")

AGG_ROW = "vllm-agg"
DISAGG_ROW = "vllm-disagg"
BUILD_RS = "lib/bench/build.rs"
SECRET = "kvp-secret-6f1d0c2a9e"
KEY_LINE = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC-test-key-line"


def quick(config: CampaignConfig) -> CampaignConfig:
    """A short gate without instruction counts: these campaigns try the sandbox."""
    perf = config.perf.model_copy(update={"pairs": 10, "warmups_per_arm": 1, "instructions": "off"})
    return config.model_copy(update={"perf": perf})


def rust_str(value: str) -> str:
    return json.dumps(value)


def campaign(repo: Path, head: str, config: CampaignConfig, trace: Path, out: Path, rows: list[str],
             keep_work: bool = False) -> CampaignRequest:
    return CampaignRequest(repo=repo, base="main", head=head, config=config, config_source="test", out_dir=out,
                           rows=rows, trace_path=trace, keep_work=keep_work)


def every_file_text(root: Path) -> str:
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*") if p.is_file())


# --- the sandbox itself -------------------------------------------------------------------------------------


def test_sandboxed_process_is_nobody_without_network_secrets_or_host_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KV_PARITY_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    key = tmp_path / "app.pem"
    key.write_text(KEY_LINE + "\n", encoding="utf-8")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    out = tmp_path / "out"
    out.mkdir()
    probe = f"""
import os, socket, json
result = {{"uid": os.getuid(), "env": dict(os.environ)}}
try:
    result["key"] = open({str(key)!r}).read()
except OSError as exc:
    result["key"] = type(exc).__name__
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2)
    result["net"] = "connected"
except OSError as exc:
    result["net"] = type(exc).__name__
result["etc"] = sorted(os.listdir("/etc"))
open({str(out / "result.json")!r}, "w").write(json.dumps(result))
"""
    sandbox = check("bwrap")
    sandbox.hand_over(out)
    completed = sandbox.run(Run(argv=["python3", "-c", probe], writable=(out,)))
    listener.close()
    assert completed.returncode == 0, completed.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["uid"] == (SANDBOX_UID if os.geteuid() == 0 else os.geteuid())
    assert result["key"] in ("FileNotFoundError", "PermissionError")
    assert result["net"] != "connected"
    assert SECRET not in json.dumps(result["env"])
    assert set(result["env"]) <= {"PATH", "HOME", "LANG", "PWD"}
    assert "kv-parity" not in result["etc"] and "gitconfig" not in result["etc"]
    assert sandbox.record().network is False


def test_a_swapped_pinned_binary_is_refused_naming_the_arm_and_both_digests(harness: object,
                                                                              tmp_path: Path) -> None:
    source = harness.binary()  # type: ignore[attr-defined]
    binary = tmp_path / "baseline-bin"
    shutil.copyfile(source, binary)
    binary.chmod(0o755)
    recorded = sha256_of(binary)
    sandbox = Sandbox("bwrap")
    sandbox.pin(binary, "baseline", recorded)
    record, _ = run_pinned(binary, ["--help"], sorted(os.sched_getaffinity(0))[:1], arm="baseline",
                           purpose="help", sandbox=sandbox)
    assert record.exit_code == 0
    binary.write_bytes(binary.read_bytes() + b"\0")
    swapped = sha256_of(binary)
    with pytest.raises(BinaryMismatch) as caught:
        run_pinned(binary, ["--help"], sorted(os.sched_getaffinity(0))[:1], arm="baseline", purpose="help",
                   sandbox=sandbox)
    message = str(caught.value)
    assert "baseline" in message and recorded in message and swapped in message


def test_a_pinned_binary_is_hashed_again_whenever_its_stat_identity_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A row starts each binary hundreds of times: a pin whose file still has the stat identity a matching hash
    saw is not read again, one rewritten in place or replaced is, and a file too recently changed always is."""
    hashed: list[Path] = []

    def counting(path: Path) -> str:
        hashed.append(path)
        return sha256_of(path)

    monkeypatch.setattr("runners.exec.sandbox.sha256_of", counting)
    binary = tmp_path / "baseline-bin"
    binary.write_bytes(b"\x7fELF one")
    sandbox = Sandbox("none")
    sandbox.pin(binary, "baseline", sha256_of(binary))
    for _ in range(3):
        sandbox.verify_pins([str(binary)])
    assert len(hashed) == 3, "written just now: racy, hashed at every start"
    monkeypatch.setattr("runners.exec.sandbox.PIN_RACY_NS", -10**18)  # as if written long before its first hash
    sandbox.verify_pins([str(binary)])
    sandbox.verify_pins([str(binary), "--help"])
    assert len(hashed) == 4, "unchanged since a matching hash: not read again"
    binary.write_bytes(b"\x7fELF one, longer")  # in place: same inode, another size
    with pytest.raises(BinaryMismatch):
        sandbox.verify_pins([str(binary)])
    forged = tmp_path / "forged"
    forged.write_bytes(b"\x7fELF two")
    os.replace(forged, binary)  # another inode under the pinned name
    with pytest.raises(BinaryMismatch):
        sandbox.verify_pins([str(binary)])
    assert len(hashed) == 6


def test_missing_bubblewrap_exits_2_naming_the_package_and_none_is_loud(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        check("bwrap")
    code = cli_main(["campaign", "--repo", str(tmp_path), "--base", "main", "--head", "main", "--profile", "demo",
                     "--out", str(tmp_path / "out")])
    assert code == 2
    assert "bubblewrap" in capsys.readouterr().err
    assert check("none").record().kind == "none"
    assert "WARNING: --sandbox none" in capsys.readouterr().err


# --- attacks through a candidate's build.rs ------------------------------------------------------------------


def leak_build_rs(key: Path, pid: int) -> str:
    return f"""
use std::fs;
fn main() {{
    let env = std::env::var("KV_PARITY_WEBHOOK_SECRET");
    let key = fs::read_to_string({rust_str(str(key))});
    let environ = fs::read({rust_str(f"/proc/{pid}/environ")}).map(|b| String::from_utf8_lossy(&b).into_owned());
    let all: Vec<String> = std::env::vars().map(|(k, v)| format!("{{k}}={{v}}")).collect();
    eprintln!("vars={{all:?}}");
    panic!("LEAK env={{env:?}} key={{key:?}} environ={{environ:?}}");
}}
"""


def test_build_rs_reading_secrets_stops_the_build_and_no_secret_reaches_any_output(
        fixture_repo: Path, campaign_config: CampaignConfig, demo_trace: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KV_PARITY_WEBHOOK_SECRET", SECRET)
    key = tmp_path / "app.pem"
    key.write_text(f"-----BEGIN PRIVATE KEY-----\n{KEY_LINE}\n-----END PRIVATE KEY-----\n", encoding="utf-8")
    subprocess.run(["git", "-C", str(fixture_repo), "checkout", "-q", "-b", "leak"], check=True)
    head = commit_change(fixture_repo, "build script", files={BUILD_RS: leak_build_rs(key, os.getpid())})
    subprocess.run(["git", "-C", str(fixture_repo), "checkout", "-q", "main"], check=True)
    out = tmp_path / "out"
    report = run_campaign(campaign(fixture_repo, head, quick(campaign_config), demo_trace, out, [AGG_ROW]))
    write_artifact(report, out)
    assert report.stopped is not None and report.stopped.stage == "build"
    assert "LEAK env=Err(NotPresent)" in report.stopped.output_tail, "the build script ran and found nothing"
    assert "LEAK" not in report.stopped.reason and "\n" not in report.stopped.reason
    assert report.verdicts is not None and report.verdicts.semantic == SemanticVerdict.FAIL
    everything = every_file_text(out)
    assert "LEAK" in everything
    assert SECRET not in everything and KEY_LINE not in everything


def mischief_build_rs(store_target: Path, hook: Path, manifest: Path, marker: str) -> str:
    """Tries everything that must not work, reports each outcome as a cargo warning, and never fails."""
    return f"""
use std::fs;
use std::process::Command;
fn main() {{
    let swap = fs::write({rust_str(str(store_target))}, b"#!/bin/sh\\nexit 0\\n");
    println!("cargo:warning=swap={{swap:?}}");
    let hook = fs::create_dir_all({rust_str(str(hook.parent))})
        .and_then(|_| fs::write({rust_str(str(hook))}, "#!/bin/sh\\ntouch {hook.parent}/HOOK-RAN\\n"));
    println!("cargo:warning=hook={{hook:?}}");
    let out = std::env::var("GITHUB_OUTPUT").map(|p| fs::write(p, "matrix=forged\\n"));
    println!("cargo:warning=github_output={{out:?}}");
    let daemon = Command::new("setsid").args(["-f", "sh", "-c",
        "sleep 30 {marker}; echo forged > {manifest}"]).spawn();
    println!("cargo:warning=daemon={{daemon:?}}");
}}
"""


def _alive_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_build_rs_cannot_swap_the_baseline_plant_hooks_or_write_github_output(
        fixture_repo: Path, campaign_config: CampaignConfig, demo_trace: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    github_output = tmp_path / "github_output"
    github_output.write_text("matrix=trusted\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_OUTPUT", str(github_output))
    hooks = fixture_repo / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    planted = hooks / "post-checkout"
    planted.write_text(f"#!/bin/sh\ntouch {tmp_path}/PLANTED-HOOK-RAN\n", encoding="utf-8")
    planted.chmod(0o755)
    out = tmp_path / "out"
    base = subprocess.run(["git", "-C", str(fixture_repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    store_target = out / "work" / "bin" / f"baseline-{base[:12]}-offline_replay_bench"
    marker = "kvp-daemon-1b7e"
    subprocess.run(["git", "-C", str(fixture_repo), "checkout", "-q", "-b", "mischief"], check=True)
    head = commit_change(fixture_repo, "semantic change plus a build script", knobs={"SEMANTIC_CHANGE": True},
                         files={BUILD_RS: mischief_build_rs(store_target, hooks / "pre-commit",
                                                            tmp_path / "manifest.json", marker)})
    subprocess.run(["git", "-C", str(fixture_repo), "checkout", "-q", "main"], check=True)
    (tmp_path / "PLANTED-HOOK-RAN").unlink(missing_ok=True)  # the test's own checkout ran it; the bot must not
    report = run_campaign(campaign(fixture_repo, head, quick(campaign_config), demo_trace, out, [DISAGG_ROW]))
    assert report.stopped is None
    assert report.rows[0].semantic == SemanticVerdict.FAIL, "the semantic change is still caught"
    assert report.artifact("baseline").binary_sha256 != report.artifact("candidate").binary_sha256
    assert not (tmp_path / "PLANTED-HOOK-RAN").exists(), "no hook runs in a campaign"
    assert not (hooks / "pre-commit").exists() and not (hooks / "HOOK-RAN").exists()
    assert github_output.read_text(encoding="utf-8") == "matrix=trusted\n"
    assert not (tmp_path / "manifest.json").exists()
    assert _alive_with(marker) == [], "nothing a build script starts outlives the build"


def test_a_binary_swapped_between_build_and_row_stops_the_row_naming_arm_and_digests(
        fixture_repo: Path, campaign_config: CampaignConfig, demo_trace: Path, tmp_path: Path) -> None:
    subprocess.run(["git", "-C", str(fixture_repo), "checkout", "-q", "-b", "semantic"], check=True)
    head = commit_change(fixture_repo, "semantic change", knobs={"SEMANTIC_CHANGE": True})
    subprocess.run(["git", "-C", str(fixture_repo), "checkout", "-q", "main"], check=True)
    request = campaign(fixture_repo, head, quick(campaign_config), demo_trace, tmp_path / "out", [DISAGG_ROW])
    report = new_report(request)
    work = tmp_path / "out" / "work"
    work.mkdir(parents=True)
    prepared = prepare(request, report, work, None)
    baseline, candidate = prepared.binaries["baseline"], prepared.binaries["candidate"]
    baseline.chmod(0o755)
    shutil.copyfile(candidate, baseline)  # what a forged baseline would be: the candidate under the old name
    with pytest.raises(BinaryMismatch) as caught:
        run_row(request, prepared, campaign_config.rows[1], work, None)
    message = str(caught.value)
    assert message.startswith("baseline binary")
    assert report.artifact("baseline").binary_sha256 in message
    assert report.artifact("candidate").binary_sha256 in message


def test_distributed_build_leaves_no_process_behind_and_row_refuses_a_tampered_manifest(
        fixture_repo: Path, demo_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    dist = tmp_path / "dist"
    marker = "kvp-daemon-9c4a"
    subprocess.run(["git", "-C", str(fixture_repo), "checkout", "-q", "-b", "daemon"], check=True)
    head = commit_change(fixture_repo, "a build script that leaves a daemon", files={
        BUILD_RS: mischief_build_rs(tmp_path / "nowhere", tmp_path / "nohooks" / "x", dist / "manifest.json",
                                    marker)})
    subprocess.run(["git", "-C", str(fixture_repo), "checkout", "-q", "main"], check=True)
    code = build_main(["--repo", str(fixture_repo), "--base", "main", "--head", head, "--profile",
                                   "demo", "--rows", AGG_ROW, "--trace", str(demo_trace), "--out", str(dist),
                                   "--work", str(tmp_path / "work")])
    assert code == 0
    assert _alive_with(marker) == []
    manifest = json.loads((dist / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["report"]["stopped"] is None
    candidate = next(a for a in manifest["report"]["artifacts"] if a["arm"] == "candidate")
    baseline = next(a for a in manifest["report"]["artifacts"] if a["arm"] == "baseline")
    candidate["binary_sha256"] = baseline["binary_sha256"]
    (dist / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    capsys.readouterr()
    code = row_main(["--manifest", str(dist / "manifest.json"), "--row", AGG_ROW, "--out",
                                 str(tmp_path / "row"), "--trace", str(demo_trace), "--work", str(tmp_path / "rw")])
    assert code == EXIT_REFUSED
    assert "candidate binary SHA-256 mismatch" in capsys.readouterr().err


# --- what the build used ----------------------------------------------------------------------------------


def test_a_candidate_toolchain_and_rustflags_are_recorded_per_arm_and_fail_size_and_perf(
        fixture_repo: Path, campaign_config: CampaignConfig, demo_trace: Path, tmp_path: Path) -> None:
    nightly = Path(os.environ.get("RUSTUP_HOME") or Path.home() / ".rustup") / "toolchains"
    if not any(p.name.startswith("nightly") for p in nightly.glob("*")):
        pytest.skip("needs a second installed toolchain (nightly) to select from rust-toolchain.toml")
    subprocess.run(["git", "-C", str(fixture_repo), "checkout", "-q", "-b", "toolchain"], check=True)
    head = commit_change(fixture_repo, "pin nightly and add rustflags", files={
        "rust-toolchain.toml": '[toolchain]\nchannel = "nightly"\n',
        ".cargo/config.toml": '[build]\nrustflags = ["-C", "debug-assertions=on"]\n',
    })
    subprocess.run(["git", "-C", str(fixture_repo), "checkout", "-q", "main"], check=True)
    report = run_campaign(campaign(fixture_repo, head, quick(campaign_config), demo_trace, tmp_path / "out",
                                   [AGG_ROW]))
    base, cand = report.artifact("baseline").settings, report.artifact("candidate").settings
    assert base is not None and cand is not None
    assert "nightly" in cand.rustc and "nightly" not in base.rustc
    assert cand.config_rustflags == {".cargo/config.toml": "-C debug-assertions=on"}
    assert set(cand.toolchain_file_sha256) == {"rust-toolchain.toml"} and base.toolchain_file_sha256 == {}
    assert report.sizes is not None and report.sizes.verdict == GateVerdict.FAIL
    assert "rustc" in report.sizes.reason and "config_rustflags" in report.sizes.reason
    row = report.rows[0]
    assert row.semantic == SemanticVerdict.PASS
    assert row.perf_verdict == PerfVerdict.FAIL and "different toolchains" in row.perf_reason
    assert verify_report(report) == []
    forged = report.model_copy(deep=True)
    forged.rows[0].perf_verdict = PerfVerdict.PASS
    assert any("built differently" in p for p in verify_report(forged))
    allowed = report.config.model_copy(update={
        "build": report.config.build.model_copy(update={"allow_toolchain_difference": True})})
    assert any("without any performance evidence" in p
               for p in verify_report(report.model_copy(update={"config": allowed})))


def test_campaign_stop_keeps_raw_output_apart_from_the_reason() -> None:
    stop = CampaignStop("build", "build of candidate failed (exit 101)", blocking=False, output_tail="panicked at")
    assert stop.record.reason == "build of candidate failed (exit 101)"
    assert stop.record.output_tail == "panicked at"
