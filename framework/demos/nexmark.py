"""NEXMark: an online auction's persons, auctions and bids, and the queries over them.

The events are JSON objects on one topic, ``{"kind": "person" | "auction" | "bid", ...}``,
in NEXMark's proportions (per 50 events: 1 person, 3 auctions, 46 bids), generated
deterministically by `events`. Event time is ingestion time (the topic's LogAppendTime),
as everywhere in flamepipe unless a query reads a payload timestamp.

Queries (each ``q<N>(name, source, sink)`` builds a `Pipeline` from any source and sink):

* Q0 pass-through: every bid.
* Q1 currency conversion: every bid with its price in euros (``price * 908 // 1000``).
* Q2 selection: ``[auction, price]`` of the bids on auctions whose id is a multiple of 123.
* Q3 local item suggestion: ``[name, city, state, auction]`` for auctions in category 10 by
  sellers in OR, ID or CA (a temporal join of auctions with the persons table).
* Q4 average price per category: per 10 s tumbling window and auction category, the mean
  of the auctions' winning bids: ``[window start, category, mean price]``. An auction's
  winning bid in a window is its highest bid there (bids joined with the auctions table as
  of their global time, so a bid on an auction not yet seen is dropped, as in Q3).
* Q5 hot items: per sliding window (10 s every 2 s), the auction(s) with the most bids:
  ``[window start, auction, bids]`` (a count per auction, then the maximum per window).
* Q7 highest bid: per 10 s tumbling window, ``[window start, auction, price, bidder]`` of
  its highest bid (ties: the greatest auction, then bidder, so the choice is associative
  and commutative and the Spark runner pre-reduces before the shuffle).
* Q8 monitor new users: ``[person, name, auction]`` for every person who opened an auction
  in the same 10 s tumbling window in which they registered (a windowed join).
"""

from __future__ import annotations

import random
from typing import Any

from framework.core.graph import Sink, Source
from framework.core.joins import Joined
from framework.core.windows import WindowResult
from framework.pipeline import Pipeline, Sliding, Stream, Tumbling

WINDOW_MS = 10_000
HOT_SIZE_MS, HOT_STEP_MS = 10_000, 2_000
_STATES = ("OR", "ID", "CA", "WA", "NY", "TX", "AZ", "NV")
_CITIES = ("Portland", "Boise", "Fresno", "Seattle", "Albany", "Austin", "Tucson", "Reno")
_NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun")


def events(count: int, seed: int = 1) -> list[dict[str, Any]]:
    """``count`` events in NEXMark's proportions; ids count up from 1000 per kind."""
    rng = random.Random(seed)
    persons: list[int] = []
    auctions: list[int] = []
    out: list[dict[str, Any]] = []
    for n in range(count):
        phase = n % 50
        if phase == 0 or not persons:
            pid = 1000 + len(persons)
            persons.append(pid)
            out.append(
                {
                    "kind": "person",
                    "id": pid,
                    "name": f"{rng.choice(_NAMES)} {pid}",
                    "state": rng.choice(_STATES),
                    "city": rng.choice(_CITIES),
                }
            )
        elif phase <= 3 or not auctions:
            aid = 1000 + len(auctions)
            auctions.append(aid)
            out.append(
                {
                    "kind": "auction",
                    "id": aid,
                    "seller": rng.choice(persons[-10:]),  # recent persons sell most
                    "category": rng.randint(10, 14),
                    "reserve": rng.randint(100, 10_000),
                }
            )
        else:
            out.append(
                {
                    "kind": "bid",
                    "auction": rng.choice(auctions[-20:]),  # recent auctions get the bids
                    "bidder": rng.choice(persons),
                    "price": rng.randint(100, 20_000),
                }
            )
    return out


def is_bid(event: dict[str, Any]) -> bool:
    """Whether the event is a bid."""
    return event.get("kind") == "bid"


def is_person(event: dict[str, Any]) -> bool:
    """Whether the event is a new person."""
    return event.get("kind") == "person"


def is_auction(event: dict[str, Any]) -> bool:
    """Whether the event is a new auction."""
    return event.get("kind") == "auction"


def _kinds(name: str, source: Source) -> tuple[Pipeline, Stream]:
    p = Pipeline(name)
    return p, p.source(source)


def q0(name: str, source: Source, sink: Sink) -> Pipeline:
    """Q0: every bid, unchanged."""
    p, all_events = _kinds(name, source)
    all_events.filter(is_bid).sink(sink)
    return p


