"""The watch server of a pipeline process: a live page, its JSON feed, Prometheus metrics.

One small HTTP server per process (the driver of ``flamepipe run`` or ``demo``, and each
``flamepipe acker`` / ``barrier``), on ``ui_host:ui_port`` (127.0.0.1 and a free port by
default; the address is logged):

* ``/``: the live pipeline page (``page.html``): the stage graph with figures on it and
  plots of throughput, min-time lag and latency over the last ten minutes;
* ``/figures``: the current `Figures` and the last ten minutes of them (one a second), JSON;
* ``/metrics``: Prometheus text (`FiguresCollector`).

Protocol of the sampler thread:

1. Every second, take one `Figures` and append it to the history (600 kept).
2. Stop when the server stops.

Example::

    >>> from framework.runners.observe.figures import Figures
    >>> server = WatchServer(lambda: Figures("demo", 0), port=0)
    >>> server.start(); server.url.startswith("http://127.0.0.1:")
    True
    >>> server.stop()
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Callable
from importlib import resources
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from framework.runners.http_server import HttpServer, Response
from framework.runners.observe.figures import Figures
from framework.runners.observe.metrics import FiguresCollector

_log = logging.getLogger(__name__)
_HISTORY = 600


class WatchServer:
    """Serves ``figures()`` (see the module docstring)."""

    def __init__(
        self, figures: Callable[[], Figures], *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self._figures = figures
        self._history: deque[dict[str, Any]] = deque(maxlen=_HISTORY)
        self._lock = threading.Lock()
        self._registry = CollectorRegistry()
        self._registry.register(FiguresCollector(figures))
        self._page = resources.files(__package__).joinpath("page.html").read_bytes()
        self._http = HttpServer(
            "flamepipe-watch",
            self._answer,
            host=host,
            port=port,
            fix="set ui_port (FLAMEPIPE_UI_PORT) to a free port, or 0 for any",
        )
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://host:port/`` once started."""
        return self._http.url

    def start(self) -> None:
        """Bind and serve; `ConfigError` in one line if the port is taken."""
        self._http.start()
        self._stop.clear()
        self._sampler = threading.Thread(
            target=self._sample, name="flamepipe-watch-sampler", daemon=True
        )
        self._sampler.start()
        _log.info("pipeline page %s (Prometheus metrics at %smetrics)", self.url, self.url)

    def stop(self) -> None:
        """Stop serving and sampling."""
        self._stop.set()
        self._http.stop()
        if self._sampler is not None:
            self._sampler.join(5)

    def _sample(self) -> None:
        # Step 1
        while not self._stop.wait(1.0):
            try:
                snapshot = self._figures().as_json()
            except Exception:  # a part stopping under the sampler: skip this second
                _log.debug("figures not available this second", exc_info=True)
                continue
            with self._lock:
                self._history.append(snapshot)
        # Step 2: the loop ends with the server

    def _feed(self) -> bytes:
        now = self._figures().as_json()
        with self._lock:
            history = list(self._history)
        return json.dumps({"now": now, "history": history}).encode()

    def _answer(self, path: str) -> Response:
        route = path.split("?", 1)[0]
        if route == "/":
            return Response(200, "text/html; charset=utf-8", self._page)
        if route == "/figures":
            return Response(200, "application/json", self._feed())
        if route == "/metrics":
            return Response(200, CONTENT_TYPE_LATEST, generate_latest(self._registry))
        return Response(404, "text/plain", b"not found\n")
