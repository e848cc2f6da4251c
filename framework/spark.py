"""Running a pipeline on Spark yourself: the public names.

`Pipeline.run()` starts a runner for you; an application or a tool that wants the run
object (to start, watch and stop it, or to share its Spark session) imports the runner
and the session factory from here. The implementation lives in
`framework.runners.spark`.

Example::

    >>> from framework.spark import SparkRunner  # doctest: +SKIP
    >>> run = SparkRunner().start(pipeline.graph())  # doctest: +SKIP
    >>> run.figures().min_time_lag_ms  # doctest: +SKIP
    >>> run.stop()  # doctest: +SKIP
"""

from framework.runners.spark.runner import PipelineRun, SparkRunner
from framework.runners.spark.session import spark_session

__all__ = ["PipelineRun", "SparkRunner", "spark_session"]
