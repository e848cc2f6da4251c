"""Record authentication: an HMAC on every record flamepipe writes, checked before it reads.

Internal records are pickles (frames, changelogs, acker checkpoints) or move time (acks,
heartbeats, node times, min times, bundle headers): decoding a forged one could run code
or stop the output for good. So every record flamepipe writes carries a header
``fp.mac`` = ``<key id>.<HMAC-SHA256>`` under the pipeline's secret key, over the topic,
the Kafka key, the value and every other header, in that order, each length-prefixed::

    b"fp-mac-1" || u32 len(topic) || topic || i32 len(key) or -1 || key
               || i32 len(value) or -1 || value
               || for each header but fp.mac: u32 len(name) || name || i32 len(v) or -1 || v

Binding the topic means a record copied to another topic (another pipeline's, another
epoch's) does not verify there. A reader checks the MAC before it decodes anything
(`Keyring.verify`); what fails is never decoded (docs/security.md says what each reader
does with it: the dead-letter topic or a counted, logged refusal).

A `Keyring` holds one or more keys: the first signs, every one verifies, so a key can be
rotated without stopping (docs/security.md, "Rotating the key"; `framework.config.secrets`
reads them). A key id is the first 8 hex digits of the key's SHA-256, so naming a key
never reveals it. The process's keyring is installed
once (`install`) by whatever starts flamepipe in it: a runner, a service command, a stage
task from its context.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import struct
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from framework.errors import ConfigError

MAC_HEADER = "fp.mac"
"""Header of every record flamepipe writes: ``<key id>.<tag>`` (ASCII id, raw tag)."""

_log = logging.getLogger(__name__)

_DOMAIN = b"fp-mac-1"
_TAG_BYTES = 16  # 128 bits of HMAC-SHA256: forging one takes 2^128 tries
_MIN_KEY_BYTES = 16
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")

HeaderList = Sequence[tuple[str, bytes | str | None]]


def _key_id(key: bytes) -> bytes:
    return hashlib.sha256(key).hexdigest()[:8].encode()


@dataclass(frozen=True, slots=True)
class Keyring:
    """The pipeline's keys: ``keys[0]`` signs, any verifies. ``repr`` shows ids only."""

    keys: tuple[bytes, ...] = field(repr=False)
    ids: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        if not self.keys:
            raise ConfigError("a keyring needs at least one key")
        for key in self.keys:
            if len(key) < _MIN_KEY_BYTES:
                raise ConfigError(
                    f"a pipeline key of {len(key)} bytes is too short: use >= 32 random bytes"
                )
        object.__setattr__(self, "ids", tuple(_key_id(k) for k in self.keys))

    def sign(
        self, topic: str, key: bytes | None, value: bytes | None, headers: HeaderList = ()
    ) -> bytes:
        """The ``fp.mac`` header value of a record, with the signing key."""
        return self.ids[0] + b"." + _tag(self.keys[0], topic, key, value, headers)

    def sign_many(
        self, topic: str, rows: Iterable[tuple[bytes | None, bytes, bytes]], header: str
    ) -> list[bytes]:
        """`sign` of each ``(key, value, header value)`` record whose one header is
        ``header``: the same ``fp.mac`` values, with the per-record work in one loop (a
        last stage signs every output item: 8.2 -> 3.5 us an item with the meta's
        encoding, `framework.wire.bundles.signed_items`)."""
        secret = self.keys[0]
        base = _bases.get((secret, topic)) or _base(secret, topic)
        named: list[bytes] = []
        _field(named, header)
        prefix = b"".join(named)
        kid = self.ids[0] + b"."
        pack, join, copy = _I32.pack, b"".join, base.copy
        out: list[bytes] = []
        append = out.append
        for key, value, extra in rows:
            mac = copy()
            mac.update(
                join((
                    _NONE if key is None else pack(len(key)), key or b"",
                    pack(len(value)), value, prefix, pack(len(extra)), extra,
                ))
            )  # fmt: skip
            append(kid + mac.digest()[:_TAG_BYTES])
        return out

    def verify(
        self, topic: str, key: bytes | None, value: bytes | None, headers: HeaderList | None
    ) -> bool:
        """True if the record's ``fp.mac`` is a valid tag under one of the keys."""
        if not headers:
            return False
        found = [v for name, v in headers if name == MAC_HEADER]
        if len(found) != 1 or found[0] is None:
            return False
        mac = found[0].encode() if isinstance(found[0], str) else bytes(found[0])
        kid, dot, tag = mac.partition(b".")
        if not dot or len(tag) != _TAG_BYTES:
            return False
        for key_id, secret in zip(self.ids, self.keys, strict=True):
            if hmac.compare_digest(kid, key_id):
                expected = _tag(secret, topic, key, value, headers)
                return hmac.compare_digest(tag, expected)
        return False


