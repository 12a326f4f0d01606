"""Random ops, as TensorFlow's: stateful draws seeded by graph and op seeds, and
stateless draws that are a pure function of a seed tensor.

Raw ops (TensorFlow's names and signatures):

- stateful (``stateful=True``: never folded, simplified or fused; each run draws new
  numbers): ``RandomUniform``, ``RandomStandardNormal``, ``TruncatedNormal`` (shape;
  attrs seed, seed2, dtype), ``RandomUniformInt`` (shape, minval, maxval) and
  ``RandomShuffle`` (value);
- stateless (pure: same shape, seed and dtype, same numbers, in any Session or process,
  on any device): ``StatelessRandomUniform``, ``StatelessRandomNormal``,
  ``StatelessTruncatedNormal`` (shape, seed), ``StatelessRandomUniformInt`` (shape, seed,
  minval, maxval) and ``StatelessRandomUniformFullInt`` (shape, seed), TensorFlow's V1
  stateless ops (seed: an int32/int64 ``[2]`` tensor).

Builders with TensorFlow's Python names and argument order, which apply TF's seed rules
(:func:`get_seed`) and scale the raw draws as TF's random_ops.py does:
``scope.random_uniform``, ``random_normal``, ``truncated_normal``, ``random_shuffle``,
``stateless_random_uniform``, ``stateless_random_normal``, ``stateless_truncated_normal``.

Where a stateful op's generator lives: one per (Session, op), created on the op's first
run from its (seed, seed2) attrs, kept beside the Session's variables (keyed by its
``ResourceStore``, which kernels reach as ``ctx.resources``), so that every plan of the
Session (``run``, ``make_callable``, shape-specialized plans) continues one sequence and
a new Session starts it again. A draw holds the generator's lock, so two threads running
the op get disjoint numbers. ``seed == seed2 == 0`` seeds it from the OS (TF's
nondeterministic seeds).

Numbers come from numpy's Philox (CPU; a stateless draw's key is its two seed ints) and
cupy's cuRAND generator (stateful GPU kernels); they need not equal TensorFlow's bit for
bit. A stateless GPU kernel draws on the host and copies the result to the device, so
that its numbers are the CPU's (TF's stateless ops give the same numbers on CPU and GPU).
"""
from __future__ import annotations

import math
import threading
import weakref
from typing import Any, Callable

import numpy as np

from graphflow.builder import as_operand
from graphflow.dtypes import DType, as_dtype, float16, float32, float64, int32, int64, \
    uint32, uint64
from graphflow.errors import InvalidArgumentError
from graphflow.graph import Graph, Output
from graphflow.registry import (INDEX_TYPES, NON_STRING_TYPES, IntAttr, TypeAttr, register_op,
                                same_as_tf)
from graphflow.scope import Scope
from graphflow.shapes import TensorShape

from .shape_rules import same_shape_as

#: TF's graph seed for an op seed given without one (random_seed.py).
DEFAULT_GRAPH_SEED = 87654321
_MAXINT32 = 2 ** 31 - 1
_MASK64 = 2 ** 64 - 1

#: The float dtypes of the random ops (TF's {half, bfloat16, float, double}; graphflow
#: has no bfloat16).
RANDOM_FLOAT_TYPES = (float16, float32, float64)
#: The dtypes of bounded random integers.
RANDOM_INT_TYPES = (int32, int64)
#: The dtypes of full-range random integers.
FULL_INT_TYPES = (int32, int64, uint32, uint64)
#: How far from the mean a truncated normal value may be, in standard deviations.
TRUNCATE_AT = 2.0


