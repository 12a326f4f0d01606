"""graphflow.interop.tf_proto: TensorFlow's messages <-> graphflow dtypes, shapes, arrays, attrs.

References: numpy (the value written is the value read; TensorFlow's fill rule is
numpy's ``np.pad(..., "edge")``), the generated DataType enum's own names, and
TensorFlow's ``make_tensor_proto``/``make_ndarray`` where TensorFlow is installed.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys

import numpy as np
import pytest

pytest.importorskip("tensorboardX")

import graphflow as gf  # noqa: E402
from graphflow.errors import (InvalidArgumentError, ResourceExhaustedError,  # noqa: E402
                              UnimplementedError)
from graphflow.interop import tf_proto as tp  # noqa: E402


def _sources():
    out = [pytest.param("tensorboardX", id="tensorboardX")]
    try:
        tp.protos("tensorboard")
        out.append(pytest.param("tensorboard", id="tensorboard"))
    except ImportError:
        pass
    if importlib.util.find_spec("tensorflow") is not None:  # imported by the first test using it
        out.append(pytest.param("tensorflow", id="tensorflow"))
    return out


SOURCES = _sources()
RNG = np.random.default_rng(24)


def _sample(dtype: gf.DType, shape) -> np.ndarray:
    n = int(np.prod(shape))
    if dtype is gf.string:
        out = np.empty(n, dtype=object)
        out[:] = [bytes(RNG.integers(0, 256, RNG.integers(0, 5)).astype(np.uint8))
                  for _ in range(n)]
        return out.reshape(shape)
    if dtype.is_bool:
        return RNG.integers(0, 2, n).astype(bool).reshape(shape)
    if dtype.is_complex:
        part = np.float32 if dtype is gf.complex64 else np.float64
        return (RNG.normal(size=n).astype(part) + 1j * RNG.normal(size=n).astype(part)).astype(
            dtype.as_numpy_dtype).reshape(shape)
    np_dtype = np.dtype(dtype.as_numpy_dtype)
    if dtype.is_floating:
        vals = RNG.normal(size=n).astype(np_dtype)
        special = np.array([np.nan, -0.0, np.inf, -np.inf], np_dtype)[:n]
        vals[:len(special)] = special
        return vals.reshape(shape)
    info = np.iinfo(np_dtype)
    vals = RNG.integers(info.min, info.max, n, dtype=np_dtype, endpoint=True)
    vals[:2] = [info.min, info.max][:n]
    return vals.reshape(shape)


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.dtype == object:
        assert a.ravel().tolist() == b.ravel().tolist()
    else:
        assert a.tobytes() == b.tobytes()  # bit for bit: nan payloads, -0.0


DTYPES = [t for t in gf.dtypes.ALL_TYPES]


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("encoding", ["auto", "content", "typed"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: t.name)
def test_tensor_round_trip(source, encoding, dtype):
    ps = tp.protos(source)
    for shape in [(), (1,), (2, 3), (0, 4)]:
        value = _sample(dtype, shape)
        before = value.copy()
        proto = tp.tensor_to_proto(value, ps=ps, encoding=encoding)
        _same(value, before)  # not modified
        back = tp.tensor_from_proto(ps.TensorProto.FromString(proto.SerializeToString()))
        _same(back, value)
        assert not back.flags.writeable


@pytest.mark.parametrize("source", SOURCES)
def test_typed_encoding_drops_trailing_repeats(source):
    ps = tp.protos(source)
    proto = tp.tensor_to_proto(np.array([[1, 2, 7], [7, 7, 7]], np.int32), encoding="typed", ps=ps)
    assert list(proto.int_val) == [1, 2, 7] and not proto.tensor_content
    proto = tp.tensor_to_proto(np.float32([0.0, -0.0, -0.0]), encoding="typed", ps=ps)
    assert [np.float32(v).tobytes() for v in proto.float_val] == \
        [np.float32(0.0).tobytes(), np.float32(-0.0).tobytes()]


# -- reading what TensorFlow writes: hand-built messages, numpy's edge padding as reference --
FIELDS = [  # (dtype, field, values as stored, the numpy dtype they hold)
    (gf.float32, "float_val", [1.5, -2.25], np.float32),
    (gf.float64, "double_val", [1e300, -0.5], np.float64),
    (gf.int32, "int_val", [-7, 2 ** 31 - 1], np.int32),
    (gf.int16, "int_val", [-300, 12], np.int16),
    (gf.int8, "int_val", [-128, 127], np.int8),
    (gf.uint8, "int_val", [255, 1], np.uint8),
    (gf.uint16, "int_val", [65535, 2], np.uint16),
    (gf.int64, "int64_val", [-2 ** 63, 2 ** 63 - 1], np.int64),
    (gf.bool, "bool_val", [True, False], np.bool_),
]


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("dtype,field,values,np_dtype", FIELDS, ids=lambda v: str(v))
def test_typed_field_fill(source, dtype, field, values, np_dtype):
    ps = tp.protos(source)
    for count in (0, 1, 2):
        proto = ps.TensorProto(dtype=tp.tf_enum(dtype))
        proto.tensor_shape.dim.add(size=5)
        stored = values[:count]
        getattr(proto, field).extend(stored)
        expected = np.zeros(5, np_dtype) if not stored else \
            np.pad(np.array(stored, np_dtype), (0, 5 - len(stored)), mode="edge")
        _same(tp.tensor_from_proto(proto), expected)


@pytest.mark.parametrize("source", SOURCES)
def test_half_val_bit_patterns(source):
    ps = tp.protos(source)
    bits = [0x3C00, 0x8000, 0x7E01, 0xFC00, 0x0001]  # 1, -0, nan with payload, -inf, subnormal
    proto = ps.TensorProto(dtype=tp.tf_enum(gf.float16), half_val=bits)
    proto.tensor_shape.dim.add(size=7)
    got = tp.tensor_from_proto(proto)
    assert got.view(np.uint16).tolist() == bits + [0x0001, 0x0001]


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("dtype,field", [(gf.complex64, "scomplex_val"),
                                         (gf.complex128, "dcomplex_val")])
def test_complex_pairs_fill(source, dtype, field):
    ps = tp.protos(source)
    proto = ps.TensorProto(dtype=tp.tf_enum(dtype))
    proto.tensor_shape.dim.add(size=3)
    getattr(proto, field).extend([1.0, 2.0, -3.0, 4.5])
    expected = np.array([1 + 2j, -3 + 4.5j, -3 + 4.5j], dtype.as_numpy_dtype)
    _same(tp.tensor_from_proto(proto), expected)
    getattr(proto, field).append(9.0)
    with pytest.raises(InvalidArgumentError, match="pairs"):
        tp.tensor_from_proto(proto)


@pytest.mark.parametrize("source", SOURCES)
def test_string_val_arbitrary_bytes(source):
    ps = tp.protos(source)
    every_byte = bytes(range(256))
    proto = ps.TensorProto(dtype=tp.tf_enum(gf.string), string_val=[every_byte, b"", b"\xff\xfe"])
    proto.tensor_shape.dim.add(size=2)
    proto.tensor_shape.dim.add(size=2)
    got = tp.tensor_from_proto(ps.TensorProto.FromString(proto.SerializeToString()))
    assert got.dtype == object and got.shape == (2, 2)
    assert got.ravel().tolist() == [every_byte, b"", b"\xff\xfe", b"\xff\xfe"]


def test_uint32_uint64_typed_fields():
    if not any(p.values[0] == "tensorboard" for p in SOURCES):
        pytest.skip("tensorboard (TensorFlow's full schema) is not installed")
    full = tp.protos("tensorboard")
    proto = full.TensorProto(dtype=tp.tf_enum(gf.uint32), uint32_val=[2 ** 32 - 1, 5])
    proto.tensor_shape.dim.add(size=3)
    _same(tp.tensor_from_proto(proto), np.uint32([2 ** 32 - 1, 5, 5]))
    proto64 = full.TensorProto(dtype=tp.tf_enum(gf.uint64), uint64_val=[2 ** 64 - 1])
    _same(tp.tensor_from_proto(proto64), np.uint64(2 ** 64 - 1).reshape(()))
    # tensorboardX's TensorProto lacks the field: refused, naming what to install
    old = tp.protos("tensorboardX").TensorProto.FromString(proto.SerializeToString())
    with pytest.raises(UnimplementedError, match=r"uint32_val.*graphflow\[tensorboard-full\]"):
        tp.tensor_from_proto(old)


@pytest.mark.parametrize("source", SOURCES)
def test_bad_tensors(source):
    ps = tp.protos(source)
    proto = ps.TensorProto(dtype=tp.tf_enum(gf.int32), int_val=[1, 2, 3])
    proto.tensor_shape.dim.add(size=2)
    with pytest.raises(InvalidArgumentError, match="2 elements but 3 values in int_val"):
        tp.tensor_from_proto(proto)
    proto = ps.TensorProto(dtype=tp.tf_enum(gf.int32), tensor_content=b"\0" * 7)
    proto.tensor_shape.dim.add(size=2)
    with pytest.raises(InvalidArgumentError, match="needs 8 bytes of tensor_content, got 7"):
        tp.tensor_from_proto(proto)
    proto = ps.TensorProto(dtype=tp.tf_enum(gf.bool), tensor_content=b"\x00\x02")
    proto.tensor_shape.dim.add(size=2)
    with pytest.raises(InvalidArgumentError, match="other than 0 or 1"):
        tp.tensor_from_proto(proto)
    proto = ps.TensorProto(dtype=tp.tf_enum(gf.int32))
    proto.tensor_shape.dim.add(size=-1)
    with pytest.raises(InvalidArgumentError, match="fully defined"):
        tp.tensor_from_proto(proto)
    proto = ps.TensorProto(dtype=tp.tf_enum(gf.float64), double_val=[1.0])
    proto.tensor_shape.dim.add(size=2 ** 30)
    proto.tensor_shape.dim.add(size=2 ** 10)
    with pytest.raises(ResourceExhaustedError, match="OOM when allocating"):
        tp.tensor_from_proto(proto)
    with pytest.raises(UnimplementedError, match="DT_BFLOAT16"):
        tp.tensor_from_proto(ps.TensorProto(dtype=14))
    with pytest.raises(InvalidArgumentError, match="DT_INVALID"):
        tp.tensor_from_proto(ps.TensorProto())


# -- dtypes, shapes, attrs -------------------------------------------------------------
@pytest.mark.parametrize("source", SOURCES)
def test_enum_names_match_generated_enum(source):
    package = tp.protos(source).TensorProto.__module__.rsplit(".", 1)[0]
    enum = importlib.import_module(package + ".types_pb2").DataType
    for dtype, value in tp.TF_ENUM.items():
        assert tp.from_tf_enum(value) is dtype
        if value in enum.values():  # tensorboardX's enum stops at DT_RESOURCE
            assert enum.Name(value) == tp.tf_enum_name(value)
    assert tp.tf_enum_name(101) == "DT_FLOAT_REF"
    with pytest.raises(UnimplementedError, match="DT_FLOAT_REF"):
        tp.from_tf_enum(101)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("dims", [None, [], [3], [None, 4], [0, None, 2]], ids=str)
def test_shape_round_trip(source, dims):
    ps = tp.protos(source)
    proto = tp.shape_to_proto(gf.TensorShape(dims), ps)
    assert proto.unknown_rank == (dims is None)
    assert [d.size for d in proto.dim] == [-1 if d is None else d for d in (dims or [])]
    back = ps.TensorShapeProto.FromString(proto.SerializeToString())
    assert tp.shape_from_proto(back).dims == dims


@pytest.mark.parametrize("source", SOURCES)
def test_bad_shapes(source):
    ps = tp.protos(source)
    proto = ps.TensorShapeProto()
    proto.dim.add(size=-2)
    with pytest.raises(InvalidArgumentError, match="negative"):
        tp.shape_from_proto(proto)
    proto = ps.TensorShapeProto(unknown_rank=True)
    proto.dim.add(size=2)
    with pytest.raises(InvalidArgumentError, match="unknown rank"):
        tp.shape_from_proto(proto)


ATTRS = [("string", b"\xff\x00abc"), ("int", -2 ** 63), ("float", 0.5), ("bool", True),
         ("type", gf.complex128), ("shape", gf.TensorShape([None, 2])),
         ("shape", gf.TensorShape(None)), ("list(int)", (1, -2, 3)),
         ("list(string)", (b"a", b"")), ("list(float)", (1.5,)), ("list(bool)", (False, True)),
         ("list(type)", (gf.int32, gf.string)), ("list(shape)", (gf.TensorShape([1]),)),
         ("list", ()), ("placeholder", "T")]


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("kind,value", ATTRS, ids=lambda v: repr(v)[:20])
def test_attr_round_trip(source, kind, value):
    ps = tp.protos(source)
    proto = tp.attr_to_proto(kind, value, ps)
    got_kind, got = tp.attr_from_proto(ps.AttrValue.FromString(proto.SerializeToString()))
    assert got_kind == kind
    if kind in ("shape", "list(shape)"):
        assert [s.dims for s in (got if kind == "list(shape)" else [got])] == \
            [s.dims for s in (value if kind == "list(shape)" else [value])]
    else:
        assert got == value


@pytest.mark.parametrize("source", SOURCES)
def test_attr_tensor_and_func(source):
    ps = tp.protos(source)
    kind, got = tp.attr_from_proto(tp.attr_to_proto("tensor", np.int64([[1, 2]]), ps))
    assert kind == "tensor"
    _same(got, np.int64([[1, 2]]))
    func = tp.Func("f", {"T": ("type", gf.float32), "n": ("int", 2)})
    assert tp.attr_from_proto(tp.attr_to_proto("func", func, ps)) == ("func", func)
    mixed = ps.AttrValue()
    mixed.list.i.append(1)
    mixed.list.f.append(2.0)
    with pytest.raises(InvalidArgumentError, match="several kinds"):
        tp.attr_from_proto(mixed)
    assert tp.attr_from_proto(ps.AttrValue()) == ("none", None)
    handle = ps.AttrValue(type=tp.DT_RESOURCE)
    with pytest.raises(UnimplementedError, match="DT_RESOURCE"):
        tp.attr_from_proto(handle)
    assert tp.attr_from_proto(handle, resource=gf.string) == ("type", gf.string)


def test_missing_protobuf_classes_name_the_extra(monkeypatch):
    tp._load.cache_clear()
    hidden = ("tensorflow", "tensorboard", "tensorboardX")
    for name in [m for m in sys.modules if m.split(".")[0] in hidden] + list(hidden):
        monkeypatch.setitem(sys.modules, name, None)
    try:
        with pytest.raises(ImportError, match=r"pip install 'graphflow\[tensorboard\]'"):
            tp.protos()
        with pytest.raises(ImportError, match=r"graphflow\[tensorboard-full\]"):
            tp.protos("tensorboard")
    finally:
        tp._load.cache_clear()


# -- TensorFlow itself as the judge, where installed -------------------------------------
TF_DTYPES = [t for t in DTYPES]


@pytest.mark.parametrize("dtype", TF_DTYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("shape", [(), (3,), (2, 2)], ids=str)
def test_against_tensorflow(dtype, shape):
    tf = pytest.importorskip("tensorflow")
    from tensorflow.core.framework import tensor_pb2

    ps = tp.protos()
    value = _sample(dtype, shape)
    # TensorFlow writes, graphflow reads
    written = tf.make_tensor_proto(value, dtype=tf.as_dtype(tp.tf_enum(dtype)))
    got = tp.tensor_from_proto(ps.TensorProto.FromString(written.SerializeToString()))
    _same(got, value)
    # graphflow writes (each encoding), TensorFlow reads
    for encoding in ("content", "typed"):
        proto = tp.tensor_to_proto(value, encoding=encoding, ps=ps)
        back = tf.make_ndarray(tensor_pb2.TensorProto.FromString(proto.SerializeToString()))
        _same(back.astype(object) if dtype is gf.string else back, value)
    assert tf.as_dtype(tp.tf_enum(dtype)).name == {"float16": "float16", "bool": "bool"}.get(
        dtype.name, dtype.name)
