"""If/StatelessIf/While/StatelessWhile for ``gf.export_tf_graph``: each gf.Function an
op holds (branches, cond, body) is written once into the GraphDef's function library as
a FunctionDef, recursively (a body's own control flow names functions of its own), and
the node names it (``NameAttrList``).

A FunctionDef's body is written by the same writer as the graph (lowerings included),
then its tensor references are put in FunctionDef form: an argument by its name, a node's
output as ``node:output_arg:index`` (the output argument names are the op's, which
graphflow registers under TensorFlow's names). The arguments are the function's
placeholders (its arguments, then its captures), the results ``output_<k>``, the ops
with effects its ``control_ret`` (they run on every call, as in TF 2).
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..errors import UnimplementedError
from ..functions import Function
from ..graph import Operation
from ..registry import registered_ops
from . import tf_proto as tp
from .tf_lowering import tf_form

if TYPE_CHECKING:  # pragma: no cover
    from .tf_export import _Writer

_ARG_NAME = re.compile(r"[^a-z0-9_]")


def write_functional(w: "_Writer", op: Operation) -> list[str]:
    """``op`` (an If or While) as one node, its functions written into the library."""
    from .tf_export import _RESOURCE

    if any(w.tf_types.get(w.ref(i)) is _RESOURCE for i in op.inputs):
        raise UnimplementedError(f"Cannot export {op.type} to TensorFlow: it takes a "
                                 f"variable's handle, which its functions would read "
                                 f"(not implemented)", op.name, op.type)
    tp.require_full(w.pb, f"Exporting {op.type} '{op.name}' (a GraphDef function library)")
    op_type, attrs = tf_form(op)
    for key, (kind, value) in list(attrs.items()):
        if kind == "func":
            attrs[key] = ("func", tp.Func(library_name(w.root, value), {}))
    return w.write_as_is(op, op_type, attrs)


def library_name(root: "_Writer", fn: Function) -> str:
    """The name of ``fn``'s FunctionDef in the root writer's library (written once)."""
    name = root.functions.get(fn)
    if name is not None:
        return name
    base = re.sub(r"[^A-Za-z0-9_]", "_", fn.name) or "function"
    taken = set(root.functions.values())
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    root.functions[fn] = name
    root.graph_def.library.function.add().CopyFrom(_function_def(root, fn, name))
    return name


def _arg_names(fn: Function) -> list[str]:
    """TF argument names (lower case, ``[a-z][a-z0-9_]*``) for the placeholders, unique
    and apart from the function's node names."""
    taken = {op.name for op in fn.graph.operations()}
    names = []
    for p in fn.inputs:
        base = _ARG_NAME.sub("_", p.op.name.lower())
        base = base if base[:1].isalpha() else "arg_" + base
        name, k = base, 0
        while name in taken or name in names:
            k += 1
            name = f"{base}_{k}"
        names.append(name)
    return names


def _function_def(root: "_Writer", fn: Function, name: str) -> Any:
    from .tf_export import _Writer

    pb = root.pb
    fdef = pb.GraphDef().library.function.add()  # ProtoSet has no FunctionDef class
    fdef.signature.name = name
    sub = _Writer(fn.graph, True, root.clear_devices, root.add_shapes)
    sub.root = root
    args = _arg_names(fn)
    inputs = {p.op for p in fn.inputs}
    for k, (p, arg) in enumerate(zip(fn.inputs, args)):
        fdef.signature.input_arg.add(name=arg, type=tp.tf_enum(p.dtype))
        sub.refs[p] = arg
        sub.tf_types[arg] = p.dtype
        sub.taken.add(arg)
        shapes = fdef.arg_attr[k].attr["_output_shapes"].list.shape  # re-import's shapes
        shapes.add().CopyFrom(tp.shape_to_proto(p.shape, pb))
    for op in fn.graph.operations():
        if op not in inputs:
            sub.write(op)
    by_name = {n.name: n for n in sub.graph_def.node}
    for node in sub.graph_def.node:
        nd = fdef.node_def.add()
        nd.CopyFrom(node)
        del nd.input[:]
        nd.input.extend(_function_ref(r, by_name, set(args), node.name) for r in node.input)
    for k, out in enumerate(fn.outputs):
        key = f"output_{k}"
        fdef.signature.output_arg.add(name=key, type=tp.tf_enum(out.dtype))
        fdef.ret[key] = _function_ref(sub.ref(out), by_name, set(args), fn.name)
    for op in fn.control_outputs:
        fdef.signature.control_output.append(op.name)
        fdef.control_ret[op.name] = op.name
    return fdef


def _function_ref(ref: str, by_name: dict, args: set[str], where: str) -> str:
    """A GraphDef tensor reference (``node``, ``node:1``, ``^node``) in FunctionDef form."""
    if ref.startswith("^"):
        return ref
    node, _, index = ref.partition(":")
    k = int(index or 0)
    if node in args:
        return node
    arg, j = _output_arg(by_name[node], k)
    return f"{node}:{arg}:{j}"


def _output_arg(node: Any, k: int) -> tuple[str, int]:
    """(output argument name, index in it) of output ``k`` of NodeDef ``node``."""
    op_def = _ops().get(node.op)
    if op_def is None:
        raise UnimplementedError(f"Cannot write op {node.op} inside a TensorFlow function: "
                                 f"its output argument names are unknown", node.name, node.op)
    start = 0
    for spec in op_def.outputs:
        if spec.number_attr is not None:
            n = node.attr[spec.number_attr].i
        elif spec.type_list_attr is not None:
            n = len(node.attr[spec.type_list_attr].list.type)
        else:
            n = 1
        if k < start + n:
            return spec.name, k - start
        start += n
    raise UnimplementedError(f"output {k} of {node.op} is beyond its outputs", node.name,
                             node.op)


_OPS: dict = {}


def _ops() -> dict:
    if not _OPS:
        _OPS.update((d.name, d) for d in registered_ops(include_internal=True))
    return _OPS


def function_ops(ops: list[Operation]) -> list[Operation]:
    """``ops`` and the ops of every function they hold (recursively): what an export
    writes."""
    out, seen = [], set()
    stack = list(reversed(ops))
    while stack:
        op = stack.pop()
        out.append(op)
        for value in op.attrs.values():
            fns = [value] if isinstance(value, Function) else \
                [v for v in value if isinstance(v, Function)] if isinstance(value, (list, tuple)) \
                else []
            for fn in fns:
                if fn not in seen:
                    seen.add(fn)
                    stack += reversed(fn.graph.operations())
    return out


__all__ = ["write_functional", "library_name", "function_ops"]