# -- TF's seed rules -----------------------------------------------------------------------
def get_seed(graph: Graph, op_seed: int | None) -> tuple[int, int]:
    """The (seed, seed2) attrs of a random op built in ``graph`` with ``op_seed``, by TF's
    rules (tf.compat.v1.get_seed): graph seed set and no op seed -> the op seed is the
    number of ops the graph has (TF 1.x: the graph's last op id), so each op gets its own
    sequence; only an op seed -> graph seed DEFAULT_GRAPH_SEED; neither -> (0, 0), which
    the kernels read as "seed from the OS"; (0, 0) from the rules -> (0, INT32_MAX)."""
    graph_seed = _checked_seed(getattr(graph, "seed", None), "graph seed")
    op_seed = _checked_seed(op_seed, "seed")
    if graph_seed is not None:
        seeds = graph_seed % _MAXINT32, (len(graph) if op_seed is None else op_seed) % _MAXINT32
    elif op_seed is not None:
        seeds = DEFAULT_GRAPH_SEED, op_seed % _MAXINT32
    else:
        return 0, 0
    return (0, _MAXINT32) if seeds == (0, 0) else seeds


def _checked_seed(seed: Any, what: str) -> int | None:
    """``seed`` as a Python int (None stays None); a non-integer is a TypeError."""
    if seed is None:
        return None
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"A {what} must be an int or None, got {type(seed).__name__} {seed!r}")
    return int(seed)


