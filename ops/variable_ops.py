"""Variables: TensorFlow 1.x resource variables, whose values live in the Session.

``VarHandleOp`` gives a variable's handle (a string scalar naming it); the other
ops take the handle as their first input, so a variable's readers and writers
are ordinary graph edges (pruning, ordering and gradients see them). Values are
kept in the Session's ``ResourceStore`` (runtime/resources.py), one per Session.

- Reads are snapshots: ``ReadVariableOp`` and ``ResourceGather`` copy what they
  read, so no fetched value and no buffer a later op writes into is the variable's.
- Updates are in place and cost what they touch: ``ResourceScatterNd*`` validate
  every index first (an out-of-range index raises and leaves the variable as it
  was: stricter than TensorFlow's CPU kernel, which applies the updates before
  the bad one), then update the stored array with the scatter loops of
  ``ops/scatter_ops.py``.
- Every read and update holds the variable's lock, so concurrent runs lose no
  update and never see a half-applied one.

Every op here is stateful: never constant-folded, never fused, never shared
between Sessions. Within one run, ops on a variable are ordered only by data
and control dependencies, as in TensorFlow 1.x.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from graphflow.dtypes import ALL_TYPES, NUMBER_TYPES, REAL_NUMBER_TYPES, bool_, int32, int64
from graphflow.errors import InvalidArgumentError
from graphflow.functions import outer_source
from graphflow.lowering import Lowering, shape_literal
from graphflow.registry import ShapeAttr, StringAttr, TypeAttr, register_op, same_as_tf
from graphflow.shapes import TensorShape, debug_string

from . import parallel_gather, scatter_loops
from .cpu_index import checked_gather
from .index_checks import check_tensor_scatter_inputs
from .intra_op import kernel_threads
from .jit import jittable
from .scatter_loops import can_combine, checked_row_adder
from .scatter_ops import BAD_INDICES_POLICIES, gather_nd, scatter_on_cpu, scatter_shape

VARIABLE_TYPES = ALL_TYPES  # strings too, as TensorFlow's CPU kernels (assign, gather, scatter update)


# -- the handle -------------------------------------------------------------------------------
VarHandleOp = register_op(
    "VarHandleOp", outputs=["resource: string"],
    attrs={"dtype": TypeAttr(VARIABLE_TYPES), "shape": ShapeAttr(),
           "shared_name": StringAttr("")},
    stateful=True,
    doc="The handle of the variable `shared_name` (default: the node's name), a string "
        "scalar: the first input of every op that reads or updates it.")


@VarHandleOp.shape_fn
def _handle_shape(ctx):
    """a scalar."""
    return TensorShape([])


@VarHandleOp.kernel("cpu")
def _handle(ctx):
    made = ctx.cache.get("handle")
    if made is None:
        name = ctx.attrs["shared_name"] or ctx.node_name
        handle = np.array(name.encode(), dtype=object)
        handle.flags.writeable = False
        made = ctx.cache["handle"] = (handle, name, np.dtype(ctx.attrs["dtype"].as_numpy_dtype))
    handle, name, dtype = made
    if ctx.resources is not None:  # the variable's dtype, for kernels reached by any handle
        ctx.resources.variable(name).declare(dtype)
    return handle


def _variable_of(ctx, handle):
    if ctx.resources is None:
        raise InvalidArgumentError(f"{ctx.op_type} needs a Session's variables")
    name = handle.item()
    return ctx.resources.variable(name.decode() if isinstance(name, bytes) else str(name))


def handle_attrs(output) -> tuple | None:
    """(dtype, shape, name) of the variable behind a handle Output, when it comes
    straight from a VarHandleOp (as every handle graphflow builds does), also through
    a branch or loop body that captured it."""
    op = outer_source(output).op
    if op.type != "VarHandleOp":
        return None
    return op.attrs["dtype"], op.attrs["shape"], op.attrs["shared_name"] or op.name


def _variable_shape(ctx) -> TensorShape:
    known = handle_attrs(ctx.input("resource"))
    return known[1] if known is not None else TensorShape(None)


def _check_value_type(ctx, name: str) -> None:
    known = handle_attrs(ctx.input("resource"))
    if known is not None and ctx.dtype(name) != known[0]:
        raise ctx.error(f"Trying to write a {ctx.dtype(name).name} value to variable "
                        f"'{known[2]}' of dtype {known[0].name}")


# -- reads ---------------------------------------------------------------------------------------
ReadVariableOp = register_op(
    "ReadVariableOp", inputs=["resource: string"], outputs=["value: dtype"],
    attrs={"dtype": TypeAttr(VARIABLE_TYPES)}, stateful=True,
    doc="A snapshot (a copy) of the variable's value.")


@ReadVariableOp.shape_fn
def _read_shape(ctx):
    """the variable's shape."""
    known = handle_attrs(ctx.input("resource"))
    if known is not None and known[0] != ctx.attr("dtype"):
        raise ctx.error(f"Trying to read variable '{known[2]}' of dtype {known[0].name} as "
                        f"{ctx.attr('dtype').name}")
    return _variable_shape(ctx)


