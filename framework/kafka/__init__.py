"""The Kafka adapter: wire formats, serdes, topic admin and exactly-once task commits.

It speaks to Kafka through ``confluent_kafka`` and uses the pure core; it never imports
Spark. Submodules: `wire`, `serde`, `admin`, `txn`, `changelog`, `cache`.
"""

__all__: list[str] = []
