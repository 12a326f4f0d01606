"""TensorFlow's protobuf messages, and conversions between them and graphflow values.

The message classes are maintained generated code, never a hand-written wire
parser (DESIGN.md, third wave). Three sources, loaded lazily:

- ``tensorflow.core.framework`` (TensorFlow itself): TensorFlow's full schema.
- ``tensorboard.compat.proto`` (package ``tensorboard``): a copy of the same schema.
- ``tensorboardX.proto`` (extra ``tensorboard``: 0.65 MB, brings only protobuf):
  GraphDef, NodeDef, AttrValue, TensorProto, TensorShapeProto. Its schema is an
  older cut of TensorFlow's: its GraphDef has no function ``library`` and its
  TensorProto no ``uint32_val``/``uint64_val`` fields.

:func:`protos` takes TensorFlow's classes when TensorFlow is imported already,
tensorboard's when importable, then TensorFlow's (installed but not imported:
importing it costs seconds, tensorboard's copy of the schema milliseconds), and
tensorboardX's last; ``protos().source`` says which one is in use.

What needs the full schema and finds only tensorboardX's is refused with an error
that says so (:func:`require_full`); writing never needs it (uint32/uint64 values
go to ``tensor_content``, which every reader takes).

Conversions: DataType enum <-> gf dtype, numpy array <-> TensorProto (every
encoding TensorFlow reads), TensorShapeProto <-> gf.TensorShape, AttrValue <->
``(kind, value)``. Decoding errors are InvalidArgumentError (UnimplementedError for
dtypes graphflow lacks); callers add the node name.
"""
from __future__ import annotations

import functools
import importlib
import logging
import math
import os
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes as _dt
from ..convert import from_little_endian
from ..dtypes import DType, dtype_of_array
from ..errors import InvalidArgumentError, ResourceExhaustedError, UnimplementedError
from ..shapes import TensorShape

log = logging.getLogger("graphflow.interop")

#: How to get the message classes, named in every error about their absence.
INSTALL_HINT = "pip install 'graphflow[tensorboard]'"
#: How to get TensorFlow's full schema (function library, uint32_val/uint64_val).
FULL_INSTALL_HINT = "pip install 'graphflow[tensorboard-full]'"

# -- the message classes ---------------------------------------------------------------


@dataclass(frozen=True)
class ProtoSet:
    """The generated classes of one source. ``full``: TensorFlow's whole schema
    (GraphDef.library, FunctionDef, TensorProto.uint32_val/uint64_val)."""

    source: str  # "tensorflow", "tensorboard" or "tensorboardX"
    full: bool
    GraphDef: type
    NodeDef: type
    AttrValue: type
    NameAttrList: type
    TensorProto: type
    TensorShapeProto: type
    VersionDef: type


#: Where each source's generated modules live.
_PACKAGES = {"tensorflow": "tensorflow.core.framework", "tensorboard": "tensorboard.compat.proto",
             "tensorboardX": "tensorboardX.proto"}
_MODULES = ("attr_value_pb2", "graph_pb2", "node_def_pb2", "tensor_pb2", "tensor_shape_pb2",
            "versions_pb2")


@functools.cache
def _load(source: str) -> ProtoSet:
    if source not in _PACKAGES:
        raise ValueError(f"protos(): source must be one of {', '.join(map(repr, _PACKAGES))}, "
                         f"got {source!r}")
    m = {name: importlib.import_module(f"{_PACKAGES[source]}.{name}") for name in _MODULES}
    return ProtoSet(source, source != "tensorboardX", m["graph_pb2"].GraphDef,
                    m["node_def_pb2"].NodeDef, m["attr_value_pb2"].AttrValue,
                    m["attr_value_pb2"].NameAttrList, m["tensor_pb2"].TensorProto,
                    m["tensor_shape_pb2"].TensorShapeProto, m["versions_pb2"].VersionDef)


