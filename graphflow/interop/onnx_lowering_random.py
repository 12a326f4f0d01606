"""ONNX lowerings of the random ops (ops/random_ops.py), filed on their OpDefs.

ONNX draws numbers with RandomUniform / RandomNormal, whose ``shape`` is an attribute:
a shape the export knows is written there; a shape known only at run time becomes
RandomUniformLike / RandomNormalLike over ``ConstantOfShape(shape)``. The rest is
composed from those draws (as tf2onnx does):

- RandomUniformInt: ``floor(u * (maxval - minval) + minval)`` in float64, clamped to
  ``[minval, maxval)``; ``minval >= maxval`` with a non-empty output fails the run.
- StatelessRandomUniformFullInt: 32-bit words ``floor(u * 2**32)``, two per 64-bit value.
- TruncatedNormal: the inverse CDF of the normal truncated to [-2, 2], solved with
  Newton's method on Erf (ONNX has no inverse Erf); a clipped normal would put mass on
  the bounds, a different distribution.
- RandomShuffle: the rows gathered in the order that TopK sorts n random keys into.

Only the distribution, dtype, shape and range are kept, not the values: an ONNX
runtime draws from its own generator. The ``seed`` attribute is derived from the op's
seeds (a stateful op's ``seed``/``seed2``, left out when both are 0, as TensorFlow then
seeds from the OS; a stateless op's constant ``seed`` tensor). A stateless op's seed
must be a constant, since ONNX takes it as an attribute. ONNX Runtime keeps a seeded
node's generator for the session's life, so each run draws new numbers: a stateless
op's export is not a pure function of its seed there.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from graphflow.dtypes import DType, float16, float32, float64, int32, int64, uint32, uint64
from graphflow.graph import Operation
from graphflow.inference import constant_value

from .onnx_lowering import Emitter, check, elem_type, lowering

STATELESS = ("StatelessRandomUniform", "StatelessRandomNormal", "StatelessTruncatedNormal",
             "StatelessRandomUniformInt", "StatelessRandomUniformFullInt")

#: Newton steps after the first for the truncated normal's inverse CDF (8 in all): from
#: 0 the iterates close in on the root monotonically (erf is concave on each side of 0);
#: in float32 they settle within 2.5e-7 of it after 6, even at the bounds.
NEWTON_STEPS = 7
#: How far from the mean a truncated normal value may be (ops/random_ops.py's TRUNCATE_AT).
TRUNCATE_AT = 2.0
#: The largest float64 below 2**63: float64 values up to it cast to int64 exactly.
_BELOW_2_63 = float(np.nextafter(2.0 ** 63, 0))

#: The dims of a draw: known ints, or the name of the int64 vector holding them.
Dims = list[int] | str


# -- seeds ---------------------------------------------------------------------------------
def _seed_attr(*words: int) -> dict:
    """ONNX's ``seed`` attribute from graphflow's seed ints: an integer below 2**24 (a
    float attribute holds those exactly; ONNX Runtime reads it as a uint32)."""
    state = np.random.SeedSequence([w & 0xFFFF_FFFF_FFFF_FFFF for w in words])
    return {"seed": float(int(state.generate_state(1, np.uint32)[0]) >> 8)}


def _seeds(op: Operation) -> dict:
    """The ``seed`` attribute of ``op``'s draws; none for a stateful op seeded from the
    OS (seed == seed2 == 0), so the runtime picks one too."""
    if op.type in STATELESS:
        first, second = (int(v) for v in np.ravel(constant_value(op.inputs[1])))
        return _seed_attr(1, first, second)
    seed, seed2 = op.attrs["seed"], op.attrs["seed2"]
    return {} if seed == seed2 == 0 else _seed_attr(0, seed, seed2)


@check(*STATELESS)
def _check_stateless(op: Operation, opset: int) -> str | None:
    if constant_value(op.inputs[1]) is None:
        return ("with a seed that is not a constant (ONNX random ops take their seed as an "
                "attribute)")
    return None


# -- draws ---------------------------------------------------------------------------------
def _out_dims(em: Emitter, op: Operation, shape: str) -> Dims:
    """The output's dims if the export knows them all, else ``shape`` (the op's shape
    input) as int64."""
    static = op.outputs[0].shape
    return static.as_list() if static.is_fully_defined() else em.i64(shape, op.inputs[0].dtype)


def _lead(em: Emitter, n: int, dims: Dims) -> Dims:
    """``[n] + dims``."""
    if isinstance(dims, str):
        return em.node("Concat", [em.const([n], np.int64), dims], axis=0)
    return [n, *dims]


def _draw(em: Emitter, op: Operation, kind: str, dtype: DType, dims: Dims) -> str:
    """ONNX's ``Random{kind}`` (Uniform in [0, 1), Normal with mean 0, scale 1) of float32
    or float64 ``dtype``: RandomX with a shape attribute, or RandomXLike over
    ConstantOfShape for dims known at run time."""
    attrs = {"dtype": elem_type(em.onnx, dtype), **_seeds(op)}
    if isinstance(dims, str):
        return em.node(f"Random{kind}Like", [em.node("ConstantOfShape", [dims])], **attrs)
    if dims:
        return em.node(f"Random{kind}", [], shape=list(dims), **attrs)
    # a scalar: drawn as [1] (ONNX's reference evaluator refuses an empty shape attribute)
    return em.node("Reshape", [em.node(f"Random{kind}", [], shape=[1], **attrs),
                               em.const(np.zeros(0, np.int64))])


def _wide(dtype: DType) -> DType:
    """The type a draw of ``dtype`` is made in: ONNX Runtime draws no float16."""
    return float32 if dtype == float16 else dtype


def _uniform(em: Emitter, op: Operation, dtype: DType, dims: Dims) -> str:
    """Uniform in [0, 1): the draw capped below 1 (a float32 draw can round up to 1.0);
    float16 as multiples of 2**-11, as graphflow's kernel makes them."""
    wide = _wide(dtype)
    one = np.ones((), wide.as_numpy_dtype)
    below_one = np.nextafter(one, 0 * one)
    u = em.node("Min", [_draw(em, op, "Uniform", wide, dims), em.scalar(wide, below_one)])
    if dtype == wide:
        return u
    steps = em.node("Floor", [em.node("Mul", [u, em.scalar(wide, 2048)])])
    return em.cast(em.node("Mul", [steps, em.scalar(wide, 1 / 2048)]), dtype)


