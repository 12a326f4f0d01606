"""The build stage of ``gf.import_tf_graph`` for graph functions: the planned bodies of
a GraphDef's library functions (If/While branches, conds and bodies; TF 1.x cond
branches and loop parts, ``tf_v1_control_flow``) as gf.Functions.

A function is built where it is first needed, when the op calling it is built: its
arguments become placeholders of a :class:`~graphflow.functions.FuncGraph` of the
calling graph, typed as the function's signature says, or (TF 1.x parts, which have
no signature) as the call's inputs are; shapes come from the signature's
``_output_shapes`` where TF wrote them, else from the call (an If's inputs, a While's
``output_shapes``: its shape invariants). Its nodes are built through the ordinary
builder, as the top-level nodes are. A function is built once per calling graph and
argument types.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..errors import OpError
from ..functions import FuncGraph, Function, finish, tracing
from ..graph import Graph, Operation
from ..registry import OpDef
from ..shapes import TensorShape, most_specific_compatible_shape
from .tf_import_plan import FunctionBody, Node, check_refs, error, topological

if TYPE_CHECKING:  # pragma: no cover
    from ..dtypes import DType

#: attrs of the ops that call graph functions, by role
_BODY_ATTR, _COND_ATTR = "body", "cond"


def _shape_key(shape: TensorShape) -> Any:
    return None if shape.rank is None else tuple(shape.dims)


class FunctionLibrary:
    """The planned function bodies of one import, built into gf.Functions on demand."""

    def __init__(self, bodies: Mapping[str, FunctionBody], op_of: Any):
        self.bodies = bodies
        self.op_of = op_of      # plan node -> its graphflow OpDef
        self._built: dict[tuple, Function] = {}

    # -- the attrs of a calling op -------------------------------------------------------
    def call_attrs(self, n: Node, op_def: OpDef, args: list, kwargs: dict,
                   graph: Graph) -> dict:
        """``kwargs`` of an If/While node with its ``func`` attrs as gf.Functions; an If's
        ``Tout`` (and a While's ``output_shapes``) from the functions where the node
        leaves them out (TF 1.x control flow converted)."""
        specs = [(o.dtype, o.shape) for o in args[-1]]  # the list input: the functions' args
        out = dict(kwargs)
        if _BODY_ATTR in kwargs and _COND_ATTR in kwargs:
            return self._while_attrs(n, out, specs, graph)
        built = []
        for key, value in kwargs.items():
            if op_def.attrs[key].kind == "func":
                out[key] = self.function(value.name, graph, specs, n)
                built.append(out[key])
        if "Tout" in op_def.attrs and "Tout" not in kwargs and built:
            out["Tout"] = list(built[0].output_types)
        return out

    def _while_attrs(self, n: Node, out: dict, specs: list, graph: Graph) -> dict:
        """A While's cond and body, built for its shape invariants; without declared
        ``output_shapes`` (TF 1.x loops), the invariants are relaxed until the body's
        results fit them (a loop variable that changes shape gets unknown dims)."""
        declared = list(out.get("output_shapes", ()))
        dtypes = [d for d, _ in specs]
        shapes = declared if len(declared) == len(specs) else [s for _, s in specs]
        body = self.function(out[_BODY_ATTR].name, graph, list(zip(dtypes, shapes)), n)
        for _ in range(3 if not declared else 0):
            if len(body.outputs) != len(shapes):
                break  # the op's shape function says what is wrong
            relaxed = [most_specific_compatible_shape(a, b)
                       for a, b in zip(shapes, body.output_shapes)]
            if [_shape_key(s) for s in relaxed] == [_shape_key(s) for s in shapes]:
                break
            shapes = relaxed
            body = self.function(out[_BODY_ATTR].name, graph, list(zip(dtypes, shapes)), n)
        out[_BODY_ATTR] = body
        out[_COND_ATTR] = self.function(out[_COND_ATTR].name, graph,
                                        list(zip(dtypes, shapes)), n)
        if not declared:
            out["output_shapes"] = shapes
        return out

    # -- functions -----------------------------------------------------------------------
    def function(self, name: str, outer: Graph, specs: Sequence[tuple["DType", TensorShape]],
                 caller: Node) -> Function:
        """The gf.Function of body ``name`` in graph ``outer``, its arguments typed by the
        signature where it has one, else by ``specs`` (the call's)."""
        body = self.bodies.get(name)
        if body is None:
            raise error(f"names function '{name}', which was not planned", caller.name,
                        caller.op)
        if len(body.args) != len(specs):
            raise error(f"passes {len(specs)} inputs to function '{name}', which takes "
                        f"{len(body.args)}", caller.name, caller.op)
        args = [(dtype or d, shape if shape is not None else s)
                for (_, dtype, shape), (d, s) in zip(body.args, specs)]
        key = (name, id(outer), tuple((d, _shape_key(s)) for d, s in args))
        fn = self._built.get(key)
        if fn is None:
            fn = self._built[key] = self._build(body, outer, args, caller)
        return fn

    def _build(self, body: FunctionBody, outer: Graph, args: list, caller: Node) -> Function:
        from ..scope import Scope
        from .tf_import import _Scopes, _build_node, _output

        graph = FuncGraph(body.name, outer)
        with tracing(graph):
            scope = Scope(graph)
            placeholders = [scope.placeholder(d, shape=s, name=arg[0])
                            for arg, (d, s) in zip(body.args, args)]
            built: dict[str, Operation] = {p.op.name: p.op for p in placeholders}
            stand_ins = [Node(a[0], "Placeholder", [], [], "") for a in body.args]
            nodes = stand_ins + body.nodes
            order = topological(nodes, check_refs(nodes))
            scopes = _Scopes(graph)
            for n in order:
                if n.name in built:
                    continue
                try:
                    built[n.name] = _build_node(scopes, n, self.op_of(n), built, {}, {}, self)
                except OpError as e:
                    raise _inside(e, body.name) from e
            outputs = [_output(graph, caller, j, built[src], ref, {}, {})
                       for j, (src, ref) in enumerate(body.results)]
        return finish(graph, placeholders, outputs, captured=[])


def _inside(e: OpError, fname: str) -> OpError:
    """``e`` naming its node as ``function/node``."""
    name = e.node_name
    if name and not name.startswith(fname + "/"):
        name = f"{fname}/{name}"
    return type(e)(e.message, name, e.op_type, detail=getattr(e, "detail", None))


__all__ = ["FunctionLibrary"]
