"""Queryable state from Python and over HTTP (``flamepipe state serve``).

`open_state` gives a `StateReader` of a pipeline's current epoch (its own min-time view
and committed-slot reader), `StateServer` answers it over HTTP:

* ``GET /state``: the operators with queryable state, ``{"id": "grouping"|"rolling"}``;
* ``GET /state/<operator>?key=<JSON>``: one `StateValue` as JSON (a JSON array key is a
  tuple key); 404 for an operator without state, 400 for a key that is not JSON, 503 if
  the state cannot be read in time (the pipeline is not running).

The server binds 127.0.0.1 by default: the state is the pipeline's data.

    >>> import json, urllib.request
    >>> class Fixed:  # any object with kinds and get() serves
    ...     kinds = {"pairs": "grouping"}
    ...     def get(self, node, key):
    ...         return StateValue(node, key, True, [key, "7"], 3, 30, 0, 0)
    >>> server = StateServer(Fixed(), port=0)
    >>> server.start()
    >>> with urllib.request.urlopen(server.url + 'state/pairs?key=%22w%22') as answer:
    ...     json.loads(answer.read())["value"]
    ['w', '7']
    >>> server.stop()
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from framework.config import Settings
from framework.core.graph import Graph
from framework.errors import ConfigError, DeadlineExceeded, KafkaClientError
from framework.runners.assembly import current_epoch, view_for
from framework.runners.http_server import HttpServer, Response
from framework.runners.keys import install_keys
from framework.runners.snapshots import CommittedSlot
from framework.snapshots.queryable import StateReader, StateValue

_log = logging.getLogger(__name__)


@contextlib.contextmanager
def open_state(
    settings: Settings, graph: Graph, *, timeout_s: float = 10.0
) -> Iterator[StateReader]:
    """A `StateReader` of ``graph``'s current epoch, its view started; closed on exit:
    ``with open_state(settings, graph) as state: state.get("pairs", "word").value``."""
    install_keys(settings)  # changelog records are verified before they are read
    epoch = current_epoch(settings, graph.name)
    view = view_for(settings, graph, epoch).start()
    committed = CommittedSlot(settings.zookeeper, graph.name)
    reader = StateReader(
        settings.kafka_bootstrap, graph, epoch, view, committed=committed, timeout_s=timeout_s
    )
    try:
        view.wait_ready()
        yield reader
    finally:
        reader.close()
        committed.close()
        view.stop()


class _Reader(Protocol):
    kinds: dict[str, str]

    def get(self, node: str, key: object) -> StateValue: ...


def parse_key(text: str) -> object:
    """A key from its JSON text: a JSON array is a tuple key; `ValueError` if not JSON."""

    def tupled(value: object) -> Any:
        return tuple(tupled(v) for v in value) if isinstance(value, list) else value

    return tupled(json.loads(text))


class StateServer:
    """Serves a reader's answers over HTTP (see the module docstring)."""

    def __init__(self, reader: _Reader, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.reader = reader
        self._http = HttpServer(
            "flamepipe-state",
            lambda path: Response.json(*self.answer(path)),
            host=host,
            port=port,
            fix="pass --port a free port, or 0 for any",
        )

    @property
    def url(self) -> str:
        """``http://host:port/`` once started."""
        return self._http.url

    def start(self) -> None:
        """Bind and serve; `ConfigError` in one line if the port is taken."""
        self._http.start()
        _log.info("queryable state at %sstate", self.url)

    def stop(self) -> None:
        """Stop serving."""
        self._http.stop()

    def answer(self, path: str) -> tuple[int, dict[str, Any]]:
        """``(status, JSON body)`` for a request path."""
        parts = urlsplit(path)
        route = [unquote(p) for p in parts.path.strip("/").split("/") if p]
        if route == ["state"]:
            return 200, dict(self.reader.kinds)
        if len(route) != 2 or route[0] != "state":
            return 404, {"error": "GET /state or /state/<operator>?key=<JSON>"}
        keys = parse_qs(parts.query).get("key")
        if not keys:
            return 400, {"error": "give the key as JSON: ?key=%22word%22"}
        try:
            key = parse_key(keys[0])
        except ValueError as exc:
            return 400, {"error": f"key {keys[0]!r} is not JSON: {exc}"}
        try:
            return 200, self.reader.get(route[1], key).as_json()
        except ConfigError as exc:
            return 404, {"error": str(exc)}
        except (DeadlineExceeded, KafkaClientError) as exc:  # a broker restarting, say
            return 503, {"error": str(exc)}
