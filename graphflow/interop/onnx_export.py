"""Export an inference graph to ONNX: ``export_onnx(graph, inputs, outputs, path, opset=18)``.

This module picks the ops the outputs need, refuses in one UnimplementedError every
node ONNX cannot express (listed by reason), freezes variables from a session when
asked, and assembles and checks the model; ``onnx_lowering`` lowers each op with
TensorFlow's semantics. ``docs/interop.md`` says what is lowered how and what is refused.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from graphflow.errors import InvalidArgumentError, UnimplementedError
from graphflow.graph import Graph, Operation, Output
from graphflow.traversal import reachable

from . import onnx_lowering_math  # noqa: F401  (files the math and nn ops' lowerings)
from .onnx_lowering_control import function_ops, functions_of  # (and files If's, While's)
from . import onnx_lowering_random  # noqa: F401  (files the random ops' lowerings)
from .onnx_lowering import Emitter, elem_type, lower_ops

#: The ONNX opsets this exporter writes (ScatterND's min/max reductions need 18).
MIN_OPSET = 18


def _import_onnx():
    try:
        import onnx
    except ImportError:
        raise ImportError("gf.export_onnx needs the onnx package: pip install 'graphflow[onnx]'") \
            from None
    return onnx


# -- the public entry point ----------------------------------------------------------------
def export_onnx(graph: Graph, inputs: Sequence[Any] | None, outputs: Sequence[Any] | None,
                path: "str | os.PathLike | None" = None, opset: int = 18, *,
                session: Any = None, name: str = "graphflow") -> "onnx.ModelProto":
    """Write the part of ``graph`` that computes ``outputs`` from ``inputs`` as an ONNX model.

    ``inputs`` and ``outputs`` are Outputs (or TF-style names ``"x:0"``); the model's
    values keep those names. Each placeholder the outputs need must be in ``inputs``;
    any other tensor listed there is fed too, as in ``Session.run``. ``outputs=None``
    means every tensor nothing consumes (leaving out placeholders, constants and
    stateful ops); ``inputs=None`` every placeholder those outputs need. Variables are
    refused unless ``session`` is given: their values in that session are then frozen
    into the model as constants. ``opset``: 18 (ScatterND's min/max reductions) up to the
    installed onnx's newest. Returns the checked ``onnx.ModelProto`` (saved at ``path``
    unless it is None). Control dependencies are dropped: an ONNX graph is pure.
    """
    onnx = _import_onnx()
    if not isinstance(graph, Graph):
        raise TypeError(f"export_onnx: graph must be a gf.Graph, got {type(graph).__name__}")
    _check_opset(onnx, opset)
    fetches = _sinks(graph) if outputs is None else _resolve(graph, outputs, "outputs")
    feeds = _placeholders(fetches) if inputs is None else _resolve(graph, inputs, "inputs")
    _check_feeds_and_fetches(feeds, fetches)
    ops, waited = _needed_ops(fetches, feeds)
    _refuse_what_onnx_cannot_express(ops, waited, feeds, session, int(opset))

    em = Emitter(onnx, int(opset), _frozen_variables(ops, session))
    em.reserved.update(o.name for o in fetches)  # no subgraph value takes a fetch's name
    _lower(em, ops, feeds)
    _name_fetches(em, fetches)
    model = _model(em, name, feeds, fetches, int(opset))
    _check(onnx, model)
    if path is not None:
        onnx.save_model(model, os.fspath(path))
    return model


def _check_opset(onnx, opset: Any) -> None:
    if isinstance(opset, bool) or not isinstance(opset, (int, np.integer)) \
            or not MIN_OPSET <= opset <= onnx.defs.onnx_opset_version():
        raise InvalidArgumentError(
            f"export_onnx: opset must be an int in [{MIN_OPSET}, "
            f"{onnx.defs.onnx_opset_version()}] (this onnx's newest), got {opset!r}")


def _check_feeds_and_fetches(feeds: list[Output], fetches: list[Output]) -> None:
    """At least one fetch, none listed twice, and no variable handle fetched."""
    if not fetches:
        raise InvalidArgumentError("export_onnx: outputs must name at least one tensor")
    for what, values in (("inputs", feeds), ("outputs", fetches)):
        seen = set()
        for out in values:
            if out.name in seen:
                raise InvalidArgumentError(f"export_onnx: {out.name} is listed twice in {what}")
            seen.add(out.name)
    for out in fetches:
        if out.op.type == "VarHandleOp" and out not in feeds:
            raise InvalidArgumentError(f"export_onnx: {out.name} is a variable's handle, not a "
                                       f"value: fetch a read of it", out.op.name, out.op.type)


def _lower(em: Emitter, ops: list[Operation], feeds: list[Output]) -> None:
    """ONNX nodes for ``ops`` in order; a fed tensor is a graph input named after it."""
    for out in feeds:
        em.values[out] = em.unique(out.name)
    lower_ops(em, ops, set(feeds))


def _name_fetches(em: Emitter, fetches: list[Output]) -> None:
    """Each fetch's value carries its tensor name: a fetch that is fed or renamed gets an
    Identity of its own."""
    for out in fetches:
        if em.values[out] != out.name:
            em.nodes.append(em.h.make_node("Identity", [em.values[out]], [out.name],
                                           name=em.unique(f"{out.op.name}/output")))


def _model(em: Emitter, name: str, feeds: list[Output], fetches: list[Output],
           opset: int) -> Any:
    """The ModelProto of what ``em`` emitted, keeping only the initializers in use."""
    onnx = em.onnx
    used = _inputs_used(em.nodes) | {o.name for o in fetches} | {em.values[o] for o in fetches}
    initializers = [t for t in em.initializers if t.name in used]  # not attrs' Consts
    return em.h.make_model(
        em.h.make_graph(em.nodes, name, [_value_info(onnx, o) for o in feeds],
                        [_value_info(onnx, o) for o in fetches], initializers),
        opset_imports=[em.h.make_opsetid("", opset)], producer_name="graphflow")


def _inputs_used(nodes: Sequence[Any]) -> set[str]:
    """The value names ``nodes`` read, also inside their subgraphs (an If's branches, a
    Loop's body), which read the model's initializers as outer-scope values."""
    used = set()
    for node in nodes:
        used.update(node.input)
        for attr in node.attribute:
            for graph in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                used |= _inputs_used(graph.node)
    return used


def _check(onnx, model) -> None:
    """onnx's checker. It insists on a shape for each graph input and output although
    the IR lets one be absent (unknown rank, as a placeholder's ``shape=None``): those
    are checked in a copy as scalars, which the checker cannot tell apart without
    shape inference."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for info in list(copy.graph.input) + list(copy.graph.output):
        if not info.type.tensor_type.HasField("shape"):
            info.type.tensor_type.shape.SetInParent()
    onnx.checker.check_model(copy)


def _sinks(graph: Graph) -> list[Output]:
    """The outputs no op consumes, of ops that compute (not placeholders, constants or
    stateful ops), in graph order."""
    consumed = {i for op in graph.operations() for i in op.inputs}
    return [out for op in graph.operations()
            if op.type not in ("Placeholder", "Const") and not op.op_def.stateful
            for out in op.outputs if out not in consumed]


def _placeholders(fetches: list[Output]) -> list[Output]:
    """The placeholders the fetches need, in graph order."""
    ops, _ = _needed_ops(fetches, [])
    return [op.outputs[0] for op in ops if op.type == "Placeholder"]


def _resolve(graph: Graph, values: Sequence[Any], what: str) -> list[Output]:
    if isinstance(values, (str, Output)) or not isinstance(values, (list, tuple)):
        raise TypeError(f"export_onnx: {what} must be a list of tensors or tensor names, got "
                        f"{type(values).__name__}")
    resolved = []
    for value in values:
        if isinstance(value, str):
            value = graph.output(value)
        elif not isinstance(value, Output) and hasattr(value, "as_output"):
            value = value.as_output()
        if not isinstance(value, Output):
            raise TypeError(f"export_onnx: {what} must hold gf.Outputs or tensor names, got "
                            f"{type(value).__name__} {value!r}")
        if value.graph is not graph:
            raise InvalidArgumentError(f"export_onnx: {value.name} in {what} is not an element "
                                       f"of this graph")
        resolved.append(value)
    return resolved


def _needed_ops(fetches: list[Output], feeds: list[Output]) -> tuple[list, list]:
    """The ops the fetches need through data edges, stopping at fed tensors, in a
    topological order (graph order, which is one); and the ops they wait for only
    through control dependencies (dropped, unless they update state: refused)."""
    fed = set(feeds)

    def producers(op: Operation) -> list[Operation]:
        return [i.op for i in op.inputs if i not in fed]

    data = reachable([o.op for o in fetches if o not in fed], producers)
    waited = reachable([c for op in data for c in op.control_inputs],
                       lambda op: producers(op) + list(op.control_inputs)) - data
    order = lambda ops: sorted(ops, key=lambda op: op.position)  # noqa: E731
    return order(data), order(waited)


def _refuse_what_onnx_cannot_express(ops: list[Operation], waited: list[Operation],
                                     feeds: list[Output], session: Any, opset: int) -> None:
    """One UnimplementedError naming every op (by node) that cannot be exported, also
    a state update that an exported op waits for and the ops inside the graph functions
    of control flow (named ``function/node``); one InvalidArgumentError for a placeholder
    that is needed but not among the inputs."""
    fed = set(feeds)
    for op in ops:
        if op.type == "Placeholder" and op.outputs[0] not in fed:
            raise InvalidArgumentError(
                f"export_onnx: placeholder tensor '{op.outputs[0].name}' is needed by the "
                f"outputs but is not listed in inputs", op.name, op.type)
    problems: dict[str, list[str]] = {}
    for op in waited:
        if op.op_def.stateful and "onnx" not in op.op_def.exporters:
            problems.setdefault(f"{op.type} (it updates state, and an exported op waits for "
                                f"it; an ONNX graph is for inference)", []).append(op.name)
    _refuse_ops(ops, fed, session, opset, "", problems)
    if problems:
        lines = "\n".join(f"  {reason}: {', '.join(names)}" for reason, names in problems.items())
        raise UnimplementedError(f"export_onnx: {sum(map(len, problems.values()))} node(s) "
                                 f"cannot be expressed in ONNX:\n{lines}")


def _refuse_ops(ops: list[Operation], fed: set, session: Any, opset: int, where: str,
                problems: dict[str, list[str]]) -> None:
    """File in ``problems`` (reason -> node names) each of ``ops`` that cannot be
    exported, looking inside the functions of control flow (their nodes named
    ``where`` + ``function/node``: a branch's, a loop body's own stateful ops too)."""
    for op in ops:
        if op.outputs and all(o in fed for o in op.outputs):  # fed: not computed
            continue
        reason = _why_not(op, session, opset)
        if reason:
            problems.setdefault(reason, []).append(where + op.name)
        for _, fn in functions_of(op):
            _refuse_ops(function_ops(fn, effects=True), set(fn.inputs), session, opset,
                        f"{where}{fn.name}/", problems)


def _why_not(op: Operation, session: Any, opset: int) -> str | None:
    """Why ``op`` cannot be exported, or None."""
    dtypes = [t.dtype for t in list(op.inputs) + list(op.outputs)]
    if "onnx" not in op.op_def.exporters:
        if op.op_def.stateful:
            return f"{op.type} (it updates state; an ONNX graph is for inference)"
        return f"{op.type} (no ONNX lowering)"
    if any(t.is_complex for t in dtypes):
        return f"{op.type} on complex tensors (ONNX has no complex arithmetic)"
    if op.type in ("VarHandleOp", "ReadVariableOp", "ResourceGather") and session is None:
        return f"{op.type} (a variable: pass session= to freeze its value as a constant)"
    check = op.op_def.export_checks.get("onnx")
    reason = check(op, opset) if check is not None else None
    return f"{op.type} {reason}" if reason else None


def _frozen_variables(ops: list[Operation], session: Any) -> dict[Operation, np.ndarray]:
    """The session's value of each variable the ops read (VarHandleOp -> array), read
    through a plain ReadVariableOp of it (one with control inputs could run updates)."""
    handles = [op for op in ops if op.type == "VarHandleOp"]
    if not handles or session is None:
        return {}
    reads = {}
    for op in handles[0].graph.operations():
        if op.type == "ReadVariableOp" and op.inputs[0].op in handles and not op.control_inputs:
            reads.setdefault(op.inputs[0].op, op.outputs[0])
    missing = [h.name for h in handles if h not in reads]
    if missing:
        raise InvalidArgumentError(
            f"export_onnx: cannot freeze variable(s) {', '.join(missing)}: no ReadVariableOp "
            f"of them without control inputs in the graph to read their value with")
    values = session.run([reads[h] for h in handles])
    return dict(zip(handles, values))


def _value_info(onnx, out: Output):
    shape = None if out.shape.rank is None else out.shape.as_list()
    return onnx.helper.make_tensor_value_info(out.name, elem_type(onnx, out.dtype), shape)
