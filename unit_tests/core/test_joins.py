"""Joins in the in-process harness: equal to an oracle over global-time order, whatever
the delivery order."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from framework.core.joins import Joined, TableLookup
from framework.core.windows import NO_VALUE
from framework.demos.orders import is_order, item_of, order_lines, paired_in_windows, priced_orders
from framework.errors import PipelineError
from framework.pipeline import Pipeline, Sliding, Tumbling
from framework.testing import InProcessRunner, ListSink, ListSource, Shuffled


def stamped(lines: list[str], step_ms: int = 7) -> list[tuple[int, str]]:
    return [(1_000 + i * step_ms, line) for i, line in enumerate(lines)]


def table_oracle(records: list[tuple[int, str]], partitions: int) -> list[list[Any]]:
    """Per order, the latest price of its item before it in (slot, front, offset) order.

    One partition here, so list order is global-time order."""
    assert partitions == 1
    price: dict[str, int] = {}
    out = []
    for _, line in records:
        kind, item, value = line.split()
        if kind == "price":
            price[item] = int(value)
        else:
            out.append([value, item, price.get(item)])
    return out


def window_oracle(records: list[tuple[int, str]], window_ms: int) -> list[list[Any]]:
    by_window: dict[tuple[str, int], list[str]] = defaultdict(list)
    for stamp, line in records:
        by_window[(item_of(line), stamp // window_ms)].append(line)
    out = []
    for (item, _), lines in by_window.items():
        prices = [int(line.split()[2]) for line in lines if not is_order(line)]
        out += [[o.split()[2], item, p] for o in lines if is_order(o) for p in prices]
    return out


@pytest.mark.parametrize("seed", [None, 1, 2])
def test_a_temporal_table_join_equals_the_latest_row_before_each_order(seed: int | None) -> None:
    records = stamped(order_lines(300, items=8, seed=5))
    source = ListSource.timed(records, topic="orders")
    delivery = Shuffled(seed=seed) if seed is not None else None
    got = priced_orders("t", source, ListSink()).run(InProcessRunner(delivery)).values()
    assert got == table_oracle(records, 1)
    assert any(row[2] is None for row in got) and any(row[2] is not None for row in got)


@pytest.mark.parametrize("seed", [None, 4])
def test_a_windowed_join_pairs_every_order_with_every_price_of_its_window(
    seed: int | None,
) -> None:
    records = stamped(order_lines(300, items=6, price_share=0.3, seed=8))
    source = ListSource.timed(records, partitions=2, topic="orders")
    delivery = Shuffled(seed=seed) if seed is not None else None
    pipeline = paired_in_windows("w", source, ListSink(), window_ms=100)
    got = pipeline.run(InProcessRunner(delivery)).values()
    assert sorted(map(tuple, got)) == sorted(map(tuple, window_oracle(records, 100)))  # type: ignore[arg-type]


def test_a_table_row_of_none_deletes_and_a_left_join_answers_absent() -> None:
    lookup = TableLookup("left")
    acc, out = lookup("k", NO_VALUE, _side(0, "s1"))
    assert (acc, out) == (NO_VALUE, (Joined("k", "s1", None),))
    acc, _ = lookup("k", acc, _side(1, "row"))
    assert lookup("k", acc, _side(0, "s2")) == ("row", (Joined("k", "s2", "row"),))
    acc, _ = lookup("k", acc, _side(1, None))
    assert acc is NO_VALUE
    assert TableLookup("inner")("k", acc, _side(0, "s3")) == (NO_VALUE, ())


def _side(side: int, value: object) -> Any:
    from framework.core.joins import Side

    return Side(side, value)


def test_join_declarations_that_cannot_work_are_refused() -> None:
    p = Pipeline("bad")
    a, b = p.source(ListSource([], topic="a")), p.source(ListSource([], topic="b"))
    with pytest.raises(PipelineError, match="'inner' or 'left'"):
        a.join_table(b, key=str, how="outer")
    with pytest.raises(PipelineError, match="Tumbling"):
        a.join_window(b, Sliding(100, 50), key=str)  # type: ignore[arg-type]
    other = Pipeline("other").source(ListSource([], topic="c"))
    with pytest.raises(PipelineError, match="same pipeline"):
        a.join_window(other, Tumbling(100), key=str)


def test_a_tombstone_pair_deletes_a_table_key() -> None:
    from framework.core.joins import deletes

    assert deletes(None) and deletes(("k", None))
    assert not deletes(("k", 0)) and not deletes(("k", None, 1)) and not deletes(["k", None])
