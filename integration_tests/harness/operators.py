"""One pipeline with the data-engineering operators over a text source with record
context: event-time windows (late items are dead letters), session windows, dedup and a
windowed left join, merged into one sink. Lines are ``"<id> <words...>"``."""

from __future__ import annotations

from typing import Any

from framework import Pipeline, Session, Tumbling


def stamped(message: Any) -> list[Any]:
    """The line with an event time up to 1.2 s before its append."""
    line_id = int(message.value.split()[0])
    return [message.value, message.timestamp_ms - (line_id % 5) * 300]


def stamped_words(item: list[Any]) -> list[list[Any]]:
    line, at = item
    line_id, *words = line.split()
    return [[word, line_id, at] for word in words]


def word(item: list[Any]) -> str:
    return str(item[0])


def event_ms(item: list[Any]) -> int:
    return int(item[2])


def count(n: int, _: Any) -> int:
    return n + 1


def event_row(result: Any) -> list[Any]:
    return ["event", result.key, result.start_ms, result.value]


def session_row(result: Any) -> list[Any]:
    return ["session", result.key, result.start_ms, result.end_ms, result.value]


def first_row(item: list[Any]) -> list[Any]:
    return ["first", item[0], item[1]]


def first_word(item: list[Any]) -> list[Any]:
    line_id, first, *_ = item[0].split()
    return [first, line_id]


def last_word(item: list[Any]) -> list[Any]:
    *_, last = item[0].split()
    return [last, item[0].split()[0]]


def join_row(joined: Any) -> list[Any]:
    right = None if joined.right is None else joined.right[1]
    return ["join", joined.key, joined.left[1], right]


def operators(app: str, source: Any, sink: Any) -> Pipeline:
    """The merged pipeline (see the module docstring)."""
    p = Pipeline(app)
    lines = p.source(source).map(stamped)
    timed, sessions, firsts, joins = lines.broadcast(4)
    by_event = (
        timed.flat_map(stamped_words)
        .key_by(word)
        .aggregate(Tumbling(1000), fold=count, initial=0, event_time=event_ms, lateness_ms=500)
        .map(event_row)
    )
    runs = (
        sessions.flat_map(stamped_words)
        .key_by(word)
        .aggregate(Session(100), fold=count, initial=0)
        .map(session_row)
    )
    first = firsts.flat_map(stamped_words).key_by(word).dedup().map(first_row)
    openings, endings = joins.broadcast(2)
    joined = (
        openings.map(first_word)
        .join_window(endings.map(last_word), Tumbling(500), key=word, how="left")
        .map(join_row)
    )
    by_event.merge(runs, first, joined).sink(sink)
    return p
