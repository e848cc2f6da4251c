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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from framework.errors import ConfigError
from framework.runners.observe.figures import Figures
from framework.runners.observe.metrics import FiguresCollector

_log = logging.getLogger(__name__)
_HISTORY = 600


def bind_http(
    host: str, port: int, handler: type[BaseHTTPRequestHandler], fix: str
) -> ThreadingHTTPServer:
    """A threading HTTP server bound to ``host:port``; `ConfigError` in one line saying
    ``fix`` if the port is taken."""
    try:
        httpd = ThreadingHTTPServer((host, port), handler)
    except OSError as exc:
        raise ConfigError(f"cannot serve on {host}:{port} ({exc.strerror}): {fix}") from None
    httpd.daemon_threads = True
    return httpd


def url_of(httpd: ThreadingHTTPServer | None) -> str:
    """``http://host:port/`` of a bound server ("" for none)."""
    if httpd is None:
        return ""
    host, port = httpd.server_address[:2]
    return f"http://{host!s}:{port}/"


class WatchServer:
    """Serves ``figures()`` (see the module docstring)."""

    def __init__(
        self, figures: Callable[[], Figures], *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self._figures = figures
        self._host, self._port = host, port
        self._history: deque[dict[str, Any]] = deque(maxlen=_HISTORY)
        self._lock = threading.Lock()
        self._registry = CollectorRegistry()
        self._registry.register(FiguresCollector(figures))
        self._page = resources.files(__package__).joinpath("page.html").read_bytes()
        self._httpd: ThreadingHTTPServer | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        """``http://host:port/`` once started."""
        return url_of(self._httpd)

    def start(self) -> None:
        """Bind and serve; `ConfigError` in one line if the port is taken."""
        self._httpd = bind_http(
            self._host,
            self._port,
            self._handler(),
            "set ui_port (FLAMEPIPE_UI_PORT) to a free port, or 0 for any",
        )
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._httpd.serve_forever, name="flamepipe-watch", daemon=True),
            threading.Thread(target=self._sample, name="flamepipe-watch-sampler", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        _log.info("pipeline page %s (Prometheus metrics at %smetrics)", self.url, self.url)

    def stop(self) -> None:
        """Stop serving and sampling."""
        self._stop.set()
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        for thread in self._threads:
            thread.join(5)

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

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/":
                    self._send(200, "text/html; charset=utf-8", server._page)
                elif path == "/figures":
                    self._send(200, "application/json", server._feed())
                elif path == "/metrics":
                    self._send(200, CONTENT_TYPE_LATEST, generate_latest(server._registry))
                else:
                    self._send(404, "text/plain", b"not found\n")

            def _send(self, status: int, kind: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                _log.debug("watch server: " + format, *args)

        return Handler
