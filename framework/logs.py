"""Where flamepipe's log lines go: the one place logging is configured.

Library modules log through ``logging.getLogger(__name__)`` and never print. What the
Kafka client library (librdkafka) says reaches Python logging too, under `CLIENT_LOGGER`
(every client `framework.kafka.clients` makes has it as its ``logger``), so an application
that configures logging (any handler on the root logger) decides everything.

Otherwise `configure` (the command line, `Pipeline.run()`) sets up:

* the console (stderr): flamepipe's own lines at ``level`` (INFO) as
  ``flamepipe: <message>``; the lines of the client libraries (librdkafka, kazoo, py4j:
  `QUIET`) only with ``verbose``;
* ``<state_dir>/logs/flamepipe.log``: INFO and above (or ``level`` if lower), Kafka
  clients included, plain
  text or JSON lines (``json_lines``: one object per line with ``ts``, ``level``,
  ``logger``, ``message``);
* Spark's JVM log goes to ``<state_dir>/logs/spark-driver.log``
  (`spark_log4j_options`, used by the Spark session), shown on the console with ``verbose``.

Example::

    >>> import logging
    >>> logging.getLogger(CLIENT_LOGGER).name
    'flamepipe.kafka-client'
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CLIENT_LOGGER = "flamepipe.kafka-client"
"""The logger librdkafka's lines go to (through the clients' ``logger`` setting)."""
# An application that configures no logging hears nothing of the client library (as with
# any library): without this, Python's last-resort handler would print its warnings.
logging.getLogger(CLIENT_LOGGER).addHandler(logging.NullHandler())
QUIET = (CLIENT_LOGGER, "kazoo", "py4j")
"""Client libraries whose lines go to the log file, and to the console only when verbose:
a broker that is away makes librdkafka log every reconnect (1 168 lines in 30 s)."""
_NAMESPACES = ("framework", "connectors", "flamepipe", "kazoo", "py4j")
_CONFIGURED = "_flamepipe_configured"


class JsonLines(logging.Formatter):
    """One JSON object per record: ``ts`` (ISO 8601 UTC), ``level``, ``logger``, ``message``
    (and ``error`` with the traceback when there is one)."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        out = {
            "ts": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


class _Stderr(logging.Handler):
    """A handler writing to whatever ``sys.stderr`` is at the time: a live console that
    redirects stderr (`framework.runners.observe.console`) then shows log lines above
    itself instead of breaking its picture."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


class _File(logging.FileHandler):
    """A log file that stays closed once closed: a library logging from a finalizer at exit
    (py4j does) must not reopen it, or fail when its directory is gone."""

    def emit(self, record: logging.LogRecord) -> None:
        if not getattr(self, "_closed", False):
            super().emit(record)


class _OwnLines(logging.Filter):
    """Lets flamepipe's lines through, and Kafka clients' only when ``verbose``."""

    def __init__(self, verbose: bool) -> None:
        super().__init__()
        self.verbose = verbose

    def filter(self, record: logging.LogRecord) -> bool:
        return self.verbose or not record.name.startswith(QUIET)


def _level(name: str) -> int:
    """The level named ``name`` (any case; INFO if it names none)."""
    return logging.getLevelNamesMapping().get(name.upper(), logging.INFO)


def log_dir(state_dir: Path) -> Path:
    """``<state_dir>/logs``: flamepipe's log file and Spark's."""
    return state_dir / "logs"


def configure(
    state_dir: Path | None = None,
    *,
    level: int | str = logging.INFO,
    verbose: bool = False,
    json_lines: bool = False,
) -> Path | None:
    """Route flamepipe's logging (see the module docstring); returns the log file's path.

    Does nothing (returns None) if the application configured logging itself; a second
    call replaces what the first set up.
    """
    if logging.getLogger().handlers:
        return None
    if isinstance(level, str):
        level = _level(level)
    kept = min(level, logging.INFO)
    console = _Stderr()
    console.setFormatter(logging.Formatter("flamepipe: %(message)s"))
    console.setLevel(logging.DEBUG if verbose else level)
    console.addFilter(_OwnLines(verbose))
    handlers: list[logging.Handler] = [console]
    path = None
    if state_dir is not None:
        path = log_dir(state_dir) / "flamepipe.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        file = _File(path, encoding="utf-8")
        file.setFormatter(
            JsonLines()
            if json_lines
            else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        )
        file.setLevel(kept)
        handlers.append(file)
    for name in _NAMESPACES:
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if getattr(h, _CONFIGURED, False)]:
            logger.removeHandler(old)
            old.close()
        for handler in handlers:
            setattr(handler, _CONFIGURED, True)
            logger.addHandler(handler)
        logger.setLevel(logging.DEBUG if verbose else kept if path is not None else level)
        logger.propagate = False
    return path


@dataclass(frozen=True, slots=True)
class WorkerLog:
    """Where a Spark Python worker logs: ``<directory>/worker-<host>-<pid>.log`` (the
    driver's ``<state_dir>/logs``, made on the executor's host if missing), and stderr
    too when ``verbose``, at ``level`` and above (the driver's ``log_level``: a DEBUG run
    times every commit of a continuous task). Sent with every task; `install` acts once
    per process."""

    directory: str
    verbose: bool = False
    level: str = "INFO"

    def install(self) -> None:
        """Route this worker process's flamepipe lines (once per process)."""
        if os.getpid() in _WORKER_PIDS or logging.getLogger().handlers:
            return
        _WORKER_PIDS.add(os.getpid())
        handlers: list[logging.Handler] = []
        try:
            directory = Path(self.directory)
            directory.mkdir(parents=True, exist_ok=True)
            name = f"worker-{os.uname().nodename}-{os.getpid()}.log"
            handlers.append(_File(directory / name, encoding="utf-8"))
        except OSError:  # no writable log directory on this host: stderr it is
            pass
        if self.verbose or not handlers:
            handlers.append(logging.StreamHandler(sys.stderr))
        for handler in handlers:
            handler.setFormatter(
                logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
            )
        for name in _NAMESPACES:
            logger = logging.getLogger(name)
            for handler in handlers:
                logger.addHandler(handler)
            logger.setLevel(min(logging.INFO, _level(self.level)))
            logger.propagate = False


