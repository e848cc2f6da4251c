"""The acker service: sharded trackers on ``<app>.acks``, min times on ``<app>.mintime``.

Reads the ack batches the tasks and fronts send, XORs them per global-time slot
(`framework.core.acker`), and publishes each segment's min time; checkpoints its shards'
state on a compacted topic so a restart replays only what came after.

Internal: not part of flamepipe's API (docs/architecture.md, "The API").
"""
