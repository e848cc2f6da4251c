"""The file sink's stores without a server: which directories open which store, and how
the WebHDFS store sorts the NameNode's refusals and tries transient ones again (the
server side runs in integration_tests/test_external_sinks.py, against a MiniDFSCluster)."""

from __future__ import annotations

import io
import json
import urllib.error
from email.message import Message
from pathlib import Path

import pytest

from connectors._stores import (
    LocalStore,
    WebHdfsStore,
    _NotFoundError,
    _remote_error,
    _TransientError,
    open_store,
)
from framework.errors import SinkError


def refusal(code: int, exception: str, message: str) -> urllib.error.HTTPError:
    body = json.dumps({"RemoteException": {"exception": exception, "message": message}})
    return urllib.error.HTTPError(
        "http://nn/x", code, "refused", Message(), io.BytesIO(body.encode())
    )


def test_paths_and_file_uris_open_a_local_store(tmp_path: Path) -> None:
    for given in (str(tmp_path), tmp_path.as_uri()):
        store = open_store(given)
        assert isinstance(store, LocalStore) and store.root == tmp_path


def test_webhdfs_uris_name_the_namenodes_rest_api() -> None:
    store = open_store("webhdfs://nn.example:9870/data/out/", user="etl")
    assert isinstance(store, WebHdfsStore)
    assert (store._base, store.root, store.user) == (
        "http://nn.example:9870/webhdfs/v1",
        "/data/out",
        "etl",
    )


def test_refusals_are_sorted_and_the_servers_stack_left_out() -> None:
    assert isinstance(
        _remote_error("w", "x", refusal(404, "FileNotFoundException", "gone")), _NotFoundError
    )
    for name in ("SafeModeException", "StandbyException", "RetriableException"):
        assert isinstance(_remote_error("w", "x", refusal(403, name, "later")), _TransientError)
    denied = _remote_error("w", "x", refusal(403, "AccessControlException", "denied\n\tat org.X"))
    assert not isinstance(denied, _TransientError)
    assert "hdfs_user" in str(denied) and "org.X" not in str(denied)


def test_transient_failures_are_tried_again_until_retry_s() -> None:
    store = WebHdfsStore("webhdfs://nn:9870/x", retry_s=5)
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise _TransientError("w: WebHDFS SafeModeException on x: starting")
        return "done"

    assert store._retrying("test", flaky) == "done" and len(calls) == 3
    store.retry_s = 0.3

    def down() -> None:
        raise _TransientError("w: WebHDFS unreachable")

    with pytest.raises(SinkError, match=r"unreachable \(still so after 0.3 s of tries\)"):
        store._retrying("test", down)

    def refused() -> None:
        calls.append(1)
        raise SinkError("w: refused")

    calls.clear()
    with pytest.raises(SinkError, match="refused"):
        store._retrying("test", refused)
    assert len(calls) == 1  # a refusal is not tried again
