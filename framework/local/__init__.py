"""Adapter: the embedded single-node stack (ZooKeeper + Kafka) started from Maven/PyPI jars.

Internal: not part of flamepipe's API (docs/architecture.md, "The API").
"""
