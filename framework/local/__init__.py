"""Adapter: the embedded single-node stack (ZooKeeper + Kafka) started from Maven/PyPI jars."""

from framework.local.jars import jar_bundle
from framework.local.stack import Endpoints, LocalStack, ServiceStatus

__all__ = ["Endpoints", "LocalStack", "ServiceStatus", "jar_bundle"]