def _normal(em: Emitter, op: Operation, dtype: DType, dims: Dims) -> str:
    x = _draw(em, op, "Normal", _wide(dtype), dims)
    return x if dtype == _wide(dtype) else em.cast(x, dtype)


def _truncated_normal(em: Emitter, op: Operation, dtype: DType, dims: Dims) -> str:
    """The standard normal truncated to [-2, 2] by its inverse CDF: for u uniform in
    [0, 1), t = (2u - 1) erf(2 / sqrt 2), and y solving erf(y) = t by Newton's method
    from 0, x = sqrt(2) y. In float32 for every dtype (ONNX Runtime's Erf is float-only)."""
    f = lambda v: em.scalar(float32, v)  # noqa: E731
    u = _uniform(em, op, float32, dims)
    t = em.node("Mul", [em.node("Sub", [em.node("Mul", [u, f(2)]), f(1)]),
                        f(math.erf(TRUNCATE_AT / math.sqrt(2)))])
    half_sqrt_pi = f(math.sqrt(math.pi) / 2)  # 1 / erf'(0)
    y = em.node("Mul", [t, half_sqrt_pi])     # the first step from 0
    for _ in range(NEWTON_STEPS):             # y -= (erf(y) - t) / erf'(y)
        slope_inv = em.node("Mul", [half_sqrt_pi, em.node("Exp", [em.node("Mul", [y, y])])])
        error = em.node("Sub", [em.node("Erf", [y]), t])
        y = em.node("Sub", [y, em.node("Mul", [error, slope_inv])])
    x = em.node("Clip", [em.node("Mul", [y, f(math.sqrt(2))]), f(-TRUNCATE_AT), f(TRUNCATE_AT)])
    return x if dtype == float32 else em.cast(x, dtype)


def _random_float(sampler: Callable) -> Callable:
    """The lowering of a float draw made by ``sampler(em, op, dtype, dims)``."""
    def lower(em: Emitter, op: Operation, ins: list) -> list:
        dims = _out_dims(em, op, ins[0])
        return [sampler(em, op, op.attrs["dtype"], dims)]
    lower.__name__ = lower.__qualname__ = f"_random_float{sampler.__name__}"
    return lower


for _float_ops, _sampler in ((("RandomUniform", "StatelessRandomUniform"), _uniform),
                             (("RandomStandardNormal", "StatelessRandomNormal"), _normal),
                             (("TruncatedNormal", "StatelessTruncatedNormal"), _truncated_normal)):
    lowering(*_float_ops)(_random_float(_sampler))


# -- integers ------------------------------------------------------------------------------
def _scalar_bound(em: Emitter, op: Operation, index: int, value: str) -> str:
    """A bound as an int64 scalar; one not known to be a scalar is reshaped to [], which
    fails the run where it is not one (TensorFlow's "minval must be 0-D")."""
    value = em.i64(value, op.inputs[index].dtype)
    if op.inputs[index].shape.rank == 0:
        return value
    return em.node("Reshape", [value, em.const(np.zeros(0, np.int64))])


