"""Adapter: running flamepipe on Apache Spark (PySpark)."""

from framework.spark.session import spark_session

__all__ = ["spark_session"]