def _order() -> tuple[str, ...]:
    """The sources :func:`protos` tries, best first: TensorFlow's own classes when it is
    imported already (its messages then interoperate with the user's), tensorboard's copy
    of the same schema (cheap to import), TensorFlow's when installed, tensorboardX's."""
    imported = sys.modules.get("tensorflow") is not None
    return (("tensorflow",) if imported else ()) + ("tensorboard",) + \
        (() if imported else ("tensorflow",)) + ("tensorboardX",)


def protos(source: str | None = None) -> ProtoSet:
    """TensorFlow's message classes from the best source importable (see :func:`_order`);
    ``source`` picks one. ImportError naming the extra to install when none is there."""
    if source is not None:
        try:
            return _load(source)
        except ImportError as e:
            hint = INSTALL_HINT if source == "tensorboardX" else FULL_INSTALL_HINT
            raise ImportError(f"TensorFlow's protobuf messages from {source} are not "
                              f"importable ({e}); install them with: {hint}") from e
    for name in _order():
        try:
            return _load(name)
        except ImportError:
            continue
        except Exception as e:  # noqa: BLE001 - a broken install (protobuf too old...)
            log.debug("TensorFlow's messages from %s do not load: %s", name, e)
    raise ImportError("Reading or writing TensorFlow GraphDefs needs TensorFlow's protobuf "
                      f"messages (from TensorFlow, tensorboard or tensorboardX); install them "
                      f"with: {INSTALL_HINT}")


def require_full(ps: ProtoSet, what: str) -> None:
    """UnimplementedError unless ``ps`` has TensorFlow's full schema, which ``what`` needs."""
    if not ps.full:
        raise UnimplementedError(
            f"{what} is readable only through TensorFlow's full protobuf schema, which "
            f"tensorboardX's messages lack; install tensorboard (or TensorFlow) to read it: "
            f"{FULL_INSTALL_HINT}")


def unknown_field_numbers(message: Any) -> set[int]:
    """The numbers of the fields in ``message`` that its class does not know (data a
    newer schema wrote, e.g. GraphDef.library read with tensorboardX's classes)."""
    from google.protobuf import unknown_fields

    return {f.field_number for f in unknown_fields.UnknownFieldSet(message)}


# -- dtypes ---------------------------------------------------------------------------
#: TensorFlow's DataType enum values (types.proto) for graphflow's dtypes.
TF_ENUM: dict[DType, int] = {
    _dt.float32: 1, _dt.float64: 2, _dt.int32: 3, _dt.uint8: 4, _dt.int16: 5, _dt.int8: 6,
    _dt.string: 7, _dt.complex64: 8, _dt.int64: 9, _dt.bool_: 10, _dt.uint16: 17,
    _dt.complex128: 18, _dt.float16: 19, _dt.uint32: 22, _dt.uint64: 23}
_FROM_ENUM = {v: k for k, v in TF_ENUM.items()}
#: Names of the DataType values graphflow has no dtype for, for error messages.
_OTHER_ENUMS = {0: "DT_INVALID", 11: "DT_QINT8", 12: "DT_QUINT8", 13: "DT_QINT32",
                14: "DT_BFLOAT16", 15: "DT_QINT16", 16: "DT_QUINT16", 20: "DT_RESOURCE",
                21: "DT_VARIANT"}
DT_RESOURCE = 20
_REF_OFFSET = 100


def tf_enum(dtype: DType | Any) -> int:
    """The DataType enum value of a gf dtype (or anything ``gf.as_dtype`` takes)."""
    return TF_ENUM[_dt.as_dtype(dtype)]


def tf_enum_name(value: int) -> str:
    """``DT_FLOAT`` for 1: the enum's name as TensorFlow spells it."""
    if value in _FROM_ENUM:
        name = {"float16": "HALF", "float32": "FLOAT", "float64": "DOUBLE"}.get(
            _FROM_ENUM[value].name, _FROM_ENUM[value].name.upper())
        return f"DT_{name}"
    if value in _OTHER_ENUMS:
        return _OTHER_ENUMS[value]
    if value > _REF_OFFSET and value - _REF_OFFSET in _FROM_ENUM | _OTHER_ENUMS:
        return tf_enum_name(value - _REF_OFFSET) + "_REF"
    return f"DataType({value})"


