"""Where `connectors.FileSink` keeps its files: a local (or mounted) directory, or HDFS.

A store names files by paths relative to the sink's root (``_state.json``,
``_pending/<name>``, ``bucket=<ms>/part-<p>.jsonl``) and offers only what the sink's commit
needs, each step durable when it returns:

* `Store.upload`: a whole file from the local spill directory into the store;
* `Store.replace`: an atomic rename over whatever the target held, parents made;
* `Store.write_atomic`: small content (the sink's state) replaced atomically;
* `Store.read`, `Store.names`, `Store.delete` for recovery.

`open_store` picks the store from the directory's form:

* a path or a ``file://`` URI: `LocalStore` (rename and fsync of the operating system);
* ``webhdfs://<namenode>:<http port>/<path>``: `WebHdfsStore`, HDFS through the NameNode's
  REST API (on by default; port 9870 in Hadoop 3). HDFS renames atomically in the
  NameNode, and a file is on its data nodes once its upload returns (closed), which is the
  durability HDFS gives every closed file. Simple authentication (``user.name``) only.
  A NameNode that is unreachable, starting, in safe mode or standing by is tried again
  with backoff for up to ``retry_s`` (60 s) before the sink stops.

Object stores (``s3://``, ``gs://``, ``abfs://``, ...) are refused: they have no atomic
rename, so a reader could see a file half copied or twice.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import posixpath
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from framework.errors import ConfigError, SinkError
from framework.retries import Retry

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
# Answers that say "not now" rather than "no": a NameNode starting, in safe mode, or a
# standby of an HA pair; and gateways' 502-504.
_TRANSIENT = frozenset(
    {"RetriableException", "SafeModeException", "StandbyException", "HTTP 502", "HTTP 503",
     "HTTP 504"}
)  # fmt: skip
_OBJECT_STORES = ("s3", "s3a", "s3n", "gs", "abfs", "abfss", "wasb", "wasbs", "oss", "cos")


class Store(Protocol):
    """The file operations of the sink's commit (module docstring)."""

    where: str  # the root as the user gave it, for messages

    def upload(self, local: Path, rel: str) -> None:
        """``rel`` holds ``local``'s bytes, durably; ``local`` is gone."""

    def replace(self, rel: str, target: str) -> None:
        """Atomically rename ``rel`` to ``target`` (replaced if present; parents made)."""

    def write_atomic(self, rel: str, data: bytes) -> None:
        """``rel`` holds ``data``: the old content or the new, never a mix."""

    def read(self, rel: str) -> bytes | None:
        """``rel``'s bytes; None when there is no such file."""

    def names(self, rel: str) -> list[str]:
        """The names in directory ``rel`` (made if missing)."""

    def delete(self, rel: str) -> None:
        """Remove file ``rel`` (nothing if absent)."""


def open_store(
    directory: str | os.PathLike[str], user: str | None = None, retry_s: float = 60.0
) -> Store:
    """The store for ``directory`` (a path or a URI); `ConfigError` naming the fix.
    ``user`` and ``retry_s`` are for HDFS (`WebHdfsStore`)."""
    text = os.fspath(directory)
    parts = urllib.parse.urlsplit(text)
    scheme = parts.scheme.lower()
    if not scheme or (len(scheme) == 1 and os.name == "nt"):
        return LocalStore(Path(text), text)
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ConfigError(f"FileSink directory {text!r}: a file:// URI names a local path")
        return LocalStore(Path(urllib.parse.unquote(parts.path)), text)
    if scheme == "webhdfs":
        return WebHdfsStore(text, user, retry_s=retry_s)
    if scheme == "hdfs":
        raise ConfigError(
            f"FileSink directory {text!r}: hdfs:// is not supported (it needs libhdfs); give "
            "the same path through WebHDFS: webhdfs://<namenode>:9870/<path>"
        )
    if scheme in _OBJECT_STORES:
        raise ConfigError(
            f"FileSink directory {text!r}: {scheme}:// is not supported: object stores have "
            "no atomic rename, so readers could see partial or duplicate files; write to "
            "HDFS (webhdfs://) or a mounted filesystem's path"
        )
    raise ConfigError(
        f"FileSink directory {text!r}: {scheme}:// is not supported; give a path, a file:// "
        "URI or webhdfs://<namenode>:9870/<path>"
    )


