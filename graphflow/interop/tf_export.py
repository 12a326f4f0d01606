"""A graphflow Graph as a TensorFlow GraphDef: ``gf.export_tf_graph(graph, path)``.

Each node is written as the TensorFlow op it stands for, under TensorFlow 2.21's op and
attr names, so that TF's ``tf.compat.v1.import_graph_def`` runs it with graphflow's
results; what TF's ops do not do as graphflow's do is lowered to ops TF has (each op's
``OpDef.tf`` and ``OpDef.exporters["tf"]``; the lowerings: ``tf_lowering``). Any other op
(user ops, the ops compiled plans make) is refused in one UnimplementedError that names
every such node. This module writes the nodes: names, tensor references, resource
types, attrs, ``_output_shapes``.

``tf_graph_def(graph, strict=False)`` writes every node as it is instead (graphflow's
op types and attrs): the picture of the graph that TensorBoard shows
(``gf.summary.FileWriter``). The messages are generated classes (``tf_proto.protos()``).
"""
from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

import numpy as np

from ..dtypes import dtype_of_array
from ..errors import InvalidArgumentError, UnimplementedError
from ..functions import Function
from ..graph import Graph, Operation, Output
from ..shapes import TensorShape
from . import tf_proto
from . import tf_lowering
from .tf_lowering import kinded_attrs, has_tf_counterpart, tf_form

#: GraphDef.versions.producer of the graphs TensorFlow 2.21 writes.
TF_PRODUCER = 2474


class _ResourceType:
    """The TF dtype of a VarHandleOp's output (DT_RESOURCE; graphflow holds a string)."""

    def __repr__(self) -> str:
        return "resource"


_RESOURCE = _ResourceType()

