"""The barrier service of one sink: buffers pre-barrier items, releases them past min time.

Output leaves in bundles, each in one Kafka transaction with its header (``GT_last``), so
a consumer can verify that nothing is duplicated or missing (`framework.wire.bundles`).

Internal: not part of flamepipe's API (docs/architecture.md, "The API").
"""
