"""The Actions path split by trust, through the real CLI: plan -> one build per arm -> manifest -> row -> merge.

`plan` and `manifest` run no pull-request code; each arm builds alone in its sandbox; `manifest` refuses a
build.json or binary that does not match the plan or itself, naming the field or both digests.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from bot.cli import main as cli_main
from runners.demo import commit_change

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (the bubblewrap package)")

ROW = "vllm-agg"


@pytest.fixture()
def planned(fixture_repo: Path, tmp_path: Path) -> tuple[Path, Path, str, str]:
    base = subprocess.run(["git", "-C", str(fixture_repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    subprocess.run(["git", "-C", str(fixture_repo), "checkout", "-q", "-b", "head"], check=True)
    head = commit_change(fixture_repo, "comment-only change", touch_comment=True)
    subprocess.run(["git", "-C", str(fixture_repo), "checkout", "-q", "main"], check=True)
    plan = tmp_path / "plan"
    output = tmp_path / "github_output"
    code = cli_main(["plan", "--repo", str(fixture_repo), "--config-ref", base, "--profile", "demo", "--base", base,
                     "--head", head, "--rows", ROW, "--campaign-id", "c0ffee", "--out", str(plan),
                     "--github-output", str(output)])
    assert code == 0
    lines = output.read_text(encoding="utf-8").splitlines()
    assert lines == ['matrix={"include":[{"row":"vllm-agg","runs_on":["kv-parity-bare-metal"]}]}', "row_count=1"]
    return fixture_repo, plan, base, head


def build_arm(repo: Path, plan: Path, arm: str, out: Path, work: Path, *extra: str) -> int:
    return cli_main(["build", "--plan", str(plan), "--repo", str(repo), "--arm", arm, "--out", str(out), "--work",
                     str(work), *extra])


def test_plan_then_each_arm_alone_then_manifest(planned: tuple[Path, Path, str, str], demo_trace: Path,
                                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, plan, base, head = planned
    github_output = tmp_path / "untouched"
    github_output.write_text("", encoding="utf-8")
    monkeypatch.setenv("GITHUB_OUTPUT", str(github_output))
    assert build_arm(repo, plan, "baseline", tmp_path / "arm-b", tmp_path / "wb") == 0
    assert build_arm(repo, plan, "candidate", tmp_path / "arm-c", tmp_path / "wc",
                     "--baseline", str(tmp_path / "arm-b")) == 0
    assert github_output.read_text(encoding="utf-8") == "", "a build writes nothing to $GITHUB_OUTPUT"
    built = json.loads((tmp_path / "arm-c" / "build.json").read_text(encoding="utf-8"))
    assert built["sha"] == head and built["stopped"] is None and built["sandbox"]["kind"] == "bwrap"
    assert built["artifact"]["settings"]["rustc"].startswith("rustc ")
    dist = tmp_path / "dist"
    assert cli_main(["manifest", "--plan", str(plan), "--baseline", str(tmp_path / "arm-b"), "--candidate",
                     str(tmp_path / "arm-c"), "--trace", str(demo_trace), "--out", str(dist)]) == 0
    manifest = json.loads((dist / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["report"]["stopped"] is None
    assert [r["sha"] for r in manifest["report"]["revisions"]] == [base, head]
    assert manifest["report"]["sizes"]["verdict"] == "PASS"
    assert all((dist / "bin" / a["binary_name"]).stat().st_mode & 0o777 == 0o555
               for a in manifest["report"]["artifacts"])


def test_manifest_refuses_a_build_for_another_head_or_a_swapped_binary(
        planned: tuple[Path, Path, str, str], demo_trace: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo, plan, base, head = planned
    assert build_arm(repo, plan, "baseline", tmp_path / "arm-b", tmp_path / "wb") == 0
    # The baseline's build copied as the candidate's: its recorded SHA is the base, not the planned head.
    shutil.copytree(tmp_path / "arm-b", tmp_path / "arm-c")
    args = ["manifest", "--plan", str(plan), "--baseline", str(tmp_path / "arm-b"), "--candidate",
            str(tmp_path / "arm-c"), "--trace", str(demo_trace), "--out", str(tmp_path / "dist")]
    capsys.readouterr()
    assert cli_main(args) == 1
    assert "arm is 'baseline', the plan says 'candidate'" in capsys.readouterr().err
    assert not (tmp_path / "dist" / "manifest.json").exists()
    built = json.loads((tmp_path / "arm-b" / "build.json").read_text(encoding="utf-8"))
    binary = tmp_path / "arm-b" / built["artifact"]["binary_name"]
    binary.chmod(0o755)
    binary.write_bytes(binary.read_bytes() + b"\0")
    assert cli_main(args) == 1
    err = capsys.readouterr().err
    assert "baseline binary SHA-256 mismatch" in err and built["artifact"]["binary_sha256"] in err
