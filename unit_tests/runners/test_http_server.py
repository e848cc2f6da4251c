"""The one HTTP layer (`framework.runners.http_server`): answers, failures, ports."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest

from framework.errors import ConfigError
from framework.runners.http_server import HttpServer, Response


def _get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


def _answer(path: str) -> Response:
    if path == "/boom":
        raise RuntimeError("the store is gone")
    if path.startswith("/json"):
        return Response.json(200, {"path": path})
    return Response(404, "text/plain", b"not found\n")


def test_a_get_is_answered_from_its_path_and_a_failing_answer_is_a_500_that_says_why() -> None:
    server = HttpServer("test", _answer)
    server.start()
    try:
        assert _get(server.url + "json?key=1") == (
            200,
            "application/json",
            b'{"path": "/json?key=1"}',
        )
        assert _get(server.url + "nothing")[0] == 404
        status, kind, body = _get(server.url + "boom")
        assert (status, kind) == (500, "text/plain")
        assert body == b"RuntimeError: the store is gone\n"
        assert _get(server.url + "json")[0] == 200, "the server goes on after a failure"
    finally:
        server.stop()
    assert server.url == ""


def test_a_taken_port_is_a_config_error_in_one_line_that_names_the_fix() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = HttpServer("test", _answer, port=port, fix="set some_port to a free port")
        with pytest.raises(ConfigError) as error:
            server.start()
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"cannot serve on 127.0.0.1:{port}")
    assert message.endswith("set some_port to a free port")


def test_stop_releases_the_port() -> None:
    server = HttpServer("test", _answer)
    server.start()
    port = int(server.url.rsplit(":", 1)[1].strip("/"))
    server.stop()
    again = HttpServer("test", _answer, port=port)
    again.start()
    again.stop()
