"""Spark Structured Streaming reads a topic (headers included) and writes another."""

from __future__ import annotations

from typing import Any

from framework.config import Settings
from framework.runners.spark.smoke import run_smoke


def test_spark_streams_topic_to_topic_with_headers(stack: Settings, spark: Any) -> None:
    result = run_smoke(stack, lines=250, progress=False)

    assert result.sent == 250
    assert len(result.received) == 250
    by_key = {key: (value, headers) for key, value, headers in result.received}
    assert set(by_key) == {str(i) for i in range(250)}
    for key, (value, headers) in by_key.items():
        assert value == f"LINE {key}"
        assert headers == [("n", key.encode())]
