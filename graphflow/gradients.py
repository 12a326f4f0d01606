"""Reverse-mode differentiation of graphs, as TensorFlow 1.x's ``tf.gradients``.

``gradients(ys, xs)`` adds the gradient subgraph to the graph of ``ys``, under a
``gradients/`` name scope, and returns one entry per x: an Output, a
``gf.IndexedSlices`` (the gradient of a gather), or None where no gradient
flows (no path, a path through integer tensors or a non-differentiable op).

The walk is TensorFlow's: the ops between xs and ys are visited from the ys
back (the graph's insertion order is topological, so its reverse is a valid
order); the gradients that reach each output are summed, and the op's rule,
declared next to its kernels with ``@Op.gradient``, turns them into gradients
of its inputs. Gradient graphs are ordinary graphs: they prune, place, fold,
fuse and serialize, and can be differentiated again.

Complex gradients follow TensorFlow's convention: for a real loss L, the
gradient w.r.t. z is dL/dRe(z) + i dL/dIm(z), so that, for y = f(z) and the
loss sum(Re(conj(v) * y)), the gradient is conj(f'(z)) * v where f is holomorphic.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Sequence

from .builder import as_operand
from .dtypes import DType, complex64, complex128, float16, float32, float64, int64, string
from .errors import InternalError, InvalidArgumentError
from .functions import outer_source
from .graph import Graph, Operation, Output
from .indexed_slices import IndexedSlices, concat_slices
from .registry import NOT_DIFFERENTIABLE
from .scope import Scope
from .shapes import TensorShape
from .traversal import reachable
from .variables import Variable

#: The dtypes gradients flow through (TensorFlow's ``_IsTrainable``).
DIFFERENTIABLE_TYPES = (float16, float32, float64, complex64, complex128)

Gradient = "Output | IndexedSlices | None"


def is_differentiable(t: Output) -> bool:
    return t.dtype in DIFFERENTIABLE_TYPES


def is_handle(t: Output) -> bool:
    """A variable's handle (a VarHandleOp's, or a function's placeholder standing for
    one): as an x, it stands for the variable's reads inside control flow (a loop body's,
    a branch's), whose gradients the control-flow op's rule sums."""
    return t.dtype == string and outer_source(t).op.type == "VarHandleOp"


def variable_type(handle: Output) -> tuple[DType, TensorShape]:
    """The dtype and shape of the variable behind ``handle`` (see :func:`is_handle`)."""
    attrs = outer_source(handle).op.attrs
    return attrs["dtype"], attrs["shape"]


def _is_target(t: Output) -> bool:
    return is_differentiable(t) or is_handle(t)


class GradContext:
    """What a gradient rule sees besides the output gradients.

    ``op`` is the forward Operation; ``scope`` builds the gradient's ops, named
    ``gradients/<op>_grad/...`` and requesting the forward op's device.
    """

    __slots__ = ("op", "scope")

    def __init__(self, op: Operation, scope: Scope):
        self.op = op
        self.scope = scope

    @property
    def inputs(self) -> tuple[Output, ...]:
        return self.op.inputs

    @property
    def outputs(self) -> tuple[Output, ...]:
        return self.op.outputs

    def attr(self, name: str) -> Any:
        return self.op.get_attr(name)

    def __repr__(self) -> str:
        return f"<GradContext of '{self.op.name}' ({self.op.type})>"


def gradients(ys: Any, xs: Any, grad_ys: Any = None, stop_gradients: Any = None,
              name: str = "gradients") -> list:
    """The sum over ``ys`` of the gradients of ``sum(y * grad_y)`` w.r.t. each x.

    ``ys``, ``xs``: an Operand or a list of them, all in one graph.
    ``grad_ys``: one per y (Outputs or values of y's dtype and shape); ones by default.
    ``stop_gradients``: tensors held constant (no gradient flows through them).
    Returns a list with one entry per x: an Output, an IndexedSlices or None. No y
    depending on any x is an InvalidArgumentError (``compute_gradients`` gives Nones).
    """
    return _gradients(ys, xs, grad_ys, stop_gradients, name, require_path=True)


def gradients_or_none(ys: Any, xs: Any, grad_ys: Any = None, name: str = "gradients") -> list:
    """As :func:`gradients`, with None for every x when no y depends on any x."""
    return _gradients(ys, xs, grad_ys, None, name, require_path=False)


def _gradients(ys: Any, xs: Any, grad_ys: Any, stop_gradients: Any, name: str,
               require_path: bool) -> list:
    ys = _tensors(ys, "ys")
    targets, xs = _resolve_xs(xs)
    graph = ys[0].graph
    _check_same_graph(graph, ys, xs)
    # tensors, not ops: another output of a held tensor's op still flows
    held = set(_stop_tensors(graph, stop_gradients))
    root = Scope(graph).with_sub_scope(name)
    walk = _BackwardWalk(root, _ops_between(graph, [x.op for x in xs], [y.op for y in ys], held),
                         held, set(xs), first_new_op=len(graph.operations()))
    if require_path:
        _check_every_y_reaches_an_x(graph, ys, xs, walk.between)
    for y, grad_y in zip(ys, _grad_ys(root, ys, grad_ys)):
        walk.pending[y].append(grad_y)
    for op in sorted(walk.between, key=lambda o: o.position, reverse=True):
        walk.visit(op)
    results = [walk.total(x, root) if _is_target(x) else None for x in xs]
    return _per_x(root, targets, results)


def _resolve_xs(xs: Any) -> tuple[list, list[Output]]:
    """Per x the user passed, a Variable's reads (else None); and the flat list of tensors
    to differentiate against, a Variable standing for its reads."""
    given = xs if isinstance(xs, (list, tuple)) else [xs]
    targets = [variable_reads(x.handle, x.name) if isinstance(x, Variable)
               else variable_reads(x, x.name) if isinstance(x, Output) and is_handle(x)
               else None for x in given]
    flat = [t for x, reads in zip(given, targets)
            for t in (reads if reads is not None else _tensors(x, "xs"))]
    if not flat and not targets:
        raise InvalidArgumentError("gradients: xs is empty")
    return targets, flat


def _check_same_graph(graph: Graph, ys: list[Output], xs: list[Output]) -> None:
    for what, group in (("ys", ys), ("xs", xs)):
        for t in group:
            if t.graph is not graph:
                raise InvalidArgumentError(
                    f"gradients: {what} tensor '{t.name}' is from another graph than "
                    f"'{ys[0].name}'")


def _stop_tensors(graph: Graph, stop_gradients: Any) -> list[Output]:
    stops = _tensors(stop_gradients, "stop_gradients", allow_empty=True) \
        if stop_gradients is not None else []
    for t in stops:
        if t.graph is not graph:
            raise InvalidArgumentError(
                f"gradients: stop_gradients tensor '{t.name}' is from another graph")
    return stops


class _BackwardWalk:
    """One gradients() call's walk: the gradients pending at each tensor, summed once when
    first read, and the step that turns an op's output gradients into its inputs'."""

    def __init__(self, root: Scope, between: set[Operation], held: set[Output],
                 xs: set[Output], first_new_op: int):
        self.root, self.between, self.held, self.xs = root, between, held, xs
        self.first_new_op = first_new_op  # ops from here on are this call's
        self.pending: dict[Output, list] = defaultdict(list)
        self.summed: dict[Output, Any] = {}

    def total(self, t: Output, scope: Scope):
        """The gradient of ``t``: what reached it, summed (once)."""
        if t not in self.summed:
            self.summed[t] = _sum_gradients(self.pending.pop(t, []), t, scope)
        return self.summed[t]

    def visit(self, op: Operation) -> None:
        """Apply ``op``'s gradient rule when a gradient reached it and one is wanted."""
        # A held tensor still gets its own gradient (it may be an x); the walk stops there.
        wanted = [i for i, t in enumerate(op.inputs) if (is_differentiable(t) and (
            t.op in self.between and t not in self.held)) or (t in self.xs and _is_target(t))]
        flowing = [o for o in op.outputs if is_differentiable(o) and o not in self.held]
        if not wanted or not any(o in self.pending for o in flowing):
            return
        rule = _gradient_rule(op)
        if rule is None:
            return
        scope = self.root.with_sub_scope(f"{op.name}_grad").beside(op)
        out_grads = [self.total(o, scope) if o in flowing else None for o in op.outputs]
        out_grads = _fill_missing(scope, op, out_grads)
        if not getattr(rule, "takes_indexed_slices", False):
            out_grads = [g.as_output() if isinstance(g, IndexedSlices) else g
                         for g in out_grads]
        in_grads = rule(GradContext(op, scope), *out_grads)
        _check_rule_result(op, in_grads)
        for i in wanted:
            if in_grads[i] is not None:
                _refine_shape(in_grads[i], op.inputs[i], self.first_new_op)
                self.pending[op.inputs[i]].append(in_grads[i])


def _gradient_rule(op: Operation):
    """``op``'s gradient rule; None for a non-differentiable op; a LookupError if none
    was declared."""
    rule = op.op_def.gradient_function
    if rule is NOT_DIFFERENTIABLE:
        return None
    if rule is None:
        raise LookupError(
            f"No gradient defined for operation '{op.name}' (op type: {op.type}); declare "
            f"one with @{op.type}.gradient, or op_def.not_differentiable(). Built at "
            f"{op.site}")
    return rule


# -- variables -------------------------------------------------------------------------------
def variable_reads(handle: Output, name: str) -> list[Output]:
    """The Outputs through which the value of the variable behind ``handle`` enters the
    graph: its dense reads, its sparse reads (ResourceGather), and ``handle`` itself when
    a control-flow op reads the variable inside a branch or body (that op's gradient
    rule then gives the gradient of those reads, w.r.t. the variable's value)."""
    consumers = handle.consumers()
    reads = [c.outputs[0] for c in consumers if c.op_def.reads_variable]
    if any(_reads_inside_functions(c, handle) for c in consumers):
        reads.append(handle)
    return reads


def _reads_inside_functions(op: Operation, handle: Output) -> bool:
    """Whether control-flow ``op`` reads the variable of ``handle`` in one of its
    functions (through the capture placeholder the handle is fed to)."""
    from .functions import Function
    functions = [f for f in op.attrs.values() if isinstance(f, Function)]
    positions = [k for k, x in enumerate(op.inputs) if x is handle]
    for f in functions:
        offset = len(f.inputs) - len(op.inputs)  # an If's inputs start with its cond
        for k in positions:
            inner = f.inputs[k + offset] if 0 <= k + offset < len(f.inputs) else None
            if inner is not None and any(
                    c.op_def.reads_variable or
                    _reads_inside_functions(c, inner) for c in inner.consumers()):
                return True
    return False


def _per_x(scope: Scope, targets: list, results: list) -> list:
    """One gradient per x the user passed: a Variable's is the sum over its reads, an
    IndexedSlices when every read that got a gradient is a sparse one."""
    it = iter(results)
    out = []
    for reads in targets:
        if reads is None:
            out.append(next(it))
            continue
        parts = []
        for read in reads:
            g = next(it)
            if g is None:
                continue
            if read.op.type == "ResourceGather":
                g = _gather_slices(scope, read, g)
            parts.append(g)
        out.append(_sum_gradients(parts, reads[0], scope) if parts else None)
    return out


def _gather_slices(scope: Scope, read: Output, grad) -> IndexedSlices:
    """The gradient of rows gathered from a variable, w.r.t. the variable. Rows of a 1-D
    read (an IndexedSlices from a gather of the read) map through its ids; other
    IndexedSlices are densified first."""
    handle, indices = read.op.inputs
    shape = variable_type(handle)[1].as_list()
    s = scope.with_sub_scope(f"{read.op.name}_grad").beside(read)
    if isinstance(grad, IndexedSlices):
        if indices.shape.rank == 1:
            rows = s.gather_nd(indices, s.expand_dims(grad.indices, -1), name="Indices")
            return IndexedSlices(grad.values, rows, s.constant(
                shape, dtype=indices.dtype, name="DenseShape"))
        grad = grad.as_output()
    values = s.reshape(grad, [-1] + shape[1:], name="Values")
    flat = s.reshape(indices, [-1], name="Indices")
    return IndexedSlices(values, flat, s.constant(shape, dtype=indices.dtype, name="DenseShape"))


# -- the walk ----------------------------------------------------------------------------
def _ops_between(graph: Graph, from_ops: list[Operation], to_ops: list[Operation],
                 held: set[Output]) -> set[Operation]:
    """Ops on a data path from an x's op to a y's op (both ends included) that passes
    through no held tensor."""
    consumers: dict[Operation, list[Operation]] = defaultdict(list)
    for op in graph.operations():
        for t in op.inputs:
            consumers[t.op].append(op)
    reached = reachable(from_ops, consumers.__getitem__)
    return reachable([op for op in to_ops if op in reached],
                     lambda op: (t.op for t in op.inputs if t.op in reached and t not in held))


def _check_every_y_reaches_an_x(graph: Graph, ys: list[Output], xs: list[Output],
                                between: set) -> None:
    """No y depending on any x is a mistake worth naming; a dependence only through
    held tensors (stop_gradients) is not: those xs get None, as in TensorFlow."""
    x_ops = {x.op for x in xs}
    if not x_ops & between and not x_ops & _ops_between(graph, list(x_ops),
                                                         [y.op for y in ys], set()):
        names = ", ".join(f"'{y.name}'" for y in ys)
        raise InvalidArgumentError(
            f"gradients: {names} does not depend on any of xs "
            f"({', '.join(repr(x.name) for x in xs)}): there is no path to differentiate")


def _grad_ys(scope: Scope, ys: list[Output], grad_ys: Any) -> list:
    if grad_ys is None:
        grad_ys = [None] * len(ys)
    elif not isinstance(grad_ys, (list, tuple)):
        grad_ys = [grad_ys]
    if len(grad_ys) != len(ys):
        raise InvalidArgumentError(
            f"gradients: {len(grad_ys)} grad_ys for {len(ys)} ys; pass one per y")
    result = []
    for y, g in zip(ys, grad_ys):
        if g is None:
            result.append(scope.with_device(y.op.device).ones_like(y, name=f"grad_ys_{len(result)}"))
            continue
        grad = as_operand(g)
        if grad is None:
            grad = scope.constant(g, dtype=y.dtype, name=f"grad_ys_{len(result)}")
        elif grad.graph is not y.graph:
            raise InvalidArgumentError(f"gradients: grad_ys tensor '{grad.name}' is from "
                                       f"another graph than '{y.name}'")
        if grad.dtype != y.dtype:
            raise TypeError(f"gradients: grad_ys for '{y.name}' has dtype {grad.dtype.name}; "
                            f"'{y.name}' has dtype {y.dtype.name}")
        if not grad.shape.is_compatible_with(y.shape):
            raise InvalidArgumentError(
                f"gradients: grad_ys for '{y.name}' has shape {grad.shape}, which is not "
                f"compatible with the shape {y.shape} of '{y.name}'")
        result.append(_checked_grad_y(scope, y, grad, len(result)))
    return result


def _checked_grad_y(scope: Scope, y: Output, grad: Output, k: int) -> Output:
    """``grad`` as it is when the static shapes settle that it has ``y``'s shape, else
    checked at run time (a fed grad_y of 5 elements for a [3] y, or [2,3] for a [3] y,
    was used as is: broadcast or silently summed)."""
    if grad.shape.is_fully_defined() and grad.shape == y.shape:
        return grad
    s = scope.with_sub_scope(f"grad_ys_{k}_check").beside(grad)
    # The check passes y's shape (a small host vector) on, and grad is reshaped to it
    # (no copy): grad itself never moves to where the check runs.
    y_shape = s.shape(y, out_type=int64)
    checked = s.create_op(
        "_AssertEqual", y_shape, s.shape(grad, out_type=int64), y_shape,
        message=f"gradients: grad_ys[{k}] ('{grad.name}') has shape {{x}} at run time; "
                f"it must have the shape {{y}} of '{y.name}'", name="GradYShape")
    out = s.reshape(grad, checked, name="GradY")
    out.shape = out.shape.merge_with(y.shape).merge_with(grad.shape)
    return out


def _fill_missing(scope: Scope, op: Operation, grads: list) -> list:
    """Zeros for the differentiable outputs that got no gradient while others did."""
    return [g if g is not None or not is_differentiable(o)
            else scope.zeros_like(o, name=f"zeros_{o.index}")
            for o, g in zip(op.outputs, grads)]


def _sum_gradients(parts: list, t: Output, scope: Scope):
    """One gradient from the gradients that reached ``t``: IndexedSlices concatenate
    when all are; otherwise everything is densified and added."""
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    if all(isinstance(p, IndexedSlices) for p in parts):
        return concat_slices(parts, scope.with_sub_scope("AggregateSlices"))
    dense = [p.as_output() if isinstance(p, IndexedSlices) else p for p in parts]
    add_n = getattr(scope, "add_n", None)
    like = dense[0] if is_handle(t) else t  # a handle's gradient has its variable's shape
    if add_n is not None and all(d.shape.is_compatible_with(like.shape) for d in dense):
        return add_n(dense, name="AddN")
    total = dense[0]
    for d in dense[1:]:
        total = scope.add(total, d, name="Add")
    return total


def _check_rule_result(op: Operation, grads: Any) -> None:
    where = f"the gradient rule of {op.type} (node '{op.name}')"
    if not isinstance(grads, (list, tuple)) or len(grads) != len(op.inputs):
        n = len(grads) if isinstance(grads, (list, tuple)) else type(grads).__name__
        raise InternalError(f"{where} returned {n} gradients for {len(op.inputs)} inputs")
    for i, (g, t) in enumerate(zip(grads, op.inputs)):
        if g is None:
            continue
        if not isinstance(g, (Output, IndexedSlices)):
            raise InternalError(f"{where} returned {g!r} for input {i}: expected an Output, "
                                f"IndexedSlices or None")
        if is_differentiable(t) and g.dtype != t.dtype:
            raise InternalError(f"{where} returned a {g.dtype.name} gradient for input {i} "
                                f"('{t.name}', {t.dtype.name})")
        expected = variable_type(t)[1] if is_handle(t) else t.shape
        if isinstance(g, Output) and not g.shape.is_compatible_with(expected):
            raise InternalError(f"{where} returned a gradient of shape {g.shape} for input "
                                f"{i} ('{t.name}', shape {expected})")


def _refine_shape(grad, t: Output, first_new_op: int) -> None:
    """The gradient of ``t`` has ``t``'s shape: the dims known of ``t`` become known of a
    gradient this call built (TensorFlow's set_shape), e.g. [?, 3] where a run-time Slice
    or ScatterNd inferred [?, ?]. Tensors from before the call (a fed grad_y) are left."""
    if isinstance(grad, Output) and grad.op.position >= first_new_op and not is_handle(t):
        grad.shape = grad.shape.merge_with(t.shape)


def _tensors(value: Any, what: str, allow_empty: bool = False) -> list[Output]:
    items: Iterable = value if isinstance(value, (list, tuple)) else [value]
    result = []
    for item in items:
        out = as_operand(item)
        if out is None:
            if isinstance(item, Operation):
                raise TypeError(f"gradients: {what} entry '{item.name}' is an Operation; pass "
                                f"one of its outputs")
            raise TypeError(f"gradients: {what} entry {item!r} is not a graphflow Output")
        result.append(out)
    if not result and not allow_empty:
        raise InvalidArgumentError(f"gradients: {what} is empty")
    return result


__all__: Sequence[str] = ["gradients", "GradContext", "DIFFERENTIABLE_TYPES", "is_differentiable"]