class LocalStore:
    """A local or mounted directory: ``os.replace`` and fsync."""

    def __init__(self, root: Path, where: str) -> None:
        self.root = root
        self.where = where

    def upload(self, local: Path, rel: str) -> None:
        # The sink's spill directory lies inside the root: a rename, no copy.
        target = self.root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        sync(local)
        os.replace(local, target)
        sync(target.parent)

    def replace(self, rel: str, target: str) -> None:
        path = self.root / target
        path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.root / rel, path)
        sync(path.parent)

    def write_atomic(self, rel: str, data: bytes) -> None:
        path = self.root / rel
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        sync(tmp)
        os.replace(tmp, path)
        sync(path.parent)

    def read(self, rel: str) -> bytes | None:
        path = self.root / rel
        return path.read_bytes() if path.exists() else None

    def names(self, rel: str) -> list[str]:
        path = self.root / rel
        path.mkdir(parents=True, exist_ok=True)
        return sorted(p.name for p in path.iterdir())

    def delete(self, rel: str) -> None:
        (self.root / rel).unlink(missing_ok=True)


class WebHdfsStore:
    """HDFS through WebHDFS (``/webhdfs/v1``) of the NameNode at the URI's host and port.

    A file is uploaded the two-step way WebHDFS prescribes (the NameNode names a data node,
    the bytes go there); renames are the NameNode's ``rename`` with ``OVERWRITE``, atomic.
    Every operation is tried again while it fails transiently (module docstring), each
    try a whole operation: an upload from its first step, a rename whose answer was lost
    found done (its source gone, its target there).
    """

    def __init__(
        self,
        uri: str,
        user: str | None = None,
        timeout_s: float = 60.0,
        retry_s: float = 60.0,
    ) -> None:
        parts = urllib.parse.urlsplit(uri)
        try:
            port = parts.port
        except ValueError:
            port = None
        if not parts.hostname or port is None:
            raise ConfigError(
                f"FileSink directory {uri!r}: webhdfs:// needs the NameNode's HTTP host and "
                "port, e.g. webhdfs://namenode:9870/data/out"
            )
        if parts.query or parts.fragment or parts.username:
            raise ConfigError(
                f"FileSink directory {uri!r}: webhdfs://host:port/path only (give the user "
                "as FileSink(hdfs_user=...) or HADOOP_USER_NAME)"
            )
        self.where = uri
        self.root = posixpath.normpath(urllib.parse.unquote(parts.path) or "/")
        if not self.root.startswith("/"):
            self.root = "/" + self.root
        self._base = f"http://{parts.netloc}/webhdfs/v1"
        self.user = user or os.environ.get("HADOOP_USER_NAME") or getpass.getuser()
        self.timeout_s = timeout_s
        self.retry_s = retry_s

    # -- Store -----------------------------------------------------------------------

    def upload(self, local: Path, rel: str) -> None:
        def attempt() -> None:
            with open(local, "rb") as body:
                self._create(rel, body, os.fstat(body.fileno()).st_size)

        self._retrying(f"upload of {rel}", attempt)
        local.unlink()

    def replace(self, rel: str, target: str) -> None:
        tries = 0

        def attempt() -> None:
            nonlocal tries
            tries += 1
            self._json("PUT", posixpath.dirname(self._path(target)), "MKDIRS")
            try:
                self._json(
                    "PUT", self._path(rel), "RENAME",
                    destination=self._path(target), renameoptions="OVERWRITE",
                )  # fmt: skip
            except _NotFoundError:
                if tries > 1 and self._exists(target) and not self._exists(rel):
                    return  # the try whose answer was lost renamed it
                raise

        self._retrying(f"rename of {rel}", attempt)

    def write_atomic(self, rel: str, data: bytes) -> None:
        self._retrying(f"upload of {rel}.tmp", lambda: self._create(rel + ".tmp", data, len(data)))
        self.replace(rel + ".tmp", rel)

    def read(self, rel: str) -> bytes | None:
        def attempt() -> bytes | None:
            try:
                return self._call("GET", self._path(rel), "OPEN")
            except _NotFoundError:
                return None

        return self._retrying(f"read of {rel}", attempt)

    def names(self, rel: str) -> list[str]:
        def attempt() -> list[str]:
            self._json("PUT", self._path(rel), "MKDIRS")
            listing = self._json("GET", self._path(rel), "LISTSTATUS")
            try:
                return sorted(s["pathSuffix"] for s in listing["FileStatuses"]["FileStatus"])
            except (KeyError, TypeError) as exc:
                raise SinkError(f"{self.where}: unexpected WebHDFS listing of {rel}") from exc

        return self._retrying(f"listing of {rel}", attempt)

    def delete(self, rel: str) -> None:
        self._retrying(
            f"delete of {rel}",
            lambda: self._json("DELETE", self._path(rel), "DELETE", recursive="false"),
        )

    def _exists(self, rel: str) -> bool:
        try:
            self._json("GET", self._path(rel), "GETFILESTATUS")
        except _NotFoundError:
            return False
        return True

    def _retrying(self, what: str, attempt: Callable[[], _T]) -> _T:
        """``attempt()``, again while it fails transiently, for up to ``retry_s``."""
        policy = Retry(
            lambda e: isinstance(e, _TransientError),
            within_s=self.retry_s,
            first_s=0.2,
            factor=2.0,
            most_s=5.0,
        )
        warned = False

        def warn_once(exc: BaseException, _pause_s: float) -> None:
            nonlocal warned
            if not warned:
                _log.warning("%s; trying again for up to %g s", exc, self.retry_s)
                warned = True

        try:
            return policy.call(attempt, warn_once)
        except _TransientError as exc:
            raise SinkError(f"{exc} (still so after {self.retry_s:g} s of tries)") from exc

    # -- WebHDFS ---------------------------------------------------------------------

    def _path(self, rel: str) -> str:
        return posixpath.join(self.root, rel)

    def _create(self, rel: str, body: object, length: int) -> None:
        # Step 1: the NameNode answers with the data node to send the bytes to.
        answer = self._json("PUT", self._path(rel), "CREATE", overwrite="true", noredirect="true")
        location = answer.get("Location") if isinstance(answer, dict) else None
        if not isinstance(location, str):
            raise SinkError(f"{self.where}: WebHDFS CREATE of {rel} named no data node")
        # Step 2: the bytes to the data node; the file is closed when it answers 201.
        request = urllib.request.Request(location, data=body, method="PUT")  # type: ignore[arg-type]
        request.add_header("Content-Type", "application/octet-stream")
        request.add_header("Content-Length", str(length))
        self._send(request, rel)

    def _json(self, method: str, path: str, op: str, **params: str) -> dict[str, Any]:
        body = self._call(method, path, op, **params)
        try:
            answer = json.loads(body) if body else {}
        except ValueError as exc:
            raise SinkError(f"{self.where}: WebHDFS {op} answered no JSON: {body[:200]!r}") from exc
        if op == "MKDIRS" and answer.get("boolean") is False:
            raise SinkError(f"{self.where}: WebHDFS could not make directory {path}")
        if not isinstance(answer, dict):
            raise SinkError(f"{self.where}: WebHDFS {op} answered {body[:200]!r}")
        return answer

    def _call(self, method: str, path: str, op: str, **params: str) -> bytes:
        query = urllib.parse.urlencode({"op": op, "user.name": self.user, **params})
        url = f"{self._base}{urllib.parse.quote(path)}?{query}"
        return self._send(urllib.request.Request(url, method=method), path)

    def _send(self, request: urllib.request.Request, what: str) -> bytes:
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return response.read()  # type: ignore[no-any-return]
        except urllib.error.HTTPError as exc:
            raise _remote_error(self.where, what, exc) from exc
        except OSError as exc:
            raise _TransientError(
                f"{self.where}: WebHDFS unreachable ({exc}); check the NameNode's HTTP "
                "address (webhdfs://<namenode>:9870/<path>)"
            ) from exc


