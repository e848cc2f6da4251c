"""The hand-written Meta writer emits exactly fastavro's bytes and rejects what it can't."""

from __future__ import annotations

import io

import pytest
from fastavro import schemaless_writer
from hypothesis import given
from hypothesis import strategies as st

from framework.core.meta import Meta
from framework.core.time import GlobalTime
from framework.errors import EncodeError
from framework.wire import avro as codec
from framework.wire import meta as metacodec

i64 = st.integers(-(1 << 63), (1 << 63) - 1)
u64 = st.integers(0, (1 << 64) - 1)
metas = st.builds(
    Meta,
    st.builds(GlobalTime, i64, i64, i64),
    st.lists(i64, max_size=70).map(tuple),  # past 63: a count needing two varint bytes
    u64,
    st.booleans(),
)


def _fastavro(meta: Meta) -> bytes:
    out = io.BytesIO()
    record = {
        "gt": {"slot": meta.gt.slot, "front": meta.gt.front, "offset": meta.gt.offset},
        "child_ids": list(meta.child_ids),
        "trace": meta.trace - (1 << 64) if meta.trace >= 1 << 63 else meta.trace,
        "tombstone": meta.tombstone,
    }
    schemaless_writer(out, codec.schema("meta"), record)
    return out.getvalue()


@given(metas)
def test_bytes_equal_fastavro_and_decode_back(meta: Meta) -> None:
    data = metacodec.encode_meta(meta)
    assert data == _fastavro(meta)
    assert codec.decode_meta(data) == meta


@given(st.lists(metas, max_size=8))
def test_in_bulk_the_bytes_are_each_metas(batch: list[Meta]) -> None:
    assert metacodec.encode_metas(batch) == [metacodec.encode_meta(m) for m in batch]


@pytest.mark.parametrize(
    "meta",
    [
        Meta(GlobalTime(1 << 63, 0, 0)),
        Meta(GlobalTime(0, 0, -(1 << 63) - 1)),
        Meta(GlobalTime(0, 0, 0), (1 << 63,)),
        Meta(GlobalTime(0, 0, 0), (), 1 << 64),
        Meta(GlobalTime(0, 0, 0), (), -1),
    ],
)
def test_out_of_range_values_are_encode_errors(meta: Meta) -> None:
    with pytest.raises(EncodeError, match="cannot encode meta"):
        metacodec.encode_meta(meta)
    with pytest.raises(EncodeError, match="cannot encode meta"):
        metacodec.encode_metas([Meta(GlobalTime(1, 2, 3)), meta])
