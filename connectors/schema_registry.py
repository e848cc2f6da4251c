"""Serdes in the Confluent Schema Registry wire format: Avro, JSON Schema and Protobuf.

A record's bytes are a zero magic byte, the 4-byte id of the writer's schema in the
registry, then the encoded value (Protobuf puts its message indexes first): what
Confluent's serializers in every language, Kafka Connect, ksqlDB, Flink's
``avro-confluent`` format and Apicurio Registry's Confluent-compatible API write and read.
The encoding is confluent-kafka's own (`confluent_kafka.schema_registry`); these classes
make it a flamepipe `Serde`:

- **Subjects** follow the topic (``<topic>-value`` / ``<topic>-key``, Confluent's
  TopicNameStrategy): the `KafkaSource` or `KafkaSink` that holds the serde binds it to its
  topic. ``subject=`` names one instead.
- **Fail fast**: before a pipeline starts, a sink registers its schema (or, with
  ``auto_register=False``, checks it is registered) and a source checks the registry
  answers; a refusal (an incompatible schema, say) is a `ConfigError` with the registry's
  reason.
- **Guarantees**: writing is deterministic for a registered schema (the same payload gives
  the same bytes on replay: same schema id, same encoding; a Protobuf message with map
  fields is the exception). Reading checks the value against the writer's schema; bytes
  that are not this format, name an unknown schema id or do not match it raise
  `DecodeError` (the record goes to the dead-letter topic with the reason). A registry that
  cannot be reached raises `RegistryError`: the task fails and is retried, and no record
  becomes a dead letter for it.
- **Schema evolution**: ``ConfluentAvro(reader_schema=...)`` reads every writer's version
  into one reader schema (Avro's resolution: a field added with a default gets it).
- **Secrets**: ``registry`` holds the client's settings (``basic.auth.user.info``, TLS
  files); they are never in a ``repr`` or a message.

Each process (the driver, every executor) keeps one registry client per URL and settings,
and each serde caches its serializer; schemas fetched by id are cached by the client.

>>> from connectors import ConfluentAvro, KafkaSink, KafkaSource
>>> bid = {"type": "record", "name": "Bid",
...        "fields": [{"name": "auction", "type": "long"}, {"name": "price", "type": "long"}]}
>>> source = KafkaSource("bids", value=ConfluentAvro("http://127.0.0.1:8081"))
>>> sink = KafkaSink("big-bids", value=ConfluentAvro("http://127.0.0.1:8081", bid))
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from framework.errors import ConfigError, DecodeError, EncodeError, PipelineError, RegistryError
from framework.wire.serde import Serde

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.serialization import SerializationContext

_CLIENTS: dict[tuple[str, tuple[tuple[str, Any], ...]], SchemaRegistryClient] = {}
_CLIENTS_LOCK = threading.Lock()
# Unknown schema ids seen per process: a record naming one is a dead letter without asking
# the registry again (a writer of garbage must not turn every record into an HTTP request).
_UNKNOWN_IDS_MAX = 10_000


def _client(url: str, settings: Mapping[str, Any]) -> SchemaRegistryClient:
    """The process's registry client for ``url`` and ``settings``."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    key = (url, tuple(sorted(settings.items())))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = SchemaRegistryClient({**settings, "url": url})
        return client


def _schema_text(schema: str | Mapping[str, Any] | None) -> str | None:
    """A schema as JSON text: a str is JSON already, except a bare Avro type name
    (``"string"``, ``"long"``) which becomes one; a dict is dumped."""
    if schema is None:
        return None
    if isinstance(schema, str):
        text = schema.strip()
        return text if text[:1] in ("{", "[", '"') else json.dumps(text)
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "http_status_code", None)
    return status if isinstance(status, int) else None


