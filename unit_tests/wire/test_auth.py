"""Record MACs: what they bind, rotation, and refusals counted."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from framework.errors import ConfigError
from framework.wire import auth

KEY = b"0123456789abcdef0123456789abcdef"
RING = auth.Keyring((KEY,))
HEADERS = (("fp.frame", b"1"),)
Headers = tuple[tuple[str, bytes], ...]


def _mac(ring: auth.Keyring = RING) -> tuple[tuple[str, bytes], ...]:
    return (*HEADERS, (auth.MAC_HEADER, ring.sign("t", b"k", b"v", HEADERS)))


def test_a_signed_record_verifies() -> None:
    assert RING.verify("t", b"k", b"v", _mac())


@given(
    st.lists(
        st.tuples(st.none() | st.binary(max_size=40), st.binary(max_size=200), st.binary()),
        max_size=6,
    ),
    st.sampled_from(["t", "out", "\u00e9t\u00e9"]),
)
def test_signing_many_records_gives_each_ones_tag(
    rows: list[tuple[bytes | None, bytes, bytes]], topic: str
) -> None:
    """`Keyring.sign_many` is `sign` of each record whose one header it names."""
    tags = RING.sign_many(topic, rows, "fp.meta")
    assert tags == [RING.sign(topic, k, v, (("fp.meta", h),)) for k, v, h in rows]
    for (key, value, header), tag in zip(rows, tags, strict=True):
        assert RING.verify(topic, key, value, (("fp.meta", header), (auth.MAC_HEADER, tag)))


@pytest.mark.parametrize(
    ("topic", "key", "value", "headers"),
    [
        ("t2", b"k", b"v", None),  # copied to another topic
        ("t", b"k2", b"v", None),
        ("t", None, b"v", None),
        ("t", b"k", b"v2", None),
        ("t", b"k", None, None),
        ("t", b"k", b"v", (("fp.frame", b"2"),)),  # a header changed
        ("t", b"k", b"v", ()),  # a header removed
    ],
)
def test_changing_anything_the_mac_covers_fails(
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: tuple[tuple[str, bytes], ...] | None,
) -> None:
    mac = _mac()[-1]
    sent = (*(HEADERS if headers is None else headers), mac)
    assert not RING.verify(topic, key, value, sent)


def test_missing_doubled_or_malformed_macs_fail() -> None:
    good = _mac()[-1]
    assert not RING.verify("t", b"k", b"v", HEADERS)
    assert not RING.verify("t", b"k", b"v", None)
    assert not RING.verify("t", b"k", b"v", (*HEADERS, good, good))
    assert not RING.verify("t", b"k", b"v", (*HEADERS, (auth.MAC_HEADER, b"nodot")))
    assert not RING.verify("t", b"k", b"v", (*HEADERS, (auth.MAC_HEADER, None)))


def test_rotation_the_first_key_signs_every_key_verifies() -> None:
    new = b"fedcba9876543210fedcba9876543210"
    rotated = auth.Keyring((new, KEY))
    assert rotated.verify("t", b"k", b"v", _mac(RING))  # old records still read
    assert rotated.sign("t", b"k", b"v", HEADERS).startswith(rotated.ids[0] + b".")
    assert not RING.verify("t", b"k", b"v", _mac(rotated))  # the old ring lacks the new key


def test_keys_never_show_in_repr_and_short_keys_are_refused() -> None:
    assert KEY.decode() not in repr(RING)
    with pytest.raises(ConfigError, match="too short"):
        auth.Keyring((b"short",))
    with pytest.raises(ConfigError):
        auth.Keyring(())


def test_a_refusal_is_counted_per_reader() -> None:
    before = auth.refused["test reader"]
    assert not auth.authentic("test reader", "t", b"k", b"v", HEADERS, where="t[0]@1")
    assert auth.authentic("test reader", "t", None, b"v", auth.signed("t", None, b"v"), where="x")
    assert auth.refused["test reader"] == before + 1


def test_tags_keep_their_wire_format() -> None:
    # Tags of records written by earlier versions must still verify: pinned values.
    ring = auth.Keyring((b"k" * 32,))
    assert (
        ring.sign("t", b"key", b"val", (("fp.meta", b"m"),)).hex()
        == "35653331386638632e3c7e5e6c63dc4f0c00028f28248a49ad"
    )
    assert (
        ring.sign("t", None, None, ()).hex() == "35653331386638632e7bdf775e3278ee617cb00f94dadf242c"
    )
