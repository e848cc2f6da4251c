"""A real HTTP service on 127.0.0.1 for ``map_async`` tests: latency and failures injected.

``GET /price?line=N`` answers ``{"line": N, "price": 7 * N}`` after ``latency_s``. Every odd
call for a line fails with 503 (so each item's first attempt fails and its retry answers),
and a line in ``broken`` always fails (its item ends in the dead-letter topic).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

__all__ = ["PriceService"]


class PriceService:
    """The service; a context manager that starts it and stops it."""

    def __init__(self, latency_s: float = 0.02, broken: frozenset[int] = frozenset()) -> None:
        self.latency_s = latency_s
        self.broken = broken
        self.calls: Counter[int] = Counter()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def answer(self, line: int) -> tuple[int, bytes]:
        with self._lock:
            self.calls[line] += 1
            call = self.calls[line]
        time.sleep(self.latency_s)
        if line in self.broken or call % 2:
            return 503, b'{"error": "unavailable"}'
        return 200, json.dumps({"line": line, "price": 7 * line}).encode()

    def __enter__(self) -> PriceService:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = parse_qs(urlparse(self.path).query)
                try:
                    line = int(query["line"][0])
                except (KeyError, ValueError):
                    status, body = 400, b'{"error": "give ?line=N"}'
                else:
                    status, body = service.answer(line)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_exc_info: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
