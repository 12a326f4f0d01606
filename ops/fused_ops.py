"""Internal ops made by graph rewrites (runtime/partition_stitch.py), never by users.

``_PartitionedSelect`` stands for the pipeline

    parts = DynamicPartition(x, p, K)
    rows  = DynamicPartition(Range(0, Size(x), 1), p, K)
    y     = DynamicStitch(rows, [f_0(parts[0]), ..., f_{K-1}(parts[K-1])])

with 1-D ``x`` and element-wise ``f_k`` (chains of ops with a scalar or of the
value with itself, maybe ending in an integer Cast), which is
``y[i] = f_{p[i]}(x[i])``. On the CPU it is one compiled pass over x, generated
from the chains (:func:`kernel_source`) and split over the intra-op pool: the
ids are checked first, then each element runs its own partition's chain only.
The pass is numba code written out as a module in
``graphflow.ops.jit.cache_dir()``, so numba's disk cache serves it to later
processes. float16, complex and string data, and inputs too small to pay for a
compile (:data:`COMPILE_MIN_ELEMENTS`), take a numpy path that computes every
chain over all of x and selects.

Results are bit for bit those of the graph as written: each step is cast back to
the dtype (numba computes small integers in int64; the cast wraps as numpy
does), Maximum and Minimum follow numpy's NaN and signed-zero rules (checked
against numpy on this machine, else they stay on the numpy path), and there is
no fastmath. A NaN comes out as a NaN, but maybe with another sign or payload:
LLVM, like the C compilers numpy is built with, does not keep those through
arithmetic (it may compute -x + 0.0 as 0.0 - x, where a NaN x keeps its sign).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
from typing import Callable

import numpy as np

from graphflow.dtypes import ALL_TYPES, bool_, int32
from graphflow.errors import InvalidArgumentError
from graphflow.registry import IntAttr, TypeAttr, op_def, register_op
from graphflow.shapes import debug_string

from . import jit
from .intra_op import run_in_chunks
from .partition_loops import first_bad_id, readonly

NON_STRING_TYPES = tuple(t for t in ALL_TYPES if not t.is_string)

PartitionedSelect = register_op(
    "_PartitionedSelect",
    inputs=["data: T", "selector: S * Tsel", "scalars: M * T"],
    outputs=["output: Tout"],
    attrs={"T": TypeAttr(), "Tout": TypeAttr(), "Tsel": TypeAttr([bool_, int32]),
           "S": IntAttr(minimum=0),
           "M": IntAttr(minimum=0), "num_partitions": IntAttr(minimum=1)},
    doc="DynamicStitch(DynamicPartition(range(n), p), [f_k(DynamicPartition(data, p)[k])]) "
        "computed as output[i] = f_{p[i]}(data[i]): the element-wise f_k commute with the "
        "partition. The attr 'program' holds each f_k as (op_type, chain position, scalar "
        "index) steps (index -1: a unary op; SELF = -2: both operands are the chain value; "
        "a Cast, to Tout, ends a chain). The partition ids p are the int32 selector, or the "
        "bool selector (ids 0 and 1), or, with no selector, the attr 'compare' = (op_type, position, "
        "scalar index): the comparison of data with a scalar, computed in the pass. The "
        "attr 'origin' = (node name, op type, site) names the partition node that errors "
        "come from.")

#: The scalar index of a step whose operands are both the chain value (x * x).
SELF = -2

#: How each element-wise step reads in generated code: ``{a}`` and ``{b}`` are the
#: operands in the graph's order, ``{T}`` the numpy type the result is cast back to.
STEP_SOURCE = {
    "Identity": "{a}",
    "Cast": "{T}({a})",  # to Tout, from an integer or bool: wraps as numpy's astype
    "Neg": "{T}(-{a})",
    "Add": "{T}({a} + {b})",
    "Sub": "{T}({a} - {b})",
    "Mul": "{T}({a} * {b})",
    "RealDiv": "{T}({a} / {b})",
    # numpy's rules: a NaN operand wins (the first of two), else the larger (smaller),
    # else b (np.maximum(0.0, -0.0) is -0.0); checked against numpy by numpy_minmax_rule
    "Maximum": "{a} if {a} != {a} else {b} if {b} != {b} else {a} if {a} > {b} else {b}",
    "Minimum": "{a} if {a} != {a} else {b} if {b} != {b} else {a} if {a} < {b} else {b}",
}

#: Comparisons a pass can compute its own mask with.
COMPARE_SOURCE = {"Equal": "{a} == {b}", "NotEqual": "{a} != {b}", "Less": "{a} < {b}",
                  "Greater": "{a} > {b}"}

#: Below this many elements the numpy path runs: compiling a pass costs 0.2-0.5 s once
#: per machine (then a few ms to load per process), while numpy takes ~2 us per step
#: on 16K float32 elements.
COMPILE_MIN_ELEMENTS = 1 << 14

#: dtypes the pass is compiled for: numba has no float16, and its complex division
#: rounds differently from numpy's.
COMPILED_TYPES = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float32, np.float64))

def kernel_source(programs: tuple, dtype: np.dtype, selector: str, compare=None,
                  out_dtype: np.dtype | None = None) -> str:
    """The source of a module defining ``partitioned_select(x, selector, branch_of,
    scalars, out, start, stop)``: ``out[i] = f_{p[i]}(x[i])`` for i in [start, stop).
    ``selector`` is "ids" (p = selector[i], already checked; ``branch_of[p]`` numbers
    the distinct chains), "mask" (p = selector[i], a bool) or "compare" (p = the
    comparison ``compare`` of x[i] with a scalar). A Cast step casts to ``out_dtype``."""
    # the scalar type's own name: np.bool_, not np.bool (numpy < 2 has no np.bool)
    T = f"np.{np.dtype(dtype).type.__name__}"
    Tout = f"np.{np.dtype(out_dtype or dtype).type.__name__}"
    if selector == "ids":
        branches = list(dict.fromkeys(programs))
        which = "branch_of[np.uint32(selector[i])]"
    else:
        branches = [programs[0], programs[1]]
        if selector == "mask":
            which = "selector[i]"
        else:
            op_type, position, scalar = compare
            a, b = ("v", f"s{scalar}") if position == 0 else (f"s{scalar}", "v")
            which = COMPARE_SOURCE[op_type].format(a=a, b=b)
    used = sorted({step[2] for chain in programs for step in chain if step[2] >= 0}
                  | ({compare[2]} if selector == "compare" else set()))
    lines = [f"# generated by graphflow.ops.fused_ops: dtype {np.dtype(dtype).name} -> "
             f"{np.dtype(out_dtype or dtype).name}, "
             f"selector {selector} {compare!r}, chains {programs!r}",
             "import numpy as np", "", "from graphflow.ops.jit import kernel", "", "",
             "@kernel",
             "def partitioned_select(x, selector, branch_of, scalars, out, start, stop):"]
    lines += [f"    s{m} = scalars[{m}]" for m in used]
    lines += ["    for i in range(np.uint64(start), np.uint64(stop)):", "        v = x[i]"]
    if len(set(branches)) == 1:
        lines += _chain_lines(branches[0], T, Tout, "        ")
    else:
        lines.append(f"        b = {which}")
        for n, chain in enumerate(branches):
            test = "else:" if n == len(branches) - 1 else \
                f"{'if' if n == 0 else 'elif'} b == {n}:"
            lines.append(f"        {test}")
            lines += _chain_lines(chain, T, Tout, "            ")
    return "\n".join(lines) + "\n"


def _chain_lines(chain: tuple, T: str, Tout: str, indent: str) -> list[str]:
    lines = []
    for op_type, position, scalar in chain:
        s = "v" if scalar == SELF else f"s{scalar}"
        a, b = ("v", s) if position == 0 else (s, "v")
        code = STEP_SOURCE[op_type].format(a=a, b=b, T=Tout if op_type == "Cast" else T)
        lines.append(f"{indent}v = {code}")
    return lines + [f"{indent}out[i] = v"]


_compiled: dict[str, Callable] = {}
_compiled_lock = threading.Lock()


def compiled_kernel(source: str) -> Callable:
    """``partitioned_select`` of the generated ``source``, imported from a module in
    the cache folder (written once, under its hash) so that numba's disk cache can
    serve it to other processes; from memory, uncached, where that folder cannot be
    written."""
    with _compiled_lock:
        fn = _compiled.get(source)
        if fn is not None:
            return fn
        name = "graphflow_fused_" + hashlib.sha256(source.encode()).hexdigest()[:24]
        try:
            module = _import_source(name, source)
        except (OSError, RuntimeError):
            # a cache folder that cannot be written (numba: "cannot cache function"):
            # compile from memory
            module = type(sys)(name)
            uncached = source.replace("@kernel\n", "@kernel(cache=False)\n")
            exec(compile(uncached, f"<{name}>", "exec"), module.__dict__)  # noqa: S102
        fn = _compiled[source] = module.partitioned_select
        return fn


def _import_source(name: str, source: str):
    folder = jit.cache_dir() / "fused"
    path = folder / f"{name}.py"
    if not path.exists() or path.read_text() != source:
        folder.mkdir(parents=True, exist_ok=True)
        # a whole file or none: another process may import it at the same time
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _error(ctx, message: str) -> InvalidArgumentError:
    """An error that names the partition node it comes from in the graph as written."""
    name, op_type, site = ctx.attrs["origin"]
    return InvalidArgumentError(message, name, op_type, site=site)


def _check_shapes(ctx, data, selector) -> None:
    if selector is not None and selector.shape != data.shape:
        raise _error(ctx, f"data.shape must start with partitions.shape, got data.shape = "
                          f"{debug_string(data.shape)}, partitions.shape = "
                          f"{debug_string(selector.shape)}")


def _check_ids(ctx, ids, first_bad: int) -> None:
    if first_bad >= 0:
        raise _error(ctx, f"partitions[{first_bad}] = {int(ids[first_bad])} is not in "
                          f"[0, {ctx.attrs['num_partitions']})")


@functools.cache
def numpy_minmax_rule() -> bool:
    """Whether np.maximum and np.minimum of an array and a scalar follow the rule the
    generated code spells out (STEP_SOURCE) on this machine, for every position in
    the array (numpy's SIMD loops and their scalar tails)."""
    for dtype in (np.float32, np.float64):
        special = np.array([0.0, -0.0, np.nan, -np.nan, 1.0, -1.0, np.inf, -np.inf], dtype)
        data = np.resize(special, 67)
        for s in special:
            for fn, larger in ((np.maximum, True), (np.minimum, False)):
                for a, b, got in ((data, s, fn(data, s)), (s, data, fn(s, data))):
                    a, b = np.broadcast_arrays(a, b)
                    pick_a = np.isnan(a) | (~np.isnan(b) & ((a > b) if larger else (a < b)))
                    want = np.where(pick_a, a, b)
                    if want.tobytes() != got.tobytes():
                        return False
    return True


def _compiles(data: np.ndarray, programs: tuple) -> bool:
    """Whether the compiled pass serves this call (else the numpy path does)."""
    if data.dtype not in COMPILED_TYPES or data.size < COMPILE_MIN_ELEMENTS:
        return False
    if data.dtype.kind == "f" and any(op in ("Maximum", "Minimum") for chain in programs
                                      for op, _, _ in chain):
        return numpy_minmax_rule()
    return True


@PartitionedSelect.kernel("cpu")
def _partitioned_select(ctx, data, selector, scalars):
    data = np.asarray(data)
    if not _compiles(data, ctx.attrs["program"]):
        return _select_numpy(ctx, data, selector, scalars)
    # read-only views throughout: one compiled signature for feeds and intermediates
    x = readonly(np.ascontiguousarray(data))
    selector = readonly(np.ascontiguousarray(selector[0])) if selector else None
    _check_shapes(ctx, x, selector)
    compare = ctx.attrs.get("compare")
    kind = "compare" if compare else "mask" if selector.dtype == np.bool_ else "ids"
    n = x.size
    if kind == "ids":
        k = ctx.attrs["num_partitions"]
        _check_ids(ctx, selector, int(first_bad_id(selector, 0, n, k)))
    compiled = ctx.cache.get("pass")
    if compiled is None:
        compiled = ctx.cache.setdefault("pass", _compile_pass(ctx, kind))
    fn, branch_of = compiled
    values = readonly(np.concatenate([np.asarray(s, x.dtype).reshape(1) for s in scalars])
                      if scalars else np.zeros(1, x.dtype))
    if selector is None:
        selector = x  # not read: the pass compares x itself
    out = ctx.empty(x.shape, ctx.attrs["Tout"].as_numpy_dtype)
    run_in_chunks(lambda start, stop: fn(x, selector, branch_of, values, out, start, stop),
                  n, 2 * n)
    return out


def _compile_pass(ctx, kind: str) -> tuple[Callable, np.ndarray]:
    """The node's compiled pass and its ``branch_of`` table (partition id -> number of
    its distinct chain), made once per plan."""
    programs = ctx.attrs["program"]
    source = kernel_source(programs, ctx.attrs["T"].as_numpy_dtype, kind,
                           ctx.attrs.get("compare"), ctx.attrs["Tout"].as_numpy_dtype)
    branches = list(dict.fromkeys(programs))
    branch_of = np.array([branches.index(chain) for chain in programs], np.int32)
    return compiled_kernel(source), readonly(branch_of)


@PartitionedSelect.kernel("gpu", T=NON_STRING_TYPES)
def _partitioned_select_gpu(ctx, data, selector, scalars):
    return _select_numpy(ctx, data, selector, scalars)


def _select_numpy(ctx, data, selector, scalars):
    """Every chain over the whole of ``data`` (numpy or cupy), then a select by id."""
    xp = ctx.xp
    k = ctx.attrs["num_partitions"]
    programs = ctx.attrs["program"]
    compare = ctx.attrs.get("compare")
    if compare:
        op_type, position, scalar = compare
        operands = (data, scalars[scalar]) if position == 0 else (scalars[scalar], data)
        selector = _step_kernel(ctx, op_type)(ctx, *operands)
    else:
        selector = selector[0]
        _check_shapes(ctx, data, selector)
    # values of the other partitions are computed, then dropped: the runtime keeps the
    # floating-point warnings they may raise quiet
    if selector.dtype == np.bool_:  # ids 0 and 1 only
        return xp.where(selector, _branch(ctx, programs[1], data, scalars),
                        _branch(ctx, programs[0], data, scalars))
    bad = (selector < 0) | (selector >= k)
    if bool(bad.any()):
        i = int(xp.argmax(bad))
        _check_ids(ctx, selector, i)
    out = _branch(ctx, programs[0], data, scalars)
    for p in range(1, k):
        out = xp.where(selector == p, _branch(ctx, programs[p], data, scalars), out)
    # the stitch it replaces gives a fresh array, which later kernels may write into:
    # one partition and no arithmetic would hand out the input buffer itself
    return out.copy() if out is data else out


def _branch(ctx, program, data, scalars):
    """Apply one partition's element-wise chain to the whole of ``data``."""
    value = data
    for op_type, position, scalar in program:
        if op_type == "Cast":  # from an integer or bool to an integer: Cast's kernel
            value = value.astype(ctx.attrs["Tout"].as_numpy_dtype)
            continue
        fn = _step_kernel(ctx, op_type)
        if scalar == SELF:
            value = fn(ctx, value, value)
        elif scalar < 0:
            value = fn(ctx, value)
        elif position == 0:
            value = fn(ctx, value, scalars[scalar])
        else:
            value = fn(ctx, scalars[scalar], value)
    return value


def _step_kernel(ctx, op_type: str) -> Callable:
    """The kernel of one step's op on this device, found once per plan."""
    fn = ctx.cache.get(op_type)
    if fn is None:
        kernel = op_def(op_type).find_kernel(ctx.device.device_type if ctx.device else "cpu",
                                             {"T": ctx.attrs["T"]})
        fn = ctx.cache.setdefault(op_type, kernel.fn)
    return fn
