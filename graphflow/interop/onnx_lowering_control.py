"""ONNX lowerings of the functional control-flow ops (ops/control_flow_ops.py), filed on
their OpDefs (``exporters["onnx"]``): If / StatelessIf become ONNX ``If``, While / StatelessWhile
ONNX ``Loop``.

A graph function (a branch, a loop's cond or body) is lowered with the same lowerings as
the model's graph, through a child :class:`Emitter` whose nodes make an ONNX subgraph
(nested control flow nests subgraphs). Its inputs are passed explicitly: an ``If``'s
branches read the If's ``input`` values from the enclosing scope (ONNX subgraphs see
outer-scope names), a ``Loop`` carries every loop variable (TF 2's while_v2 layout: the
counter, the maximum, the user's variables, the captures). Constants are initializers of
the model's graph, which every subgraph sees.

- ``If``'s predicate is TensorFlow's truth value: a number is true when non-zero, a
  string when non-empty (ONNX takes a bool).
- ``Loop``: the cond function runs once before the loop and again at the end of each
  iteration, on the body's results. ``M`` (the trip count) is the loop's constant
  ``maximum_iterations`` when the cond and body have while_loop's counter layout
  (``counter < maximum``, ``counter + 1``), else empty: the cond decides alone.
- A frozen variable's handle (``session=``) has no ONNX value: it is bound to its value
  in the functions instead of being passed (a loop must pass it through unchanged).

- A loop variable's declared shape in the body is its shape invariant: unknown dims, or
  no shape at all for an invariant of unknown rank (ONNX lets a loop-carried value change
  shape, rank included, between iterations; the checker, onnxruntime and the reference
  evaluator run such loops).

Refused, naming the node: a string predicate before opset 19 (ONNX's Equal takes strings
from there), an If returning a variable's handle, a loop whose body changes a handle.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from graphflow.dtypes import DType, bool_, int64
from graphflow.functions import Function
from graphflow.graph import Operation, Output
from graphflow.inference import constant_value
from graphflow.shapes import TensorShape
from graphflow.traversal import reachable

from .onnx_lowering import Emitter, check, elem_type, lower_ops, lowering

#: control-flow op type -> the attrs holding its graph functions
FUNCTION_ATTRS: dict[str, tuple[str, ...]] = {
    "If": ("then_branch", "else_branch"), "StatelessIf": ("then_branch", "else_branch"),
    "While": ("cond", "body"), "StatelessWhile": ("cond", "body")}


def functions_of(op: Operation) -> list[tuple[str, Function]]:
    """(attr, Function) for each graph function ``op`` calls (none for other ops)."""
    return [(attr, op.attrs[attr]) for attr in FUNCTION_ATTRS.get(op.type, ())]


def function_ops(fn: Function, effects: bool = False) -> list[Operation]:
    """The ops of ``fn``'s graph its outputs need through data edges, stopping at its
    input placeholders, in graph order (a topological one). With ``effects`` its stateful
    ops too, which run on every call whether an output needs them or not (the export
    check refuses those it cannot express)."""
    fed = set(fn.inputs)
    starts = [o.op for o in fn.outputs if o not in fed]
    if effects:
        starts += list(fn.control_outputs)
    found = reachable(starts, lambda op: [i.op for i in op.inputs if i not in fed])
    return sorted(found, key=lambda op: op.position)


def lower_function(em: Emitter, fn: Function, inputs: Sequence[str | None],
                   outer: Sequence[Output]) -> list[str]:
    """``fn``'s output values, its ops lowered through ``em``, its input placeholders
    bound to the value names ``inputs`` (in ``em``'s scope). ``outer`` are the tensors
    those stand for: a frozen variable's handle binds its value (no ONNX value)."""
    for placeholder, name, tensor in zip(fn.inputs, inputs, outer):
        em.values[placeholder] = name
        if tensor.op in em.frozen:
            em.frozen[placeholder.op] = em.frozen[tensor.op]
    lower_ops(em, function_ops(fn), set(fn.inputs))
    return [em.values[o] for o in fn.outputs]


def is_handle(tensor: Output) -> bool:
    """Whether ``tensor`` is a variable's handle (a VarHandleOp's output, or a function's
    capture of one, however deep): it has no ONNX value, only a frozen one."""
    while tensor.op.type == "Placeholder":
        outer = {inner: o for o, inner in getattr(tensor.graph, "captures", {}).items()}
        if tensor not in outer:
            return False
        tensor = outer[tensor]
    return tensor.op.type == "VarHandleOp"


def _value_info(em: Emitter, name: str, dtype: DType, shape: TensorShape | None) -> Any:
    """A subgraph input's or output's type: unknown dims unset, no shape for no rank."""
    dims = None if shape is None or shape.rank is None else shape.as_list()
    return em.h.make_tensor_value_info(name, elem_type(em.onnx, dtype), dims)


def _subgraph(sub: Emitter, name: str, inputs: list, values: Sequence[str],
              outputs: Sequence[tuple[DType, TensorShape | None]]) -> Any:
    """The GraphProto of ``sub``'s nodes returning ``values``, each through an Identity
    of its own: a subgraph output is then always made in the subgraph, never an outer
    value, one of its inputs or an initializer (cases backends treat unevenly)."""
    infos = []
    for k, (value, (dtype, shape)) in enumerate(zip(values, outputs)):
        out = sub.unique(f"{sub.prefix}output:{k}")
        sub.nodes.append(sub.h.make_node("Identity", [value], [out],
                                         name=sub.unique(f"{sub.prefix}output_{k}")))
        infos.append(_value_info(sub, out, dtype, shape))
    return sub.h.make_graph(sub.nodes, name, inputs, infos)


def _truth(em: Emitter, value: str, dtype: DType) -> str:
    """TensorFlow's truth value of a scalar as an ONNX bool: non-zero, or non-empty."""
    if dtype.is_bool:
        return value
    zero = em.scalar(dtype, b"" if dtype.is_string else 0)
    return em.node("Not", [em.node("Equal", [value, zero])])


# -- If ---------------------------------------------------------------------------------------
@check("If", "StatelessIf")
def _check_if(op: Operation, opset: int) -> str | None:
    if op.inputs[0].dtype.is_string and opset < 19:
        return ("with a string cond (its truth needs a string Equal, in ONNX from opset "
                "19: pass opset=19)")
    for attr in ("then_branch", "else_branch"):
        if any(is_handle(o) for o in op.attrs[attr].outputs):
            return f"whose {attr} returns a variable's handle (ONNX has no handles)"
    return None


@lowering("If", "StatelessIf")
def _if(em: Emitter, op: Operation, ins: list) -> list:
    """ONNX If over the two branch functions, each a subgraph reading the If's inputs
    from the enclosing scope."""
    if not op.outputs:  # nothing to compute: ONNX's If has at least one output
        return []
    pred = _truth(em, ins[0], op.inputs[0].dtype)
    branches = {}
    for attr in ("then_branch", "else_branch"):
        fn = op.attrs[attr]
        sub = em.child(f"{em.prefix}{op.name}/{attr}/")
        values = lower_function(sub, fn, ins[1:], op.inputs[1:])
        branches[attr] = _subgraph(sub, f"{em.prefix}{op.name}/{attr}", [], values,
                                   [(o.dtype, o.shape) for o in fn.outputs])
    outs = em.node("If", [pred], n_out=len(op.outputs), **branches)
    return [outs] if len(op.outputs) == 1 else outs


# -- While ------------------------------------------------------------------------------------
def _invariants(op: Operation) -> list[TensorShape]:
    """Each loop variable's shape invariant: output_shapes, else the body's arguments'."""
    return list(op.attrs["output_shapes"]) or [p.shape for p in op.attrs["body"].inputs]


@check("While", "StatelessWhile")
def _check_while(op: Operation, opset: int) -> str | None:
    cond, body = op.attrs["cond"], op.attrs["body"]
    if cond.outputs[0].dtype.is_string and opset < 19:
        return ("whose cond returns a string (its truth needs a string Equal, in ONNX from "
                "opset 19: pass opset=19)")
    for k, value in enumerate(op.inputs):
        if (is_handle(value) or is_handle(body.outputs[k])) and \
                body.outputs[k] is not body.inputs[k]:
            return (f"whose body changes loop variable {k} ({value.name}), a variable's "
                    f"handle (ONNX has no handles)")
    return None


def _is_counter_step(body: Function) -> bool:
    """Whether the body returns ``counter + 1`` and the maximum unchanged (while_loop's)."""
    if len(body.outputs) < 2 or body.outputs[1] is not body.inputs[1]:
        return False
    step = body.outputs[0].op
    if step.type != "Add" or step.inputs[0] is not body.inputs[0]:
        return False
    one = constant_value(step.inputs[1])
    return one is not None and np.shape(one) == () and one == 1


def _is_bounded_cond(cond: Function) -> bool:
    """Whether the cond is ``counter < maximum`` (and-ed with the user's cond)."""
    pred = cond.outputs[0].op
    if pred.type == "LogicalAnd":
        pred = pred.inputs[0].op
    return pred.type == "Less" and len(cond.inputs) >= 2 and all(
        a is b for a, b in zip(pred.inputs, cond.inputs[:2]))


def trip_count(op: Operation) -> int | None:
    """The most iterations a While can run when that is a constant: its constant
    ``maximum_iterations`` (loop variable 1) less the counter's start (variable 0),
    where the cond and body have while_loop's counter layout; else None."""
    if len(op.inputs) < 2 or not (_is_counter_step(op.attrs["body"])
                                  and _is_bounded_cond(op.attrs["cond"])):
        return None
    start, limit = constant_value(op.inputs[0]), constant_value(op.inputs[1])
    if start is None or limit is None or np.shape(limit) != () or int(limit) < 0:
        return None
    return max(int(limit) - int(start), 0)


def _loop_body(em: Emitter, op: Operation, carried: list[int]) -> Any:
    """The Loop's body subgraph: (iteration, cond_in, *carried) -> (cond_out, *carried'):
    the body function, then the cond function on its results."""
    cond, body = op.attrs["cond"], op.attrs["body"]
    sub = em.child(f"{em.prefix}{op.name}/body/")
    iteration, cond_in = sub.unique(f"{sub.prefix}iteration"), sub.unique(f"{sub.prefix}cond_in")
    names = [sub.unique(f"{sub.prefix}{p.op.name}") if k in carried else None
             for k, p in enumerate(body.inputs)]
    results = lower_function(sub, body, names, op.inputs)
    after = sub.child(f"{em.prefix}{op.name}/cond_after_body/")
    [pred] = lower_function(after, cond, results, op.inputs)
    sub.nodes.extend(after.nodes)
    sub.begin(op)
    pred = _truth(sub, pred, cond.outputs[0].dtype)
    shapes = _invariants(op)
    inputs = [_value_info(sub, iteration, int64, TensorShape([])),
              _value_info(sub, cond_in, bool_, TensorShape([]))] + [
        _value_info(sub, names[k], op.inputs[k].dtype, shapes[k]) for k in carried]
    outputs = [(bool_, TensorShape([]))] + [(op.inputs[k].dtype, shapes[k]) for k in carried]
    return _subgraph(sub, f"{em.prefix}{op.name}/body", inputs,
                     [pred] + [results[k] for k in carried], outputs)


@lowering("While", "StatelessWhile")
def _while(em: Emitter, op: Operation, ins: list) -> list:
    """ONNX Loop: the cond function before it, the body (and the cond after it) as its
    body; every loop variable with an ONNX value is loop-carried (a frozen variable's
    handle, passed through, has none)."""
    carried = [k for k, value in enumerate(ins) if value is not None]
    before = em.child(f"{em.prefix}{op.name}/cond/")
    [pred] = lower_function(before, op.attrs["cond"], ins, op.inputs)
    em.nodes.extend(before.nodes)
    pred = _truth(em, pred, op.attrs["cond"].outputs[0].dtype)
    count = trip_count(op)
    trips = "" if count is None else em.const(count, np.int64)
    body = _loop_body(em, op, carried)
    outs = em.node("Loop", [trips, pred] + [ins[k] for k in carried], n_out=len(carried),
                   body=body) if carried else []
    outs = [outs] if len(carried) == 1 else list(outs)
    names: list = [None] * len(ins)
    for k, value in zip(carried, outs):
        names[k] = value
    return names