def _checked_minval(em: Emitter, lo: str, hi: str, dims: Dims) -> str:
    """``lo``, and a failed run where lo >= hi and the output is not empty (TensorFlow's
    "Need minval < maxval"; an empty output skips the check, as there)."""
    if not isinstance(dims, str) and math.prod(dims) == 0:
        return lo
    bad = em.node("GreaterOrEqual", [lo, hi])
    if isinstance(dims, str):
        size = em.node("ReduceProd", [dims], keepdims=0)
        bad = em.node("And", [bad, em.node("Greater", [size, em.const(0, np.int64)])])
    return em.node("Add", [lo, em.fail_if(bad, int64)])


def _uniform_int(em: Emitter, op: Operation, dims: Dims, minval: str, maxval: str) -> str:
    """Integers in [minval, maxval): floor(u * (maxval - minval) + minval) in float64
    (uniform while the bounds and their range fit 2**53), clamped into the bounds."""
    lo, hi = (_scalar_bound(em, op, i, v) for i, v in ((-2, minval), (-1, maxval)))
    lo = _checked_minval(em, lo, hi, dims)
    lo_f, hi_f = em.cast(lo, float64), em.cast(hi, float64)
    u = _uniform(em, op, float64, dims)
    v = em.node("Floor", [em.node("Add", [em.node("Mul", [u, em.node("Sub", [hi_f, lo_f])]),
                                          lo_f])])
    v = em.cast(em.node("Min", [v, em.scalar(float64, _BELOW_2_63)]), int64)
    v = em.node("Max", [em.node("Min", [v, em.node("Sub", [hi, em.const(1, np.int64)])]), lo])
    dtype = op.outputs[0].dtype
    return v if dtype == int64 else em.cast(v, dtype)


@lowering("RandomUniformInt", "StatelessRandomUniformInt")
def _random_uniform_int(em: Emitter, op: Operation, ins: list) -> list:
    return [_uniform_int(em, op, _out_dims(em, op, ins[0]), ins[-2], ins[-1])]


def _words(em: Emitter, op: Operation, dims: Dims) -> str:
    """Uniform 32-bit words, floor(u * 2**32), as float64."""
    u = _uniform(em, op, float64, dims)
    return em.node("Floor", [em.node("Mul", [u, em.scalar(float64, 2.0 ** 32)])])


@lowering("StatelessRandomUniformFullInt")
def _random_uniform_full_int(em: Emitter, op: Operation, ins: list) -> list:
    """Every value of the dtype equally likely: one word per 32-bit value (int32 offset
    by -2**31), two per 64-bit one (high word << 32 | low word)."""
    dtype = op.outputs[0].dtype
    dims = _out_dims(em, op, ins[0])
    if dtype == int32:
        return [em.cast(em.node("Sub", [_words(em, op, dims), em.scalar(float64, 2.0 ** 31)]),
                        int32)]
    if dtype == uint32:
        return [em.cast(_words(em, op, dims), uint32)]
    words = em.cast(_words(em, op, _lead(em, 2, dims)), uint64)
    high, low = (em.node("Gather", [words, em.const(i, np.int64)], axis=0) for i in (0, 1))
    shifted = em.node("BitShift", [high, em.scalar(uint64, 32)], direction="LEFT")
    value = em.node("BitwiseOr", [shifted, low])
    return [value if dtype == uint64 else em.cast(value, int64)]


# -- shuffle -------------------------------------------------------------------------------
@check("RandomShuffle")
def _check_shuffle(op: Operation, opset: int) -> str | None:
    if op.inputs[0].shape.rank is None:
        return ("on a tensor of unknown rank (a scalar is returned as it is, a tensor "
                "shuffled along dimension 0: ONNX needs the rank to tell which)")
    return None


@lowering("RandomShuffle")
def _random_shuffle(em: Emitter, op: Operation, ins: list) -> list:
    """The rows of ``value`` in the order TopK sorts n uniform float64 keys into (ties,
    which TopK breaks by the lower index, are as rare as equal float64 draws); a scalar
    as it is."""
    if op.inputs[0].shape.rank == 0:
        return [em.node("Identity", ins)]
    n = op.inputs[0].shape.dims[0]
    count = em.slice1(em.node("Shape", ins), 0, 1) if n is None else em.const([n], np.int64)
    keys = _draw(em, op, "Uniform", float64, count if n is None else [n])
    _, order = em.node("TopK", [keys, count], n_out=2, axis=0, largest=1, sorted=1)
    return [em.gather_rows(ins[0], order)]