class _NotFoundError(SinkError):
    """A WebHDFS FileNotFoundException (recovery treats it as absent)."""


class _TransientError(SinkError):
    """Worth another try: unreachable, or an answer in ``_TRANSIENT``."""


def _remote_error(where: str, what: str, exc: urllib.error.HTTPError) -> SinkError:
    try:
        remote = json.loads(exc.read())["RemoteException"]
        # The message may carry the server's Java stack: its first line says it all.
        name, message = str(remote["exception"]), str(remote["message"]).split("\n")[0]
    except (ValueError, KeyError, TypeError, OSError):
        name, message = f"HTTP {exc.code}", str(exc.reason)
    if name in _TRANSIENT:
        return _TransientError(f"{where}: WebHDFS {name} on {what}: {message}")
    if name == "FileNotFoundException":
        return _NotFoundError(f"{where}: {what}: {message}")
    if name in ("AccessControlException", "SecurityException"):
        return SinkError(
            f"{where}: HDFS refused {what} ({message}); give a user allowed to write there "
            "(FileSink(hdfs_user=...) or HADOOP_USER_NAME)"
        )
    return SinkError(f"{where}: WebHDFS {name} on {what}: {message}")


def sync(path: Path) -> None:
    """fsync ``path`` (a file or a directory)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
