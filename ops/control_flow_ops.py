"""Control flow: If / StatelessIf and While / StatelessWhile over graph functions.

TensorFlow 2's functional control flow: a branch or a loop's cond and body is a
``gf.Function`` (graphflow/functions.py) held in an attr, and the op runs it as a
plan of its own through ``ctx.functions`` (the runtime's runner,
runtime/functions.py): one call of a prepared plan per branch taken or per
iteration, no Python round trip beyond it. ``scope.cond`` and ``scope.while_loop``
(graphflow/control_flow.py) trace the Python functions and build these ops.

Gradients: an If's is an If over the branches' vector-Jacobian functions (each
recomputes its branch from the inputs). A While's forward pass is re-run as a
``_WhileRecorded`` twin that keeps every iteration's loop variables (TF 2's
while_v2 accumulators, kept natively: one array per variable), and ``_WhileGrad``
walks the iterations backwards calling the body's vector-Jacobian function. A plan
running both a While and its recorded twin runs the loop once (runtime/
control_flow.py). Recomputing a body is exact for everything but ops with effects:
a branch or body that updates a variable or draws random numbers has no gradient
here (an UnimplementedError when the gradient is built).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from graphflow.dtypes import ALL_TYPES
from graphflow.errors import InvalidArgumentError, OpError, UnimplementedError
from graphflow.function_gradients import (dense, differentiable, gradient_type, reads_variable,
                                          vjp_function)
from graphflow.registry import (FuncAttr, IntAttr, IntListAttr, ShapeListAttr, TypeAttr,
                                TypeListAttr, register_op)
from graphflow.shapes import TensorShape, most_specific_compatible_shape, within_invariant

_IF_ATTRS = {"Tcond": TypeAttr(ALL_TYPES), "Tin": TypeListAttr(), "Tout": TypeListAttr(),
             "then_branch": FuncAttr(), "else_branch": FuncAttr(),
             "output_shapes": ShapeListAttr(())}
_IF_DOC = ("then_branch(*input) if cond else else_branch(*input): cond is a scalar (a "
           "number or string counts as true when non-zero / non-empty).")

If = register_op("If", inputs=["cond: Tcond", "input: Tin"], outputs=["output: Tout"],
                 attrs=dict(_IF_ATTRS), stateful=True,
                 doc=_IF_DOC + " Its branches may have effects (variable updates).")
StatelessIf = register_op("StatelessIf", inputs=["cond: Tcond", "input: Tin"],
                          outputs=["output: Tout"], attrs=dict(_IF_ATTRS),
                          doc=_IF_DOC + " Its branches have no effects.")

_WHILE_ATTRS = {"T": TypeListAttr(), "cond": FuncAttr(), "body": FuncAttr(),
                "output_shapes": ShapeListAttr(()), "parallel_iterations": IntAttr(10, minimum=1)}
_WHILE_DOC = ("input while cond(*input): input = body(*input); the loop variables keep "
              "their dtypes, and their shapes stay within output_shapes (the shape invariants).")

While = register_op("While", inputs=["input: T"], outputs=["output: T"],
                    attrs=dict(_WHILE_ATTRS), stateful=True,
                    doc=_WHILE_DOC + " Its cond and body may have effects.")
StatelessWhile = register_op("StatelessWhile", inputs=["input: T"], outputs=["output: T"],
                             attrs=dict(_WHILE_ATTRS),
                             doc=_WHILE_DOC + " Its cond and body have no effects.")

_WhileRecorded = register_op(
    "_WhileRecorded", inputs=["input: T"],
    outputs=["output: T", "history: Thist", "index: int64"],
    attrs={**_WHILE_ATTRS, "Thist": TypeListAttr(), "recorded": IntListAttr()},
    doc="A While that also keeps the loop variables `recorded` of every iteration (each one's "
        "values flattened and concatenated) and their shapes (index), for its gradient.")

_WhileGrad = register_op(
    "_WhileGrad", inputs=["initial: T", "history: Thist", "index: int64", "dys: Tgrad"],
    outputs=["grads: Tgrad"],
    attrs={"T": TypeListAttr(), "Thist": TypeListAttr(), "Tgrad": TypeListAttr(),
           "vjp": FuncAttr(), "recorded": IntListAttr(), "differentiable": IntListAttr()},
    doc="The gradient of a While from its recorded iterations: the body's vector-Jacobian "
        "function vjp(*loop_vars, *dys) -> dxs, applied from the last iteration to the first.")


# -- shape functions: the functions' signatures, checked at build time -----------------------
def _check_signature(ctx, function, role: str, types: Sequence, outputs: Sequence | None):
    """A function attr must take ``types`` (and return ``outputs``, if given)."""
    if tuple(function.input_types) != tuple(types):
        raise ctx.error(f"{role} takes ({_names(function.input_types)}), but the op passes "
                        f"({_names(types)})")
    if outputs is not None and tuple(function.output_types) != tuple(outputs):
        raise ctx.error(f"{role} returns ({_names(function.output_types)}), but the op's "
                        f"outputs are ({_names(outputs)})")


def _names(types) -> str:
    return ", ".join(t.name for t in types)


def _declared_shapes(ctx, count: int, default: Sequence[TensorShape]) -> list[TensorShape]:
    shapes = list(ctx.attr("output_shapes"))
    if not shapes:
        return list(default)
    if len(shapes) != count:
        raise ctx.error(f"output_shapes has {len(shapes)} shapes for {count} outputs")
    return shapes


@If.shape_fn
@StatelessIf.shape_fn
def _if_shape(ctx):
    """output_shapes, else the shape both branches agree on (unknown dims where they differ)."""
    tin, tout = ctx.attr("Tin"), ctx.attr("Tout")
    then_fn, else_fn = ctx.attr("then_branch"), ctx.attr("else_branch")
    _check_signature(ctx, then_fn, "then_branch", tin, tout)
    _check_signature(ctx, else_fn, "else_branch", tin, tout)
    pred = ctx.shape("cond")
    if pred.rank is not None and pred.rank != 0:
        raise ctx.error(f"The predicate (cond) of If must be a scalar, but it has shape {pred}")
    common = [most_specific_compatible_shape(a, b) for a, b in zip(then_fn.output_shapes, else_fn.output_shapes)]
    return _declared_shapes(ctx, len(tout), common)


def _while_shapes(ctx, types) -> list[TensorShape]:
    cond, body = ctx.attr("cond"), ctx.attr("body")
    _check_signature(ctx, cond, "cond", types, None)
    _check_signature(ctx, body, "body", types, types)
    if len(cond.outputs) != 1:
        raise ctx.error(f"cond must return one (scalar) tensor, it returns {len(cond.outputs)}")
    return _declared_shapes(ctx, len(types), [o.shape for o in ctx.input("input")])


@While.shape_fn
@StatelessWhile.shape_fn
def _while_shape(ctx):
    """output_shapes (the loop's shape invariants), else the inputs' shapes."""
    return _while_shapes(ctx, ctx.attr("T"))


@_WhileRecorded.shape_fn
def _recorded_shape(ctx):
    """the While's, then one flat history per recorded variable and the index."""
    shapes = _while_shapes(ctx, ctx.attr("T"))
    return shapes + [TensorShape([None])] * len(ctx.attr("recorded")) + [TensorShape([None])]


@_WhileGrad.shape_fn
def _while_grad_shape(ctx):
    """the shapes of the differentiated loop variables' initial values (a variable's
    handle: the variable's shape, as its dy)."""
    return [dy.shape for dy in ctx.input("dys")]


# -- kernels ----------------------------------------------------------------------------------
def _runner(ctx):
    runner = ctx.functions
    if runner is None:
        raise UnimplementedError(f"{ctx.op_type} runs its functions in a Session's plan")
    return runner


def truth(value, what: str) -> bool:
    """A predicate's value as a bool: a scalar, true when non-zero (non-empty string)."""
    array = np.asarray(value)
    if array.ndim != 0:
        raise InvalidArgumentError(f"The predicate ({what}) must be a scalar, but it has shape "
                                   f"[{','.join(map(str, array.shape))}]")
    item = array.item()
    return bool(len(item)) if isinstance(item, (bytes, str)) else bool(item)


@If.kernel("cpu")
@StatelessIf.kernel("cpu")
def _if_kernel(ctx, cond, inputs):
    taken = "then_branch" if truth(cond, "cond of If") else "else_branch"
    return list(_runner(ctx).caller(ctx.attrs[taken])(list(inputs)))


class LoopRun:
    """One run of a While's loop: cond and body called through the runner, each
    iteration's results checked against the shape invariants, errors naming the
    iteration."""

    def __init__(self, ctx):
        runner = _runner(ctx)
        self.node = ctx.node_name
        self.cond = runner.caller(ctx.attrs["cond"])
        self.body = runner.caller(ctx.attrs["body"])
        # a body output whose static shape is within its invariant always is (shape functions
        # hold for every value): only the others are checked, each iteration
        body = ctx.attrs["body"]
        self.checked = [(k, shape) for k, (out, shape) in enumerate(
            zip(body.outputs, ctx.attrs["output_shapes"])) if not within_invariant(out.shape, shape)]
        self.iteration = 0

    def proceed(self, values: list) -> bool:
        try:
            return truth(self.cond(values)[0], "the result of the while loop's cond")
        except OpError as e:
            raise in_iteration(e, self.node, self.iteration, "cond") from None

    def step(self, values: list) -> list:
        try:
            new = list(self.body(values))
        except OpError as e:
            raise in_iteration(e, self.node, self.iteration, "body") from None
        for k, shape in self.checked:
            value = new[k]
            if not shape.is_compatible_with(TensorShape(np.shape(value))):
                raise InvalidArgumentError(
                    f"Loop variable {k} of the while loop has shape "
                    f"[{','.join(map(str, np.shape(value)))}] after iteration {self.iteration}, "
                    f"which its shape invariant {shape} does not allow", self.node, "While")
        self.iteration += 1
        return new


def in_iteration(err: OpError, loop: str, iteration: int, role: str) -> OpError:
    """``err`` (from a node of the loop's cond or body) saying which loop and iteration."""
    where = f"in iteration {iteration} of the while loop '{loop}' ({role})"
    if err.node_name is None:
        return err.with_node(loop, "While", detail=where)
    detail = f"{err.detail}; {where}" if err.detail else where
    new = err.__class__(err.message, err.node_name, err.op_type, site=err.site, detail=detail)
    new.__cause__ = err
    return new


@While.kernel("cpu")
@StatelessWhile.kernel("cpu")
def _while_kernel(ctx, inputs):
    compiled = _runner(ctx).compiled_loop(ctx.attrs["cond"], ctx.attrs["body"])
    if compiled is not None:  # one compiled loop (runtime/compiled_loops.py), once it is
        values = compiled.run(inputs)
        if values is not None:
            return values
    loop, values = LoopRun(ctx), list(inputs)
    while loop.proceed(values):
        values = loop.step(values)
    return values


@_WhileRecorded.kernel("cpu")
def _while_recorded_kernel(ctx, inputs):
    loop, values = LoopRun(ctx), list(inputs)
    recorded = ctx.attrs["recorded"]
    kept: list[list] = [[] for _ in recorded]
    while loop.proceed(values):
        for slot, k in zip(kept, recorded):
            slot.append(np.asarray(values[k]))
        values = loop.step(values)
    types = ctx.attrs["Thist"]
    history = [flat_history(slot, t.as_numpy_dtype) for slot, t in zip(kept, types)]
    return values + history + [history_index(kept, loop.iteration)]


def flat_history(arrays: list, dtype) -> np.ndarray:
    if not arrays:
        return np.zeros(0, dtype)
    return np.concatenate([a.reshape(-1) for a in arrays]).astype(dtype, copy=False)


def history_index(kept: list[list], iterations: int) -> np.ndarray:
    """``[iterations, then per recorded variable, per iteration: rank, *dims]``."""
    parts: list[int] = [iterations]
    for slot in kept:
        for a in slot:
            parts += [a.ndim, *a.shape]
    return np.array(parts, np.int64)


def unpack_history(flats: Sequence[np.ndarray], index: np.ndarray) -> tuple[int, list[list]]:
    """The iterations' arrays per recorded variable (views of the flat histories)."""
    iterations, pos = int(index[0]), 1
    per_var = []
    for flat in flats:
        arrays, start = [], 0
        for _ in range(iterations):
            rank = int(index[pos])
            shape = tuple(int(d) for d in index[pos + 1:pos + 1 + rank])
            pos += 1 + rank
            size = int(np.prod(shape, dtype=np.int64))
            arrays.append(flat[start:start + size].reshape(shape))
            start += size
        per_var.append(arrays)
    return iterations, per_var


@_WhileGrad.kernel("cpu")
def _while_grad_kernel(ctx, initial, history, index, dys):
    vjp = _runner(ctx).caller(ctx.attrs["vjp"])
    recorded, differentiable = ctx.attrs["recorded"], ctx.attrs["differentiable"]
    iterations, kept = unpack_history(history, index)
    grads = list(dys)
    values = list(initial)
    for t in range(iterations - 1, -1, -1):
        for arrays, k in zip(kept, recorded):
            values[k] = arrays[t]
        try:
            grads = list(vjp(values + grads))
        except OpError as e:
            raise in_iteration(e, ctx.node_name, t, "gradient of the body") from None
    return [np.asarray(g) for g in grads] if differentiable else []


# -- gradients ---------------------------------------------------------------------------------
@If.gradient
@StatelessIf.gradient
def _if_grad(g, *grads):
    """An If over the branches' vector-Jacobian functions: d(cond) is None."""
    op = g.op
    inputs = list(op.inputs[1:])
    functions = [op.attrs["then_branch"], op.attrs["else_branch"]]
    wrt = [k for k, x in enumerate(inputs) if differentiable(x.dtype)
           or any(reads_variable(f, k) for f in functions)]
    outs = [k for k, o in enumerate(op.outputs) if differentiable(o.dtype)]
    dys = [dense(g.scope, grads[k], op.outputs[k]) for k in outs]
    out = [None] * len(op.inputs)
    if not wrt or not outs:
        return out
    branches = [vjp_function(g.scope, f, wrt, outs, f"{op.name}/{b}")
                for f, b in zip(functions, ("then_branch", "else_branch"))]
    types = [gradient_type(inputs[k]) for k in wrt]
    results = g.scope.create_op(
        op.type, op.inputs[0], inputs + dys, Tout=[t for t, _ in types],
        then_branch=branches[0], else_branch=branches[1],
        output_shapes=[shape for _, shape in types], name=f"{op.name}_grad")
    for j, k in enumerate(wrt):
        out[1 + k] = results[j]
    return out


def _while_grad(g, *grads):
    """The recorded twin, then _WhileGrad over its iterations."""
    op = g.op
    types = list(op.attrs["T"])
    body = op.attrs["body"]
    initial = list(op.inputs)
    wrt = [k for k, t in enumerate(types) if differentiable(t) or reads_variable(body, k)]
    if not wrt:
        return [None] * len(initial)
    recorded = [k for k, o in enumerate(body.outputs) if o is not body.inputs[k]]
    twin = g.scope.create_op(
        "_WhileRecorded", initial, cond=op.attrs["cond"], body=body,
        output_shapes=list(op.attrs["output_shapes"]),
        parallel_iterations=op.attrs["parallel_iterations"],
        Thist=[types[k] for k in recorded], recorded=recorded, name=f"{op.name}_recorded")
    n = len(types)
    history, index = twin[n:n + len(recorded)], twin[n + len(recorded)]
    dys = [dense(g.scope, grads[k], op.outputs[k], gradient_type(initial[k])) for k in wrt]
    vjp = vjp_function(g.scope, body, wrt, wrt, f"{op.name}/body")
    results = g.scope.create_op("_WhileGrad", initial, history, index, dys, vjp=vjp,
                                recorded=recorded, differentiable=wrt, name=f"{op.name}_grad")
    out = [None] * len(initial)
    for j, k in enumerate(wrt):
        out[k] = results[j]
    return out


While.gradient(_while_grad)
StatelessWhile.gradient(_while_grad)


@_WhileRecorded.gradient
def _recorded_grad(g, *grads):
    """As its While's: the histories are no one's to differentiate."""
    return _while_grad(g, *grads[:len(g.op.attrs["T"])])