@ReadVariableOp.kernel("cpu")
def _read(ctx, handle):
    state = _variable_of(ctx, handle)
    with state.lock:
        value = state.initialized_value()
        state.check_dtype(np.dtype(ctx.attrs["dtype"].as_numpy_dtype), "read")
        out = ctx.empty(value.shape, value.dtype)
        np.copyto(out, value)
    return out


ResourceGather = register_op(
    "ResourceGather", inputs=["resource: string", "indices: Tindices"], outputs=["output: dtype"],
    attrs={"dtype": TypeAttr(VARIABLE_TYPES), "Tindices": TypeAttr((int32, int64))},
    stateful=True, aliases=("sparse_read",),
    doc="Rows `indices` (any shape) of the variable along dim 0: a copy of only those rows.")


@ResourceGather.shape_fn
def _gather_shape(ctx):
    """indices.shape + variable.shape[1:]."""
    variable = _variable_shape(ctx)
    if variable.rank is not None and variable.rank < 1:
        raise ctx.error(f"params must be at least 1 dimensional, got {variable}")
    if ctx.shape("indices").rank is None or variable.rank is None:
        return TensorShape(None)
    return ctx.shape("indices").concatenate(variable[1:])


@ResourceGather.kernel("cpu")
def _gather(ctx, handle, indices):
    state = _variable_of(ctx, handle)
    with state.lock:
        value = state.initialized_value()
        state.check_dtype(np.dtype(ctx.attrs["dtype"].as_numpy_dtype), "read")
        if value.ndim < 1:
            raise InvalidArgumentError(f"params must be at least 1 dimensional, got shape "
                                       f"{debug_string(value.shape)}")
        flat, rows = indices.reshape(-1), value.shape[0]
        if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= rows):
            first = int(np.flatnonzero((flat < 0) | (flat >= rows))[0])
            raise InvalidArgumentError(  # TensorFlow's GatherFunctor message
                f"indices[{first}] = {int(flat[first])} is not in [0, {rows})")
        return gather_nd(ctx, value, indices[..., None], "")


