"""Serdes: how payloads become Kafka record bytes and back.

A serde must be deterministic (equal objects give equal bytes: a replay must write the
same output byte for byte) and picklable (Spark ships it to its executors). ``loads``
raises only `DecodeError`, with a short reason, so a bad record can become a dead letter;
``dumps`` of an object the serde cannot encode raises `PipelineError`.

A `TopicSerde` (the Schema Registry serdes of `connectors`) also learns the topic and the
side (key or value) it serves from the source or sink that holds it, and checks its
registry before anything starts.

`Pickle` is for flamepipe's internal topics only: unpickling runs code, so it must never
read a topic that anyone but flamepipe writes.
"""

from __future__ import annotations

import io
import json
import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from framework.errors import DecodeError, EncodeError, PipelineError


@runtime_checkable
class Serde(Protocol):
    """Turns payloads into bytes (`dumps`) and back (`loads`)."""

    def dumps(self, obj: object) -> bytes:
        """The bytes of ``obj``; `PipelineError` if this serde cannot encode it."""
        ...

    def loads(self, data: bytes) -> Any:
        """The object in ``data``; `DecodeError` if the bytes are not one."""
        ...


@runtime_checkable
class TopicSerde(Serde, Protocol):
    """A serde whose bytes depend on the topic and side it serves (a registry subject)."""

    def for_topic(self, topic: str, *, key: bool) -> Serde:
        """This serde for the key (``key=True``) or the value of ``topic``."""
        ...

    def check(self, *, writes: bool) -> None:
        """Fail fast, before a pipeline starts: `ConfigError` with the fix if the serde
        cannot work (its registry unreachable; ``writes``: its schema refused)."""
        ...


def bind_serde(serde: Serde, topic: str, *, key: bool) -> Serde:
    """``serde`` for one side of ``topic``: a `TopicSerde` bound to it, any other as is."""
    return serde.for_topic(topic, key=key) if isinstance(serde, TopicSerde) else serde


def _cannot_encode(serde: str, obj: object, reason: object) -> EncodeError:
    return EncodeError(f"{serde} cannot encode {type(obj).__name__}: {reason}")


@dataclass(frozen=True, slots=True)
class Utf8:
    """Text as UTF-8."""

    def dumps(self, obj: object) -> bytes:
        """The UTF-8 bytes of the string ``obj``."""
        if not isinstance(obj, str):
            raise _cannot_encode("Utf8", obj, "not a str")
        try:
            return obj.encode()
        except UnicodeEncodeError as exc:  # lone surrogates
            raise _cannot_encode("Utf8", obj, exc) from exc

    def loads(self, data: bytes) -> str:
        """The text in ``data``."""
        try:
            return bytes(data).decode()
        except (UnicodeDecodeError, TypeError) as exc:
            raise DecodeError(f"not UTF-8: {exc}") from exc


_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), allow_nan=False, check_circular=False
)


def _canonical_encoder() -> Callable[[Any], str]:
    """``_CANONICAL.encode``, built once: `json.JSONEncoder.encode` makes a new C encoder on
    every call, which cost more than the encoding of a small payload (a barrier's profile:
    10 % of its CPU). The C encoder is CPython's; elsewhere the plain method is used.
    Without the circular check a cycle ends in `RecursionError`, which `Json` reports."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _CANONICAL.encode
    iterencode = make(
        None,
        _CANONICAL.default,
        json.encoder.encode_basestring_ascii,
        None,
        ":",
        ",",
        True,
        False,
        False,
    )  # markers, default, encoder, indent, separators, sort_keys, skipkeys, allow_nan

    def encode(obj: object) -> str:
        if isinstance(obj, str):  # what JSONEncoder.encode does for a bare string
            return json.encoder.encode_basestring_ascii(obj)
        return "".join(iterencode(obj, 0))

    return encode


_encode = _canonical_encoder()


@dataclass(frozen=True, slots=True)
class Json:
    """JSON as UTF-8: sorted keys, no spaces, so equal objects give equal bytes."""

    def dumps(self, obj: object) -> bytes:
        """The canonical JSON bytes of ``obj`` (NaN and infinities are refused)."""
        try:
            text = _encode(obj)
        except (TypeError, ValueError, RecursionError) as exc:
            raise _cannot_encode("Json", obj, exc) from exc
        return text.encode()

    def loads(self, data: bytes) -> Any:
        """The object in the JSON text ``data``."""
        try:
            return json.loads(bytes(data).decode())
        except (ValueError, TypeError, RecursionError) as exc:
            raise DecodeError(f"not JSON: {_short(exc)}") from exc


@dataclass(frozen=True, slots=True)
class Bytes:
    """Raw bytes, unchanged."""

    def dumps(self, obj: object) -> bytes:
        """``obj`` as bytes (bytes, bytearray or memoryview)."""
        if not isinstance(obj, bytes | bytearray | memoryview):
            raise _cannot_encode("Bytes", obj, "not bytes-like")
        return bytes(obj)

    def loads(self, data: bytes) -> bytes:
        """``data`` as bytes."""
        try:
            return bytes(data)
        except TypeError as exc:
            raise DecodeError(f"not bytes: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Pickle:
    """Python objects by pickle protocol 5: flamepipe's internal topics only."""

    def dumps(self, obj: object) -> bytes:
        """The pickle of ``obj``."""
        try:
            return pickle.dumps(obj, protocol=5)
        except Exception as exc:  # pickling reports failures with many exception types
            raise _cannot_encode("Pickle", obj, exc) from exc

    def loads(self, data: bytes) -> Any:
        """The object pickled in ``data``."""
        try:
            return pickle.loads(data)
        except Exception as exc:  # garbage makes pickle raise almost anything
            raise DecodeError(f"not a pickle: {type(exc).__name__}: {_short(exc)}") from exc


@dataclass(frozen=True, slots=True)
class AvroSerde:
    """Records of one Avro schema, schemaless (the topic fixes the schema)."""

    schema: Mapping[str, Any]
    _parsed: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            parsed = parse_schema(dict(self.schema), named_schemas={})
        except Exception as exc:  # fastavro reports bad schemas with many exception types
            raise PipelineError(f"bad Avro schema: {exc}") from exc
        object.__setattr__(self, "_parsed", parsed)

    def dumps(self, obj: object) -> bytes:
        """The Avro bytes of ``obj``."""
        out = io.BytesIO()
        try:
            schemaless_writer(out, self._parsed, obj)
        except Exception as exc:  # fastavro reports bad data with many exception types
            raise _cannot_encode("AvroSerde", obj, exc) from exc
        return out.getvalue()

    def loads(self, data: bytes) -> Any:
        """The record in ``data``; trailing bytes are an error."""
        try:
            buf = io.BytesIO(data)
            record = schemaless_reader(buf, self._parsed, None)
        except Exception as exc:  # fastavro signals bad bytes with many exception types
            raise DecodeError(f"not Avro: {type(exc).__name__}: {_short(exc)}") from exc
        left = len(buf.getbuffer()) - buf.tell()
        if left:
            raise DecodeError(f"not Avro: {left} trailing bytes")
        return record


def _short(exc: BaseException, limit: int = 200) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[: limit - 3] + "..."
