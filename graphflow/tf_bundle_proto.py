"""TensorFlow's checkpoint messages as protobuf classes, built at run time by
protobuf's own descriptor machinery (never a hand-written wire format, DESIGN.md):

- ``BundleHeaderProto``, ``BundleEntryProto`` (``tensorflow/core/protobuf/
  tensor_bundle.proto``) with the ``TensorShapeProto``, ``TensorSliceProto`` and
  ``VersionDef`` they hold;
- ``CheckpointState`` (``tensorflow/python/checkpoint/checkpoint_state.proto``), the
  text of a folder's ``checkpoint`` file.

Field names, numbers and types are TensorFlow's (proto3), so the bytes are
TensorFlow's; the two enums (``DataType``, ``Endianness``) are declared as int32,
which is the same varint on the wire. The messages live in a private descriptor
pool, so they never clash with tensorboard's or tensorboardX's copies of
TensorShapeProto, and nothing here needs either package: only ``protobuf``.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace

_PACKAGE = "tensorflow"

# (message, [(field, number, type, label, message type or None, oneof index or None)])
_INT32, _INT64, _BOOL, _STRING, _DOUBLE, _FIXED32, _MESSAGE = (
    "TYPE_INT32", "TYPE_INT64", "TYPE_BOOL", "TYPE_STRING", "TYPE_DOUBLE", "TYPE_FIXED32",
    "TYPE_MESSAGE")
_ONE, _MANY = "LABEL_OPTIONAL", "LABEL_REPEATED"
_MESSAGES = {
    "VersionDef": [("producer", 1, _INT32, _ONE), ("min_consumer", 2, _INT32, _ONE),
                   ("bad_consumers", 3, _INT32, _MANY)],
    "TensorShapeProto": [("dim", 2, _MESSAGE, _MANY, "TensorShapeProto.Dim"),
                         ("unknown_rank", 3, _BOOL, _ONE)],
    "TensorShapeProto.Dim": [("size", 1, _INT64, _ONE), ("name", 2, _STRING, _ONE)],
    "TensorSliceProto": [("extent", 1, _MESSAGE, _MANY, "TensorSliceProto.Extent")],
    "TensorSliceProto.Extent": [("start", 1, _INT64, _ONE),
                                ("length", 2, _INT64, _ONE, None, "has_length")],
    "BundleHeaderProto": [("num_shards", 1, _INT32, _ONE), ("endianness", 2, _INT32, _ONE),
                          ("version", 3, _MESSAGE, _ONE, "VersionDef")],
    "BundleEntryProto": [("dtype", 1, _INT32, _ONE),
                         ("shape", 2, _MESSAGE, _ONE, "TensorShapeProto"),
                         ("shard_id", 3, _INT32, _ONE), ("offset", 4, _INT64, _ONE),
                         ("size", 5, _INT64, _ONE), ("crc32c", 6, _FIXED32, _ONE),
                         ("slices", 7, _MESSAGE, _MANY, "TensorSliceProto")],
    "CheckpointState": [("model_checkpoint_path", 1, _STRING, _ONE),
                        ("all_model_checkpoint_paths", 2, _STRING, _MANY),
                        ("all_model_checkpoint_timestamps", 3, _DOUBLE, _MANY),
                        ("last_preserved_timestamp", 4, _DOUBLE, _ONE)],
}
#: BundleHeaderProto.endianness
LITTLE, BIG = 0, 1


@functools.cache
def messages() -> SimpleNamespace:
    """The message classes: ``messages().BundleEntryProto()`` and so on."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    file = descriptor_pb2.FileDescriptorProto(
        name="graphflow/tf_checkpoint.proto", package=_PACKAGE, syntax="proto3")
    made: dict[str, descriptor_pb2.DescriptorProto] = {}
    for name, fields in _MESSAGES.items():  # outer messages come before their nested ones
        outer, _, inner = name.partition(".")
        message = made[outer].nested_type.add(name=inner) if inner else \
            file.message_type.add(name=name)
        made[name] = message
        for field, number, kind, label, *rest in fields:
            type_name, oneof = (rest + [None, None])[:2]
            f = message.field.add(name=field, number=number,
                                  type=getattr(descriptor_pb2.FieldDescriptorProto, kind),
                                  label=getattr(descriptor_pb2.FieldDescriptorProto, label))
            if type_name:
                f.type_name = f".{_PACKAGE}.{type_name}"
            if oneof:
                f.oneof_index = len(message.oneof_decl)
                message.oneof_decl.add(name=oneof)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return SimpleNamespace(**{
        name.replace(".", "_"): message_factory.GetMessageClass(
            pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
        for name in _MESSAGES})


__all__ = ["messages", "LITTLE", "BIG"]
