"""Where the pipeline's keys come from: `framework.config.secrets`."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from framework.config import Settings
from framework.config.secrets import new_key, pipeline_keys
from framework.errors import ConfigError


def test_a_key_is_made_once_in_the_state_directory_private(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    first = pipeline_keys(settings)
    assert pipeline_keys(settings) == first and len(first[0]) == 32
    assert (tmp_path / "pipeline.key").stat().st_mode & 0o077 == 0


def test_the_environment_wins_and_lists_keys_in_order(tmp_path: Path) -> None:
    a, b = new_key(), new_key()
    settings = Settings.load(env={"FLAMEPIPE_SECRET": f"{a},{b}"}, state_dir=tmp_path)
    assert pipeline_keys(settings) == (base64.b64decode(a), base64.b64decode(b))
    assert a not in repr(settings)
    assert not (tmp_path / "pipeline.key").exists()


def test_a_key_file_with_comments(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    key = new_key()
    path.write_text(f"# rotated 2026-11-25\n\n{key}\n")
    path.chmod(0o600)
    assert pipeline_keys(Settings(secret_file=path)) == (base64.b64decode(key),)


def test_bad_key_files_fail_fast_without_echoing_them(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("not base64 at all!\n")
    path.chmod(0o600)
    with pytest.raises(ConfigError, match="key 1: not base64") as caught:
        pipeline_keys(Settings(secret_file=path))
    assert "at all" not in str(caught.value)
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        pipeline_keys(Settings(secret_file=path))
    with pytest.raises(ConfigError, match="does not exist"):
        pipeline_keys(Settings(secret_file=tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n")
    os.chmod(empty, 0o600)
    with pytest.raises(ConfigError, match="holds no key"):
        pipeline_keys(Settings(secret_file=empty))
    with pytest.raises(ConfigError, match="too short"):
        pipeline_keys(Settings(secret="c2hvcnQ="))
