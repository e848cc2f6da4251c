"""Where a pipeline's Spark checkpoints live: a directory or any Hadoop file-system URI.

A driver restarted on another host resumes only if its checkpoints are where it can read
them: ``checkpoint_uri`` (a shared mount, ``hdfs://namenode/flamepipe``,
``s3a://bucket/flamepipe``) is passed through to Spark, which opens it with Hadoop's
``FileSystem`` for that scheme. Layout (docs/runtime.md, "Checkpoints")::

    <checkpoint_uri>/<app>/e<epoch>/<stage id>/   one Spark checkpoint per stage query
                                   /<stage id>/flamepipe-run-id
                                                  the id namespacing its commit markers

The few files flamepipe writes there itself go through the same Hadoop ``FileSystem``
(the driver's JVM, `_hadoop_fs`), so any scheme Spark can checkpoint to works for them.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from framework.config import Settings
from framework.errors import StateError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_log = logging.getLogger(__name__)
_RUN_ID = "flamepipe-run-id"


def checkpoint_root(settings: Settings) -> str:
    """``settings.checkpoint_uri``, or the local ``<state_dir>/apps`` as a ``file:`` URI."""
    if settings.checkpoint_uri:
        uri = settings.checkpoint_uri.rstrip("/")
        return uri if urlparse(uri).scheme else Path(uri).resolve().as_uri()
    return (settings.state_dir / "apps").resolve().as_uri()


def epoch_checkpoints(settings: Settings, app: str, epoch: int) -> str:
    """The checkpoints of ``app``'s queries in ``epoch`` (a new epoch starts afresh)."""
    return f"{checkpoint_root(settings)}/{app}/e{epoch}"


def read_or_create_run_id(spark: SparkSession, checkpoint: str) -> str:
    """An id kept in the checkpoint: restarts from it keep it, a new checkpoint gets a new one.

    Commit markers are namespaced by it, so a replay from a fresh checkpoint never takes
    its batch 0 for a batch an earlier run committed.

    Step 1: read ``<checkpoint>/flamepipe-run-id`` if it exists.
    Step 2: else create it without overwriting; if another driver won that race, read
            theirs (two drivers on one checkpoint must share one id).
    """
    path = _jvm(spark).org.apache.hadoop.fs.Path(f"{checkpoint}/{_RUN_ID}")
    fs = _hadoop_fs(spark, path)
    # Step 1
    if fs.exists(path):
        return _read(fs, path)
    # Step 2
    run_id = uuid.uuid4().hex
    try:
        out = fs.create(path, False)
        try:
            out.write(run_id.encode())
        finally:
            out.close()
    except Exception as err:  # py4j's error wraps FileAlreadyExistsException and I/O errors
        if fs.exists(path):
            return _read(fs, path)
        raise StateError(f"cannot write {path.toString()}: {err}") from err
    _log.debug("new run id %s in %s", run_id, checkpoint)
    return run_id


def checkpoint_names(spark: SparkSession, checkpoints: str) -> list[str]:
    """The query checkpoints under an epoch's ``checkpoints`` (none if it does not exist)."""
    path = _jvm(spark).org.apache.hadoop.fs.Path(checkpoints)
    fs = _hadoop_fs(spark, path)
    if not fs.exists(path):
        return []
    statuses = fs.listStatus(path)
    return sorted(str(s.getPath().getName()) for s in statuses if s.isDirectory())


def _jvm(spark: SparkSession) -> Any:
    """The session's py4j view of the JVM (py4j's objects are untyped: Any)."""
    jvm = spark._jvm
    if jvm is None:
        raise RuntimeError("the Spark session has no JVM: it was stopped")
    return jvm


def _hadoop_fs(spark: SparkSession, path: Any) -> Any:
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())


def _read(fs: Any, path: Any) -> str:
    stream = fs.open(path)
    try:
        jvm_bytes = stream.readAllBytes()
    finally:
        stream.close()
    text = bytes(jvm_bytes).decode().strip()
    if len(text) != 32:
        raise StateError(f"{path.toString()} does not hold a run id: delete the checkpoint")
    return text