@dataclass(frozen=True, eq=False, kw_only=True)
class _Registered:
    """What every registry serde holds besides its format (see the module docstring)."""

    url: str
    subject: str | None = None
    registry: Mapping[str, Any] = field(default_factory=dict, repr=False)
    auto_register: bool = True
    topic: str | None = field(default=None, repr=False)
    is_key: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
            raise PipelineError(
                f"{type(self).__name__}: url must be the registry's http(s) URL, got {self.url!r}"
            )
        if "url" in self.registry:
            raise PipelineError(f"{type(self).__name__}: give the URL as url=, not in registry")

    # -- binding and checks (framework.wire.serde.TopicSerde) --------------------------

    def for_topic(self, topic: str, *, key: bool) -> Serde:
        """This serde for the key or the value of ``topic``."""
        bound: Serde = replace(self, topic=topic, is_key=key)
        return bound

    def check(self, *, writes: bool) -> None:
        """`ConfigError` if the registry does not answer or (``writes``) refuses or lacks
        the schema this serde writes."""
        subject = self._subject()
        try:
            if writes and self._writes_schema():
                self._register_or_find(subject)
            else:
                self._registry().get_subjects()
        except ConfigError:
            raise
        except Exception as exc:  # httpx, SchemaRegistryError: the registry's answer
            raise ConfigError(
                f"{type(self).__name__} for subject {subject!r} at {self.url}: {_why(exc)}; "
                f"{_fix(exc)}"
            ) from exc

    # -- the byte format --------------------------------------------------------------

    def dumps(self, obj: object) -> bytes:
        """The registry-framed bytes of ``obj``."""
        subject = self._subject()  # an unbound serde is a PipelineError, not a dead letter
        if not self._writes_schema():
            raise EncodeError(f"{type(self).__name__} for {subject} has no schema to write")
        try:
            data = self._serialize(obj)
        except Exception as exc:  # the serializer's and the registry's own exception types
            raise self._encode_error(exc) from exc
        if not isinstance(data, bytes):
            raise EncodeError(f"{type(self).__name__} cannot encode {type(obj).__name__}")
        return data

    def _serialize(self, obj: object) -> Any:
        try:
            return self._serializer()(obj, self._context())
        except Exception as exc:
            if _status(exc) != 409:
                raise
        # Two tasks registering one schema at once: Apicurio answers 409 to the one that
        # lost the race (seen once in CI, two source partitions' first records); asked
        # again, the registry finds the version the winner made. A real incompatibility is
        # refused again and fails as before.
        return self._serializer()(obj, self._context())

    def loads(self, data: bytes) -> Any:
        """The value in registry-framed ``data``."""
        data = bytes(data)
        if len(data) < 5 or data[0] != 0:
            raise DecodeError(
                f"not the Schema Registry wire format (magic byte 0 and a 4-byte schema id; "
                f"{len(data)} bytes starting {data[:1].hex() or 'empty'})"
            )
        schema_id = int.from_bytes(data[1:5], "big")
        unknown = self._cache().setdefault("unknown", set())
        if schema_id in unknown:
            raise DecodeError(f"unknown schema id {schema_id} in {self.url}")
        try:
            return self._deserializer()(data, self._context())
        except Exception as exc:  # the deserializer's and the registry's own exception types
            raise self._decode_error(exc, schema_id, unknown) from exc

    # -- what each format provides -------------------------------------------------------

    def _writes_schema(self) -> bool:
        raise NotImplementedError

    def _new_serializer(self, conf: dict[str, Any]) -> Callable[[Any, Any], bytes]:
        raise NotImplementedError

    def _new_deserializer(self) -> Callable[[bytes, Any], Any]:
        raise NotImplementedError

    def _schema_for_check(self) -> tuple[str, str]:
        raise NotImplementedError

    # -- helpers ------------------------------------------------------------------------

    def _subject(self) -> str:
        if self.subject is not None:
            return self.subject
        if self.topic is None:
            raise PipelineError(
                f"{type(self).__name__} is not bound to a topic: give it to a KafkaSource or "
                "KafkaSink, or name subject="
            )
        return f"{self.topic}-{'key' if self.is_key else 'value'}"

    def _registry(self) -> SchemaRegistryClient:
        return _client(self.url, self.registry)

    def _cache(self) -> dict[str, Any]:
        cache: dict[str, Any] | None = self.__dict__.get("_local")
        if cache is None:
            cache = {}
            object.__setattr__(self, "_local", cache)
        return cache

    def _context(self) -> SerializationContext:
        ctx = self._cache().get("context")
        if ctx is None:
            from confluent_kafka.serialization import MessageField, SerializationContext

            side = MessageField.KEY if self.is_key else MessageField.VALUE
            ctx = self._cache()["context"] = SerializationContext(self.topic or "", side)
        return ctx

    def _serializer(self) -> Callable[[Any, Any], bytes]:
        made = self._cache().get("serializer")
        if made is None:
            subject = self._subject()
            conf: dict[str, Any] = {
                "auto.register.schemas": self.auto_register,
                "use.latest.version": False,
                "subject.name.strategy": lambda _ctx, _name: subject,
            }
            made = self._cache()["serializer"] = self._new_serializer(conf)
        return made

    def _deserializer(self) -> Callable[[bytes, Any], Any]:
        made = self._cache().get("deserializer")
        if made is None:
            made = self._cache()["deserializer"] = self._new_deserializer()
        return made

    def _register_or_find(self, subject: str) -> None:
        from confluent_kafka.schema_registry import Schema

        schema_type, text = self._schema_for_check()
        schema = Schema(text, schema_type)
        if self.auto_register:
            self._registry().register_schema(subject, schema)
        else:
            self._registry().lookup_schema(subject, schema)

    def _encode_error(self, exc: BaseException) -> Exception:
        status = _status(exc)
        if status is None and _is_transport(exc):
            return RegistryError(f"{type(self).__name__}: {self.url} unreachable: {_why(exc)}")
        if status is not None and (status >= 500 or status in (401, 403, 404, 409, 422)):
            # Not the record's fault: the registry refused the schema or the client.
            return RegistryError(
                f"{type(self).__name__} for {self._subject()}: {_why(exc)}; {_fix(exc)}"
            )
        return EncodeError(f"{type(self).__name__} cannot encode: {_why(exc)}")

    def _decode_error(self, exc: BaseException, schema_id: int, unknown: set[int]) -> Exception:
        status = _status(exc)
        if status == 404:
            if len(unknown) < _UNKNOWN_IDS_MAX:
                unknown.add(schema_id)
            return DecodeError(f"unknown schema id {schema_id} in {self.url}")
        if (status is None and _is_transport(exc)) or (status is not None and status >= 500):
            return RegistryError(f"{type(self).__name__}: {self.url} unreachable: {_why(exc)}")
        if status is not None and status in (401, 403):
            return RegistryError(f"{type(self).__name__}: {self.url} refused: {_why(exc)}")
        return DecodeError(f"not {self._format()} of schema {schema_id}: {_why(exc)}")

    def _format(self) -> str:
        return type(self).__name__.removeprefix("Confluent")

    def __getstate__(self) -> dict[str, Any]:
        # Serializers and clients hold sockets and locks: every process makes its own.
        return {k: v for k, v in self.__dict__.items() if k != "_local"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


def _is_transport(exc: BaseException) -> bool:
    names = {klass.__name__ for klass in type(exc).__mro__}
    return bool(names & {"TransportError", "ConnectError", "TimeoutException", "OSError"})


def _why(exc: BaseException, limit: int = 300) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fix(exc: BaseException) -> str:
    status = _status(exc)
    if status == 409:
        return "make the schema compatible with the subject's versions, or change its compatibility"
    if status == 404:
        return "register the schema first, or let the sink register it (auto_register=True)"
    if status in (401, 403):
        return "give the registry's credentials in registry= (basic.auth.user.info)"
    if status == 422:
        return "the registry cannot read the schema: check that it is valid"
    return "start the registry or fix the URL"


@dataclass(frozen=True, eq=False)
class ConfluentAvro(_Registered):
    """Avro values in the registry's wire format.

    ``schema`` (JSON text or a dict) is what a sink writes; a source reads each record with
    its writer's schema, or with ``reader_schema`` to resolve every version into one.

    >>> from connectors import ConfluentAvro, KafkaSource
    >>> v2 = {"type": "record", "name": "Bid", "fields": [
    ...     {"name": "price", "type": "long"},
    ...     {"name": "currency", "type": "string", "default": "EUR"}]}
    >>> bids = KafkaSource("bids", value=ConfluentAvro("http://127.0.0.1:8081", reader_schema=v2))
    """

    url: str
    schema: str | Mapping[str, Any] | None = None
    reader_schema: str | Mapping[str, Any] | None = None

    def _writes_schema(self) -> bool:
        return self.schema is not None

    def _schema_for_check(self) -> tuple[str, str]:
        return "AVRO", _schema_text(self.schema) or ""

    def _new_serializer(self, conf: dict[str, Any]) -> Callable[[Any, Any], bytes]:
        from confluent_kafka.schema_registry.avro import AvroSerializer

        return AvroSerializer(self._registry(), _schema_text(self.schema), conf=conf)  # type: ignore[no-any-return]

    def _new_deserializer(self) -> Callable[[bytes, Any], Any]:
        from confluent_kafka.schema_registry.avro import AvroDeserializer

        return AvroDeserializer(self._registry(), _schema_text(self.reader_schema))  # type: ignore[no-any-return]


@dataclass(frozen=True, eq=False)
class ConfluentJson(_Registered):
    """JSON values with a JSON Schema in the registry's wire format.

    A sink validates each value against ``schema`` before writing it (a value that does not
    match is a dead letter); a source validates against the writer's schema.

    >>> from connectors import ConfluentJson, KafkaSink
    >>> person = {"type": "object", "properties": {"name": {"type": "string"}},
    ...           "required": ["name"]}
    >>> sink = KafkaSink("people", value=ConfluentJson("http://127.0.0.1:8081", person))
    """

    url: str
    schema: str | Mapping[str, Any] | None = None

    def _writes_schema(self) -> bool:
        return self.schema is not None

    def _schema_for_check(self) -> tuple[str, str]:
        return "JSON", _schema_text(self.schema) or ""

    def _new_serializer(self, conf: dict[str, Any]) -> Callable[[Any, Any], bytes]:
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        return JSONSerializer(_schema_text(self.schema), self._registry(), conf=conf)  # type: ignore[no-any-return]

    def _new_deserializer(self) -> Callable[[bytes, Any], Any]:
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer

        return JSONDeserializer(None, schema_registry_client=self._registry())  # type: ignore[no-any-return]


@dataclass(frozen=True, eq=False)
class ConfluentProtobuf(_Registered):
    """Protobuf messages of ``message_type`` (a generated message class) in the registry's
    wire format. A source yields ``message_type`` instances (``google.protobuf.
    json_format.MessageToDict`` in a ``map`` makes dicts); a sink writes instances.

    The class must be importable where Spark runs the stage (a module shipped with the
    job, like any user code).
    """

    url: str
    message_type: type

    def __post_init__(self) -> None:
        super().__post_init__()
        if getattr(self.message_type, "DESCRIPTOR", None) is None:
            raise PipelineError(
                f"ConfluentProtobuf: message_type must be a generated Protobuf message class, "
                f"got {self.message_type!r}"
            )

    def _writes_schema(self) -> bool:
        return True

    def _register_or_find(self, subject: str) -> None:
        # Protobuf schemas may import others (references): the serializer registers them
        # the way it will when writing, so the check writes nothing of its own.
        self._serializer()(self.message_type(), self._context())

    def _new_serializer(self, conf: dict[str, Any]) -> Callable[[Any, Any], bytes]:
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

        conf = {**conf, "use.deprecated.format": False}
        return ProtobufSerializer(self.message_type, self._registry(), conf=conf)  # type: ignore[no-any-return]

    def _new_deserializer(self) -> Callable[[bytes, Any], Any]:
        from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

        conf = {"use.deprecated.format": False}
        return ProtobufDeserializer(self.message_type, conf, self._registry())  # type: ignore[no-any-return]