# -- draws: one interface over numpy's Generator and cupy's RandomState ----------------------
class _NumpyDraws:
    """Draws from a numpy Generator (the CPU, and any device whose arrays are numpy's)."""

    def __init__(self, generator: np.random.Generator):
        self.generator = generator

    def uniform(self, shape: tuple, dtype: np.dtype) -> np.ndarray:
        return self.generator.random(shape, dtype=dtype)

    def normal(self, shape: tuple, dtype: np.dtype) -> np.ndarray:
        return self.generator.standard_normal(shape, dtype=dtype)

    def integers(self, lo: int, hi: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
        return self.generator.integers(lo, hi, shape, dtype=dtype)

    def permutation(self, n: int) -> np.ndarray:
        return self.generator.permutation(n)


class _CupyDraws:
    """Draws from a cupy RandomState (cuRAND) on the device current when it was made."""

    def __init__(self, state):
        self.state = state

    def uniform(self, shape: tuple, dtype: np.dtype):
        return self.state.random_sample(shape, dtype=dtype)

    def normal(self, shape: tuple, dtype: np.dtype):
        return self.state.standard_normal(shape, dtype=dtype)

    def integers(self, lo: int, hi: int, shape: tuple, dtype: np.dtype):
        return self.state.randint(lo, hi, shape, dtype=dtype)

    def permutation(self, n: int):
        return self.state.permutation(n)


def _philox(key: tuple[int, int] | None, counter: tuple[int, int] = (0, 0)) -> _NumpyDraws:
    """numpy draws from Philox4x64 with a 128-bit ``key`` and ``counter`` (its upper
    half), each two 64-bit ints; None: a key from the OS."""
    if key is None:
        return _NumpyDraws(np.random.Generator(np.random.Philox()))
    words = np.array([k & _MASK64 for k in key], dtype=np.uint64)
    start = np.array([0, 0, *(c & _MASK64 for c in counter)], dtype=np.uint64)
    return _NumpyDraws(np.random.Generator(np.random.Philox(key=words, counter=start)))


#: The upper key word of every stateless draw: stateless seeds [a, b] and a stateful op's
#: (seed, seed2) = (a, b) key different streams.
_STATELESS_KEY = 0x3EC8F72002461E29


def _stateless_draws(seed) -> _NumpyDraws:
    """The draws of a stateless op: the first seed int keys Philox, the second picks the
    counter's upper half (TF's layout), so that seeds differing in either give streams
    2**128 blocks apart."""
    first, second = _stateless_seed(seed)
    return _philox((first, _STATELESS_KEY), counter=(second, 0))


def _new_draws(xp, seed: int, seed2: int):
    """A stateful op's generator for arrays of ``xp``, from its seed attrs."""
    key = None if seed == 0 and seed2 == 0 else (seed, seed2)
    if xp is np:
        return _philox(key)
    # cupy takes one 64-bit seed: the pair, mixed by numpy's SeedSequence
    single = None if key is None else int(np.random.SeedSequence(
        [k & _MASK64 for k in key]).generate_state(1, np.uint64)[0])
    return _CupyDraws(xp.random.RandomState(single))


# -- the per-Session state of stateful ops ---------------------------------------------------
class _Stream:
    """One stateful op's generator in one Session, and the lock that makes a draw atomic."""

    __slots__ = ("draws", "lock")

    def __init__(self, draws):
        self.draws = draws
        self.lock = threading.Lock()


#: Session resource store -> {(node name, device): stream}; an entry goes with its Session.
_STREAMS: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()
_STREAMS_LOCK = threading.Lock()


def _stream(ctx) -> _Stream:
    """The generator of the op ``ctx`` runs, in the Session running it: made on first use,
    then shared by every plan of that Session (each plan's context keeps it at hand, as a
    plan belongs to one Session). Without a Session (a kernel called directly), it lives
    in the kernel context."""
    stream = ctx.cache.get(_Stream)
    if stream is not None:
        return stream
    owner = ctx.resources
    key = (ctx.node_name, getattr(ctx.device, "name", ""))
    with _STREAMS_LOCK:
        streams = {} if owner is None else _STREAMS.setdefault(owner, {})
        stream = streams.get(key)
        if stream is None:
            stream = streams[key] = _Stream(_new_draws(
                ctx.xp, ctx.attrs["seed"], ctx.attrs["seed2"]))
        ctx.cache[_Stream] = stream
    return stream


# -- what a draw computes, on any generator ---------------------------------------------------
def _uniform(draws, xp, shape: tuple, dtype: np.dtype):
    """Uniform in [0, 1). float16 is drawn as multiples of 2**-11 (exact in a half), since
    a float32 draw rounded to half could give 1.0."""
    if dtype == np.float16:
        steps = xp.floor(draws.uniform(shape, np.float32) * np.float32(2048))
        return (steps * np.float32(1 / 2048)).astype(np.float16)
    return draws.uniform(shape, dtype)


def _normal(draws, xp, shape: tuple, dtype: np.dtype):
    """Standard normal; float16 from a float32 draw."""
    if dtype == np.float16:
        return draws.normal(shape, np.float32).astype(np.float16)
    return draws.normal(shape, dtype)


def _truncated_normal(draws, xp, shape: tuple, dtype: np.dtype):
    """Standard normal with every value beyond TRUNCATE_AT re-drawn until none is (about
    4.6% of the values per round, so a few vectorized rounds)."""
    wide = np.float32 if dtype == np.float16 else dtype
    out = draws.normal(shape, wide)
    while True:
        outside = xp.abs(out) > TRUNCATE_AT
        count = int(outside.sum())
        if count == 0:
            return out.astype(dtype, copy=False)
        out[outside] = draws.normal((count,), wide)


_DRAW = {"uniform": _uniform, "normal": _normal, "truncated": _truncated_normal}


# -- kernel helpers -------------------------------------------------------------------------
def _output_shape(ctx, shape, dtype) -> tuple[int, ...]:
    """The dims held by the ``shape`` input, checked as TF's kernels do, within the
    Session's memory limit."""
    if shape.ndim != 1:
        raise InvalidArgumentError(
            f"shape must be a vector of {{int32,int64}}, got shape {list(shape.shape)}")
    dims = tuple(int(d) for d in shape.tolist())
    for d in dims:
        if d < 0:
            raise InvalidArgumentError(f"Dimension {d} must be >= 0")
    ctx.check_allocation(math.prod(dims), dtype)  # exact: an int64 product may wrap
    return dims


def _bounds(minval, maxval, empty: bool) -> tuple[int, int] | None:
    """(lo, hi) of a bounded integer draw: scalars with lo < hi, checked as TF's kernel
    (the order only when the output is not empty); None for an empty output."""
    for what, v in (("minval", minval), ("maxval", maxval)):
        if v.ndim != 0:
            raise InvalidArgumentError(f"{what} must be 0-D, got shape {list(v.shape)}")
    if empty:
        return None
    lo, hi = int(minval), int(maxval)
    if lo >= hi:
        raise InvalidArgumentError(f"Need minval < maxval: {lo} >= {hi}")
    return lo, hi


def _stateless_seed(seed) -> tuple[int, int]:
    """The two seed ints of a stateless op (int32 and int64 seeds of equal values give
    equal numbers)."""
    if seed.ndim != 1 or seed.shape[0] != 2:
        raise InvalidArgumentError(f"seed must have shape [2], not {list(seed.shape)}")
    first, second = seed.tolist()
    return int(first), int(second)


def _on_device(ctx, host: np.ndarray):
    """A host result as the kernel's device holds it."""
    return host if ctx.xp is np else ctx.xp.asarray(host)


# -- shape functions --------------------------------------------------------------------------
def _shape_from_input(ctx) -> TensorShape:
    """The shape held by the 1-D int ``shape`` input, as far as it is known (a constant:
    every dim, each >= 0; else what its producer fixes, at least its length)."""
    rank = ctx.shape("shape").rank
    if rank not in (None, 1):
        raise ctx.error(f"Shape must be rank 1 but is rank {rank} for 'shape' "
                        f"(shape {ctx.shape('shape')})")
    dims = ctx.value("shape")
    if dims is not None and (dims < 0).any():
        raise ctx.error(f"Dimension {int(dims[dims < 0][0])} must be >= 0, in shape "
                        f"{dims.tolist()}")
    return ctx.shape_value("shape")


def _check_scalar(ctx, name: str) -> None:
    shape = ctx.shape(name)
    if shape.rank not in (None, 0):
        raise ctx.error(f"{name} must be a scalar; got a tensor of shape {shape}")


def _check_seed_shape(ctx) -> None:
    """seed: a vector of 2 (TF's StatelessShape)."""
    shape = ctx.shape("seed")
    if shape.rank is None:
        return
    if shape.rank != 1:
        raise ctx.error(f"Shape must be rank 1 but is rank {shape.rank} for 'seed' "
                        f"(shape {shape})")
    if shape.dims[0] is not None and shape.dims[0] != 2:
        raise ctx.error(f"Dimension must be 2 but is {shape.dims[0]} for 'seed' (shape {shape})")


def _random_shape(ctx) -> TensorShape:
    """the shape held by `shape` (partial when it is not a constant)."""
    return _shape_from_input(ctx)


def _random_int_shape(ctx) -> TensorShape:
    """the shape held by `shape`; minval and maxval are scalars."""
    _check_scalar(ctx, "minval")
    _check_scalar(ctx, "maxval")
    return _shape_from_input(ctx)


def _stateless_shape(ctx) -> TensorShape:
    """the shape held by `shape`; seed has shape [2]."""
    _check_seed_shape(ctx)
    return _shape_from_input(ctx)


def _stateless_int_shape(ctx) -> TensorShape:
    """the shape held by `shape`; seed has shape [2]; minval and maxval are scalars."""
    _check_scalar(ctx, "minval")
    _check_scalar(ctx, "maxval")
    return _stateless_shape(ctx)


# -- stateful ops ----------------------------------------------------------------------------
_SEED_ATTRS = {"seed": IntAttr(0), "seed2": IntAttr(0)}
_SEED_DOC = (" seed, seed2: either non-zero seeds the op's generator (one per Session), "
             "else the OS does; each run draws new numbers.")


def _stateful_float_op(name: str, draw: str, doc: str):
    """A stateful op ``(shape) -> dtype`` drawing ``draw`` numbers, with its kernels."""
    op = register_op(
        name, inputs=["shape: T"], outputs=["output: dtype"],
        attrs={"dtype": TypeAttr(RANDOM_FLOAT_TYPES), "T": TypeAttr(INDEX_TYPES),
               **_SEED_ATTRS},  # required attrs first: the builder's signature follows
        stateful=True, doc=doc + _SEED_DOC)
    op.shape_fn(_random_shape)
    fn = _DRAW[draw]

    @op.kernel("cpu")
    @op.kernel("gpu")
    def _kernel(ctx, shape):
        dtype = np.dtype(ctx.attrs["dtype"].as_numpy_dtype)
        dims = _output_shape(ctx, shape, dtype)
        stream = _stream(ctx)
        with stream.lock:
            return fn(stream.draws, ctx.xp, dims, dtype)

    op.not_differentiable()
    return op


RandomUniform = _stateful_float_op(
    "RandomUniform", "uniform", "Uniform random values in [0, 1) of shape `shape`.")
RandomStandardNormal = _stateful_float_op(
    "RandomStandardNormal", "normal", "Normal random values (mean 0, stddev 1) of shape `shape`.")
TruncatedNormal = _stateful_float_op(
    "TruncatedNormal", "truncated", "Normal random values (mean 0, stddev 1) of shape `shape`, "
    "values more than 2 stddevs from the mean dropped and re-drawn.")

RandomUniformInt = register_op(
    "RandomUniformInt", inputs=["shape: T", "minval: Tout", "maxval: Tout"],
    outputs=["output: Tout"],
    attrs={"Tout": TypeAttr(RANDOM_INT_TYPES), "T": TypeAttr(INDEX_TYPES), **_SEED_ATTRS},
    stateful=True,
    doc="Uniform random integers in [minval, maxval) of shape `shape` (scalar bounds, "
        "minval < maxval unless the output is empty)." + _SEED_DOC)
RandomUniformInt.shape_fn(_random_int_shape)


@RandomUniformInt.kernel("cpu")
@RandomUniformInt.kernel("gpu")
def _random_uniform_int(ctx, shape, minval, maxval):
    dtype = np.dtype(ctx.attrs["Tout"].as_numpy_dtype)
    dims = _output_shape(ctx, shape, dtype)
    bounds = _bounds(minval, maxval, empty=math.prod(dims) == 0)
    if bounds is None:
        return ctx.xp.empty(dims, dtype)
    stream = _stream(ctx)
    with stream.lock:
        return stream.draws.integers(*bounds, dims, dtype)


RandomShuffle = register_op(
    "RandomShuffle", inputs=["value: T"], outputs=["output: T"],
    attrs={"T": TypeAttr(), **_SEED_ATTRS}, stateful=True,
    doc="`value` with its slices along dimension 0 in a random order (a scalar as it is)."
        + _SEED_DOC)
RandomShuffle.shape_fn(same_shape_as("value"))


@RandomShuffle.kernel("cpu")
@RandomShuffle.kernel("gpu", T=NON_STRING_TYPES)
def _random_shuffle(ctx, value):
    if value.ndim == 0 or value.shape[0] <= 1:
        return value.copy()  # TF returns the input; a copy keeps the output the op's own
    stream = _stream(ctx)
    with stream.lock:
        order = stream.draws.permutation(value.shape[0])
    return value[order]


for _op in (RandomUniformInt, RandomShuffle):
    _op.not_differentiable()


# -- stateless ops ---------------------------------------------------------------------------
_STATELESS_DOC = " A pure function of (shape, seed, dtype): seed is an int32/int64 [2]."


def _stateless_float_op(name: str, draw: str, doc: str):
    """A stateless op ``(shape, seed) -> dtype`` drawing ``draw`` numbers, with its kernels."""
    op = register_op(
        name, inputs=["shape: T", "seed: Tseed"], outputs=["output: dtype"],
        attrs={"dtype": TypeAttr(RANDOM_FLOAT_TYPES, float32), "T": TypeAttr(INDEX_TYPES, int32),
               "Tseed": TypeAttr(INDEX_TYPES, int64)},
        doc=doc + _STATELESS_DOC)
    op.shape_fn(_stateless_shape)
    fn = _DRAW[draw]

    @op.kernel("cpu")
    @op.kernel("gpu")
    def _kernel(ctx, shape, seed):
        dtype = np.dtype(ctx.attrs["dtype"].as_numpy_dtype)
        dims = _output_shape(ctx, shape, dtype)
        return _on_device(ctx, fn(_stateless_draws(seed), np, dims, dtype))

    op.not_differentiable()
    return op


StatelessRandomUniform = _stateless_float_op(
    "StatelessRandomUniform", "uniform", "Uniform random values in [0, 1) of shape `shape`.")
StatelessRandomNormal = _stateless_float_op(
    "StatelessRandomNormal", "normal", "Normal random values (mean 0, stddev 1) of shape `shape`.")
StatelessTruncatedNormal = _stateless_float_op(
    "StatelessTruncatedNormal", "truncated", "Normal random values (mean 0, stddev 1) of shape "
    "`shape`, values more than 2 stddevs from the mean dropped and re-drawn.")

StatelessRandomUniformInt = register_op(
    "StatelessRandomUniformInt", inputs=["shape: T", "seed: Tseed", "minval: dtype",
                                         "maxval: dtype"],
    outputs=["output: dtype"],
    attrs={"dtype": TypeAttr(RANDOM_INT_TYPES), "T": TypeAttr(INDEX_TYPES),
           "Tseed": TypeAttr(INDEX_TYPES, int64)},
    doc="Uniform random integers in [minval, maxval) of shape `shape` (scalar bounds, "
        "minval < maxval unless the output is empty)." + _STATELESS_DOC)
StatelessRandomUniformInt.shape_fn(_stateless_int_shape)


@StatelessRandomUniformInt.kernel("cpu")
@StatelessRandomUniformInt.kernel("gpu")
def _stateless_random_uniform_int(ctx, shape, seed, minval, maxval):
    dtype = np.dtype(ctx.attrs["dtype"].as_numpy_dtype)
    dims = _output_shape(ctx, shape, dtype)
    draws = _stateless_draws(seed)
    bounds = _bounds(minval, maxval, empty=math.prod(dims) == 0)
    if bounds is None:
        return ctx.xp.empty(dims, dtype)
    return _on_device(ctx, draws.integers(*bounds, dims, dtype))


StatelessRandomUniformFullInt = register_op(
    "StatelessRandomUniformFullInt", inputs=["shape: T", "seed: Tseed"],
    outputs=["output: dtype"],
    attrs={"dtype": TypeAttr(FULL_INT_TYPES, uint64), "T": TypeAttr(INDEX_TYPES, int32),
           "Tseed": TypeAttr(INDEX_TYPES, int64)},
    doc="Uniform random integers over the whole range of `dtype`, of shape `shape`."
        + _STATELESS_DOC)
StatelessRandomUniformFullInt.shape_fn(_stateless_shape)


@StatelessRandomUniformFullInt.kernel("cpu")
@StatelessRandomUniformFullInt.kernel("gpu")
def _stateless_random_uniform_full_int(ctx, shape, seed):
    dtype = np.dtype(ctx.attrs["dtype"].as_numpy_dtype)
    dims = _output_shape(ctx, shape, dtype)
    info = np.iinfo(dtype)
    generator = _stateless_draws(seed).generator
    return _on_device(ctx, generator.integers(info.min, info.max, dims, dtype=dtype,
                                              endpoint=True))


for _op in (StatelessRandomUniformInt, StatelessRandomUniformFullInt):
    _op.not_differentiable()


# -- builders: TF's Python API ----------------------------------------------------------------
def _shape_tensor(s: Scope, shape: Any) -> Any:
    """``shape`` as a builder input (TF's shape_tensor): an Output as it is, a TensorShape
    as its dims (fully known), an empty list as an int32 vector, anything else a Const of
    its own dtype (Python ints: int32, or int64 past int32's range)."""
    if as_operand(shape) is not None:
        return shape
    if isinstance(shape, TensorShape):
        if not shape.is_fully_defined():
            raise InvalidArgumentError(f"Cannot convert a partially known TensorShape {shape} "
                                       f"to a Tensor")
        shape = shape.as_list()
    if isinstance(shape, (list, tuple)) and not shape:
        shape = np.zeros(0, np.int32)
    return s.constant(shape, name="shape")


def _value(s: Scope, value: Any, dtype: DType, name: str) -> Any:
    """``value`` as a tensor of ``dtype`` (TF's convert_to_tensor(value, dtype)): an Output
    as it is (the op using it checks its dtype), else a Const of ``dtype``."""
    return value if as_operand(value) is not None else s.constant(value, dtype=dtype, name=name)


def _checked_dtype(dtype: Any, accepted: tuple, what: str) -> DType:
    """``dtype`` as a DType among ``accepted`` (TF's ValueError otherwise)."""
    dtype = as_dtype(dtype)
    if dtype not in accepted:
        raise InvalidArgumentError(
            f"Argument `dtype` got invalid value {dtype!r} for {what}. Accepted dtypes are "
            f"({', '.join(repr(t) for t in accepted)}).")
    return dtype


def _name_scope(self: Scope, name: str | None, default: str) -> Scope:
    """Where a builder's ops go: ``name/...`` (default: the builder's name), as TF's
    name_scope(name, default)."""
    if name is not None and not isinstance(name, str):
        raise TypeError(f"{default}: name must be a string, got {name!r}")
    return self.without_op_name().with_sub_scope(name or default)


def random_uniform(self: Scope, shape, minval=0, maxval=None, dtype=float32, seed=None, *,
                   name: str | None = None) -> Output:
    """Uniform random values in [minval, maxval) (TF's ``tf.random.uniform``): floats from
    ``RandomUniform`` scaled (maxval defaults to 1), integers from ``RandomUniformInt``
    (maxval required). ``seed``: the op seed (see :func:`get_seed`)."""
    dtype = _checked_dtype(dtype, RANDOM_FLOAT_TYPES + RANDOM_INT_TYPES, "random_uniform")
    if maxval is None:
        if dtype.is_integer:
            raise InvalidArgumentError(f"Must specify maxval for integer dtype {dtype!r}")
        maxval = 1
    s = _name_scope(self, name, "random_uniform")
    shape = _shape_tensor(s, shape)
    minval_is_zero = _is_python_int(minval, 0)
    maxval_is_one = _is_python_int(maxval, 1)
    if not minval_is_zero or not maxval_is_one or dtype.is_integer:
        minval = _value(s, minval, dtype, "min")
        maxval = _value(s, maxval, dtype, "max")
    seed, seed2 = get_seed(self.graph, seed)
    if dtype.is_integer:
        return s.create_op(RandomUniformInt, shape, minval, maxval, seed=seed, seed2=seed2)
    result = s.create_op(RandomUniform, shape, dtype=dtype, seed=seed, seed2=seed2)
    if minval_is_zero:
        return result if maxval_is_one else s.mul(result, maxval, name="mul")
    scaled = s.mul(result, s.sub(maxval, minval, name="sub"), name="mul")
    return s.add(scaled, minval, name="add")


def _is_python_int(value: Any, number: int) -> bool:
    """TF's shortcut test: a Python int equal to ``number`` (0.0 or an array is not)."""
    return isinstance(value, int) and not isinstance(value, bool) and value == number


def _normal_builder(raw, default_name: str, what: str) -> Callable:
    """A builder ``(shape, mean, stddev, dtype, seed)``: ``raw * stddev + mean``."""
    def build(self: Scope, shape, mean=0.0, stddev=1.0, dtype=float32, seed=None, *,
              name: str | None = None) -> Output:
        s = _name_scope(self, name, default_name)
        shape = _shape_tensor(s, shape)
        dtype = as_dtype(dtype)
        mean, stddev = _value(s, mean, dtype, "mean"), _value(s, stddev, dtype, "stddev")
        seed, seed2 = get_seed(self.graph, seed)
        rnd = s.create_op(raw, shape, dtype=dtype, seed=seed, seed2=seed2)
        return s.add(s.mul(rnd, stddev, name="mul"), mean, name="add")

    build.__name__ = build.__qualname__ = default_name
    build.__doc__ = (f"{what} with ``mean`` and ``stddev`` (TF's ``tf.random.{what}``): "
                     f"``{raw.name}(shape) * stddev + mean``. ``seed``: the op seed (see "
                     f":func:`get_seed`).")
    return build


random_normal = _normal_builder(RandomStandardNormal, "random_normal", "normal")
truncated_normal = _normal_builder(TruncatedNormal, "truncated_normal", "truncated_normal")


def random_shuffle(self: Scope, value, seed=None, *, name: str | None = None) -> Output:
    """``value`` shuffled along dimension 0 (TF's ``tf.random.shuffle``). ``seed``: the op
    seed (see :func:`get_seed`)."""
    seed, seed2 = get_seed(self.graph, seed)
    return self.create_op(RandomShuffle, value, seed=seed, seed2=seed2, name=name)


def stateless_random_uniform(self: Scope, shape, seed, minval=0, maxval=None, dtype=float32, *,
                             name: str | None = None) -> Output:
    """Uniform random values in [minval, maxval), a pure function of ``seed`` (an
    int32/int64 [2]; TF's ``tf.random.stateless_uniform``): floats scaled from
    ``StatelessRandomUniform`` (maxval defaults to 1); integers from
    ``StatelessRandomUniformInt``, or over the dtype's whole range
    (``StatelessRandomUniformFullInt``) when minval and maxval are both None."""
    dtype = _checked_dtype(dtype, RANDOM_FLOAT_TYPES + FULL_INT_TYPES, "stateless_random_uniform")
    if dtype.is_integer:
        if (minval is None) != (maxval is None):
            raise InvalidArgumentError(f"For integer dtype {dtype!r}, minval and maxval must be "
                                       f"both `None` or both non-`None`.")
        if minval is not None and dtype in (uint32, uint64):
            raise InvalidArgumentError(f"Invalid dtype for bounded uniform integers: {dtype!r}")
    elif maxval is None:
        maxval = 1
    s = _name_scope(self, name, "stateless_random_uniform")
    shape = _shape_tensor(s, shape)
    if dtype.is_integer and minval is None:
        return s.create_op(StatelessRandomUniformFullInt, shape, seed, dtype=dtype)
    minval, maxval = _value(s, minval, dtype, "min"), _value(s, maxval, dtype, "max")
    if dtype.is_integer:
        return s.create_op(StatelessRandomUniformInt, shape, seed, minval, maxval)
    rnd = s.create_op(StatelessRandomUniform, shape, seed, dtype=dtype)
    scaled = s.mul(rnd, s.sub(maxval, minval, name="sub"), name="mul")
    return s.add(scaled, minval, name="add")


def _stateless_normal_builder(raw, default_name: str, what: str) -> Callable:
    """A builder ``(shape, seed, mean, stddev, dtype)``: ``raw * stddev + mean``."""
    def build(self: Scope, shape, seed, mean=0.0, stddev=1.0, dtype=float32, *,
              name: str | None = None) -> Output:
        s = _name_scope(self, name, default_name)
        shape = _shape_tensor(s, shape)
        dtype = as_dtype(dtype)
        mean, stddev = _value(s, mean, dtype, "mean"), _value(s, stddev, dtype, "stddev")
        rnd = s.create_op(raw, shape, seed, dtype=dtype)
        return s.add(s.mul(rnd, stddev, name="mul"), mean, name="add")

    build.__name__ = build.__qualname__ = default_name
    build.__doc__ = (f"{what} with ``mean`` and ``stddev``, a pure function of ``seed`` (an "
                     f"int32/int64 [2]; TF's ``tf.random.{default_name}``): "
                     f"``{raw.name}(shape, seed) * stddev + mean``.")
    return build


stateless_random_normal = _stateless_normal_builder(
    StatelessRandomNormal, "stateless_random_normal", "normal")
stateless_truncated_normal = _stateless_normal_builder(
    StatelessTruncatedNormal, "stateless_truncated_normal", "truncated normal")

#: builder name -> function, installed on Scope in place of the generated raw-op builders
#: (the raw ops stay reachable as ``scope.create_op("RandomUniform", ...)`` and
#: ``graphflow.ops.RandomUniform.create``)
BUILDERS: dict[str, Callable] = {
    "random_uniform": random_uniform, "random_normal": random_normal,
    "truncated_normal": truncated_normal, "random_shuffle": random_shuffle,
    "stateless_random_uniform": stateless_random_uniform,
    "stateless_random_normal": stateless_random_normal,
    "stateless_truncated_normal": stateless_truncated_normal,
}
for _name, _builder in BUILDERS.items():
    setattr(Scope, _name, _builder)


# TensorFlow's op of the same name in a GraphDef, both ways (graphflow/interop/)
same_as_tf("RandomUniform", "RandomStandardNormal", "TruncatedNormal", "RandomUniformInt",
           "RandomShuffle", "StatelessRandomUniform", "StatelessRandomNormal",
           "StatelessTruncatedNormal", "StatelessRandomUniformInt", "StatelessRandomUniformFullInt")
