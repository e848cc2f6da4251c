from __future__ import annotations

from pathlib import Path

import pytest

from framework.config import Settings
from framework.errors import ConfigError


def test_defaults_are_the_embedded_stack() -> None:
    settings = Settings.load(env={})
    assert settings.embedded
    assert settings.kafka_bootstrap == "127.0.0.1:9092"
    assert settings.zookeeper == "127.0.0.1:2181"
    assert settings.state_backend == "file"
    assert settings.snapshot_interval_ms == 1000
    assert settings.snapshot_path == settings.state_dir / "snapshots"


def test_precedence_file_then_env_then_overrides(tmp_path: Path) -> None:
    cfg = tmp_path / "fp.toml"
    cfg.write_text(
        '[flamepipe]\nkafka_port = 19092\nzookeeper_port = 12181\nspark_master = "local[2]"\n'
    )
    env = {"FLAMEPIPE_ZOOKEEPER_PORT": "22181"}
    settings = Settings.load(cfg, env=env, spark_master="local[1]")
    assert settings.kafka_port == 19092
    assert settings.zookeeper_port == 22181
    assert settings.spark_master == "local[1]"


def test_external_cluster_from_environment() -> None:
    env = {
        "FLAMEPIPE_BOOTSTRAP_SERVERS": "k1:9092,k2:9092",
        "FLAMEPIPE_ZOOKEEPER_CONNECT": "z:2181",
    }
    settings = Settings.load(env=env)
    assert not settings.embedded
    assert settings.kafka_bootstrap == "k1:9092,k2:9092"
    assert settings.zookeeper == "z:2181"


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"FLAMEPIPE_KAFKA_PORT": "abc"}, "FLAMEPIPE_KAFKA_PORT: expected int"),
        ({"FLAMEPIPE_KAFKA_PORT": "70000"}, "kafka_port=70000 is not a TCP port"),
        ({"FLAMEPIPE_KAFKA_PORT": "2181"}, "ports must differ"),
        ({"FLAMEPIPE_REGISTRY_PORT": "-1"}, "registry_port=-1 is not a TCP port"),
        ({"FLAMEPIPE_SPARK_MASTER": "locale"}, "is not a Spark master URL"),
        ({"FLAMEPIPE_DELTA_MS": "20"}, r"'delta_ms' is not a setting: .*Pipeline\(name, delta_ms"),
        ({"FLAMEPIPE_ZOOKEEPER_CONNECT": "z:1"}, "needs both"),
        (
            {"FLAMEPIPE_STATE_BACKEND": "redis"},
            r"state_backend='redis' is not a state backend: use one of memory, file, rocksdb "
            r"\(FLAMEPIPE_STATE_BACKEND\)",
        ),
        ({"FLAMEPIPE_SNAPSHOT_INTERVAL_MS": "0"}, "snapshot_interval_ms=0 must be >= 1"),
        ({"FLAMEPIPE_SNAPSHOT_INTERVAL_MS": "1s"}, "FLAMEPIPE_SNAPSHOT_INTERVAL_MS: expected int"),
    ],
)
def test_bad_values_say_what_to_fix(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        Settings.load(env=env)


def test_snapshot_settings_from_file_and_environment(tmp_path: Path) -> None:
    cfg = tmp_path / "fp.toml"
    cfg.write_text(
        '[flamepipe]\nstate_backend = "rocksdb"\nsnapshot_dir = "/mnt/shared/snaps"\n'
        "snapshot_interval_ms = 250\n"
    )
    settings = Settings.load(cfg, env={})
    assert settings.state_backend == "rocksdb"
    assert settings.snapshot_path == Path("/mnt/shared/snaps")
    assert settings.snapshot_interval_ms == 250
    env = {"FLAMEPIPE_STATE_BACKEND": "memory", "FLAMEPIPE_SNAPSHOT_DIR": "none"}
    settings = Settings.load(cfg, env=env, state_dir=tmp_path)
    assert settings.state_backend == "memory"
    assert settings.snapshot_dir is None
    assert settings.snapshot_path == tmp_path / "snapshots"


def test_unknown_key_in_file_suggests_the_right_one(tmp_path: Path) -> None:
    cfg = tmp_path / "fp.toml"
    cfg.write_text("kafka_prot = 1\n")
    with pytest.raises(ConfigError, match="did you mean 'kafka_port'"):
        Settings.load(cfg, env={})


def test_the_slot_width_is_the_pipelines_not_a_setting(tmp_path: Path) -> None:
    cfg = tmp_path / "fp.toml"
    cfg.write_text("delta_ms = 20\n")
    with pytest.raises(ConfigError, match=r"'delta_ms' is not a setting: .*Pipeline\(name"):
        Settings.load(cfg, env={})
    with pytest.raises(ConfigError, match="'delta_ms' is not a setting"):
        Settings.load(env={}, delta_ms=20)


def test_missing_or_broken_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        Settings.load(tmp_path / "nope.toml", env={})
    bad = tmp_path / "bad.toml"
    bad.write_text("kafka_port = = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        Settings.load(bad, env={})


def test_every_declared_check_names_a_setting_and_every_least_value_is_refused_below() -> None:
    from dataclasses import fields

    from framework.config import settings as module

    names = {f.name for f in fields(Settings)}
    declared = {*module._PORTS, *module._LEAST, *module._ONE_OF}
    assert declared <= names, f"checks of no setting: {sorted(declared - names)}"
    for name, (least, _) in module._LEAST.items():
        with pytest.raises(ConfigError, match=rf"^{name}={least - 1} must be >= {least}"):
            Settings(**{name: least - 1})  # type: ignore[arg-type]
