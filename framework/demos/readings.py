"""Sensor readings stamped by their producers: the event-time demo and tests.

A line is ``"<event ms> <sensor> <value>"``; `windowed_readings` sums each sensor's values
per tumbling window of event time, final ``lateness_ms`` after the window's end; a reading
ingested later than that goes to the dead-letter topic with reason ``late``.
"""

from __future__ import annotations

import random
from typing import Any

from framework.core.graph import Sink, Source
from framework.core.windows import WindowResult
from framework.pipeline import Pipeline, Tumbling


def reading_lines(
    count: int, now_ms: int, *, late_ms: int = 0, sensors: int = 4, seed: int = 1
) -> list[str]:
    """``count`` readings stamped within 150 ms before ``now_ms - late_ms``."""
    rng = random.Random(seed)
    base = now_ms - late_ms
    return [
        f"{base - rng.randrange(150)} s{rng.randrange(sensors)} {rng.randint(1, 9)}"
        for _ in range(count)
    ]


def parse(line: str) -> tuple[int, str, int]:
    """``(event ms, sensor, value)``."""
    stamp, sensor, value = line.split()
    return int(stamp), sensor, int(value)


def event_ms(reading: tuple[int, str, int]) -> int:
    """The reading's event time."""
    return reading[0]


def sensor_of(reading: tuple[int, str, int]) -> str:
    """The reading's sensor: the key."""
    return reading[1]


def total(acc: int, reading: tuple[int, str, int]) -> int:
    """A window's fold: the sum of its values."""
    return acc + reading[2]


def window_row(result: WindowResult) -> list[Any]:
    """``[sensor, window start ms, sum]``."""
    return [result.key, result.start_ms, result.value]


def windowed_readings(
    name: str,
    source: Source,
    sink: Sink,
    *,
    window_ms: int = 200,
    lateness_ms: int = 300,
    updates_ms: int = 0,
) -> Pipeline:
    """Per sensor and event-time window of ``window_ms``, the sum of its readings (again
    for each reading up to ``updates_ms`` late)."""
    p = Pipeline(name)
    readings = p.source(source).map(parse).key_by(sensor_of)
    sums = readings.aggregate(
        Tumbling(window_ms),
        fold=total,
        initial=0,
        event_time=event_ms,
        lateness_ms=lateness_ms,
        updates_ms=updates_ms,
    )
    sums.map(window_row).sink(sink)
    return p
