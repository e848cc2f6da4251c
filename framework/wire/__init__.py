"""Every byte format flamepipe writes or reads, in one package; pure (no client libraries).

=================  ==================================  =====================================
module             format                              where it travels
=================  ==================================  =====================================
``avro``, ``meta`` meta, min time, bundle header,      headers and values of internal and
                   ack batch (``schemas/*.avsc``)      output topics (``meta``: by hand)
``frames``         many items with meta and ack value  shuffle and pre-barrier topics
``acks``           one ack batch per acker shard       ``<app>.acks``
``dead_letters``   original bytes + ``fp.dlq.*``       ``<app>.dlq``
``changelog``      one record per key; min time        ``<app>.<node>.state`` (compacted)
``bundles``        output items and bundle headers     the sink's output topic
``positions``      ``P_ack`` and ``GT_last``           consumer-group offset metadata
``znodes``         snapshot and epoch records (JSON)   ZooKeeper
``serde``          Utf8, Json, Bytes, AvroSerde;       record values (Pickle: flamepipe's
                   Pickle                              internal topics only)
``topics``         names of an application's topics    --
``records``        Kafka records as tuples             between tasks and clients
=================  ==================================  =====================================

Every decoder raises `DecodeError` (never whatever the bytes triggered); every encoder
`EncodeError`. Formats only grow: a field is added with a default, never renamed or
retyped (`avro.decode_with` reads old bytes with a newer schema).

Internal: not part of flamepipe's API (docs/architecture.md, "The API").
"""
