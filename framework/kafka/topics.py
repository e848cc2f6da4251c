"""The specs of flamepipe's internal topics: partitions, retention, segments, in one place.

Names come from `framework.wire.topics.Topics`; creation and checks from
`framework.kafka.admin.ensure_topics`.

Every internal topic rolls its log segments at `SEGMENTS` (64 MiB or 10 minutes): the
broker frees disk only a whole segment at a time, after the topic janitor moved the log
start past it (`framework.operations.hygiene`) or the cleaner compacted it, and the default
segment (1 GiB, 7 days) would keep an hour of a busy pipeline's acks and shuffles on disk
whatever was trimmed.
"""

from __future__ import annotations

from collections.abc import Mapping

from framework.kafka.admin import TopicSpec, compacted_spec
from framework.wire.topics import Topics

SEGMENTS: Mapping[str, str] = {"segment.bytes": str(64 << 20), "segment.ms": str(10 * 60_000)}
"""Segment size and age of every internal topic (see the module docstring)."""

CHANGELOG_LAG_MS = 10 * 60_000
"""How long a changelog record stays uncompacted: a snapshot cuts an aggregate's
changelog at a batch younger than half of it (`framework.snapshots.copies`)."""

CHANGELOG_DELETE_RETENTION_MS = 24 * 3600_000
"""How long compaction keeps a changelog's deletion (a grouping's item gone): a reader
that last read longer ago than half of it may have missed one and reads from the start
(`ChangelogReader.outlived_deletions`)."""

CHANGELOG_CONFIG: Mapping[str, str] = {
    **SEGMENTS,
    "max.message.bytes": str(16 << 20),
    "min.compaction.lag.ms": str(CHANGELOG_LAG_MS),
    "delete.retention.ms": str(CHANGELOG_DELETE_RETENTION_MS),
}
"""A changelog record holds a whole bucket of an aggregate: up to 16 MiB."""


def acks_topic_spec(app: str, shards: int, epoch: int = 0) -> TopicSpec:
    """``<app>.acks``: one partition per shard, stamped by the broker (LogAppendTime: the
    acker bounds heartbeats by that stamp); trimmed below the acker's checkpoints, never
    expired by time (a stopped acker resumes from its checkpoint however late)."""
    config = {
        **SEGMENTS,
        "cleanup.policy": "delete",
        "retention.ms": "-1",
        "retention.bytes": "-1",
        "message.timestamp.type": "LogAppendTime",
    }
    return TopicSpec(Topics(app, epoch).acks, shards, config)


def mintime_topic_spec(app: str, partitions: int = 1, epoch: int = 0) -> TopicSpec:
    """``<app>.mintime``: compacted by ``<shard>:<segment>`` (see `framework.kafka.mintime`)."""
    return compacted_spec(Topics(app, epoch).mintime, partitions, SEGMENTS)


def acker_state_spec(app: str, epoch: int = 0) -> TopicSpec:
    """``<app>.acker``: the acker's shard checkpoints, compacted by shard."""
    return compacted_spec(Topics(app, epoch).acker, 1, SEGMENTS)


def shuffle_topic_spec(name: str, partitions: int) -> TopicSpec:
    """The input of a grouping or aggregate stage, partitioned by key; trimmed below the
    stage's last completed batch, never expired by time (a stopped driver resumes there)."""
    return TopicSpec(name, partitions, {**SEGMENTS, "retention.ms": "-1"})


def changelog_topic_spec(name: str, partitions: int) -> TopicSpec:
    """The changelog of a stateful stage: compacted by key (an aggregate's bucket, a
    grouping's item)."""
    return compacted_spec(name, partitions, CHANGELOG_CONFIG)


def positions_topic_spec(name: str, partitions: int) -> TopicSpec:
    """A continuous stage's input positions, one record per commit, compacted by input
    partition (`framework.kafka.stage_positions`)."""
    return compacted_spec(name, partitions, SEGMENTS)


def pre_topic_spec(app: str, sink_node: str, epoch: int = 0, barriers: int = 1) -> TopicSpec:
    """The pre-barrier topic of ``sink_node``: a partition per barrier instance, each read
    whole by its instance; trimmed below the barrier's ``P_rel``, never expired by time."""
    name = Topics(app, epoch).pre(sink_node)
    return TopicSpec(name, barriers, {**SEGMENTS, "retention.ms": "-1"})


def lifts_topic_spec(app: str) -> TopicSpec:
    """``<app>.lifts``: moved global times of late source records, compacted (one key per
    range, never superseded: kept as long as the input)."""
    return compacted_spec(Topics(app).lifts, 1)


def dlq_topic_spec(app: str) -> TopicSpec:
    """``<app>.dlq``: dead letters, for people; the broker's default retention."""
    return TopicSpec(Topics(app).dlq, 1)
