"""The tracker: knowing exactly when nothing at or below a global time is in flight.

`tracker.Acker` is the exact tracker of the tracker paper (XOR per segment and slot, min
time per segment); `local.LocalAcker` pre-aggregates a worker's acks before they are sent;
`sharded.ShardedAcker` splits slots over shards that exchange node-time vectors, so no
shard publishes a min time another could still contradict.

Internal: not part of flamepipe's API (docs/architecture.md, "The API").
"""
