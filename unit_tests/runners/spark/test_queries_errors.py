"""What Spark is told when a stage's batch fails: one line a person can act on."""

from __future__ import annotations

from framework.runners.spark.queries import essence

_TRACE = (
    """An error occurred while calling o123.collectToPython.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 failed
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "tasks.py", line 3, in run
framework.errors.ProtocolViolation: lines[0]@5: a record below the heartbeated floor
\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException
"""
    + "\tat frame\\n" * 2000
)


def test_a_flamepipe_error_inside_the_trace_is_the_line() -> None:
    assert essence(Exception(_TRACE)) == (
        "ProtocolViolation: lines[0]@5: a record below the heartbeated floor"
    )


def test_else_the_first_named_error_that_is_not_the_wrapper() -> None:
    text = "An error occurred while calling o1.collect.\n: org.apache.spark.SparkException: Job 5 x"
    assert essence(Exception(text)) == "SparkException: Job 5 x"


def test_else_the_first_line_and_never_more_than_the_limit() -> None:
    assert essence(Exception("x" * 5000 + "\nmore")) == "x" * 500
    assert essence(ValueError("")) == "ValueError"
