"""The per-process client cache: create once, evict and close the least recently used,
never hand a forked child its parent's clients."""

from __future__ import annotations

import multiprocessing

from framework.kafka.cache import ProcessCache


def test_creates_once_and_evicts_least_recently_used() -> None:
    closed: list[str] = []
    cache: ProcessCache[str, str] = ProcessCache(closed.append, limit=2)
    made: list[str] = []

    def make(key: str) -> str:
        made.append(key)
        return key.upper()

    assert cache.get("a", lambda: make("a")) == "A"
    assert cache.get("a", lambda: make("a")) == "A"
    cache.get("b", lambda: make("b"))
    cache.get("a", lambda: make("a"))  # a is now the most recent
    cache.get("c", lambda: make("c"))
    assert made == ["a", "b", "c"]
    assert closed == ["B"]
    assert len(cache) == 2
    assert cache.discard("a") == "A"
    assert closed == ["B"]
    cache.clear()
    assert closed == ["B", "C"]
    assert len(cache) == 0


def _child(cache: ProcessCache[str, object], queue: multiprocessing.Queue[bool]) -> None:
    parent_value = object()
    value = cache.get("k", lambda: parent_value)
    queue.put(value is parent_value)


def test_a_forked_child_does_not_see_the_parents_values() -> None:
    cache: ProcessCache[str, object] = ProcessCache(lambda _: None)
    cache.get("k", object)
    context = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[bool] = context.Queue()
    child = context.Process(target=_child, args=(cache, queue))
    child.start()
    child.join(10)
    assert queue.get(timeout=5) is True
    assert len(cache) == 1


def test_clear_all_closes_the_values_of_every_cache_of_the_process() -> None:
    closed: list[str] = []
    first: ProcessCache[str, str] = ProcessCache(closed.append)
    second: ProcessCache[str, str] = ProcessCache(closed.append)
    first.get("a", lambda: "A")
    second.get("b", lambda: "B")
    ProcessCache.clear_all()
    assert sorted(closed) == ["A", "B"]
    assert len(first) == len(second) == 0