_NONE = _I32.pack(-1)
_bases: dict[tuple[bytes, str], Any] = {}
"""Per key and topic, the HMAC state after the domain and the topic: a tag copies it
instead of deriving the key's pads again (the barrier tags one record per output item;
6.2 -> 4.7 us a tag, and one ``update`` of the joined fields instead of one per length and
field). Topics per process are few: the stage's outputs, a barrier's sinks."""


def _field(parts: list[bytes], data: bytes | str | None) -> None:
    if data is None:
        parts.append(_NONE)
        return
    raw = data.encode() if isinstance(data, str) else data
    parts.append(_I32.pack(len(raw)))
    parts.append(raw)


def _base(secret: bytes, topic: str) -> Any:
    mac = hmac.new(secret, _DOMAIN, hashlib.sha256)
    parts: list[bytes] = []
    _field(parts, topic)
    mac.update(b"".join(parts))
    # The C object under the wrapper when there is one (OpenSSL): its copy and update
    # skip a Python call each (measured: 2.1 -> 1.5 us a tag).
    base = getattr(mac, "_hmac", None) or mac
    if len(_bases) >= 1024:  # a reader of many topics: start again rather than grow
        _bases.clear()
    _bases[(secret, topic)] = base
    return base


_names: dict[str, bytes] = {}  # a header name's length-prefixed bytes (few names exist)


def _tag(
    secret: bytes, topic: str, key: bytes | None, value: bytes | None, headers: HeaderList
) -> bytes:
    base = _bases.get((secret, topic)) or _base(secret, topic)
    if isinstance(key, str) or isinstance(value, str):  # not what writers pass; still valid
        parts: list[bytes] = []
        _field(parts, key)
        _field(parts, value)
    else:
        pack = _I32.pack
        parts = [
            _NONE if key is None else pack(len(key)),
            key or b"",
            _NONE if value is None else pack(len(value)),
            value or b"",
        ]
    for name, header in headers:
        if name == MAC_HEADER:
            continue
        prefixed = _names.get(name)
        if prefixed is None:
            named: list[bytes] = []
            _field(named, name)
            prefixed = b"".join(named)
            if len(_names) < 256:
                _names[name] = prefixed
        parts.append(prefixed)
        _field(parts, header)
    mac = base.copy()
    mac.update(b"".join(parts))
    return mac.digest()[:_TAG_BYTES]  # type: ignore[no-any-return]


_installed: list[Keyring] = []  # the process's keyring, once installed


def install(keyring: Keyring) -> None:
    """Make ``keyring`` the one this process signs and verifies with."""
    _installed[:] = [keyring]


def installed() -> Keyring | None:
    """The process's keyring, or None before `install`."""
    return _installed[0] if _installed else None


def current() -> Keyring:
    """The process's keyring; `ConfigError` if nothing installed one (fails closed)."""
    if not _installed:
        raise ConfigError(
            "no pipeline key installed in this process: start pipelines through a runner or "
            "a flamepipe command (or framework.runners.keys.install_keys(settings))"
        )
    return _installed[0]


def signed(
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]] = (),
) -> tuple[tuple[str, bytes], ...]:
    """``headers`` with the record's ``fp.mac`` under the process's keyring appended.

    Headers that already end with an ``fp.mac`` are returned as they are: the record was
    signed where its bytes were made (a last stage signs each output item, so the
    barrier, one process per sink, only moves them; `framework.wire.bundles`). Passing a
    tag on cannot make a record authentic: readers check it against the record.
    """
    if headers and headers[-1][0] == MAC_HEADER:
        return tuple(headers)
    return (*headers, (MAC_HEADER, current().sign(topic, key, value, headers)))


refused: Counter[str] = Counter()
"""Records refused in this process, per reader (``"acker"``, ``"barrier"``, ...)."""
_LOGGED_FIRST = 10


def authentic(
    reader: str,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: HeaderList | None,
    *,
    where: str,
) -> bool:
    """Whether a record read from ``topic`` may be decoded; a refusal is counted under
    ``reader`` and logged (the first ten, then every thousandth)."""
    if current().verify(topic, key, value, headers):
        return True
    refused[reader] += 1
    count = refused[reader]
    if count <= _LOGGED_FIRST or count % 1000 == 0:
        _log.warning(
            "%s refused %s: no valid %s, not decoded (%d refused by it so far). A forged "
            "record, or a process of this pipeline with another key (FLAMEPIPE_SECRET, "
            "secret_file, <state_dir>/pipeline.key): docs/security.md",
            reader,
            where,
            MAC_HEADER,
            count,
        )
    return False
