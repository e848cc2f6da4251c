"""The pure FlameStream core: imports neither Spark, Kafka nor ZooKeeper.

Internal: not part of flamepipe's API (docs/architecture.md, "The API").
"""
