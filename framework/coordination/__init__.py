"""ZooKeeper coordination (kazoo): committed snapshots, epochs and leader election.

Adapters only: ``framework.core`` never imports this package. The znode layout is in
`framework.coordination.paths`; decisions in ``docs/decisions/snapshots-and-coordination.md``.

Internal: not part of flamepipe's API (docs/architecture.md, "The API").
"""
