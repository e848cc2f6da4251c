"""framework.logs: where log lines go when the application does not say."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from framework import logs


def configure(*args: Any, **kwargs: Any) -> Path | None:
    """`logs.configure` as if the application had not configured logging (pytest's own
    capture handlers on the root logger would count as the application's)."""
    root = logging.getLogger()
    saved, root.handlers = root.handlers, []
    try:
        return logs.configure(*args, **kwargs)
    finally:
        root.handlers = saved


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    """Each test configures from scratch and leaves no handler behind."""

    def reset() -> None:
        for name in ("framework", "connectors", "flamepipe", "kazoo", "py4j"):
            logger = logging.getLogger(name)
            for handler in list(logger.handlers):
                logger.removeHandler(handler)
                handler.close()
            logger.propagate = True
            logger.setLevel(logging.NOTSET)

    reset()
    yield
    reset()


def test_own_lines_reach_the_console_and_the_file_client_lines_only_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = configure(tmp_path)
    assert path == tmp_path / "logs" / "flamepipe.log"
    logging.getLogger("framework.barrier.service").info("bundle 7 out")
    logging.getLogger(logs.CLIENT_LOGGER).error("FAIL|127.0.0.1:1: Connection refused")
    logging.getLogger("kazoo.client").warning("Connection dropped")
    err = capsys.readouterr().err
    assert "flamepipe: bundle 7 out" in err
    assert "Connection refused" not in err and "Connection dropped" not in err
    text = path.read_text()
    assert "bundle 7 out" in text and "Connection refused" in text and "Connection dropped" in text


def test_verbose_shows_client_lines_on_the_console(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configure(tmp_path, verbose=True)
    logging.getLogger(logs.CLIENT_LOGGER).error("FAIL|broker down")
    assert "FAIL|broker down" in capsys.readouterr().err


def test_json_lines_file(tmp_path: Path) -> None:
    path = configure(tmp_path, json_lines=True)
    assert path is not None
    logging.getLogger("framework.acker").warning("refused %d", 3)
    record = json.loads(path.read_text().splitlines()[-1])
    assert record["level"] == "WARNING"
    assert record["logger"] == "framework.acker"
    assert record["message"] == "refused 3"
    assert record["ts"].endswith("Z")


def test_level_hides_info_on_the_console(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configure(tmp_path, level="WARNING")
    logging.getLogger("framework.x").info("quiet")
    logging.getLogger("framework.x").warning("loud")
    err = capsys.readouterr().err
    assert "loud" in err and "quiet" not in err


def test_an_application_that_configured_logging_decides(tmp_path: Path) -> None:
    assert logs.configure(tmp_path) is None  # pytest's capture handlers are on the root
    assert logging.getLogger("framework").handlers == []


def test_a_second_configure_replaces_the_first(tmp_path: Path) -> None:
    configure(tmp_path / "a")
    configure(tmp_path / "b")
    assert len(logging.getLogger("framework").handlers) == 2  # console + one file
    logging.getLogger("framework.y").info("only in b")
    assert "only in b" in (tmp_path / "b" / "logs" / "flamepipe.log").read_text()
    assert "only in b" not in (tmp_path / "a" / "logs" / "flamepipe.log").read_text()


def test_spark_log4j_options_write_a_config_naming_the_log_file(tmp_path: Path) -> None:
    (option,) = logs.spark_log4j_options(tmp_path)
    assert option.startswith("-Dlog4j2.configurationFile=file:")
    config = (tmp_path / "logs" / "log4j2-driver.properties").read_text()
    assert str(tmp_path / "logs" / "spark-driver.log") in config
    assert "appenderRef.console" not in config
    assert "appenderRef.console" in (
        logs.spark_log4j_options(tmp_path, verbose=True)
        and (tmp_path / "logs" / "log4j2-driver.properties").read_text()
    )


@pytest.mark.parametrize(("level", "debug"), [("INFO", False), ("debug", True), ("ERROR", False)])
def test_worker_log_writes_to_a_file_per_process_at_the_drivers_level(
    tmp_path: Path, level: str, debug: bool
) -> None:
    """A worker logs INFO and above, and DEBUG when the driver runs at DEBUG."""
    logs._WORKER_PIDS.clear()
    root = logging.getLogger()
    saved, root.handlers = root.handlers, []
    task = logging.getLogger("framework.plan.task")
    spaces = [logging.getLogger(name) for name in logs._NAMESPACES]
    before = [(logger.handlers[:], logger.level, logger.propagate) for logger in spaces]
    try:
        logs.WorkerLog(str(tmp_path), level=level).install()
        task.warning("dead letter")
        task.info("began")
        task.debug("committed")
    finally:
        root.handlers = saved
        for logger, (handlers, level_was, propagate) in zip(spaces, before, strict=True):
            logger.handlers, logger.propagate = handlers, propagate
            logger.setLevel(level_was)
    (path,) = tmp_path.glob("worker-*.log")
    text = path.read_text()
    assert "dead letter" in text and "began" in text
    assert ("committed" in text) is debug
