"""Orders priced by a price table: the joins of the demo and the integration tests.

One input topic carries two kinds of lines, ``"price <item> <amount>"`` (a table row: the
item's price from then on) and ``"order <item> <id>"``; `priced_orders` joins each order
with its item's price as of the order's global time (a temporal table join),
`paired_in_windows` pairs orders and prices of an item in the same tumbling window.
"""

from __future__ import annotations

import random
from typing import Any

from framework.core.graph import Sink, Source
from framework.core.joins import Joined
from framework.pipeline import Pipeline, Tumbling


def order_lines(count: int, items: int = 20, price_share: float = 0.2, seed: int = 3) -> list[str]:
    """``count`` lines, about ``price_share`` of them prices, the rest numbered orders."""
    rng = random.Random(seed)
    lines = []
    for n in range(count):
        item = f"i{rng.randrange(items)}"
        if rng.random() < price_share:
            lines.append(f"price {item} {rng.randint(1, 99)}")
        else:
            lines.append(f"order {item} o{n}")
    return lines


def is_price(line: str) -> bool:
    """Whether the line is a table row."""
    return line.startswith("price ")


def is_order(line: str) -> bool:
    """Whether the line is an order."""
    return line.startswith("order ")


def item_of(line: str) -> str:
    """The item a line is about: the join key."""
    return line.split()[1]


def priced(joined: Joined) -> list[Any]:
    """``[order id, item, price or None]``."""
    row = joined.right
    price = None if row is None else int(str(row).split()[2])
    return [str(joined.left).split()[2], joined.key, price]


def priced_orders(name: str, source: Source, sink: Sink) -> Pipeline:
    """Each order with its item's price as of the order (None before any price)."""
    p = Pipeline(name)
    lines, copy = p.source(source).broadcast(2)
    orders, prices = lines.filter(is_order), copy.filter(is_price)
    joined = orders.join_table(prices, key=item_of, how="left")
    joined.map(priced).sink(sink)
    return p


def paired_in_windows(name: str, source: Source, sink: Sink, window_ms: int = 200) -> Pipeline:
    """Per item and tumbling window, every order paired with every price of the window."""
    p = Pipeline(name)
    lines, copy = p.source(source).broadcast(2)
    orders, prices = lines.filter(is_order), copy.filter(is_price)
    joined = orders.join_window(prices, Tumbling(window_ms), key=item_of)
    joined.map(priced).sink(sink)
    return p
