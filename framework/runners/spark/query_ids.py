"""Query ids: which stages a Spark query runs and how, as the name of its checkpoint.

An epoch's checkpoint directory holds one directory per query, named by its id: a split
stage by its stage id (``group``), a fused pair by both (``source-lines+group``), a
continuous stage by its id and ``@continuous``. A restarted driver reads those names back
to refuse running a stage in another mode than the one its epoch started in.

>>> QueryId.parse("source-lines+group")
QueryId(stages=('source-lines', 'group'), mode='fused')
>>> str(QueryId.continuous("group")), QueryId.parse("group@continuous").mode
('group@continuous', 'continuous')
>>> QueryId.split("group").overlaps(QueryId.parse("source-lines+group"))
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Mode = Literal["split", "fused", "continuous"]

CONTINUOUS_SUFFIX = "@continuous"
"""The checkpoint directory of a continuous stage is its id with this suffix."""

_FUSED = "+"


@dataclass(frozen=True)
class QueryId:
    """The stages of one query and the mode it runs them in."""

    stages: tuple[str, ...]
    mode: Mode

    @classmethod
    def split(cls, stage: str) -> QueryId:
        """A stage as a micro-batch query of its own."""
        return cls((stage,), "split")

    @classmethod
    def fused(cls, map_stage: str, reduce_stage: str) -> QueryId:
        """A source stage and the keyed stage it alone feeds, as one query."""
        return cls((map_stage, reduce_stage), "fused")

    @classmethod
    def continuous(cls, stage: str) -> QueryId:
        """A stage as long-running tasks."""
        return cls((stage,), "continuous")

    @classmethod
    def parse(cls, name: str) -> QueryId:
        """The id a checkpoint directory is named by."""
        if name.endswith(CONTINUOUS_SUFFIX):
            return cls.continuous(name.removesuffix(CONTINUOUS_SUFFIX))
        if _FUSED in name:
            map_stage, _, reduce_stage = name.partition(_FUSED)
            return cls.fused(map_stage, reduce_stage)
        return cls.split(name)

    def __str__(self) -> str:
        if self.mode == "continuous":
            return f"{self.stages[0]}{CONTINUOUS_SUFFIX}"
        return _FUSED.join(self.stages)

    def overlaps(self, other: QueryId) -> bool:
        """Whether the two queries run a stage in common."""
        return bool(set(self.stages) & set(other.stages))