class _Writer:
    """Builds the NodeDefs of one GraphDef: names, tensor references, TF dtypes."""

    def __init__(self, graph: Graph, strict: bool, clear_devices: bool, add_shapes: bool):
        self.pb = tf_proto.protos()
        self.graph_def = self.pb.GraphDef()
        self.graph_def.versions.producer = TF_PRODUCER
        self.strict = strict
        self.clear_devices = clear_devices
        self.add_shapes = add_shapes
        self.taken = {op.name for op in graph.operations()}
        self.refs: dict[Output, str] = {}        # graphflow output -> TF tensor reference
        self.tf_types: dict[str, Any] = {}       # TF tensor reference -> DType or _RESOURCE
        self.consts: dict[tuple, str] = {}       # lowerings' small constants, shared
        self.root = self                         # the writer of the GraphDef (of a library)
        self.functions: dict[Any, str] = {}      # gf.Function -> its FunctionDef's name

    # -- names -------------------------------------------------------------------------
    def fresh(self, name: str) -> str:
        """``name``, or ``name_1``... if the graph or an earlier lowering took it."""
        unique, i = name, 0
        while unique in self.taken:
            i += 1
            unique = f"{name}_{i}"
        self.taken.add(unique)
        return unique

    def ref(self, output: Output) -> str:
        return self.refs[output]

    # -- nodes -------------------------------------------------------------------------
    def node(self, name: str, op_type: str, inputs: Iterable[str], attrs: Mapping[str, Any],
             device: str = "", controls: Iterable[str] = (),
             outputs: Iterable[tuple[Any, TensorShape | None]] = ()) -> list[str]:
        """Add one NodeDef; returns the references of its outputs. ``attrs``: {name: (kind,
        value)}; ``outputs``: each output's TF dtype and static shape (None: unknown, then
        no ``_output_shapes``)."""
        node = self.graph_def.node.add(name=name, op=op_type)
        node.input.extend(list(inputs) + [f"^{c}" for c in controls])
        if device and not self.clear_devices:
            node.device = device
        for key, (kind, value) in attrs.items():
            node.attr[key].CopyFrom(self.attr(kind, value, name, op_type, key))
        outputs = list(outputs)
        shapes = [shape for _, shape in outputs]
        if self.add_shapes and outputs and all(s is not None for s in shapes):
            node.attr["_output_shapes"].list.shape.extend(
                tf_proto.shape_to_proto(s, self.pb) for s in shapes)
        refs = [name if i == 0 else f"{name}:{i}" for i in range(len(outputs))]
        for r, (dtype, _) in zip(refs, outputs):
            self.tf_types[r] = dtype
        return refs

    def const(self, name: str, value: np.ndarray, device: str = "") -> str:
        """A Const node holding ``value`` for a lowering; returns its reference. Small
        values are written once per device and shared (lowerings use the same few)."""
        value = np.asarray(value)
        dtype = dtype_of_array(value)
        key = (device, dtype, value.shape, value.tobytes() if dtype.kind != "string"
               else tuple(value.ravel().tolist())) if value.size <= 16 else None
        if key is not None and key in self.consts:
            return self.consts[key]
        ref = self.node(self.fresh(name), "Const", [], {
            "value": ("tensor", value), "dtype": ("type", dtype)},
            device, outputs=[(dtype, TensorShape(value.shape))])[0]
        if key is not None:
            self.consts[key] = ref
        return ref

    def attr(self, kind: str, value: Any, node: str, op_type: str, key: str):
        """One attr as an AttrValue; in strict mode a value TF cannot hold is an error,
        in the graph view its text."""
        if value is _RESOURCE:
            return self.pb.AttrValue(type=tf_proto.DT_RESOURCE)
        if kind == "func" and isinstance(value, Function):  # the graph view: its name
            value = tf_proto.Func(value.name, {})
        try:
            return tf_proto.attr_to_proto(kind, value, self.pb)
        except (TypeError, ValueError, KeyError) as e:
            if self.strict:
                raise InvalidArgumentError(f"attr '{key}' ({kind}) cannot be written to a "
                                           f"TensorFlow GraphDef: {e}", node, op_type) from None
            return self.pb.AttrValue(s=str(value).encode("utf-8"))

    # -- graphflow ops -----------------------------------------------------------------
    def write(self, op: Operation) -> None:
        """Add ``op`` (lowered where TF needs it) and record its outputs' references."""
        if self.strict:
            lower = op.op_def.exporters.get("tf")
            refs = lower(self, op) if lower is not None else None
            if refs is None:
                refs = self.write_as_is(op, *tf_form(op))
        else:
            refs = self.write_as_is(op, op.type, kinded_attrs(op))
        for output, r in zip(op.outputs, refs):
            self.refs[output] = r

    def write_as_is(self, op: Operation, op_type: str, attrs: dict) -> list[str]:
        """``op`` as one node of type ``op_type`` with ``attrs`` (type attrs of inputs
        that are resource handles say so, as TF's)."""
        inputs = [self.ref(i) for i in op.inputs]
        groups, start = [], 0
        for spec, n in zip(op.op_def.inputs, op.arg_lengths):
            groups.append((spec, inputs[start:start + n]))
            start += n
        resource: set = set()
        for spec, refs in groups:
            if spec.type_attr and refs and self.tf_types.get(refs[0]) is _RESOURCE:
                attrs[spec.type_attr] = ("type", _RESOURCE)
                resource.add(spec.type_attr)
        outputs = []
        for spec, n in zip(op.op_def.outputs, _output_counts(op)):
            outputs += [spec.type_attr in resource] * n
        if op.type == "VarHandleOp":  # graphflow's handles are strings, TF's resources
            outputs = [True] * len(op.outputs)
        outputs = [(_RESOURCE if r else o.dtype, o.shape) for r, o in zip(outputs, op.outputs)]
        return self.node(op.name, op_type, inputs, attrs, op.device,
                         [c.name for c in op.control_inputs], outputs)

def _output_counts(op: Operation) -> list[int]:
    """How many outputs each declared output argument of ``op`` stands for."""
    specs = op.op_def.outputs
    lists = [s for s in specs if s.is_list]
    fixed = len(specs) - len(lists)
    return [(op.attrs[s.number_attr] if len(lists) > 1 else len(op.outputs) - fixed)
            if s.is_list else 1 for s in specs]

