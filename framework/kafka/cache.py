"""Per-process caches of Kafka clients, safe across fork and bounded in size.

Spark reuses its Python workers across tasks, so producers (with their initialised
transactional ids) and consumers are worth keeping. A librdkafka client does not survive
``fork``: a cache filled in another process is dropped, never used. The least recently
used entry beyond ``limit`` is closed, because each client owns threads and sockets.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, ClassVar, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ProcessCache(Generic[K, V]):
    """Values by key, created on first use, at most ``limit`` of them, this process only."""

    _all: ClassVar[weakref.WeakSet[ProcessCache[Any, Any]]] = weakref.WeakSet()

    @classmethod
    def clear_all(cls) -> None:
        """`clear` every cache of this process: before its broker goes away (tests, a
        shutdown), so no cached client keeps reconnecting to it until the process exits."""
        for cache in list(cls._all):
            cache.clear()

    def __init__(self, close: Callable[[V], None], limit: int = 64) -> None:
        """``close`` releases an evicted or cleared value; it must not raise."""
        ProcessCache._all.add(self)
        self._close = close
        self._limit = limit
        self._values: OrderedDict[K, V] = OrderedDict()
        self._pid = os.getpid()
        self._lock = threading.Lock()
        # A fork while another thread holds the lock would leave it held in the child.
        # The hook holds the cache weakly: a dropped cache must not live on in it.
        ref = weakref.ref(self)

        def renew_lock() -> None:
            cache = ref()
            if cache is not None:
                cache._lock = threading.Lock()

        os.register_at_fork(after_in_child=renew_lock)

    def get(self, key: K, create: Callable[[], V]) -> V:
        """The value of ``key``, made by ``create`` if this process has none yet."""
        evicted: list[V] = []
        with self._lock:
            self._forget_other_process()
            value = self._values.get(key)
            if value is None:
                value = self._values[key] = create()
                while len(self._values) > self._limit:
                    evicted.append(self._values.popitem(last=False)[1])
            self._values.move_to_end(key)
        for old in evicted:
            self._close(old)
        return value

    def peek(self, key: K) -> V | None:
        """The value of ``key`` if this process made one, without making it."""
        with self._lock:
            self._forget_other_process()
            return self._values.get(key)

    def discard(self, key: K) -> V | None:
        """Remove ``key`` without closing its value; returns it (None if absent)."""
        with self._lock:
            self._forget_other_process()
            return self._values.pop(key, None)

    def clear(self) -> None:
        """Close and forget every value of this process."""
        with self._lock:
            self._forget_other_process()
            values = list(self._values.values())
            self._values.clear()
        for value in values:
            self._close(value)

    def __len__(self) -> int:
        with self._lock:
            self._forget_other_process()
            return len(self._values)

    def _forget_other_process(self) -> None:
        # Clients inherited through fork belong to the parent: never close or use them.
        pid = os.getpid()
        if pid != self._pid:
            self._values = OrderedDict()
            self._pid = pid