def from_tf_enum(value: int) -> DType:
    """The gf dtype of a DataType enum value; UnimplementedError for types graphflow
    lacks (bfloat16, quantized, resource, variant, reference types)."""
    try:
        return _FROM_ENUM[value]
    except KeyError:
        if value == 0:
            raise InvalidArgumentError("DataType DT_INVALID (0) is not a dtype") from None
        raise UnimplementedError(f"graphflow has no dtype for TensorFlow's "
                                 f"{tf_enum_name(value)}") from None


# -- shapes ---------------------------------------------------------------------------
def shape_to_proto(shape: Any, ps: ProtoSet | None = None) -> Any:
    """A TensorShapeProto: ``unknown_rank`` for an unknown rank, size -1 for unknown dims."""
    ps = ps or protos()
    shape = TensorShape(shape)
    proto = ps.TensorShapeProto()
    if shape.rank is None:
        proto.unknown_rank = True
    else:
        for d in shape.dims:
            proto.dim.add(size=-1 if d is None else d)
    return proto


def shape_from_proto(proto: Any) -> TensorShape:
    """The gf.TensorShape of a TensorShapeProto (sizes -1 unknown; below -1 refused)."""
    if proto.unknown_rank:
        if len(proto.dim):
            raise InvalidArgumentError(f"A shape with unknown rank has {len(proto.dim)} dims")
        return TensorShape(None)
    dims = []
    for d in proto.dim:
        if d.size < -1:
            raise InvalidArgumentError(f"Shape {[x.size for x in proto.dim]} has a negative "
                                       f"dimension")
        dims.append(None if d.size == -1 else d.size)
    return TensorShape(dims)


# -- tensors --------------------------------------------------------------------------
#: The typed repeated field that holds values of each dtype (TensorFlow's tensor.cc).
_FIELD = {_dt.float32: "float_val", _dt.float64: "double_val", _dt.int32: "int_val",
          _dt.int16: "int_val", _dt.int8: "int_val", _dt.uint8: "int_val",
          _dt.uint16: "int_val", _dt.int64: "int64_val", _dt.bool_: "bool_val",
          _dt.float16: "half_val", _dt.complex64: "scomplex_val",
          _dt.complex128: "dcomplex_val", _dt.string: "string_val",
          _dt.uint32: "uint32_val", _dt.uint64: "uint64_val"}
_INT64_MAX = 2 ** 63 - 1


