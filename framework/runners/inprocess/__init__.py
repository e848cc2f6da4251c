"""inprocess."""
