"""Every builder method, fed junk, fails cleanly at build time.

For each op graphflow registers, ``scope.<builder>(...)`` gets random arguments:
tensors of every dtype and of known, partial and unknown shapes, next to wrong
types, None, huge and negative ints, NaN, inf, strings, bytes, dicts, objects,
nested and ragged lists. Building either succeeds or raises a graphflow error
(an ``OpError``) or the TypeError/ValueError TensorFlow raises, with a message;
never another exception, and never gigabytes of memory (shape inference only
evaluates what is small). No session runs: this is about building.
"""
from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphflow as gf
from graphflow.errors import OpError

from support.registered_ops import package_ops

ACCEPTED = (OpError, TypeError, ValueError)
#: What one build may allocate: build-time folding keeps to about 1 MB per value.
MAX_BUILD_BYTES = 64 << 20


OPS = {d.name: d for d in package_ops()}

# -- junk -----------------------------------------------------------------------------------
HUGE_INTS = [2 ** 70, -2 ** 70, 2 ** 64, 2 ** 63, 2 ** 63 - 1, -2 ** 63 - 1, 2 ** 32, 2 ** 31,
             -2 ** 31 - 1]
DTYPES = [gf.float16, gf.float32, gf.float64, gf.int8, gf.int16, gf.int32, gf.int64, gf.uint8,
          gf.uint16, gf.uint32, gf.uint64, gf.bool, gf.complex64, gf.complex128, gf.string]


class _Opaque:
    """An object graphflow knows nothing about."""


class _BadOperand:
    """Has an ``as_output`` that returns something else than an Output."""

    def as_output(self):
        return 3


small_ints = st.integers(-3, 6)
scalars = st.one_of(
    st.none(), st.booleans(), small_ints, st.sampled_from(HUGE_INTS),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([math.nan, math.inf, -0.0]),
    st.complex_numbers(max_magnitude=1e3), st.text(max_size=3), st.binary(max_size=3),
    st.sampled_from(["", "int32", "float32", "string", "ERROR", "IGNORE", "x:0", "²", "٠"]),
    st.sampled_from(DTYPES), st.sampled_from([int, float, bool, str, bytes, complex, object]),
    st.sampled_from([np.int32, np.float64, np.dtype("datetime64[s]"), np.dtype("V4")]),
    st.builds(_Opaque), st.builds(_BadOperand), st.just({}),
    st.dictionaries(st.text(max_size=2), small_ints, max_size=2), st.just(slice(1, 2)),
    st.just(Ellipsis), st.just(gf.TensorShape(None)), st.just(gf.TensorShape([2, None])),
)
junk = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner), max_leaves=8)
int_lists = st.recursive(st.integers(-2, 5) | st.sampled_from(HUGE_INTS),
                         lambda inner: st.lists(inner, max_size=3), max_leaves=6)
odd_arrays = st.sampled_from([
    np.array([1.5, np.nan, np.inf]), np.array([2 ** 63], dtype=np.uint64),
    np.array(["a", "b"]), np.array([object()], dtype=object), np.array([[1, 2], [3, 4]])[:, 0],
    np.zeros((0, 2, 0)), np.array(np.datetime64("2020-01-01")), np.array([1, 2], dtype=">i4"),
    np.zeros((2, 2), dtype=[("a", np.int32)]),
])
any_junk = st.one_of(junk, int_lists, odd_arrays)

#: Elements of the tensors: small values (indices, dims, ids) and edge values.
ELEMENTS = st.integers(-2, 4) | st.sampled_from([2 ** 31 - 1, -2 ** 31, 2 ** 63 - 1, -2 ** 63])
shapes = st.one_of(st.none(), st.lists(st.sampled_from([None, 0, 1, 2, 3]), max_size=3))
concrete_shapes = st.lists(st.integers(0, 3), max_size=3).map(tuple)


def _array(dtype: gf.DType, shape: tuple, values: list) -> np.ndarray:
    """``values`` (cycled over ``shape``) as ``dtype``; integers wrap, as a cast does."""
    flat = np.resize(np.array(values or [0], dtype=object), math.prod(shape))
    if dtype.is_string:
        array = np.empty(flat.size, dtype=object)
        array[:] = [str(v).encode() for v in flat]
    elif dtype.is_bool:
        array = flat != 0
    else:
        with np.errstate(all="ignore"):
            wide = np.array([float(v) for v in flat]) if dtype.is_floating or dtype.is_complex \
                else np.array([v % 2 ** 64 for v in flat], dtype=np.uint64)
            array = wide.astype(dtype.as_numpy_dtype)
    return array.reshape(shape)


#: Sizes for computed tensors: small, just past what build-time folding evaluates, huge.
SIZES = st.sampled_from([0, 1, 3, 2 ** 16 + 1, 2 ** 31 - 1, 2 ** 40])


