"""Where checkpoints live: `framework.runners.spark.storage`."""

from __future__ import annotations

from pathlib import Path

import pytest

from framework.config import Settings
from framework.errors import ConfigError
from framework.runners.spark.storage import checkpoint_root, epoch_checkpoints


def test_checkpoints_default_to_the_state_directory(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    assert checkpoint_root(settings) == (tmp_path / "apps").as_uri()
    assert epoch_checkpoints(settings, "wc", 3) == f"{(tmp_path / 'apps').as_uri()}/wc/e3"


def test_a_uri_passes_through_unchanged() -> None:
    settings = Settings(checkpoint_uri="hdfs://namenode:8020/flamepipe/")
    assert epoch_checkpoints(settings, "wc", 0) == "hdfs://namenode:8020/flamepipe/wc/e0"


def test_a_directory_becomes_an_absolute_file_uri(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = Settings(checkpoint_uri="shared/ck")
    assert checkpoint_root(settings) == (tmp_path / "shared" / "ck").as_uri()


@pytest.mark.parametrize("field", ["snapshot_dir", "state_dir"])
def test_a_uri_where_a_directory_is_needed_fails_fast(field: str) -> None:
    with pytest.raises(ConfigError, match="only checkpoint_uri takes"):
        Settings.load(env={f"FLAMEPIPE_{field.upper()}": "s3a://bucket/x"})


def test_an_empty_checkpoint_uri_fails_fast() -> None:
    with pytest.raises(ConfigError, match="checkpoint_uri"):
        Settings(checkpoint_uri="")