def tensor_to_proto(value: Any, dtype: Any = None, *, encoding: str = "auto",
                    ps: ProtoSet | None = None) -> Any:
    """A TensorProto holding ``value`` exactly (``value`` is not modified).

    ``encoding``: ``"content"`` (raw little-endian bytes in ``tensor_content``;
    strings always go to ``string_val``), ``"typed"`` (the dtype's repeated field,
    trailing repeats of the last value dropped, as TensorFlow reads them back), or
    ``"auto"``, TensorFlow's own choice: typed for a single element, content otherwise.
    uint32/uint64 go to ``tensor_content`` when the classes lack their typed fields.
    """
    ps = ps or protos()
    if encoding not in ("auto", "content", "typed"):
        raise ValueError(f"encoding must be 'auto', 'content' or 'typed', got {encoding!r}")
    array = np.asarray(value, dtype=None if dtype is None or _dt.as_dtype(dtype) is _dt.string
                       else _dt.as_dtype(dtype).as_numpy_dtype)
    gf_dtype = _dt.as_dtype(dtype) if dtype is not None else dtype_of_array(array)
    proto = ps.TensorProto(dtype=TF_ENUM[gf_dtype], tensor_shape=shape_to_proto(array.shape, ps))
    flat = array.reshape(-1)
    field = _FIELD[gf_dtype]
    if gf_dtype is _dt.string:
        items = [x if isinstance(x, bytes) else str(x).encode() for x in flat.tolist()]
        if encoding == "typed":
            items = _drop_trailing_repeats(items)
        proto.string_val.extend(items)
        return proto
    typed = encoding == "typed" or (encoding == "auto" and flat.size == 1)
    if typed and field not in ps.TensorProto.DESCRIPTOR.fields_by_name:
        typed = False  # tensorboardX's TensorProto has no uint32_val / uint64_val
    if not typed:
        little = flat.astype(np.dtype(gf_dtype.as_numpy_dtype).newbyteorder("<"), copy=False)
        proto.tensor_content = little.tobytes()
        return proto
    if gf_dtype is _dt.float16:
        values = flat.view(np.uint16).astype(np.int32)
    elif gf_dtype.is_complex:
        values = np.stack([flat.real, flat.imag], axis=-1)
    else:
        values = flat
    values = values.tolist()
    if gf_dtype.is_complex:
        pairs = _drop_trailing_repeats([tuple(p) for p in values])
        values = [x for p in pairs for x in p]
    else:
        values = _drop_trailing_repeats(values, bitwise=gf_dtype.is_floating)
    getattr(proto, field).extend(values)
    return proto


def _drop_trailing_repeats(values: list, bitwise: bool = False) -> list:
    """``values`` without the trailing copies of its last value (TensorFlow repeats the
    last value to fill the shape); floats compare by bits (-0.0, nan payloads)."""
    def key(v):
        return np.float64(v).tobytes() if bitwise else v
    end = len(values)
    while end > 1 and key(values[end - 2]) == key(values[end - 1]):
        end -= 1
    return values[:end]


def tensor_from_proto(proto: Any) -> np.ndarray:
    """The read-only array a TensorProto holds, read as TensorFlow reads it.

    ``tensor_content`` (little-endian bytes, exactly the shape's size) wins when set;
    otherwise the dtype's repeated field, its last value repeated to fill the shape
    (no values: zeros, or empty strings). More values than elements, a byte count that
    does not match, a bool byte other than 0/1: InvalidArgumentError.
    """
    dtype = from_tf_enum(proto.dtype)
    if not proto.HasField("tensor_shape"):
        shape: list[int] = []
    else:
        parsed = shape_from_proto(proto.tensor_shape)
        if not parsed.is_fully_defined():
            raise InvalidArgumentError(f"A tensor's shape must be fully defined, got "
                                       f"{parsed.dims}")
        shape = parsed.dims
    count = math.prod(shape)
    nonzero = math.prod(d for d in shape if d)
    size = dtype.itemsize if dtype is not _dt.string else 1
    if nonzero * size > _INT64_MAX:
        raise InvalidArgumentError(f"Tensor shape {shape} of {dtype.name} is too large")
    content = proto.tensor_content
    if content and dtype is not _dt.string:
        array = from_little_endian(
            content, count, dtype,
            wrong_size=lambda need: f"Tensor of shape {shape} and dtype {dtype.name} needs "
                                    f"{need} bytes of tensor_content, got {len(content)}",
            bad_bool="A bool tensor's tensor_content has a byte other than 0 or 1")
    else:
        array = _typed_values(proto, dtype, count, shape)
    array = array.reshape(shape)
    array.flags.writeable = False
    return array