_WORKER_PIDS: set[int] = set()  # processes whose worker logging is installed


def show_on_console(level: int = logging.INFO) -> None:
    """Send flamepipe's log lines at ``level`` and above to stderr, unless the application
    configured logging itself (or this ran already)."""
    if any(getattr(h, _CONFIGURED, False) for h in logging.getLogger("framework").handlers):
        return
    configure(level=level)


def spark_log4j_options(state_dir: Path, verbose: bool = False) -> list[str]:
    """JVM options that send Spark's driver log to ``<state_dir>/logs/spark-driver.log``
    (WARN and above also on stderr when ``verbose``)."""
    directory = log_dir(state_dir)
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "log4j2-driver.properties"
    console = "console, " if verbose else ""
    text = "\n".join(
        [
            # WARN: Spark's INFO lines are several per micro-batch.
            "rootLogger.level = warn",
            f"rootLogger.appenderRefs = {console}file",
            "rootLogger.appenderRef.file.ref = file",
            *(["rootLogger.appenderRef.console.ref = console"] if verbose else []),
            "appender.file.type = File",
            "appender.file.name = file",
            f"appender.file.fileName = {directory / 'spark-driver.log'}",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = %d{ISO8601} %p %c{1}: %m%n%ex",
            "appender.console.type = Console",
            "appender.console.name = console",
            "appender.console.target = SYSTEM_ERR",
            "appender.console.filter.threshold.type = ThresholdFilter",
            "appender.console.filter.threshold.level = warn",
            "appender.console.layout.type = PatternLayout",
            "appender.console.layout.pattern = spark: %p %c{1}: %m%n%ex",
            # The level pyspark's gateway compares the root's with: equal, Spark does not
            # print its "Setting default log level" banner on stderr.
            "logger.repl.name = org.apache.spark.repl.Main",
            "logger.repl.level = warn",
            # Spark's own chatty loggers, as in its log4j2 template.
            "logger.jetty.name = org.sparkproject.jetty",
            "logger.jetty.level = warn",
            "logger.parquet.name = org.apache.parquet",
            "logger.parquet.level = error",
            "logger.kafka.name = org.apache.kafka",
            "logger.kafka.level = warn",
            "",
        ]
    )
    if not config.exists() or config.read_text() != text:
        config.write_text(text)
    return [f"-Dlog4j2.configurationFile={config.as_uri()}"]