def _computed(scope: gf.Scope, dtype: gf.DType, kind: str, size: int, value: int):
    """A Range or Fill of ``size`` elements: values known at build time (too large to
    evaluate when ``size`` is large); a placeholder where the op rejects the dtype."""
    try:
        if kind == "range":
            return scope.range(*(_array(dtype, (), [v]) for v in (value, value + size, 1)))
        return scope.fill(np.array([size], np.int64), _array(dtype, (), [value]))
    except ACCEPTED:
        return scope.placeholder(dtype)


@st.composite
def tensor_like(draw, scope: gf.Scope, dtype: gf.DType):
    """A placeholder of ``dtype`` (known, partial or unknown shape), a constant, a numpy
    array or nested list the builder turns into one, or a Range or Fill."""
    kind = draw(st.sampled_from(["placeholder", "constant", "array", "list", "range", "fill"]))
    if kind == "placeholder":
        return scope.placeholder(dtype, shape=draw(shapes))
    if kind in ("range", "fill"):
        return _computed(scope, dtype, kind, draw(SIZES), draw(st.integers(-2, 2)))
    array = _array(dtype, draw(concrete_shapes), draw(st.lists(ELEMENTS, max_size=6)))
    if kind == "constant":
        return scope.constant(array)
    return array if kind == "array" or dtype.is_string else array.tolist()


def attr_values(attr):
    """A value of the attr's kind, usually a sensible one."""
    return {
        "type": st.sampled_from(attr.allowed or DTYPES),
        "int": st.integers(-1, 4) | st.sampled_from(HUGE_INTS),
        "bool": st.booleans(),
        "float": st.floats(allow_nan=True, allow_infinity=True),
        "string": st.sampled_from(["", "ERROR", "IGNORE", "mod", "div"]),
        "shape": shapes,
        "list(int)": st.lists(st.integers(-3, 3), max_size=3),
        "tensor": st.builds(_array, st.sampled_from(DTYPES), concrete_shapes,
                            st.lists(ELEMENTS, max_size=4)),
    }.get(attr.kind, any_junk)


@st.composite
def call_arguments(draw, scope: gf.Scope, definition):
    """Keyword arguments for ``definition``'s builder: inputs whose dtypes agree (one per
    type attr), list inputs of one length, some attrs; then up to three arguments
    replaced by junk, dropped, or added where the op takes no such argument."""
    types = {name: draw(st.sampled_from(attr.allowed or DTYPES))
             for name, attr in definition.attrs.items() if attr.kind == "type"}
    lengths = {spec.number_attr or spec.type_list_attr: draw(st.integers(0, 3))
               for spec in definition.inputs if spec.is_list}
    kwargs = {}
    for spec in definition.inputs:
        if spec.type_list_attr is not None:  # a list of mixed dtypes
            kwargs[spec.name] = [draw(tensor_like(scope, draw(st.sampled_from(DTYPES))))
                                 for _ in range(lengths[spec.type_list_attr])]
            continue
        dtype = spec.dtype or types[spec.type_attr]
        if spec.is_list:
            kwargs[spec.name] = [draw(tensor_like(scope, dtype))
                                 for _ in range(lengths[spec.number_attr])]
        else:
            kwargs[spec.name] = draw(tensor_like(scope, dtype))
    for name in definition.user_attrs:
        attr = definition.attrs[name]
        if attr.required or draw(st.booleans()):
            kwargs[name] = draw(attr_values(attr))
    params = [s.name for s in definition.inputs] + list(definition.user_attrs)
    for _ in range(draw(st.integers(0, 3))):
        change = draw(st.sampled_from(["junk", "junk", "junk", "drop", "extra"]))
        if change == "extra":
            kwargs[draw(st.sampled_from(["bogus", "name_", "T"]))] = draw(any_junk)
        elif params:
            name = draw(st.sampled_from(params))
            if change == "drop":
                kwargs.pop(name, None)
            else:
                kwargs[name] = draw(any_junk | st.lists(any_junk, max_size=3))
    return kwargs


# -- the property ------------------------------------------------------------------------------
@pytest.mark.parametrize("op_type", sorted(OPS))
@settings(max_examples=10, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_builder_fails_cleanly_on_junk(op_type, data):
    definition = OPS[op_type]
    scope = gf.Scope(gf.Graph())
    kwargs = data.draw(call_arguments(scope, definition), label="arguments")
    build = getattr(scope, definition.builder_name)
    tracemalloc.start()
    try:
        build(**kwargs)
    except ACCEPTED as e:
        assert str(e).strip(), f"{type(e).__name__} without a message"
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < MAX_BUILD_BYTES, f"building {op_type} allocated {peak} bytes"


def test_every_package_op_is_covered():
    """The property runs over graphflow's ops as they are declared now, not a fixed list."""
    names = set(OPS)
    assert {"ScatterNd", "DynamicPartition", "DynamicStitch", "Const", "Placeholder"} <= names
    assert not [n for n in names if n.startswith("_")]
