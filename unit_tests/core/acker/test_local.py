"""Local acker: aggregation and flush order keep the tracker exact."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from framework.core.acker.local import LocalAcker
from framework.core.acker.tracker import Acker
from framework.core.messages import Ack, Heartbeat
from unit_tests.core.acker.test_tracker import Msg, Sim, actions, run_sim, sims


@dataclass
class ShadowSim(Sim):
    """A local-mode simulation that also feeds every message straight to a shadow acker."""

    shadow: Acker = field(init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.shadow = Acker(self.segments, range(self.fronts))

    def _send(self, sender: int, message: Msg) -> None:
        super()._send(sender, message)
        kind, segment, a, b = message
        if kind == "ack":
            self.shadow.ack(segment, a, b)
        else:
            self.shadow.heartbeat(a, b)

    def sync(self) -> None:
        """Flush and deliver everything, then both ackers saw the same acks."""
        for sender in range(len(self.channels)):
            self.flush(sender)
            self.deliver(sender, len(self.channels[sender]))
        for segment in [*self.segments, None]:
            assert self.acker.min_time(segment) == self.shadow.min_time(segment)


@settings(max_examples=300, deadline=None)
@given(sim=sims(modes=("local",)), steps=actions)
def test_local_mode_is_safe_and_converges(sim: Sim, steps: list[tuple[int, int, int]]) -> None:
    run_sim(sim, steps)


@st.composite
def shadow_sims(draw: st.DrawFn) -> ShadowSim:
    base = draw(sims(modes=("local",)))
    return ShadowSim(base.segments, base.fronts, base.nodes, "local", base.seed)


@settings(max_examples=300, deadline=None)
@given(sim=shadow_sims(), steps=actions, every=st.integers(1, 10))
def test_aggregated_flush_matches_direct_feed(
    sim: ShadowSim, steps: list[tuple[int, int, int]], every: int
) -> None:
    count = 0

    def maybe_sync(s: Sim) -> None:
        nonlocal count
        count += 1
        if count % every == 0:
            sim.sync()

    run_sim(sim, steps, maybe_sync)
    sim.sync()


def test_flush_order_and_aggregation() -> None:
    local = LocalAcker({"up": [], "down": ["up"]})
    local.ack("up", 3, 0b0101)
    local.ack("down", 3, 0b0011)
    local.ack("down", 5, 0b1000)
    local.ack("up", 3, 0b0001)  # XORs into the first ack
    local.ack_many([("up", 4, 7), ("up", 4, 7)])  # sent and received: dropped
    local.heartbeat(1, 9)
    local.heartbeat(0, 4)
    local.heartbeat(1, 8)  # older than 9: ignored
    assert local.pending == 6
    assert local.flush() == [
        Ack("down", 5, 0b1000),
        Ack("down", 3, 0b0011),  # same slot: downstream before upstream
        Ack("up", 3, 0b0100),
        Heartbeat(0, 4),
        Heartbeat(1, 9),
    ]
    assert local.pending == 0
    assert local.flush() == []


def test_unknown_segments_flush_last_in_their_slot() -> None:
    local = LocalAcker(["a", "b"])
    local.ack("zzz", 1, 1)
    local.ack("a", 1, 2)
    local.ack("b", 1, 3)
    assert [a.segment for a in local.flush() if isinstance(a, Ack)] == ["b", "a", "zzz"]


def test_flush_to_an_acker() -> None:
    acker = Acker({"s": []}, fronts=[0])
    local = LocalAcker()
    local.ack("s", 2, 5)
    local.heartbeat(0, 6)
    assert local.flush_to(acker) == 2
    assert acker.min_time() == 2
    local.ack("s", 2, 5)
    assert local.flush_to(acker) == 1
    assert acker.min_time() == 6
    assert local.flush_to(acker) == 0