# -- public ----------------------------------------------------------------------------
def tf_graph_def(graph: Graph, strict: bool = True, clear_devices: bool = False,
                 add_shapes: bool = True):
    """``graph`` as a tensorboardX ``GraphDef`` message.

    ``strict=True``: TensorFlow's ops and attrs, lowered where TF needs it; ops with no
    TensorFlow counterpart raise one UnimplementedError naming every such node.
    ``strict=False``: every node as graphflow has it (for TensorBoard's graph view).
    ``clear_devices`` leaves device strings out; ``add_shapes`` writes each node's
    static output shapes as attr ``_output_shapes`` (TensorBoard labels edges with them).
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"export to TensorFlow takes a gf.Graph, got {type(graph).__name__} "
                        f"{graph!r}")
    ops = graph.operations()
    if strict:
        _check_exportable(ops)
    writer = _Writer(graph, strict, clear_devices, add_shapes)
    for op in ops:  # creation order is a topological order
        writer.write(op)
    return writer.graph_def


def _check_exportable(ops: list[Operation]) -> None:
    """One UnimplementedError naming every node (those inside If/While functions too)
    of an op type TensorFlow has no counterpart for."""
    from .tf_export_functions import function_ops

    missing: dict[str, list[str]] = {}
    for op in function_ops(ops):
        if not has_tf_counterpart(op.type):
            missing.setdefault(op.type, []).append(op.name)
    if not missing:
        return
    listed = "; ".join(f"{t} (node{'s' if len(n) > 1 else ''} {', '.join(map(repr, n))})"
                       for t, n in missing.items())
    nodes = [n for names in missing.values() for n in names]
    raise UnimplementedError(
        f"Cannot export to TensorFlow: {len(nodes)} node{'s' if len(nodes) > 1 else ''} of "
        f"op types TensorFlow has no counterpart for: {listed}",
        nodes[0] if len(nodes) == 1 else None,
        next(iter(missing)) if len(nodes) == 1 else None)


def export_tf_graph(graph: Graph, path: "str | os.PathLike", clear_devices: bool = False,
                    add_shapes: bool = True):
    """Write ``graph`` as a TensorFlow GraphDef to ``path``: text format if it ends in
    ``.pbtxt``, binary otherwise. TensorFlow's ``tf.compat.v1.import_graph_def`` runs
    it with graphflow's results; node names stay graphflow's. Returns the message.

    UnimplementedError (before anything is written) names every node of an op type
    TensorFlow has no counterpart for (graphflow's internal ops, user ops; the
    ``_WhileRecorded``/``_WhileGrad`` of a while loop's gradient). If/StatelessIf/
    While/StatelessWhile are written with their functions as the GraphDef's library
    (FunctionDefs, recursively; ``tf_export_functions``).
    """
    graph_def = tf_graph_def(graph, strict=True, clear_devices=clear_devices,
                             add_shapes=add_shapes)
    path = os.fspath(path)
    if path.lower().endswith(".pbtxt"):
        from google.protobuf import text_format
        data = text_format.MessageToString(graph_def).encode("utf-8")
    else:
        data = graph_def.SerializeToString()
    with open(path, "wb") as f:
        f.write(data)
    return graph_def


def __getattr__(name: str) -> Any:
    """``SAME_AS_TF``, ``RESOURCE_OPS``, ``TF_DEFAULTS``, ``DROPPED``, ``LOWERINGS``: the
    views of the OpDefs that ``tf_lowering`` gives."""
    if name in ("SAME_AS_TF", "RESOURCE_OPS", "TF_DEFAULTS", "DROPPED", "LOWERINGS"):
        return getattr(tf_lowering, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["export_tf_graph", "tf_graph_def", "has_tf_counterpart", "SAME_AS_TF", "DROPPED",
           "RESOURCE_OPS", "TF_DEFAULTS", "LOWERINGS", "TF_PRODUCER"]
