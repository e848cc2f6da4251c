"""Which modules go to the executors, and a function that cannot travel fails on the driver."""

from __future__ import annotations

import importlib
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from framework import Pipeline, PipelineError
from framework.runners.spark.shipping import referenced_modules, ship, user_roots
from framework.testing import ListSink, ListSource

JOBS = """
from framework import Pipeline
from framework.testing import ListSink, ListSource
from helpers.words import split

def pipeline():
    p = Pipeline("shipped")
    p.source(ListSource([], topic="lines")).flat_map(split).map(str.upper).sink(ListSink())
    return p
"""


@pytest.fixture
def user_code(tmp_path: Path) -> Iterator[Path]:
    """``jobs.py`` and a package ``helpers`` in a directory of their own, importable."""
    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "__init__.py").write_text("")
    (tmp_path / "helpers" / "words.py").write_text("def split(line):\n    return line.split()\n")
    (tmp_path / "helpers" / "__pycache__").mkdir()
    (tmp_path / "helpers" / "__pycache__" / "junk.py").write_text("")
    (tmp_path / "jobs.py").write_text(JOBS)
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("jobs", "helpers", "helpers.words"):
            sys.modules.pop(name, None)


class _Context:
    def __init__(self) -> None:
        self.added: list[str] = []

    def addPyFile(self, path: str) -> None:  # noqa: N802 - Spark's name
        self.added.append(path)


class _Spark:
    def __init__(self) -> None:
        self.sparkContext = _Context()


def test_the_user_modules_a_pipeline_names_are_shipped_whole(user_code: Path) -> None:
    graph = importlib.import_module("jobs").pipeline().graph()
    modules = referenced_modules(graph)
    assert {"helpers.words", "framework.runners.inprocess.endpoints"} <= modules
    assert user_roots(modules) == {"helpers": user_code / "helpers"}
    spark = _Spark()
    shipment = ship(spark, graph, user_code / "run")
    assert shipment.zip_path is not None
    assert spark.sparkContext.added == [str(shipment.zip_path)]
    with zipfile.ZipFile(shipment.zip_path) as zf:
        assert sorted(zf.namelist()) == ["helpers/__init__.py", "helpers/words.py"]


def test_a_new_epoch_in_the_same_context_ships_the_same_file_once(user_code: Path) -> None:
    """A replay or a stall recovery starts the next epoch in the running driver: Spark
    refuses a file name added from another path, so the zip is named by its content and
    added to a context once; changed code is another file."""
    graph = importlib.import_module("jobs").pipeline().graph()
    spark = _Spark()
    first = ship(spark, graph, user_code / "code")
    again = ship(spark, graph, user_code / "code")
    assert first.zip_path == again.zip_path
    assert spark.sparkContext.added == [str(first.zip_path)]
    other = _Spark()  # a new context (a restarted driver) gets it again
    assert ship(other, graph, user_code / "code").zip_path == first.zip_path
    assert other.sparkContext.added == [str(first.zip_path)]
    (user_code / "helpers" / "words.py").write_text(
        "def split(line):\n    return line.split(',')\n"
    )
    changed = ship(spark, graph, user_code / "code")
    assert changed.zip_path != first.zip_path
    assert spark.sparkContext.added == [str(first.zip_path), str(changed.zip_path)]


RUNNER_JOBS = """
from framework import Pipeline
from framework.testing import ListSink, ListSource
import textops

def shout(line):
    return textops.loud(line)

def pipeline():
    p = Pipeline("indirect")
    p.source(ListSource([], topic="lines")).map(shout).sink(ListSink())
    return p
"""


TEXTOPS = """
from helpers.words import split

def loud(line):
    return " ".join(split(line)).upper()
"""


def test_the_modules_a_shipped_module_imports_are_shipped_too(user_code: Path) -> None:
    """``shout`` travels by reference to ``runner_jobs``, which calls ``textops`` (never
    named by the pickle) on the executor: both go, and what ``textops`` imports too."""
    (user_code / "runner_jobs.py").write_text(RUNNER_JOBS)
    (user_code / "textops.py").write_text(TEXTOPS)
    try:
        graph = importlib.import_module("runner_jobs").pipeline().graph()
        assert user_roots(referenced_modules(graph)) == {
            "runner_jobs": user_code / "runner_jobs.py"
        }
        spark = _Spark()
        shipment = ship(spark, graph, user_code / "run")
        assert sorted(shipment.roots) == ["helpers", "runner_jobs", "textops"]
        assert shipment.zip_path is not None
        with zipfile.ZipFile(shipment.zip_path) as zf:
            assert {"runner_jobs.py", "textops.py", "helpers/words.py"} <= set(zf.namelist())
    finally:
        for name in ("runner_jobs", "textops"):
            sys.modules.pop(name, None)


def test_installed_standard_and_own_modules_stay_home() -> None:
    assert user_roots(["json", "pytest", "framework.core.ops", "connectors", "__main__"]) == {}


def test_nothing_to_ship_adds_nothing(tmp_path: Path) -> None:
    p = Pipeline("plain")
    p.source(ListSource([], topic="lines")).map(str.upper).sink(ListSink())
    spark = _Spark()
    assert ship(spark, p.graph(), tmp_path).zip_path is None
    assert spark.sparkContext.added == []


def test_a_function_that_cannot_be_pickled_is_named_on_the_driver() -> None:
    lock = threading.Lock()

    def locked(line: str) -> str:
        with lock:
            return line

    p = Pipeline("unpicklable")
    p.source(ListSource([], topic="lines")).map(locked, name="locked").sink(ListSink())
    with pytest.raises(PipelineError, match=r"\(locked\): fn .*locked.* cannot be sent"):
        referenced_modules(p.graph())
