"""Frames as pickled rows (the wire format) against Arrow IPC, per item, in one process.

A frame carries up to ``FRAME_ITEMS`` items of a shuffle from one stage task to the next
(`framework.wire.frames`). The candidate format puts the meta in Arrow columns (slot,
front, offset, child ids, trace, tombstone, ack, hash) and, since a payload can be any
Python object, the keys and values as one pickle each (Arrow cannot hold an arbitrary
object without a pickle per item). Both are timed for what their two kinds of writers
and readers do:

* **writers**: per item (`FrameBuilder.add`: the grouping's and aggregate's outputs, rows
  of Python values) and on columns (`FrameBuilder.add_columns`: a columnar source stage,
  the meta already in lists);
* **readers**: per item (`decode_frame`: `Meta` and `Keyed` per item, what a grouping
  takes) and in bulk (`frame_rows`: rows as written, what a combinable aggregate's intake
  and the barrier take; for Arrow the columns as NumPy arrays plus the payload lists).

The windowed word count's keyed partials: ``Keyed(word, hash, (word, n))`` with a
one-id child path. CPU microseconds per item, median of ``rounds``:

    .venv/bin/python benchmarks/bench_frames.py [items] [rounds]
"""

from __future__ import annotations

import pickle
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from framework.core.meta import Meta
from framework.core.ops import Keyed
from framework.core.time import GlobalTime
from framework.wire.frames import FrameBuilder, decode_frame, frame_rows

_SCHEMA = pa.schema(
    [
        ("slot", pa.int64()),
        ("front", pa.int64()),
        ("offset", pa.int64()),
        ("child_ids", pa.list_(pa.int64())),
        ("trace", pa.int64()),
        ("tombstone", pa.bool_()),
        ("ack", pa.uint64()),
        ("hash", pa.int64()),
    ]
)


def items(n: int) -> list[tuple[Meta, int, Keyed]]:
    rng = random.Random(7)
    out = []
    for i in range(n):
        word = f"w{int(rng.paretovariate(1.1)) % 50_000}"
        meta = Meta(GlobalTime(1_796_000_000_000 + i // 100, 0, i), (i % 8,), 0x5EED, False)
        out.append((meta, rng.getrandbits(64), Keyed(word, hash(word), (word, 1 + i % 3))))
    return out


def ipc_of_columns(cols: dict[str, Any], keys: list[Any], values: list[Any]) -> bytes:
    batch = pa.record_batch(
        [pa.array(cols[f.name], f.type) for f in _SCHEMA], schema=_SCHEMA
    ).replace_schema_metadata(
        {"payload": pickle.dumps((keys, values), protocol=5)}  # one pickle, not one per item
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue())


def ipc_from_rows(rows: list[tuple[Meta, int, Keyed]]) -> bytes:
    cols: dict[str, list[Any]] = {f.name: [] for f in _SCHEMA}
    keys, values = [], []
    for meta, ack, payload in rows:
        gt = meta[0]
        cols["slot"].append(gt[0])
        cols["front"].append(gt[1])
        cols["offset"].append(gt[2])
        cols["child_ids"].append(meta[1])
        cols["trace"].append(meta[2])
        cols["tombstone"].append(meta[3])
        cols["ack"].append(ack)
        cols["hash"].append(payload[1])
        keys.append(payload[0])
        values.append(payload[2])
    return ipc_of_columns(cols, keys, values)


def ipc_bulk(blob: bytes) -> tuple[list[np.ndarray], Any]:
    batch = pa.ipc.open_stream(blob).read_next_batch()
    numeric = [batch.column(name).to_numpy() for name in ("slot", "offset", "ack", "hash")]
    children = batch.column("child_ids").to_pylist()
    payload = pickle.loads(batch.schema.metadata[b"payload"])
    return [*numeric, np.asarray(children, dtype=object)], payload


def ipc_items(blob: bytes) -> list[tuple[Meta, int, Keyed]]:
    batch = pa.ipc.open_stream(blob).read_next_batch()
    keys, values = pickle.loads(batch.schema.metadata[b"payload"])
    c = {name: batch.column(name).to_pylist() for name in _SCHEMA.names}
    return [
        (Meta(GlobalTime(s, f, o), tuple(ch), t, b), a, Keyed(k, h, v))
        for s, f, o, ch, t, b, a, h, k, v in zip(
            c["slot"],
            c["front"],
            c["offset"],
            c["child_ids"],
            c["trace"],
            c["tombstone"],
            c["ack"],
            c["hash"],
            keys,
            values,
            strict=True,
        )
    ]


def timed(fn: Callable[[], Any], n: int, rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        began = time.process_time()
        fn()
        samples.append((time.process_time() - began) / n * 1e6)
    return statistics.median(samples)


def main() -> None:
    args = [int(a) for a in sys.argv[1:]]
    n, rounds = (args + [4096, 200][len(args) :])[:2]
    rows = items(n)
    columns: dict[str, Any] = {
        "slot": [m[0][0] for m, _, _ in rows],
        "front": [0] * n,
        "offset": [m[0][2] for m, _, _ in rows],
        "child_ids": [m[1] for m, _, _ in rows],
        "trace": [m[2] for m, _, _ in rows],
        "tombstone": [False] * n,
        "ack": [a for _, a, _ in rows],
        "hash": [p[1] for _, _, p in rows],
    }
    keys = [p[0] for _, _, p in rows]
    values = [p[2] for _, _, p in rows]

    def pickled_rows() -> bytes:
        builder = FrameBuilder(keyed=True)
        for meta, ack, payload in rows:
            builder.add(meta, ack, payload)
        return builder.frames(max_bytes=1 << 30, max_items=n)[0]

    def pickled_columns() -> bytes:
        builder = FrameBuilder(keyed=True)
        builder.add_columns(
            columns["slot"],
            columns["offset"],
            columns["child_ids"],
            columns["ack"],
            [keys, columns["hash"], values],
            front=0,
            trace=0x5EED,
        )
        return builder.frames(max_bytes=1 << 30, max_items=n)[0]

    version = b"1"
    blob, ipc = pickled_rows(), ipc_from_rows(rows)
    table = [
        ("write per item (add)", pickled_rows, lambda: ipc_from_rows(rows)),
        (
            "write on columns (add_columns)",
            pickled_columns,
            lambda: ipc_of_columns(columns, keys, values),
        ),
        (
            "read per item (Meta, Keyed)",
            lambda: decode_frame(version, blob, "x"),
            lambda: ipc_items(ipc),
        ),
        (
            "read in bulk (rows / columns)",
            lambda: frame_rows(((("fp.frame", version),)), blob, "x"),
            lambda: ipc_bulk(ipc),
        ),
    ]
    print(
        f"{n} keyed items a frame; bytes per item: pickled rows {len(blob) / n:.1f}, "
        f"Arrow IPC {len(ipc) / n:.1f}"
    )
    print(f"{'CPU us per item':34} {'pickled rows':>13} {'Arrow IPC':>10} {'ratio':>6}")
    for name, ours, arrow in table:
        a, b = timed(ours, n, rounds), timed(arrow, n, rounds)
        print(f"{name:34} {a:13.2f} {b:10.2f} {b / a:5.1f}x")


if __name__ == "__main__":
    main()
