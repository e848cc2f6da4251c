"""A Protobuf message for the Schema Registry tests, built the way protoc's Python output
builds it (a serialized file descriptor), so its class pickles by name on Spark's workers.

    syntax = "proto3";
    package flamepipe.tests;
    message Bid { int64 auction = 1; string bidder = 2; int64 price = 3; }
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.internal import builder

_FILE = descriptor_pb2.FileDescriptorProto(
    name="flamepipe_tests_bids.proto", package="flamepipe.tests", syntax="proto3"
)
_BID = _FILE.message_type.add(name="Bid")
for _number, (_name, _type) in enumerate(
    [
        ("auction", descriptor_pb2.FieldDescriptorProto.TYPE_INT64),
        ("bidder", descriptor_pb2.FieldDescriptorProto.TYPE_STRING),
        ("price", descriptor_pb2.FieldDescriptorProto.TYPE_INT64),
    ],
    start=1,
):
    _BID.field.add(
        name=_name,
        number=_number,
        type=_type,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        json_name=_name,
    )

DESCRIPTOR = descriptor_pool.Default().AddSerializedFile(_FILE.SerializeToString())
_globals: dict[str, Any] = globals()
builder.BuildMessageAndEnumDescriptors(DESCRIPTOR, _globals)
builder.BuildTopDescriptorsAndMessages(DESCRIPTOR, __name__, _globals)
Bid: Any = _globals["Bid"]