def in_euros(bid: dict[str, Any]) -> dict[str, Any]:
    """Q1's map: the bid with its price converted (integer cents)."""
    return {**bid, "price": bid["price"] * 908 // 1000}


def q1(name: str, source: Source, sink: Sink) -> Pipeline:
    """Q1: every bid, price in euros."""
    p, all_events = _kinds(name, source)
    all_events.filter(is_bid).map(in_euros).sink(sink)
    return p


def selected(bid: dict[str, Any]) -> bool:
    """Q2's filter."""
    return is_bid(bid) and bid["auction"] % 123 == 0


def auction_price(bid: dict[str, Any]) -> list[Any]:
    """``[auction, price]``."""
    return [bid["auction"], bid["price"]]


def q2(name: str, source: Source, sink: Sink) -> Pipeline:
    """Q2: bids on every 123rd auction."""
    p, all_events = _kinds(name, source)
    all_events.filter(selected).map(auction_price).sink(sink)
    return p


def local_seller(event: dict[str, Any]) -> bool:
    """Q3's persons: in OR, ID or CA."""
    return is_person(event) and event["state"] in ("OR", "ID", "CA")


def in_category_10(event: dict[str, Any]) -> bool:
    """Q3's auctions."""
    return is_auction(event) and event["category"] == 10


def seller_of(auction: dict[str, Any]) -> int:
    """The key of an auction in Q3 and Q8."""
    return int(auction["seller"])


def person_id(person: dict[str, Any]) -> int:
    """The key of a person."""
    return int(person["id"])


def suggestion(joined: Joined) -> list[Any]:
    """``[name, city, state, auction]``."""
    person: dict[str, Any] = joined.right  # type: ignore[assignment]
    auction: dict[str, Any] = joined.left  # type: ignore[assignment]
    return [person["name"], person["city"], person["state"], auction["id"]]


def q3(name: str, source: Source, sink: Sink) -> Pipeline:
    """Q3: auctions in category 10 of sellers in OR, ID, CA (inner temporal join)."""
    p, all_events = _kinds(name, source)
    auctions_copy, persons_copy = all_events.broadcast(2)
    auctions = auctions_copy.filter(in_category_10)
    persons = persons_copy.filter(local_seller)
    auctions.join_table(persons, key=seller_of, table_key=person_id).map(suggestion).sink(sink)
    return p


def bid_auction(bid: dict[str, Any]) -> int:
    """The key of a bid in Q4: its auction."""
    return int(bid["auction"])


def auction_id(auction: dict[str, Any]) -> int:
    """The key of an auction in Q4's table."""
    return int(auction["id"])


def category_bid(joined: Joined) -> tuple[int, int, int]:
    """``(auction, category, price)`` of a bid joined with its auction."""
    bid: dict[str, Any] = joined.left  # type: ignore[assignment]
    auction: dict[str, Any] = joined.right  # type: ignore[assignment]
    return int(bid["auction"]), int(auction["category"]), int(bid["price"])


def higher_price(a: tuple[int, int, int], b: tuple[int, int, int]) -> tuple[int, int, int]:
    """Q4's reduce per auction: the higher bid (one auction, so one category)."""
    return max(a, b, key=lambda bid: bid[2])


def category_of(result: WindowResult) -> int:
    """The category of an auction's winning bid."""
    return int(result.value[1])  # type: ignore[index]


def mean_price(result: WindowResult) -> list[Any]:
    """``[window start, category, mean of the winning prices]`` (2 decimals)."""
    winners: tuple[WindowResult, ...] = result.value  # type: ignore[assignment]
    prices = [w.value[2] for w in winners]  # type: ignore[index]
    return [result.start_ms, result.key, round(sum(prices) / len(prices), 2)]


def q4(name: str, source: Source, sink: Sink) -> Pipeline:
    """Q4: per tumbling window and category, the mean winning price of its auctions.

    The winning bid per auction and window (pre-reduced before the shuffle), then every
    winner of a window gathered by category in the same tumbling window of global time:
    a result's slot is its window's last item's, so the winners of ``[s, s + 10 s)`` fall
    in the gather's ``[s, s + 10 s)``, which is final as soon as they are all out. (An
    event-time gather by the windows' starts would wait a lateness more: 13 s p50 instead
    of ~1 s, `benchmarks/bench_nexmark.py --phase latency`.)
    """
    p, all_events = _kinds(name, source)
    bids_copy, auctions_copy = all_events.broadcast(2)
    bids, auctions = bids_copy.filter(is_bid), auctions_copy.filter(is_auction)
    priced = bids.join_table(auctions, key=bid_auction, table_key=auction_id).map(category_bid)
    winners = priced.key_by(first).aggregate(
        Tumbling(WINDOW_MS), reduce=higher_price, combinable=True
    )
    per_category = winners.key_by(category_of).aggregate(Tumbling(WINDOW_MS))
    per_category.map(mean_price).sink(sink)
    return p


def window_start(result: WindowResult) -> int:
    """The event time of a window's result: its start."""
    return result.start_ms


def everything(_: Any) -> int:
    """One key for a global aggregate."""
    return 0


def hottest(result: WindowResult) -> list[list[Any]]:
    """Q5's last step: the auction(s) with the most bids in one window."""
    counts: tuple[WindowResult, ...] = result.value  # type: ignore[assignment]
    top = max(c.value[1] for c in counts)  # type: ignore[index]
    return sorted([result.start_ms, c.key, c.value[1]] for c in counts if c.value[1] == top)  # type: ignore[index]


def q5(name: str, source: Source, sink: Sink) -> Pipeline:
    """Q5: per sliding window, the auctions with the most bids.

    Counts per auction and window, then every count of a window gathered by the window's
    start: an event-time window ``[s, s + step)`` over the counts' starts with a lateness
    of size - step, so final once min time passes ``s + size``. That is exact: a count's
    slot is its window's last item's, below ``s + size``, and it holds that slot until it
    is out.
    """
    p, all_events = _kinds(name, source)
    per_auction = (
        all_events.filter(is_bid)
        .map(auction_one)
        .key_by(first)
        .aggregate(Sliding(HOT_SIZE_MS, HOT_STEP_MS), reduce=add_counts, combinable=True)
    )
    gathered = per_auction.key_by(everything).aggregate(
        Tumbling(HOT_STEP_MS), event_time=window_start, lateness_ms=HOT_SIZE_MS - HOT_STEP_MS
    )
    gathered.flat_map(hottest).sink(sink)
    return p


def auction_one(bid: dict[str, Any]) -> tuple[int, int]:
    """``(auction, 1)``: a bid to count."""
    return int(bid["auction"]), 1


def first(pair: tuple[int, ...]) -> int:
    """The auction of an ``(auction, count)`` pair or an ``(auction, category, price)`` bid."""
    return pair[0]


def add_counts(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    """Two counts of one auction added (combinable: pre-reduced before the shuffle)."""
    return a[0], a[1] + b[1]


def higher(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Q7's reduce: the higher bid by (price, auction, bidder): associative, commutative."""
    return max(a, b, key=_rank)


def _rank(bid: dict[str, Any]) -> tuple[int, int, int]:
    return bid["price"], bid["auction"], bid["bidder"]


def highest_row(result: WindowResult) -> list[Any]:
    """``[window start, auction, price, bidder]``."""
    bid: dict[str, Any] = result.value  # type: ignore[assignment]
    return [result.start_ms, bid["auction"], bid["price"], bid["bidder"]]


def q7(name: str, source: Source, sink: Sink) -> Pipeline:
    """Q7: the highest bid of every tumbling window."""
    p, all_events = _kinds(name, source)
    bids = all_events.filter(is_bid).key_by(everything)
    highest = bids.aggregate(Tumbling(WINDOW_MS), reduce=higher, combinable=True)
    highest.map(highest_row).sink(sink)
    return p


def new_seller(joined: Joined) -> list[Any]:
    """``[person, name, auction]``."""
    person: dict[str, Any] = joined.left  # type: ignore[assignment]
    auction: dict[str, Any] = joined.right  # type: ignore[assignment]
    return [person["id"], person["name"], auction["id"]]


def q8(name: str, source: Source, sink: Sink) -> Pipeline:
    """Q8: persons who opened an auction in the window they registered in."""
    p, all_events = _kinds(name, source)
    persons_copy, auctions_copy = all_events.broadcast(2)
    persons, auctions = persons_copy.filter(is_person), auctions_copy.filter(is_auction)
    joined = persons.join_window(auctions, Tumbling(WINDOW_MS), key=person_id, other_key=seller_of)
    joined.map(new_seller).sink(sink)
    return p


QUERIES = {"q0": q0, "q1": q1, "q2": q2, "q3": q3, "q4": q4, "q5": q5, "q7": q7, "q8": q8}
"""Every query by name."""
