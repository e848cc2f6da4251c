"""Adapter: running flamepipe pipelines on Apache Spark (PySpark)."""

from framework.spark.runner import PipelineRun, SparkRunner
from framework.spark.session import spark_session

__all__ = ["PipelineRun", "SparkRunner", "spark_session"]
