"""The one HTTP layer of flamepipe's servers: GET only, served by a thread, one address.

The watch server (`framework.runners.observe.server`: the live page, its JSON feed,
Prometheus metrics) and the queryable state's (`framework.operations.queryable_state`) answer
a GET from its path alone; this module binds, serves and stops them. A port that cannot be
bound is a `ConfigError` in one line that names the setting to change; an answer that
raises is a 500 whose body says why, and the server goes on.

Built on the standard library's ``http.server``: two GET-only servers need no framework,
and one would cost every process that imports the runner its start-up
(docs/decisions/libraries.md).

Example::

    >>> server = HttpServer("hello", lambda path: Response(200, "text/plain", b"hi\\n"))
    >>> server.start(); server.url.startswith("http://127.0.0.1:")
    True
    >>> server.stop()
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from framework.errors import ConfigError

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Response:
    """What a GET gets: a status, a Content-Type and the body."""

    status: int
    kind: str
    body: bytes

    @classmethod
    def json(cls, status: int, value: object) -> Response:
        """``value`` as a JSON body."""
        return cls(status, "application/json", json.dumps(value).encode())


Answer = Callable[[str], Response]
"""The request's path (with its query) -> the response."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], name: str, answer: Answer) -> None:
        super().__init__(address, _Handler)
        self.name = name
        self.answer = answer


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        try:
            response = self.server.answer(self.path)
        except Exception as exc:  # the request's failure, not the server's
            _log.warning("%s: GET %s failed", self.server.name, self.path, exc_info=True)
            response = Response(500, "text/plain", f"{type(exc).__name__}: {exc}\n".encode())
        self.send_response(response.status)
        self.send_header("Content-Type", response.kind)
        self.send_header("Content-Length", str(len(response.body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(response.body)

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s: " + format, self.server.name, *args)


class HttpServer:
    """Serves ``answer`` on ``host:port`` (0: any free port) from a thread of its own."""

    def __init__(
        self,
        name: str,
        answer: Answer,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        fix: str = "give it a free port, or 0 for any",
    ) -> None:
        self.name = name
        self._answer = answer
        self._host, self._port, self._fix = host, port, fix
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://host:port/`` once started ("" before)."""
        if self._httpd is None:
            return ""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/"

    def start(self) -> None:
        """Bind and serve; `ConfigError` in one line saying ``fix`` if the port is taken."""
        try:
            self._httpd = _Server((self._host, self._port), self.name, self._answer)
        except OSError as exc:
            raise ConfigError(
                f"cannot serve on {self._host}:{self._port} ({exc.strerror}): {self._fix}"
            ) from None
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name=self.name, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and release the port."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
