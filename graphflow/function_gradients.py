"""Vector-Jacobian functions of graph functions, for the gradients of control flow.

``vjp_function(scope, f, wrt, outs)`` traces ``g(*f.inputs, *dys) -> dxs``: it copies
``f``'s body into a new function (:func:`inline`), then differentiates the copy with
``gf.gradients`` (so a loop or cond inside ``f`` brings its own gradient). The copy
recomputes ``f``'s intermediates from its inputs: exact for everything except ops with
effects, which a gradient may not replay; such a body is refused when the gradient is
built (UnimplementedError), as reads of variables are not.
"""
from __future__ import annotations

from typing import Sequence

from .builder import create_operation
from .errors import UnimplementedError
from .functions import Function, arguments_like, finish, new_func_graph, tracing
from .gradients import DIFFERENTIABLE_TYPES
from .graph import Operation, Output
from .indexed_slices import IndexedSlices
from .scope import Scope


def differentiable(dtype) -> bool:
    return dtype in DIFFERENTIABLE_TYPES


def dense(scope: Scope, grad, like: Output) -> Output:
    """An output gradient as a dense tensor (IndexedSlices densified, None as zeros)."""
    if grad is None:
        return scope.zeros_like(like)
    if isinstance(grad, IndexedSlices):
        from .indexed_slices import convert_to_tensor
        return convert_to_tensor(grad)
    return grad


def inline(scope: Scope, function: Function, inputs: Sequence[Output]) -> list[Output]:
    """``function``'s outputs computed from ``inputs`` by a copy of its ops built in
    ``scope`` (its stateful ops included, in their order)."""
    mapped: dict[Output, Output] = dict(zip(function.inputs, inputs))
    copies: dict[Operation, Operation] = {}
    fed = {p.op for p in function.inputs}
    for op in function.graph.operations():
        if op in fed:
            continue
        controls = [copies[c] for c in op.control_inputs if c in copies]
        args = [[mapped[x] for x in group] if isinstance(group, list) else mapped[group]
                for group in op.grouped_inputs()]
        attrs = {a: op.attrs[a] for a in op.op_def.user_attrs if a in op.attrs}
        copy = create_operation(scope.with_control_dependencies(controls), op.op_def,
                                tuple(args), attrs, name=op.name)
        copies[op] = copy
        mapped.update(zip(op.outputs, copy.outputs))
    return [mapped[o] for o in function.outputs]


def replayable(op: Operation) -> bool:
    """Whether running ``op`` again changes nothing: a stateless op, a read, or control
    flow whose functions are all replayable."""
    functions = [v for v in op.attrs.values() if isinstance(v, Function)]
    if functions:
        return all(replayable(c) for f in functions for c in f.control_outputs)
    return not op.op_def.stateful or op.op_def.idempotent


def _check_replayable(function: Function, what: str) -> None:
    for op in function.control_outputs:
        if not replayable(op):
            raise UnimplementedError(
                f"No gradient through {what}: its node '{op.name}' ({op.type}) has effects "
                f"(a variable update or a random draw), which a gradient would run again. "
                f"Move it out of the branch or body, or stop the gradient before it")


def vjp_function(scope: Scope, function: Function, wrt: Sequence[int], outs: Sequence[int],
                 name: str) -> Function:
    """``g(*inputs, *dys) -> dxs``: the gradients of ``function``'s outputs ``outs``
    (weighted by ``dys``) w.r.t. its inputs ``wrt``; zeros where none flows."""
    from .gradients import gradients_or_none
    _check_replayable(function, f"'{name}'")
    graph = new_func_graph(scope, name.replace("/", "_") + "_vjp")
    xs = arguments_like(graph, [(p.dtype, p.shape) for p in function.inputs])
    dys = arguments_like(graph, [(function.outputs[k].dtype, function.outputs[k].shape)
                                 for k in outs], prefix="dy")
    with tracing(graph):
        inner = Scope(graph)
        ys = inline(inner.with_sub_scope("forward"), function, xs)
        targets = [ys[k] for k in outs]
        grads = gradients_or_none(targets, [xs[k] for k in wrt], grad_ys=dys) if targets \
            else [None] * len(wrt)
        results = [dense(inner, g, xs[k]) for g, k in zip(grads, wrt)]
        results = [inner.identity(r) if r.graph is not graph or r.op.type == "Placeholder"
                   else r for r in results]
    return finish(graph, xs + dys, results, captured=[])
