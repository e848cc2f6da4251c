"""Which stages run fused: a source stage and the keyed stage it alone feeds, as one Spark
query with a Spark shuffle between them instead of a Kafka topic.

The exactly-once argument and the conditions: docs/decisions/fused-stages.md. A source
stage ``S`` fuses with keyed stage ``K`` when every exit of ``S`` shuffles into ``K`` and
no other stage sends anything to ``K``: then the map side (``S``) writes nothing to Kafka
but rows for ``K``'s hash units, and everything commits on the reduce side (``K``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from framework.plan.stages import ExitKind, Stage


@dataclass(frozen=True, slots=True)
class Fused:
    """Source stage ``map`` and keyed stage ``reduce``, run as one query."""

    map: Stage
    reduce: Stage

    @property
    def id(self) -> str:
        """The query's id: both stage ids (Kafka- and path-safe)."""
        return f"{self.map.id}+{self.reduce.id}"


def fuse(stages: Sequence[Stage]) -> tuple[tuple[Stage, ...], tuple[Fused, ...]]:
    """The stages that stay on their own and the fused pairs, in plan order."""
    by_entry = {stage.entry: stage for stage in stages}
    feeders: dict[str, set[str]] = {}
    for stage in stages:
        for exit_ in stage.exits.values():
            feeders.setdefault(exit_.target, set()).add(stage.id)
    pairs: dict[str, Fused] = {}
    for stage in stages:
        target = _only_shuffle_target(stage)
        if target is None or feeders.get(target) != {stage.id} or target not in by_entry:
            continue
        pairs[stage.id] = Fused(stage, by_entry[target])
    fused_ids = {pair.map.id for pair in pairs.values()} | {p.reduce.id for p in pairs.values()}
    alone = tuple(stage for stage in stages if stage.id not in fused_ids)
    return alone, tuple(pairs.values())


def _only_shuffle_target(stage: Stage) -> str | None:
    """The one keyed stage every exit of source stage ``stage`` shuffles into, if any."""
    if not stage.is_source or not stage.exits:
        return None
    targets = {exit_.target for exit_ in stage.exits.values()}
    kinds = {exit_.kind for exit_ in stage.exits.values()}
    if len(targets) != 1 or kinds != {ExitKind.SHUFFLE}:
        return None
    return next(iter(targets))
