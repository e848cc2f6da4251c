"""The warm-up task: what a Python worker imports before its first stage task."""

from __future__ import annotations

import os
import sys

import pyarrow as pa
import pytest

from framework.runners.spark.warmup import _warm, _warm_plain


def test_a_warmup_task_imports_the_stage_modules_and_the_given_ones() -> None:
    sys.modules.pop("colorsys", None)  # a small standard module nothing here imports

    batches = [pa.RecordBatch.from_pylist([{"id": 0}])]
    (out,) = list(_warm(("colorsys",), iter(batches)))

    assert "colorsys" in sys.modules
    assert "framework.runners.spark.tasks" in sys.modules
    row = out.to_pylist()[0]
    assert row["pid"] == os.getpid()
    assert row["seconds"] >= 0.0


def test_a_module_that_cannot_be_imported_fails_the_task() -> None:
    with pytest.raises(ModuleNotFoundError, match="no_such_module_here"):
        list(_warm(("no_such_module_here",), iter([])))


def test_a_plain_warmup_task_imports_the_continuous_task_module() -> None:
    sys.modules.pop("colorsys", None)

    (row,) = list(_warm_plain(("colorsys",), iter([0])))

    assert "colorsys" in sys.modules
    assert "framework.runners.spark.continuous_tasks" in sys.modules
    assert row["pid"] == os.getpid() and row["seconds"] >= 0.0
