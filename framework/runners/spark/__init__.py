"""Internal: the Spark runner. Its public names are in `framework.spark`."""
