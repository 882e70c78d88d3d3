"""The campaign's trusted inputs come from one revision: `--config-ref` (the bot passes its base branch's tip) is
where both the config and the determinism patch are read, while the baseline stays `--base` (the merge base)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bot.cli.campaigns import _config_for
from runners.pipeline.campaign import CampaignRequest, _base_patch
from runners.schema.config import DEFAULT_CONFIG_PATH, parse_config
from tests.webhooks import CONFIG_TOML, commit, git

PATCHED = CONFIG_TOML.replace("[build]", '[determinism]\npatch = "ci/determinism.patch"\n\n[build]', 1)


def _history(repo: Path) -> tuple[str, str]:
    """(merge base, tip): the tip changed both the config and the patch after the pull request branched."""
    repo.mkdir()
    git(repo, "init", "--quiet", "-b", "main")
    base = commit(repo, {DEFAULT_CONFIG_PATH: PATCHED, "ci/determinism.patch": "old patch\n"}, "config and patch")
    tip = commit(
        repo,
        {DEFAULT_CONFIG_PATH: PATCHED.replace("count = 5000", "count = 6000"), "ci/determinism.patch": "new patch\n"},
        "tighten",
    )
    return base, tip


def test_the_determinism_patch_is_read_at_the_config_ref_not_the_merge_base(tmp_path: Path) -> None:
    base, tip = _history(tmp_path / "repo")
    config = parse_config(PATCHED, "test")

    def request(config_ref: str | None) -> CampaignRequest:
        return CampaignRequest(
            repo=tmp_path / "repo",
            base=base,
            head=base,
            config=config,
            config_source="x",
            out_dir=tmp_path / "out",
            config_ref=config_ref,
        )

    (tmp_path / "tip").mkdir()
    (tmp_path / "base").mkdir()
    at_tip = _base_patch(request(tip), config.determinism.patch, "determinism", tip, tmp_path / "tip")
    at_base = _base_patch(request(None), config.determinism.patch, "determinism", base, tmp_path / "base")
    assert at_tip is not None and at_tip.read_text() == "new patch\n"
    assert at_base is not None and at_base.read_text() == "old patch\n"


def test_the_cli_reads_the_config_at_the_ref_and_records_the_given_source(tmp_path: Path) -> None:
    base, tip = _history(tmp_path / "repo")

    def args(**extra: str | None) -> argparse.Namespace:
        values = {"repo": str(tmp_path / "repo"), "base": base, "config": None, "profile": None}
        values.update({"config_ref": None, "config_source": None, **extra})
        return argparse.Namespace(**values)

    config, source = _config_for(args(config_ref=tip, config_source=f"{DEFAULT_CONFIG_PATH} @ {tip} (base branch tip)"))
    assert config.trace.count == 6000 and source == f"{DEFAULT_CONFIG_PATH} @ {tip} (base branch tip)"
    config, source = _config_for(args())
    assert config.trace.count == 5000 and source == f"{DEFAULT_CONFIG_PATH}@{base}"