def _typed_values(proto: Any, dtype: DType, count: int, shape: list[int]) -> np.ndarray:
    field = _FIELD[dtype]
    if field not in proto.DESCRIPTOR.fields_by_name:  # tensorboardX: no uint32_val/uint64_val
        number = {"uint32_val": 16, "uint64_val": 17}[field]
        if number in unknown_field_numbers(proto):
            require_full(_load("tensorboardX"), f"A {dtype.name} tensor's {field}")
        raw: Any = []
    else:
        raw = getattr(proto, field)
    if dtype is _dt.string:
        values = list(raw)
        n = len(values)
        if n > count:
            raise InvalidArgumentError(f"Tensor of shape {shape} has {count} elements but "
                                       f"{n} values in string_val")
        _check_fits(count, dtype, shape)
        array = np.empty(count, dtype=object)
        array[:n] = values
        array[n:] = values[-1] if n else b""
        return array
    if dtype.is_complex:
        parts = np.asarray(raw, dtype=np.float32 if dtype is _dt.complex64 else np.float64)
        if len(parts) % 2:
            raise InvalidArgumentError(f"A {dtype.name} tensor's {field} holds {len(parts)} "
                                       f"numbers, not (real, imag) pairs")
        values = np.empty(len(parts) // 2, dtype=dtype.as_numpy_dtype)
        values.real, values.imag = parts[0::2], parts[1::2]  # exact bits of each part
    elif dtype is _dt.float16:
        values = np.asarray(raw, dtype=np.int64).astype(np.uint16).view(np.float16)
    else:
        source = {"float_val": np.float32, "double_val": np.float64, "int_val": np.int32,
                  "int64_val": np.int64, "bool_val": np.bool_, "uint32_val": np.uint32,
                  "uint64_val": np.uint64}[field]
        values = np.asarray(raw, dtype=source).astype(dtype.as_numpy_dtype)  # C's wrap
    n = len(values)
    if n > count:
        raise InvalidArgumentError(f"Tensor of shape {shape} has {count} elements but {n} "
                                   f"values in {field}")
    if n == count:
        return values
    _check_fits(count, dtype, shape)
    out = np.empty(count, dtype=dtype.as_numpy_dtype)
    out[:n] = values
    out[n:] = values[-1] if n else 0
    return out


def _check_fits(count: int, dtype: DType, shape: list[int]) -> None:
    """ResourceExhaustedError before filling a tensor larger than the machine's memory
    (a few bytes of TensorProto can ask for any shape)."""
    nbytes = count * (dtype.itemsize if dtype is not _dt.string else 8)
    try:
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        return
    if nbytes > available:
        raise ResourceExhaustedError(f"OOM when allocating a tensor of shape {shape} and type "
                                     f"{dtype.name}: more than the machine's {available} bytes")


# -- attrs ----------------------------------------------------------------------------
#: AttrValue.ListValue's fields, by the kind name TensorFlow's OpDefs use.
_LIST_FIELDS = {"s": "list(string)", "i": "list(int)", "f": "list(float)", "b": "list(bool)",
                "type": "list(type)", "shape": "list(shape)", "tensor": "list(tensor)",
                "func": "list(func)"}
_SCALAR_KINDS = {"s": "string", "i": "int", "f": "float", "b": "bool", "type": "type",
                 "shape": "shape", "tensor": "tensor", "func": "func",
                 "placeholder": "placeholder"}


@dataclass(frozen=True)
class Func:
    """A ``func`` attr: a function name and its attrs as ``{name: (kind, value)}``."""

    name: str
    attrs: dict


def attr_from_proto(value: Any, resource: DType | None = None) -> tuple[str, Any]:
    """``(kind, value)`` for an AttrValue: ``("int", 3)``, ``("type", gf.float32)``,
    ``("string", b"...")`` (bytes, as stored), ``("shape", TensorShape)``,
    ``("tensor", ndarray)``, ``("func", Func)``, ``("list(int)", (1, 2))``...; an empty
    list is ``("list", ())``, an AttrValue with nothing set ``("none", None)``.
    ``resource``: the dtype to read DT_RESOURCE as (graphflow holds variable handles as
    strings); by default it is refused. A list holding values of two kinds is an
    InvalidArgumentError."""
    def type_of(enum: int) -> DType:
        return resource if enum == DT_RESOURCE and resource is not None else from_tf_enum(enum)

    which = value.WhichOneof("value")
    if which is None:
        return "none", None
    if which == "list":
        lst = value.list
        found = [f for f in _LIST_FIELDS if len(getattr(lst, f))]
        if len(found) > 1:
            raise InvalidArgumentError(f"A list attr holds values of several kinds "
                                       f"({', '.join(_LIST_FIELDS[f] for f in found)})")
        if not found:
            return "list", ()
        f = found[0]
        items = getattr(lst, f)
        conv = {"type": type_of, "shape": shape_from_proto, "tensor": tensor_from_proto,
                "func": lambda x: _func_from_proto(x, resource), "i": int, "f": float,
                "b": bool, "s": bytes}[f]
        return _LIST_FIELDS[f], tuple(conv(x) for x in items)
    raw = getattr(value, which)
    conv = {"type": type_of, "shape": shape_from_proto, "tensor": tensor_from_proto,
            "func": lambda x: _func_from_proto(x, resource)}.get(which)
    return _SCALAR_KINDS[which], conv(raw) if conv else raw


def _func_from_proto(func: Any, resource: DType | None = None) -> Func:
    return Func(func.name, {k: attr_from_proto(v, resource)
                            for k, v in sorted(func.attr.items())})


def attr_to_proto(kind: str, value: Any, ps: ProtoSet | None = None) -> Any:
    """An AttrValue for ``value`` of ``kind`` (the kinds :func:`attr_from_proto` returns,
    and graphflow's own; strings may be str or bytes)."""
    ps = ps or protos()
    av = ps.AttrValue()
    if kind == "string":
        av.s = value.encode() if isinstance(value, str) else bytes(value)
    elif kind == "int":
        av.i = int(value)
    elif kind == "float":
        av.f = float(value)
    elif kind == "bool":
        av.b = bool(value)
    elif kind == "type":
        av.type = tf_enum(value)
    elif kind == "shape":
        av.shape.CopyFrom(shape_to_proto(value, ps))
    elif kind == "tensor":
        av.tensor.CopyFrom(tensor_to_proto(value, ps=ps))
    elif kind == "func":
        av.func.CopyFrom(_func_to_proto(value, ps))
    elif kind == "placeholder":
        av.placeholder = value
    elif kind in ("list", *_LIST_FIELDS.values()):
        av.list.SetInParent()  # an empty list is still a list
        field = {v: k for k, v in _LIST_FIELDS.items()}.get(kind)
        if field is None and len(value):
            raise ValueError("attr_to_proto(): a non-empty list needs its kind, "
                             "e.g. 'list(int)'")
        for item in value:
            if field in ("shape", "tensor", "func"):
                conv = {"shape": shape_to_proto, "tensor": lambda v, p: tensor_to_proto(v, ps=p),
                        "func": _func_to_proto}[field]
                getattr(av.list, field).add().CopyFrom(conv(item, ps))
            elif field == "type":
                av.list.type.append(tf_enum(item))
            elif field == "s":
                av.list.s.append(item.encode() if isinstance(item, str) else bytes(item))
            else:
                getattr(av.list, field).append(item)
    else:
        raise ValueError(f"attr_to_proto(): unknown attr kind {kind!r}")
    return av


def _func_to_proto(func: Func, ps: ProtoSet) -> Any:
    out = ps.NameAttrList(name=func.name)
    for k, (kind, v) in func.attrs.items():
        out.attr[k].CopyFrom(attr_to_proto(kind, v, ps))
    return out


__all__ = ["INSTALL_HINT", "FULL_INSTALL_HINT", "ProtoSet", "protos", "require_full",
           "unknown_field_numbers", "TF_ENUM", "DT_RESOURCE", "tf_enum", "tf_enum_name",
           "from_tf_enum", "shape_to_proto", "shape_from_proto", "tensor_to_proto",
           "tensor_from_proto", "Func", "attr_from_proto", "attr_to_proto"]
