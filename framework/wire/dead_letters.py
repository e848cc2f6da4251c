"""Dead letters: a record that could not be decoded or processed, with the reason.

A dead letter keeps the original key and value bytes untouched; why and where it failed
  travel in ``fp.dlq.*`` headers (UTF-8 text), so the record can be replayed as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from framework.errors import DecodeError

_REASON, _STAGE, _TOPIC = "fp.dlq.reason", "fp.dlq.stage", "fp.dlq.topic"
_PARTITION, _OFFSET, _TRACEBACK = "fp.dlq.partition", "fp.dlq.offset", "fp.dlq.traceback"
DLQ_HEADERS = (_REASON, _STAGE, _TOPIC, _PARTITION, _OFFSET, _TRACEBACK)
"""Headers of a dead letter, in the order `dead_letter` writes them."""

# The original value may already be close to the broker's size limit; a bounded report
# keeps a dead letter from failing the very transaction it is meant to rescue.
_MAX_REASON = 1_000
_MAX_TRACEBACK = 8_000

Headers = tuple[tuple[str, bytes], ...]
HeaderValue = str | bytes | None


def _clip_head(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _clip_tail(text: str, limit: int) -> str:
    # A traceback's last lines name the error; its first ones are the outermost frames.
    return text if len(text) <= limit else "...\n" + text[len(text) - limit + 4 :]


def dead_letter(  # noqa: PLR0917 - one record's coordinates, as the task has them
    original_key: bytes | None,
    original_value: bytes | None,
    reason: str,
    stage: str,
    topic: str,
    partition: int,
    offset: int,
    traceback: str,
) -> tuple[bytes | None, bytes | None, Headers]:
    """``(key, value, headers)`` of the dead letter of record ``topic[partition]@offset``.

    Key and value are the original bytes; the reason (first 1000 characters) and the
    traceback (last 8000) are clipped so the letter stays writable.
    """
    texts = (
        _clip_head(reason, _MAX_REASON),
        stage,
        topic,
        str(partition),
        str(offset),
        _clip_tail(traceback, _MAX_TRACEBACK),
    )
    headers = tuple((name, text.encode()) for name, text in zip(DLQ_HEADERS, texts, strict=True))
    return original_key, original_value, headers


class MessageLike(Protocol):
    """The part of a ``confluent_kafka.Message`` that `read_dead_letter` reads."""

    def key(self) -> bytes | None:
        """The record key."""

    def value(self) -> bytes | None:
        """The record value."""

    def headers(self) -> Mapping[str, HeaderValue] | Sequence[tuple[str, HeaderValue]] | None:
        """The record headers: pairs in order, or a mapping."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A dead letter as read back: the original record, and where and why it failed."""

    key: bytes | None
    value: bytes | None
    reason: str
    stage: str
    topic: str
    partition: int
    offset: int
    traceback: str


def _text(name: str, raw: HeaderValue) -> str:
    if raw is None or isinstance(raw, str):
        return raw or ""
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise DecodeError(f"dead-letter header {name} is not UTF-8: {exc}") from exc


def _header_texts(message: MessageLike) -> dict[str, str]:
    raw = message.headers() or ()
    pairs = raw.items() if isinstance(raw, Mapping) else raw
    texts = {name: _text(name, value) for name, value in pairs if name in DLQ_HEADERS}
    missing = [name for name in DLQ_HEADERS if name not in texts]
    if missing:
        raise DecodeError(f"not a dead letter: headers {', '.join(missing)} missing")
    return texts


def _integer(texts: dict[str, str], name: str) -> int:
    try:
        return int(texts[name])
    except ValueError:
        raise DecodeError(f"dead-letter header {name} is not an integer: {texts[name]!r}") from None


def read_dead_letter(message: MessageLike) -> DeadLetter:
    """The `DeadLetter` in a record of a dead-letter topic; `DecodeError` if it is none."""
    texts = _header_texts(message)
    return DeadLetter(
        key=message.key(),
        value=message.value(),
        reason=texts[_REASON],
        stage=texts[_STAGE],
        topic=texts[_TOPIC],
        partition=_integer(texts, _PARTITION),
        offset=_integer(texts, _OFFSET),
        traceback=texts[_TRACEBACK],
    )
