"""The element-wise ops that generated kernels compute, and one element of each.

Two plan-time rewrites generate numba code from element-wise ops: fused regions
(runtime/fusion.py -> ops/fused_elementwise.py) and the partitioned select
(runtime/partition_stitch.py -> ops/fused_ops.py). Both read what they need
here, as a trait on the op's OpDef (``op_def("Add").elementwise``): whether the
op is element-wise, whether it joins fused regions, its kind, and its scalar
expression (:meth:`ElementwiseRule.expression`). A new op that should fuse is
one line in :data:`RULES`.

The expressions give the unfused kernels' (numpy's, TensorFlow's) results bit
for bit:

- after every op the value is cast back to the op's dtype, so that float32 rounds
  after each op (float32 ops computed in float64 and rounded once are correctly
  rounded for + - * /, so the result does not depend on how numba types them);
- integer + - * and negation wrap modulo 2**bits, as TensorFlow's do: they are
  computed in uint64, which wraps, then cast back (numba computes small ints in
  int64, and its signed arithmetic is ``nsw``: LLVM may assume an int64 sum does
  not overflow, and did, turning ``(a + a) != 0`` into ``a != 0`` for INT64_MIN);
- Maximum and Minimum follow numpy's NaN and signed-zero rules, found by probing
  numpy's own loops (:func:`minmax_rules`); a float Maximum/Minimum is not
  compiled where numpy is not consistent on this machine;
- no fastmath; a float division by zero gives inf or NaN (``error_model="numpy"``).

String, float16 and complex values are never compiled (:data:`COMPILED_DTYPES`:
numba has no float16 arithmetic, and its complex products and quotients are not
numpy's bit for bit).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from graphflow.lowering import Lowering, dtype_literal, shape_literal
from graphflow.registry import op_def

from . import array_ops, dense_math_ops, math_ops

#: The modules that register the ops of :data:`RULES` (imported first).
DECLARED_IN = (array_ops, math_ops, dense_math_ops)

#: dtypes whose element-wise arithmetic numba reproduces bit for bit.
COMPILED_DTYPES = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float32, np.float64))


@dataclass(frozen=True)
class ElementwiseRule:
    """How one element of an element-wise op's result is computed in generated code.

    ``kind``: "arithmetic" (the result has the operands' dtype), "comparison",
    "logical", "select" or "cast". ``source`` spells one element: ``{0}``, ``{1}``,
    ``{2}`` are the operands, ``{t}`` the result type; ``wrapping``: computed in
    uint64 for integers. ``fuses``: the op joins fused regions."""

    op_type: str
    arity: int
    kind: str
    source: str
    wrapping: bool = False
    fuses: bool = True

    def compiles(self, dtypes: Iterable, attrs: dict | None = None) -> bool:
        """Whether generated code computes this op over values of ``dtypes`` (its
        operands', then its result's) exactly as its kernel does, under ``attrs``."""
        dtypes = [np.dtype(d) for d in dtypes]
        if any(d not in COMPILED_DTYPES for d in dtypes):
            return False
        if self.kind == "cast" and dtypes[0].kind == "f" and dtypes[-1].kind in "iu":
            return False  # undefined for NaN and out of range: left to the Cast kernel
        if self.kind == "cast" and (attrs or {}).get("Truncate"):
            return False  # rounding toward zero: the Cast kernel's bit operations
        if self.op_type in MINMAX and dtypes[0].kind == "f":
            return minmax_rules()[self.op_type] is not None
        if self.op_type in CLAMPS and dtypes[0].kind == "f":
            return all(minmax_rules()[_MINMAX_OF[cmp]] is not None
                       for cmp, _ in CLAMPS[self.op_type])
        if self.op_type in FLOAT_ONLY and dtypes[0].kind != "f":
            return False
        return True

    def expression(self, dtype, operands: Sequence[str], operand_dtype=None) -> str:
        """One element of the result, of numpy dtype ``dtype``, as a numba expression of
        the ``operands``' source (of ``operand_dtype``: the first operand's). Type names
        read as :func:`type_aliases` defines them."""
        dtype = np.dtype(dtype)
        t = type_name(dtype)
        if self.wrapping and dtype.kind in "iu":
            wide = [f"{type_name(np.uint64)}({x})" for x in operands]
            if self.op_type == "Neg":  # 0 - x (numba would not keep -x in uint64)
                return f"{t}({type_name(np.uint64)}(0) - {wide[0]})"
            return self.source.format(*wide, t=t)
        if self.op_type in MINMAX and dtype.kind == "f":
            return _float_minmax(self.op_type, *operands)
        if self.op_type in CLAMPS and dtype.kind == "f":
            value = operands[0]
            for cmp, bound in CLAMPS[self.op_type]:
                value = _float_minmax(_MINMAX_OF[cmp], f"({value})", f"{t}({bound})")
            return value
        if self.op_type == "Abs" and dtype.kind == "i":  # wraps: abs(INT_MIN) is INT_MIN
            u64 = type_name(np.uint64)
            return f"({operands[0]} if {operands[0]} >= 0 else {t}({u64}(0) - {u64}({operands[0]})))"
        if self.kind == "cast" and dtype == np.bool_:
            return operands[0] if np.dtype(operand_dtype) == np.bool_ else f"{operands[0]} != 0"
        return self.source.format(*operands, t=t)


#: The element-wise ops generated code computes. Identity is a step of partitioned
#: selects only (the simplification pass removes it before fusion).
RULES = (
    ElementwiseRule("Identity", 1, "arithmetic", "{0}", fuses=False),
    ElementwiseRule("Neg", 1, "arithmetic", "{t}(-{0})", wrapping=True),
    ElementwiseRule("Add", 2, "arithmetic", "{t}({0} + {1})", wrapping=True),
    ElementwiseRule("Sub", 2, "arithmetic", "{t}({0} - {1})", wrapping=True),
    ElementwiseRule("Mul", 2, "arithmetic", "{t}({0} * {1})", wrapping=True),
    ElementwiseRule("RealDiv", 2, "arithmetic", "{t}({0} / {1})"),
    ElementwiseRule("Maximum", 2, "arithmetic", "{0} if {0} > {1} else {1}"),
    ElementwiseRule("Minimum", 2, "arithmetic", "{0} if {0} < {1} else {1}"),
    ElementwiseRule("Equal", 2, "comparison", "{0} == {1}"),
    ElementwiseRule("NotEqual", 2, "comparison", "{0} != {1}"),
    ElementwiseRule("Less", 2, "comparison", "{0} < {1}"),
    ElementwiseRule("Greater", 2, "comparison", "{0} > {1}"),
    ElementwiseRule("LogicalAnd", 2, "logical", "{0} and {1}"),
    ElementwiseRule("LogicalOr", 2, "logical", "{0} or {1}"),
    ElementwiseRule("LogicalNot", 1, "logical", "not {0}"),
    ElementwiseRule("SelectV2", 3, "select", "{1} if {0} else {2}"),
    ElementwiseRule("Cast", 1, "cast", "{t}({0})"),
    # the exact ones of ops/dense_math_ops.py. Exp, Log, Tanh... do not fuse: in numba
    # they are libm's scalar calls, unfused numpy's SIMD loops, and the two differ in the
    # last bit (exp float32: 39% of 1M inputs) and libm's are 4-30x slower on this
    # machine (tanh float32 over 1M: 15.5 ms against numpy's 0.5 ms)
    ElementwiseRule("Square", 1, "arithmetic", "{t}({0} * {0})", wrapping=True),
    ElementwiseRule("Abs", 1, "arithmetic", "{t}(abs({0}))"),
    ElementwiseRule("Floor", 1, "arithmetic", "{t}(np.floor({0}))"),
    ElementwiseRule("Ceil", 1, "arithmetic", "{t}(np.ceil({0}))"),
    ElementwiseRule("Relu", 1, "arithmetic", "{0} if {0} > 0 else {t}(0)"),
    ElementwiseRule("Relu6", 1, "arithmetic",
                    "{t}(6) if {0} > 6 else ({0} if {0} > 0 else {t}(0))"),
    # correctly rounded in IEEE arithmetic, so numba's bits are numpy's
    ElementwiseRule("Sqrt", 1, "arithmetic", "{t}(np.sqrt({0}))"),
    ElementwiseRule("Rsqrt", 1, "arithmetic", "{t}({t}(1) / {t}(np.sqrt({0})))"),
    ElementwiseRule("Reciprocal", 1, "arithmetic", "{t}({t}(1) / {0})"),
    ElementwiseRule("Round", 1, "arithmetic", "{t}(np.rint({0}))"),
    ElementwiseRule("Softsign", 1, "arithmetic", "{t}({0} / {t}({t}(1) + {t}(abs({0}))))"),
    ElementwiseRule("SquaredDifference", 2, "arithmetic",
                    "{t}({t}({0} - {1}) * {t}({0} - {1}))"),
    # numpy's sign: +0 for either zero, a NaN stays itself
    ElementwiseRule("Sign", 1, "arithmetic",
                    "{t}(1) if {0} > 0 else ({t}(-1) if {0} < 0 else "
                    "({0} if {0} != {0} else {t}(0)))"),
)

#: Rules for float operands only (integers: another kernel, or wrapping these do not do)
FLOAT_ONLY = frozenset({"Floor", "Ceil", "Round", "SquaredDifference"})

MINMAX = {"Maximum": ">", "Minimum": "<"}
#: Rules that are numpy's maximum / minimum against constants: float NaN and signed-zero
#: rules as Maximum's and Minimum's (ops/dense_math_ops.py computes them with those)
CLAMPS = {"Relu": ((">", 0),), "Relu6": ((">", 0), ("<", 6))}


def lower_elementwise(rule: ElementwiseRule, spec) -> Lowering | None:
    """One element-wise op inside a compiled segment (graphflow/lowering.py): a loop over
    the elements, where every input has the output's static shape or holds one element
    (all of them only inside a compiled loop: scalar arithmetic alone is Python's)."""
    shape = spec.output_shape(0)
    n_in = len(spec.inputs)
    if shape is None or n_in != rule.arity or len(spec.outputs) != 1:
        return None
    shapes = [spec.shape(k) for k in range(n_in)]
    out_dtype = np.dtype(spec.outputs[0].dtype.as_numpy_dtype)
    if any(s is None for s in shapes) or not rule.compiles(
            [*(spec.dtype(k) for k in range(n_in)), out_dtype], spec.attrs):
        return None
    ones = [math.prod(s) == 1 and len(s) <= len(shape) for s in shapes]
    if any(not one and s != shape for s, one in zip(shapes, ones)) \
            or (all(ones) and not spec.in_loop) or not spec.small_output(shape, out_dtype):
        return None
    operands = [f"{{t}}x{k}[{0 if one else '{t}j'}]" for k, one in enumerate(ones)]
    element = rule.expression(out_dtype, operands, spec.dtype(0))
    return Lowering("\n".join([
        f"{{o0}} = np.empty({shape_literal(shape)}, {dtype_literal(out_dtype)})",
        "{t}o = {o0}.reshape(-1)",
        *(f"{{t}}x{k} = np.ascontiguousarray({{i{k}}}).reshape(-1)" for k in range(n_in)),
        f"for {{t}}j in range({math.prod(shape)}):",
        f"    {{t}}o[{{t}}j] = {element}"]))


for _rule in RULES:
    op_def(_rule.op_type).elementwise = _rule
    if _rule.fuses:
        op_def(_rule.op_type).lower("cpu")(functools.partial(lower_elementwise, _rule))


def type_name(dtype) -> str:
    """The name generated code calls numpy dtype ``dtype``'s scalar type by."""
    return f"_{np.dtype(dtype).name}"


def type_aliases(dtypes: Iterable) -> list[str]:
    """The lines of a generated module that define :func:`type_name` for ``dtypes`` (and
    uint64, which wrapping arithmetic uses); the module imports numpy as ``_np``."""
    names = sorted({np.dtype(np.uint64), *(np.dtype(d) for d in dtypes)}, key=str)
    # the scalar type's own name: np.bool_, not np.bool (numpy < 2 has no np.bool)
    return [f"{type_name(d)} = _np.{d.type.__name__}" for d in names]


_MINMAX_OF = {">": "Maximum", "<": "Minimum"}


def _float_minmax(op_type: str, a: str, b: str) -> str:
    """numpy's rule, as probed: a NaN ``a`` wins, else the larger (smaller), else ``b``
    (or ``a`` on ties where numpy keeps the first)."""
    cmp = MINMAX[op_type]
    if minmax_rules()[op_type] == "ties_first":
        cmp += "="
    return f"{a} if ({a} {cmp} {b} or {a} != {a}) else {b}"


# -- numpy's Maximum/Minimum on floats ---------------------------------------------------
@functools.cache
def minmax_rules() -> dict[str, str | None]:
    """For np.maximum and np.minimum on float arrays: ``"ties_second"`` when they return
    ``a if (a > b or a is NaN) else b`` (``<`` for minimum), ``"ties_first"`` for ``>=``,
    None when numpy agrees with neither on some length or with a scalar operand (its SIMD
    loops and their scalar tails differ). Probed once per process, on first use."""
    found: dict[str, str | None] = {}
    for name, fn, cmp in (("Maximum", np.maximum, np.greater), ("Minimum", np.minimum, np.less)):
        rules = {"ties_second": cmp, "ties_first": np.greater_equal if cmp is np.greater
                 else np.less_equal}
        agree = set(rules)
        for dtype, uint in ((np.float32, np.uint32), (np.float64, np.uint64)):
            for xs, ys in _probe_operands(dtype, uint):
                got = fn(xs, ys).view(uint)
                for rule in list(agree):
                    want = np.where(rules[rule](xs, ys) | np.isnan(xs), xs, ys)
                    if not np.array_equal(got, np.broadcast_to(want, got.shape).view(uint)):
                        agree.discard(rule)
        found[name] = next(iter(sorted(agree)), None)
    return found


def _probe_operands(dtype, uint):
    """Pairs of operands holding every (a, b) of special values (signed zeros, infinities,
    NaNs with payloads), at every offset of several lengths, and against 0-d scalars."""
    nan = np.array(np.nan, dtype)
    payload = (nan.view(uint) | uint(1)).view(dtype)
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, nan, -nan, payload], dtype)
    pairs = len(special) ** 2
    a = np.resize(np.repeat(special, len(special)), 2 * pairs + 257)
    b = np.resize(np.tile(special, len(special)), 2 * pairs + 257)
    for n in (1, 3, 8, 17, 64, 257):
        for start in range(0, pairs, n):
            x, y = a[start:start + n], b[start:start + n]
            yield from ((x, y), (x[:1], y), (x, y[:1]))
    data = np.resize(special, 67)
    for s in special:
        yield data, s
        yield s, data
