from pathlib import Path

import pytest

from framework.local.servers import (
    DEFAULT_JVM_FLAGS,
    JVM_FLAGS_VARIABLE,
    SparkWorkerSpec,
    local_jvm_flags,
)


def test_default_flags_are_c1_and_serial_gc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(JVM_FLAGS_VARIABLE, raising=False)
    assert local_jvm_flags() == DEFAULT_JVM_FLAGS.split()
    assert "-XX:TieredStopAtLevel=1" in local_jvm_flags()


def test_the_variable_replaces_them_and_empty_means_jvm_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(JVM_FLAGS_VARIABLE, "-XX:+UseG1GC  -Xss1m")
    assert local_jvm_flags() == ["-XX:+UseG1GC", "-Xss1m"]
    monkeypatch.setenv(JVM_FLAGS_VARIABLE, "")
    assert local_jvm_flags() == []


def test_a_local_spark_worker_offers_the_cores_it_is_given(tmp_path: Path) -> None:
    spec = SparkWorkerSpec("spark://127.0.0.1:7077", tmp_path / "w", cores=6)
    argv, _ = spec.argv("java", tmp_path, "marker")
    assert argv[argv.index("--cores") + 1] == "6"
