"""The Kafka layer: the only place flamepipe makes Kafka clients.

`clients` (consumers, producers, reading helpers), `transactions` (the one transactional
producer, and the stage tasks' exactly-once commits), `admin` and `topics` (topics and
their specs), `changelog` (catch-up reads of a stateful task's changelog), `mintime` (the
live view of min times), `tail` (the last bundle of an output topic), `endpoints`
(`KafkaSource`, `KafkaSink`), `retry` (which errors pass by themselves), `cache` (clients
kept per process). Failures surface as `KafkaClientError` or `DeadlineExceeded`.

Internal: not part of flamepipe's API (docs/architecture.md, "The API").
"""