@ResourceGather.prepare("cpu")
def _prepare_gather(spec):
    """The lean read of rows: one bounds check of the ids (a negative id is huge as
    unsigned), one ``take``; anything unusual goes to the full kernel."""
    dtype = np.dtype(spec.attrs["dtype"].as_numpy_dtype)
    index_shape = spec.shape(1)
    if dtype == object or index_shape is None or 0 in index_shape:
        return None
    unsigned = np.dtype(f"u{spec.dtype(1).itemsize}")
    n = math.prod(index_shape)

    def big(ctx, handle, indices):
        """A big read (the variable's shape can change): each intra-op thread checks and
        copies its own rows (ops/parallel_gather.py)."""
        state = _variable_of(ctx, handle)
        with state.lock:
            value = state.value
            if value is not None and value.dtype == dtype and value.ndim >= 1 \
                    and value.flags.c_contiguous and value.size:
                rows = value.shape[0]
                width = value.size // rows
                out = ctx.empty(index_shape + value.shape[1:], dtype)
                if parallel_gather.gather(out.reshape(n, width), value.reshape(rows, width),
                                          indices.reshape(n, 1), (rows,), kernel_threads(ctx)):
                    return out
        return _gather(ctx, handle, indices)  # its checks and errors

    def lean(ctx, handle, indices):
        state = _variable_of(ctx, handle)
        with state.lock:
            value = state.value
            if value is not None and value.dtype == dtype and value.ndim >= 1 \
                    and value.flags.c_contiguous and value.size:
                flat = indices.reshape(-1)
                if int(flat.view(unsigned).max()) < value.shape[0]:
                    out = ctx.empty(index_shape + value.shape[1:], dtype)
                    np.take(value.reshape(value.shape[0], -1), flat, axis=0,
                            out=out.reshape(n, -1), mode="clip")
                    return out
        return _gather(ctx, handle, indices)  # its checks and errors

    known = handle_attrs(spec.inputs[0])
    if known is not None and known[1].rank is not None and known[1].rank >= 1 \
            and all(d is not None for d in known[1].as_list()[1:]) and not parallel_gather.splits(
                n, n * dtype.itemsize * math.prod(known[1].as_list()[1:])):
        return lean  # small rows of a declared shape: no per-call size test

    def either(ctx, handle, indices):
        value = _variable_of(ctx, handle).value
        if value is not None and value.ndim >= 1 and parallel_gather.splits(
                n, n * value.itemsize * (value.size // max(1, value.shape[0]))):
            return big(ctx, handle, indices)
        return lean(ctx, handle, indices)
    return either


def _static_variable(spec) -> tuple | None:
    """(dtype, shape, rows, row width) of the variable behind input 0, when its handle
    comes from a VarHandleOp of a static non-empty shape of rank >= 1 and numba compiles
    its dtype: what a lowered step reads and writes in place."""
    known = handle_attrs(spec.inputs[0])
    if known is None or not known[1].is_fully_defined():
        return None
    dtype, shape = np.dtype(known[0].as_numpy_dtype), tuple(known[1].as_list())
    if not shape or math.prod(shape) == 0 or not jittable(dtype):
        return None
    return dtype, shape, shape[0], math.prod(shape[1:])


@ResourceGather.lower("cpu")
def _lower_gather(spec):
    """The rows at the ids, each id checked against the row count first."""
    variable, index_shape = _static_variable(spec), spec.shape(1)
    if variable is None or index_shape is None or 0 in index_shape:
        return None
    dtype, shape, rows, width = variable
    out_shape = tuple(index_shape) + shape[1:]
    if not spec.small_output(out_shape, dtype):
        return None
    return Lowering(
        f"{{t}}f, {{t}}good = {{column}}(np.ascontiguousarray({{i1}}).reshape(-1), {rows})\n"
        + checked_gather(f"{{i0}}.reshape(({rows}, {width}))", out_shape, dtype),
        {"gather": scatter_loops.gathered_rows, "column": scatter_loops.located_rows},
        variables=(0,))


# -- whole-value updates ------------------------------------------------------------------------
def _assign_op(name: str, doc: str, types):
    op = register_op(name, inputs=["resource: string", "value: dtype"],
                     attrs={"dtype": TypeAttr(types)}, stateful=True, doc=doc)

    @op.shape_fn
    def _shape(ctx):
        """no outputs; value.shape must equal the variable's."""
        _check_value_type(ctx, "value")
        variable, value = _variable_shape(ctx), ctx.shape("value")
        if not variable.is_compatible_with(value):
            raise ctx.error(f"Trying to assign to variable with tensor with wrong shape. "
                            f"Expected {variable} got {value}")
        return []
    return op


AssignVariableOp = _assign_op("AssignVariableOp", "The variable's value becomes a copy of "
                              "`value` (the caller's array is never kept).", VARIABLE_TYPES)
AssignAddVariableOp = _assign_op("AssignAddVariableOp", "variable += value, in place.",
                                 NUMBER_TYPES)
AssignSubVariableOp = _assign_op("AssignSubVariableOp", "variable -= value, in place.",
                                 NUMBER_TYPES)


def _check_same_shape(state, value) -> None:
    if state.value is not None and state.value.shape != value.shape:
        raise InvalidArgumentError(
            f"Cannot update variable '{state.name}' with shape "
            f"{debug_string(state.value.shape)} using a Tensor with shape "
            f"{debug_string(value.shape)}, shapes must be equal.")


@AssignVariableOp.kernel("cpu")
def _assign(ctx, handle, value):
    state = _variable_of(ctx, handle)
    fresh = np.array(value, copy=True, order="C")  # copied before the lock is taken
    with state.lock:
        state.check_dtype(fresh.dtype, "assign")
        _check_same_shape(state, fresh)
        state.journal_all(in_place=False)
        state.value = fresh


def _in_place_kernel(op, ufunc) -> None:
    """variable = ufunc(variable, value) in place, under the variable's lock."""
    @op.kernel("cpu")
    def _kernel(ctx, handle, value):
        state = _variable_of(ctx, handle)
        with state.lock:
            current = state.initialized_value()
            state.check_dtype(value.dtype, "update")
            _check_same_shape(state, value)
            state.journal_all()
            ufunc(current, value, out=current)


_in_place_kernel(AssignAddVariableOp, np.add)
_in_place_kernel(AssignSubVariableOp, np.subtract)


# -- sparse updates -------------------------------------------------------------------------------
def _resource_scatter_op(name: str, op: str, types, doc: str):
    definition = register_op(
        name, inputs=["resource: string", "indices: Tindices", "updates: dtype"],
        attrs={"dtype": TypeAttr(types), "Tindices": TypeAttr((int32, int64)),
               "bad_indices_policy": StringAttr("", BAD_INDICES_POLICIES)},
        stateful=True, doc=doc + " In place: costs the rows it touches, not the table.")

    @definition.shape_fn
    def _shape(ctx):
        """no outputs; updates.shape == indices.shape[:-1] + variable.shape[indices.shape[-1]:] where known."""
        _check_value_type(ctx, "updates")
        variable = _variable_shape(ctx)
        if variable.rank is not None and variable.rank < 1:
            raise ctx.error(f"Cannot scatter into the scalar variable of shape {variable}")
        scatter_shape(ctx, ctx.shape("indices"), ctx.shape("updates"), variable, "ref")
        return []

    @definition.kernel("cpu")
    def _kernel(ctx, handle, indices, updates):
        state = _variable_of(ctx, handle)
        with state.lock:
            value = state.initialized_value()
            state.check_dtype(updates.dtype, "update")

            def stored() -> np.ndarray:  # called once every index is validated
                if state.journaled:
                    _journal_scatter(state, indices)
                return value
            scatter_on_cpu(ctx, value.shape, indices, updates, op, stored,
                           lambda: check_tensor_scatter_inputs(value, indices, updates))

    @definition.prepare("cpu")
    def _prepare(spec):
        return _lean_row_adder(spec, op, _kernel)

    @definition.lower("cpu")
    def _lower(spec):
        return _lower_row_scatter(spec, op)
    return definition


def _lower_row_scatter(spec, op: str) -> Lowering | None:
    """Whole rows at depth 1, bad ids an error: every id checked against the row count,
    then the rows written in place, in index order."""
    variable, index_shape, update_shape = _static_variable(spec), spec.shape(1), spec.shape(2)
    if variable is None or not index_shape or index_shape[-1] != 1 \
            or spec.attrs.get("bad_indices_policy", "") == "IGNORE":
        return None
    dtype, shape, rows, width = variable
    n = math.prod(index_shape[:-1])
    if n == 0 or update_shape != tuple(index_shape[:-1]) + shape[1:] \
            or spec.dtype(2) != dtype or not can_combine(op, dtype) \
            or (op != "update" and dtype.kind == "b"):
        return None
    loop, flag = scatter_loops.row_loop(op)
    return Lowering("\n".join([
        f"{{t}}f, {{t}}good = {{column}}(np.ascontiguousarray({{i1}}).reshape(-1), {rows})",
        "if not {t}good:",
        "    {ok} = False",
        "if {ok}:  # nothing is written when this step or one before it failed",
        f"    {{loop}}({{i0}}.reshape(({rows}, {width})), {{t}}f, "
        f"np.ascontiguousarray({{i2}}).reshape(({n}, {width})), {flag})"]),
        {"loop": loop, "column": scatter_loops.located_rows}, variables=(0,), writes=True)


def _lean_row_adder(spec, op: str, full: Callable) -> Callable | None:
    """The lean ``+=``/``-=`` of whole rows (index depth 1, error policy): one compiled
    call checks every id against the row count, then writes. Anything else goes to
    the full kernel, with its checks and errors: an id out of bounds (nothing was
    written), shapes or dtypes that do not fit, an uninitialized variable, a run that
    keeps an undo journal (a cluster's)."""
    dtype = np.dtype(spec.attrs["dtype"].as_numpy_dtype)
    index_shape = spec.shape(1)
    add = checked_row_adder(op, dtype)
    if add is None or not index_shape or index_shape[-1] != 1 \
            or spec.attrs.get("bad_indices_policy", "") == "IGNORE":
        return None
    rows_shape = index_shape[:-1]
    n = math.prod(rows_shape)
    if n == 0:
        return None

    def lean(ctx, handle, indices, updates):
        state = _variable_of(ctx, handle)
        with state.lock:
            value = state.value
            if value is not None and value.dtype == dtype and updates.dtype == dtype \
                    and value.ndim >= 1 and value.size and value.flags.c_contiguous \
                    and updates.shape == rows_shape + value.shape[1:] \
                    and not state.journaled \
                    and add(value.reshape(value.shape[0], -1),
                            np.ascontiguousarray(indices).reshape(-1),
                            np.ascontiguousarray(updates).reshape(n, -1)):
                return None
        return full(ctx, handle, indices, updates)
    return lean


ResourceScatterNdUpdate = _resource_scatter_op(
    "ResourceScatterNdUpdate", "update", VARIABLE_TYPES,
    "variable[indices[i, ..., :]] = updates[i, ...]; the last duplicate wins.")
ResourceScatterNdAdd = _resource_scatter_op(
    "ResourceScatterNdAdd", "add", NUMBER_TYPES + (bool_,),
    "variable[indices[i, ..., :]] += updates[i, ...]; duplicates accumulate in index order "
    "(bools OR, as TensorFlow's CPU kernel).")
ResourceScatterNdSub = _resource_scatter_op(
    "ResourceScatterNdSub", "sub", NUMBER_TYPES + (bool_,),
    "variable[indices[i, ..., :]] -= updates[i, ...]; duplicates accumulate in index order "
    "(bools XOR, as TensorFlow's CPU kernel).")
ResourceScatterNdMin = _resource_scatter_op(
    "ResourceScatterNdMin", "min", REAL_NUMBER_TYPES,
    "variable[indices[i, ..., :]] = min(itself, updates[i, ...]).")
ResourceScatterNdMax = _resource_scatter_op(
    "ResourceScatterNdMax", "max", REAL_NUMBER_TYPES,
    "variable[indices[i, ..., :]] = max(itself, updates[i, ...]).")


def _journal_scatter(state, indices: np.ndarray) -> None:
    """Save the rows a validated scatter into ``state`` is about to write in the run's undo
    journal (distributed runs keep one: runtime/resources.py); index tuples that
    ``bad_indices_policy="IGNORE"`` skips write nothing and are left out."""
    value = state.value
    depth = indices.shape[-1]
    if value.size == 0:
        return
    if depth == 0:
        state.journal_all()
        return
    dims = np.asarray(value.shape[:depth], np.int64)
    tuples = indices.reshape(-1, depth).astype(np.int64, copy=False)
    inside = np.all((tuples >= 0) & (tuples < dims), axis=1)
    offsets = np.ravel_multi_index(tuple(tuples[inside].T), value.shape[:depth])
    state.journal_rows(offsets, math.prod(value.shape[depth:]))


for _op in (VarHandleOp, ReadVariableOp, ResourceGather, AssignVariableOp, AssignAddVariableOp,
            AssignSubVariableOp, ResourceScatterNdUpdate, ResourceScatterNdAdd,
            ResourceScatterNdSub, ResourceScatterNdMin, ResourceScatterNdMax):
    _op.not_differentiable()  # gradients w.r.t. variables: graphflow/gradients.py


# -- optimizer steps -------------------------------------------------------------------------------
def _locked(*states):
    """Hold several variables' locks, always taken in name order (no deadlock)."""
    import contextlib
    stack = contextlib.ExitStack()
    for state in sorted(states, key=lambda s: s.name):
        stack.enter_context(state.lock)
    return stack


ResourceApplyAdagrad = register_op(
    "ResourceApplyAdagrad", inputs=["var: string", "accum: string", "lr: T", "grad: T"],
    attrs={"T": TypeAttr(tuple(t for t in NUMBER_TYPES if t.is_floating or t.is_complex))},
    stateful=True,
    doc="accum += grad * grad; var -= lr * grad / sqrt(accum) (TensorFlow's Adagrad), in place.")


def _check_slots(ctx) -> TensorShape:
    """Build-time checks shared by the Adagrad ops, where the handles tell: var and
    accum hold T and have one shape; lr is a scalar. Returns var's shape."""
    if not ctx.shape("lr").is_compatible_with(TensorShape([])):
        raise ctx.error(f"lr is not a scalar: {ctx.shape('lr')}")
    shapes = []
    for name in ("var", "accum"):
        known = handle_attrs(ctx.input(name))
        if known is None:
            shapes.append(TensorShape(None))
            continue
        if known[0] != ctx.attr("T"):
            raise ctx.error(f"{name} '{known[2]}' has dtype {known[0].name}, the update "
                            f"is {ctx.attr('T').name}")
        shapes.append(known[1])
    if not shapes[0].is_compatible_with(shapes[1]):
        raise ctx.error(f"var and accum do not have the same shape: {shapes[0]} {shapes[1]}")
    return shapes[0].merge_with(shapes[1])


def _check_slot_values(var, accum, value, acc, lr) -> None:
    """The same checks on the values, at run time (handles from anywhere, fed lr)."""
    if np.ndim(lr) != 0:
        raise InvalidArgumentError(f"lr is not a scalar: {debug_string(np.shape(lr))}")
    dtype = np.asarray(lr).dtype
    for state, stored in ((var, value), (accum, acc)):
        if stored.dtype != dtype:
            raise InvalidArgumentError(f"Variable '{state.name}' has dtype {stored.dtype}, "
                                       f"the update is {dtype}")
    if value.shape != acc.shape:
        raise InvalidArgumentError(f"var and accum do not have the same shape: "
                                   f"{debug_string(value.shape)} {debug_string(acc.shape)}")


@ResourceApplyAdagrad.shape_fn
def _adagrad_shape(ctx):
    """no outputs; lr is a scalar, var and accum hold T and have grad's shape."""
    var = _check_slots(ctx)
    if not var.is_compatible_with(ctx.shape("grad")):
        raise ctx.error(f"var and grad do not have the same shape: {var} {ctx.shape('grad')}")
    return []


@ResourceApplyAdagrad.kernel("cpu")
def _apply_adagrad(ctx, var, accum, lr, grad):
    v, a = _variable_of(ctx, var), _variable_of(ctx, accum)
    with _locked(v, a):
        value, acc = v.initialized_value(), a.initialized_value()
        _check_slot_values(v, a, value, acc, lr)
        for state in (v, a):
            _check_same_shape(state, grad)
        for state in (v, a):
            state.journal_all()
        acc += grad * grad
        value -= lr * grad / np.sqrt(acc)


ResourceSparseApplyAdagrad = register_op(
    "ResourceSparseApplyAdagrad",
    inputs=["var: string", "accum: string", "lr: T", "grad: T", "indices: Tindices"],
    attrs={"T": TypeAttr(tuple(t for t in NUMBER_TYPES if t.is_floating or t.is_complex)),
           "Tindices": TypeAttr((int32, int64))},
    stateful=True,
    doc="Adagrad on the rows `indices` only: duplicate rows' gradients are summed first "
        "(as TensorFlow's optimizer does), then accum[i] += g*g, var[i] -= lr*g/sqrt(accum[i]).")


@ResourceSparseApplyAdagrad.shape_fn
def _sparse_adagrad_shape(ctx):
    """no outputs; lr is a scalar, var and accum hold T and have one shape (rank >= 1),
    indices is 1-D, grad is [len(indices)] + var.shape[1:]."""
    var = _check_slots(ctx)
    if var.rank == 0:
        raise ctx.error("var must be at least 1 dimensional")
    indices = ctx.shape("indices")
    if not indices.is_compatible_with(TensorShape([None])):
        raise ctx.error(f"indices must be one-dimensional, got {indices}")
    if var.rank is not None and indices.rank is not None and \
            not ctx.shape("grad").is_compatible_with(indices.concatenate(var[1:])):
        raise ctx.error(f"grad must be [len(indices)] + var.shape[1:] = "
                        f"{indices.concatenate(var[1:])}, got {ctx.shape('grad')}")
    return []


@ResourceSparseApplyAdagrad.kernel("cpu")
def _sparse_apply_adagrad(ctx, var, accum, lr, grad, indices):
    v, a = _variable_of(ctx, var), _variable_of(ctx, accum)
    with _locked(v, a):
        value, acc = v.initialized_value(), a.initialized_value()
        _check_slot_values(v, a, value, acc, lr)
        if value.ndim < 1:
            raise InvalidArgumentError("var must be at least 1 dimensional")
        if indices.ndim != 1:
            raise InvalidArgumentError(f"indices must be one-dimensional, got "
                                       f"{debug_string(indices.shape)}")
        if grad.shape != indices.shape + value.shape[1:]:
            raise InvalidArgumentError(
                f"grad must be [len(indices)] + var.shape[1:] = "
                f"{debug_string(indices.shape + value.shape[1:])}, got {debug_string(grad.shape)}")
        bad = (indices < 0) | (indices >= value.shape[0])
        if bad.any():  # checked before anything is written
            i = int(np.argmax(bad))
            raise InvalidArgumentError(f"Index {int(indices[i])} at offset {i} in indices is out "
                                       f"of range [0, {value.shape[0]})")
        rows, position = np.unique(indices, return_inverse=True)
        for state in (v, a):
            state.journal_rows(rows, math.prod(value.shape[1:]))
        summed = np.zeros((len(rows),) + value.shape[1:], value.dtype)
        np.add.at(summed, position.reshape(-1), grad)
        acc[rows] += summed * summed
        value[rows] -= lr * summed / np.sqrt(acc[rows])


for _op in (ResourceApplyAdagrad, ResourceSparseApplyAdagrad):
    _op.not_differentiable()


# reads have no effect: a gradient that recomputes a branch or loop body may run them again
for _read in (VarHandleOp, ReadVariableOp, ResourceGather):
    _read.idempotent = True
for _read in (ReadVariableOp, ResourceGather):
    _read.reads_variable = True  # a gradient w.r.t. the variable sums over these
VarHandleOp.hoistable = True  # no value read, never fails: before a segment, not ending it


# TensorFlow's op of the same name in a GraphDef, both ways (graphflow/interop/)
same_as_tf(VarHandleOp, defaults={"container": ("string", ""), "debug_name": ("string", ""),
                                "allowed_devices": ("list(string)", ())})
same_as_tf(ReadVariableOp, "AssignAddVariableOp", "AssignSubVariableOp")
same_as_tf("AssignVariableOp", defaults={"validate_shape": ("bool", False)})
same_as_tf(ResourceGather, defaults={"batch_dims": ("int", 0), "validate_indices": ("bool", True)})
same_as_tf("ResourceApplyAdagrad", "ResourceSparseApplyAdagrad",
           defaults={"use_locking": ("bool", False), "update_slots": ("bool", True)})
same_as_tf("ResourceScatterNdAdd", "ResourceScatterNdSub", "ResourceScatterNdMin",
           "ResourceScatterNdMax", "ResourceScatterNdUpdate", renamed={"dtype": "T"},
           defaults={"use_locking": ("bool", True)})
