"""The specs of flamepipe's internal topics: partitions and retention, in one place.

Names come from `framework.wire.topics.Topics`; creation and checks from
`framework.kafka.admin.ensure_topics`.
"""

from __future__ import annotations

from framework.kafka.admin import TopicSpec, compacted_spec
from framework.wire.topics import Topics

__all__ = ["acker_state_spec", "acks_topic_spec", "mintime_topic_spec"]


def acks_topic_spec(app: str, shards: int, epoch: int = 0) -> TopicSpec:
    """``<app>.acks``: one partition per shard, kept forever (the acker replays it all),
    stamped by the broker (LogAppendTime: the acker bounds heartbeats by that stamp)."""
    config = {
        "cleanup.policy": "delete",
        "retention.ms": "-1",
        "retention.bytes": "-1",
        "message.timestamp.type": "LogAppendTime",
    }
    return TopicSpec(Topics(app, epoch).acks, shards, config)


def mintime_topic_spec(app: str, partitions: int = 1, epoch: int = 0) -> TopicSpec:
    """``<app>.mintime``: compacted by ``<shard>:<segment>`` (see `framework.kafka.mintime`)."""
    return compacted_spec(Topics(app, epoch).mintime, partitions)


def acker_state_spec(app: str, epoch: int = 0) -> TopicSpec:
    """``<app>.acker``: the acker's shard checkpoints, compacted by shard."""
    return compacted_spec(Topics(app, epoch).acker, 1)
