import pytest

from framework.local.servers import DEFAULT_JVM_FLAGS, JVM_FLAGS_VARIABLE, local_jvm_flags


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
