"""Plain-Python answers of the NEXMark queries over events in global-time order.

Input: ``(timestamp ms, event)`` pairs as Kafka stored them on one partition (offset order
is then global-time order). Independent of the pipelines: no flamepipe operator is used.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from framework.demos.nexmark import HOT_SIZE_MS, HOT_STEP_MS, WINDOW_MS

Stamped = list[tuple[int, dict[str, Any]]]


def answer(query: str, stamped: Stamped) -> list[Any]:
    """The rows query ``query`` must output, in no particular order."""
    return list(_ORACLES[query](stamped))


def _bids(stamped: Stamped) -> list[tuple[int, dict[str, Any]]]:
    return [(t, e) for t, e in stamped if e["kind"] == "bid"]


def _q0(stamped: Stamped) -> list[Any]:
    return [e for _, e in _bids(stamped)]


def _q1(stamped: Stamped) -> list[Any]:
    return [{**e, "price": e["price"] * 908 // 1000} for _, e in _bids(stamped)]


def _q2(stamped: Stamped) -> list[Any]:
    return [[e["auction"], e["price"]] for _, e in _bids(stamped) if e["auction"] % 123 == 0]


def _q3(stamped: Stamped) -> list[Any]:
    persons: dict[int, dict[str, Any]] = {}
    out = []
    for _, e in stamped:
        if e["kind"] == "person" and e["state"] in ("OR", "ID", "CA"):
            persons[e["id"]] = e
        elif e["kind"] == "auction" and e["category"] == 10 and e["seller"] in persons:
            p = persons[e["seller"]]
            out.append([p["name"], p["city"], p["state"], e["id"]])
    return out


def _q4(stamped: Stamped) -> list[Any]:
    auctions: dict[int, dict[str, Any]] = {}
    winners: dict[tuple[int, int], tuple[int, int]] = {}  # (start, auction) -> (category, price)
    for t, e in stamped:
        if e["kind"] == "auction":
            auctions[e["id"]] = e
        elif e["kind"] == "bid" and e["auction"] in auctions:
            key = (t // WINDOW_MS * WINDOW_MS, e["auction"])
            if key not in winners or e["price"] > winners[key][1]:
                winners[key] = (auctions[e["auction"]]["category"], e["price"])
    prices: dict[tuple[int, int], list[int]] = defaultdict(list)
    for (start, _), (category, price) in winners.items():
        prices[(start, category)].append(price)
    return [[s, c, round(sum(ps) / len(ps), 2)] for (s, c), ps in prices.items()]


def _q5(stamped: Stamped) -> list[Any]:
    counts: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for t, e in _bids(stamped):
        first = (t - HOT_SIZE_MS) // HOT_STEP_MS + 1
        for index in range(first, t // HOT_STEP_MS + 1):
            counts[index * HOT_STEP_MS][e["auction"]] += 1
    out = []
    for start, per_auction in counts.items():
        top = max(per_auction.values())
        out += [[start, a, n] for a, n in per_auction.items() if n == top]
    return out


def _q7(stamped: Stamped) -> list[Any]:
    best: dict[int, dict[str, Any]] = {}
    for t, e in _bids(stamped):
        start = t // WINDOW_MS * WINDOW_MS
        rank = (e["price"], e["auction"], e["bidder"])
        if start not in best or rank > tuple(
            best[start][k] for k in ("price", "auction", "bidder")
        ):
            best[start] = e
    return [[s, b["auction"], b["price"], b["bidder"]] for s, b in best.items()]


def _q8(stamped: Stamped) -> list[Any]:
    persons: dict[tuple[int, int], dict[str, Any]] = {}
    auctions: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for t, e in stamped:
        window = t // WINDOW_MS
        if e["kind"] == "person":
            persons[(window, e["id"])] = e
        elif e["kind"] == "auction":
            auctions[(window, e["seller"])].append(e)
    return [
        [p["id"], p["name"], a["id"]] for key, p in persons.items() for a in auctions.get(key, [])
    ]


_ORACLES = {
    "q0": _q0,
    "q1": _q1,
    "q2": _q2,
    "q3": _q3,
    "q4": _q4,
    "q5": _q5,
    "q7": _q7,
    "q8": _q8,
}
