"""The plan stage of ``gf.import_tf_graph``: a GraphDef's nodes as the flat, ordered list
of nodes to build.

Calls of library functions (``PartitionedCall``, ``StatefulPartitionedCall``, or a
function's name as the op) are inlined as ``call/node`` nodes; uses of a call's outputs
read the function's results; every input is checked to name a node; every op graphflow
lacks is collected (for one UnimplementedError listing them all); cycles are found. Attrs
are decoded to ``(kind, value)`` only for the nodes graphflow can build.

The library functions an If/While names (branches, cond, body) are planned as graph
functions of their own (``Planner.bodies``: ``FunctionBody``), built into gf.Functions
at the build stage (``tf_functions``); the ops they lack are listed as ``function/node``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from .. import dtypes as _dt
from ..errors import InvalidArgumentError, OpError, UnimplementedError
from ..graph import _VALID_OP_NAME
from ..registry import registered_ops
from ..traversal import stable_topological_order
from . import tf_proto as tp

#: Attrs that change no result, accepted at any value: graphflow's variable updates always
#: hold the variable's lock; names for debuggers; an index check TF itself ignores.
_INERT_ATTRS = frozenset({"use_locking", "debug_name", "validate_indices"})
#: Ops that call a library function named by their attr ``f``.
_CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
#: GraphDef.library's field number (graph.proto).
LIBRARY_FIELD = 2
#: a tensor reference: 'node' or 'node:index'
REF = re.compile(r"(?P<node>[^:^]+)(?::(?P<index>[0-9]{1,10}))?")
#: inside a function body: 'node:output_arg:index', or an argument's name
_FUNC_REF = re.compile(r"(?P<node>[^:^]+)"
                       r"(?::(?P<arg>[A-Za-z_][A-Za-z0-9_]*):(?P<index>[0-9]{1,10}))?")


def error(message: str, node: str | None = None, op_type: str | None = None
          ) -> InvalidArgumentError:
    """InvalidArgumentError for a malformed GraphDef, naming the node."""
    return InvalidArgumentError(f"Invalid GraphDef: {message}", node, op_type)


@dataclass
class Node:
    """One node to build: a GraphDef node, an inlined function-body node, or the
    Identity (one result) or NoOp (several) that stands for an inlined call."""

    name: str
    op: str                                   # TensorFlow's op type
    inputs: list[tuple[str, Any]]             # (node, index or (output arg name, index))
    controls: list[str]
    device: str
    attrs: dict[str, tuple[str, Any]] = field(default_factory=dict)  # decoded


def op_aliases() -> dict[str, str]:
    """TensorFlow op types imported as a graphflow op of another name (same semantics):
    what the OpDefs' TFForms name (``TFForm.op``, ``TFForm.aliases``) besides the op."""
    return {tf_op: d.name for d in registered_ops(include_internal=False) if d.tf is not None
            for tf_op in (d.tf.op, *d.tf.aliases) if tf_op != d.name}


def __getattr__(name: str) -> Any:
    if name == "OP_ALIASES":  # the former table: a view of the OpDefs
        return op_aliases()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _renamed_attrs(op: Any) -> dict[str, str]:
    """TensorFlow's attr name -> graphflow's, for a node read as OpDef ``op`` (or None):
    its TFForm's renames, reversed (ResourceScatterNd*: T is graphflow's dtype)."""
    form = getattr(op, "tf", None)
    return {} if form is None else {theirs: ours for ours, theirs in form.renamed.items()}


def _decode_attrs(node: Any, name: str, substitute: Mapping | None = None,
                  renamed: Mapping[str, str] | None = None) -> dict:
    """``{attr: (kind, value)}`` of a NodeDef (TF's ``_bookkeeping`` attrs left out);
    ``substitute``: a calling function's attrs, for a body's placeholder attrs;
    ``renamed``: TF's attr names -> graphflow's (``_renamed_attrs``)."""
    out = {}
    renamed = renamed or {}
    for key, value in sorted(node.attr.items()):
        if key.startswith("_") or key in _INERT_ATTRS:
            continue
        if node.op == "Placeholder" and key == "dtype" and value.type == tp.DT_RESOURCE:
            raise UnimplementedError("A placeholder of DT_RESOURCE (a variable captured by a "
                                     "tf.function) cannot be fed here: freeze the function "
                                     "first (convert_variables_to_constants_v2)", name, node.op)
        try:
            kind, decoded = tp.attr_from_proto(value, resource=_dt.string)
        except UnimplementedError as e:  # a dtype graphflow lacks (bfloat16, resource...)
            raise UnimplementedError(f"attr '{key}': {e.message}", name, node.op) from None
        except OpError as e:
            raise error(f"attr '{key}': {e.message}", name, node.op) from None
        if kind == "placeholder":  # a polymorphic function body: the call gives the value
            if substitute is None or decoded not in substitute:
                raise error(f"attr '{key}' refers to the function attr '{decoded}', which "
                             f"the call does not set", name, node.op)
            kind, decoded = substitute[decoded]
        out[renamed.get(key, key)] = (kind, decoded)
    return out


def _split_inputs(node: Any, pattern: re.Pattern) -> tuple[list, list]:
    """(data inputs as (node, index or (output arg, index)), control input names)."""
    data, controls = [], []
    for j, ref in enumerate(node.input):
        if ref.startswith("^"):
            if not ref[1:]:
                raise error(f"input {j} '^' names no node", node.name, node.op)
            controls.append(ref[1:])
            continue
        if controls:
            raise error(f"data input {ref!r} comes after control inputs (control inputs "
                         f"must come last)", node.name, node.op)
        m = pattern.fullmatch(ref)
        if m is None:
            raise error(f"input {j} {ref!r} is not of the form 'node', 'node:index' or "
                         f"'^node'", node.name, node.op)
        arg = m.groupdict().get("arg")
        index = int(m["index"]) if m["index"] is not None else 0
        data.append((m["node"], (arg, index) if arg else index))
    return data, controls


class Planner:
    """Turns a GraphDef into the flat list of nodes to build, inlining function calls."""

    def __init__(self, graph_def: Any, ps: tp.ProtoSet):
        self.ps = ps
        self.ops = {d.name: d for d in registered_ops(include_internal=False)}
        #: TF op types read as a graphflow op of another name (AddV2: Add)
        self.aliases = op_aliases()
        self.functions: dict[str, Any] = {}
        self.library_unreadable = False
        if ps.full:
            for f in graph_def.library.function:
                self.functions[f.signature.name] = f
        elif LIBRARY_FIELD in tp.unknown_field_numbers(graph_def):
            self.library_unreadable = True
        self.nodes: list[Node] = []
        self.names: set[str] = set()
        #: inlined call -> (its results as (node, ref), the function's output names)
        self.results: dict[str, tuple[list, list[str]]] = {}
        self.missing: dict[str, list[str]] = {}
        self.missing_in: set[str] = set()  # library functions that use missing ops
        #: library functions planned as graph functions (If/While branches and bodies)
        self.bodies: dict[str, FunctionBody] = {}
        self._where = ""        # "f/" while planning the body of function f
        self._planning: tuple[str, ...] = ()  # the functions being planned, outermost first

    def op_of(self, tf_op: str) -> Any:
        """The OpDef a node of TF's op type ``tf_op`` is built as, or None."""
        return self.ops.get(tf_op) or self.ops.get(self.aliases.get(tf_op))

    # -- top level --------------------------------------------------------------------
    def plan(self, graph_def: Any) -> list[Node]:
        for i, node in enumerate(graph_def.node):
            where = f"node[{i}]"
            if not node.name or not _VALID_OP_NAME.fullmatch(node.name):
                raise error(f"{where} has the invalid node name {node.name!r}", node.name or
                             None, node.op or None)
            if node.name in self.names:
                raise error(f"duplicate node name ({where})", node.name, node.op)
            if not node.op:
                raise error(f"{where} has no op", node.name)
            self.names.add(node.name)
        for node in graph_def.node:
            data, controls = _split_inputs(node, REF)
            self._add(Node(node.name, node.op, data, controls, node.device), node, (), None)
        for n in self.nodes:
            n.inputs = [self._redirect(n, src, ref) for src, ref in n.inputs]
        return self.nodes

    def _redirect(self, n: Node, src: str, ref: Any) -> tuple[str, Any]:
        """A reference to an inlined call's output, as the function result it reads
        (through nested calls)."""
        if src not in self.results:
            return src, ref
        results, names = self.results[src]
        if isinstance(ref, tuple):  # 'call:output:0' (PartitionedCall) or 'call:ret_name:0'
            arg, index = ref
            index = index if arg not in names else names.index(arg) + index
        else:
            index = ref
        if not 0 <= index < len(results):
            raise error(f"input '{src}:{index}' names output {index} of the call '{src}', "
                         f"whose function returns {len(results)} values", n.name, n.op)
        return self._redirect(n, *results[index])

    def _add(self, n: Node, raw: Any, stack: tuple, substitute: Mapping | None) -> None:
        """Plan node ``n`` (read from NodeDef ``raw``): a call is inlined, an op graphflow
        lacks is recorded as missing (its attrs not even read), any other kept."""
        calls = n.op in _CALL_OPS or n.op in self.functions or (
            self.library_unreadable and n.op not in self.ops and n.op not in self.aliases)
        if not calls and n.op not in V1_CONTROL_FLOW and n.op not in self.ops \
                and self.aliases.get(n.op) not in self.ops:
            self.missing.setdefault(n.op, []).append(self._where + n.name)
            if self._where:
                self.missing_in.add(self._where[:-1])
            self.nodes.append(n)
            self._missing_in_functions(raw, n)
            return
        n.attrs = _decode_attrs(raw, n.name, substitute, _renamed_attrs(self.op_of(n.op)))
        if calls:
            self._inline(n, self._called_function(n), stack)
            return
        self.nodes.append(n)
        for value in n.attrs.values():  # If/While branches and bodies: graph functions
            funcs = [value[1]] if value[0] == "func" else \
                list(value[1]) if value[0] == "list(func)" else []
            for func in funcs:
                self.plan_function(func.name, dict(func.attrs), n)

    def _missing_in_functions(self, raw: Any, n: Node) -> None:
        """Plan the library functions named by the attrs of a node graphflow cannot build
        (an If/While it lacks): the ops they lack are listed too, as ``function/node``."""
        for value in (v for _, v in sorted(raw.attr.items())):
            which = value.WhichOneof("value")
            funcs = [value.func] if which == "func" else \
                list(value.list.func) if which == "list" else []
            for func in funcs:
                if func.name in self.functions:
                    attrs = {k: tp.attr_from_proto(v, resource=_dt.string)
                             for k, v in sorted(func.attr.items())}
                    self.plan_function(func.name, attrs, n)

    # -- graph functions (If/While branches and bodies) --------------------------------
    def plan_function(self, fname: str, substitute: Mapping, caller: Node) -> None:
        """Plan library function ``fname`` as a graph function (``self.bodies[fname]``):
        its nodes, calls inlined, under names of its own; ops it lacks are listed as
        ``fname/node``. Each function once."""
        if fname in self.bodies:
            return
        if fname in self._planning:
            raise UnimplementedError(f"Function '{fname}' calls itself (through "
                                     f"{' -> '.join(self._planning + (fname,))}); recursive "
                                     f"functions are not implemented", caller.name, caller.op)
        f = self.functions.get(fname)
        if f is None:
            if self.library_unreadable:
                tp.require_full(self.ps, f"The function library of this GraphDef (node "
                                         f"'{caller.name}' calls '{fname}')")
            raise error(f"names function '{fname}', which the GraphDef's library does not "
                         f"define", caller.name, caller.op)
        saved = (self.nodes, self.names, self.results, self._where)
        self._planning += (fname,)
        try:
            self.bodies[fname] = self._plan_body(f, fname, substitute, caller)
        finally:
            self.nodes, self.names, self.results, self._where = saved
            self._planning = self._planning[:-1]

    def _plan_body(self, f: Any, fname: str, substitute: Mapping, caller: Node) -> FunctionBody:
        args = [_argument(f, k, arg, substitute, caller) for k, arg in
                enumerate(f.signature.input_arg)]
        arg_names = [a[0] for a in args]
        node_names = {nd.name for nd in f.node_def}
        clash = sorted(node_names & set(arg_names))
        if clash or len(set(arg_names)) != len(arg_names):
            raise error(f"function '{fname}' has an argument and a node (or two arguments) "
                         f"named {(clash or arg_names)[0]!r}", caller.name, caller.op)
        self.nodes, self.names, self.results = [], node_names | set(arg_names), {}
        self._where = fname + "/"
        for nd in f.node_def:
            if not nd.name or not _VALID_OP_NAME.fullmatch(nd.name):
                raise error(f"function '{fname}' has the invalid node name {nd.name!r}",
                             caller.name, caller.op)
            data, controls = _split_inputs(nd, _FUNC_REF)
            self._add(Node(nd.name, nd.op, data, controls, nd.device), nd, self._planning,
                      substitute)
        for n in self.nodes:
            n.inputs = [self._redirect(n, src, ref) for src, ref in n.inputs]
        body = _Body(caller, fname, "", {}, self.names)
        results = [self._redirect(caller, *ref) for ref in _function_results(body, f)]
        return FunctionBody(fname, args, self.nodes, results)

    def _called_function(self, n: Node) -> str:
        if n.op in _CALL_OPS:
            kind, func = n.attrs.get("f", ("none", None))
            if kind != "func":
                raise error(f"attr 'f' of a {n.op} must be a function, got kind '{kind}'",
                             n.name, n.op)
            name = func.name
        else:  # a function's name as the op
            name = n.op
        if name not in self.functions:
            if self.library_unreadable:
                tp.require_full(self.ps, f"The function library of this GraphDef (node "
                                         f"'{n.name}' calls '{name}')")
            raise error(f"calls function '{name}', which the GraphDef's library does not "
                         f"define", n.name, n.op)
        return name

    # -- inlining --------------------------------------------------------------------
    def _inline(self, call: Node, fname: str, stack: tuple) -> None:
        """Plan the body of function ``fname`` in place of ``call``, under a fresh name
        prefix; the call's name then stands for the function's results."""
        f = self._inlinable(call, fname, stack)
        func_attrs = dict(call.attrs["f"][1].attrs) if call.op in _CALL_OPS else \
            {k: v for k, v in call.attrs.items()}
        body = _Body(call, fname, self._fresh_prefix(call.name),
                     {a.name: src for a, src in zip(f.signature.input_arg, call.inputs)},
                     {nd.name for nd in f.node_def})
        for nd in f.node_def:
            self._add(self._body_node(body, nd), nd, stack + (fname,), func_attrs)
        results = _function_results(body, f)
        control_ret = [body.prefix + n for n in f.control_ret.values() if n in body.names]
        # uses of the call's outputs read the function's results directly
        self.results[call.name] = (results, [a.name for a in f.signature.output_arg])
        if len(results) == 1:  # the call's name stands for its one result: "call:0" works
            self.nodes.append(Node(call.name, "Identity", results, control_ret, call.device))
        else:  # a NoOp that waits for the whole function ("^call", or the call as a fetch)
            self.nodes.append(Node(call.name, "NoOp", [], sorted(
                {src for src, _ in results} | set(control_ret)), call.device))

    def _inlinable(self, call: Node, fname: str, stack: tuple) -> Any:
        """The FunctionDef ``fname``, after checking ``call`` can inline it: no recursion,
        single-tensor arguments only, one input per argument."""
        if fname in stack:
            raise UnimplementedError(f"Function '{fname}' calls itself (through "
                                     f"{' -> '.join(stack + (fname,))}); recursion cannot "
                                     f"be inlined", call.name, call.op)
        f = self.functions[fname]
        sig = f.signature
        for arg in list(sig.input_arg) + list(sig.output_arg):
            if arg.number_attr or arg.type_list_attr:
                raise UnimplementedError(f"Function '{fname}' has the list argument "
                                         f"'{arg.name}'; only functions of single tensors are "
                                         f"inlined", call.name, call.op)
        if len(call.inputs) != len(sig.input_arg):
            raise error(f"calls function '{fname}' with {len(call.inputs)} inputs; it takes "
                         f"{len(sig.input_arg)}", call.name, call.op)
        return f

    def _body_node(self, body: _Body, nd: Any) -> Node:
        """The plan node of the function's NodeDef ``nd``: prefixed, its inputs resolved,
        waiting for the call's control inputs too."""
        call, prefix = body.call, body.prefix
        if not nd.name or not _VALID_OP_NAME.fullmatch(prefix + nd.name):
            raise error(f"function '{body.fname}' has the invalid node name {nd.name!r}",
                         call.name, call.op)
        data, controls = _split_inputs(nd, _FUNC_REF)
        inner = Node(prefix + nd.name, nd.op,
                     [body.resolve(s, ref, prefix + nd.name) for s, ref in data],
                     [prefix + c if c in body.names else self._bad_control(c, body.fname, call)
                      for c in controls] + list(call.controls),
                     nd.device or call.device)
        self.names.add(inner.name)
        return inner

    def _bad_control(self, name: str, fname: str, call: Node) -> str:
        raise error(f"control input '^{name}' of function '{fname}' names no node of the "
                     f"function", call.name, call.op)

    def _fresh_prefix(self, base: str) -> str:
        prefix, k = base + "/", 0
        while any(n.startswith(prefix) for n in self.names):
            k += 1
            prefix = f"{base}/inlined_{k}/"
        return prefix


#: TF 1.x's control-flow ops: planned (attrs read), then rewritten as If/While
#: (``tf_v1_control_flow``) before anything is built.
V1_CONTROL_FLOW = frozenset({"Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond"})


@dataclass
class FunctionBody:
    """A graph function to build (a library function, or a TF 1.x cond branch or loop
    part): its arguments as (name, dtype, shape), either None where the call gives it,
    its plan nodes (argument placeholders not among them) and its results."""

    name: str
    args: list[tuple[str, Any, Any]]
    nodes: list[Node]
    results: list[tuple[str, Any]]


def _argument(f: Any, k: int, arg: Any, substitute: Mapping, caller: Node) -> tuple:
    """(name, dtype, shape or None) of a function's input argument ``k``."""
    fname = f.signature.name
    if arg.number_attr or arg.type_list_attr:
        raise UnimplementedError(f"Function '{fname}' has the list argument '{arg.name}'; "
                                 f"only functions of single tensors are implemented",
                                 caller.name, caller.op)
    if arg.type_attr:
        kind, dtype = substitute.get(arg.type_attr, (None, None))
        if kind != "type":
            raise error(f"argument '{arg.name}' of function '{fname}' has the type attr "
                         f"'{arg.type_attr}', which the call does not set", caller.name,
                         caller.op)
    elif arg.type == tp.DT_RESOURCE:
        dtype = _dt.string
    else:
        try:
            dtype = tp.from_tf_enum(arg.type)
        except OpError as e:
            raise UnimplementedError(f"argument '{arg.name}' of function '{fname}': "
                                     f"{e.message}", caller.name, caller.op) from None
    shape = None
    if k in f.arg_attr and "_output_shapes" in f.arg_attr[k].attr:
        shapes = f.arg_attr[k].attr["_output_shapes"].list.shape
        if len(shapes) == 1:
            shape = tp.shape_from_proto(shapes[0])
    return arg.name, dtype, shape


def check_refs(nodes: list[Node]) -> dict[str, Node]:
    by_name = {n.name: n for n in nodes}
    if len(by_name) != len(nodes):
        seen: set[str] = set()
        dup = next(n for n in nodes if n.name in seen or seen.add(n.name))
        raise error("duplicate node name (an inlined function node clashes with it)",
                     dup.name, dup.op)
    for n in nodes:
        for src, _ in n.inputs:
            if src not in by_name:
                raise error(f"input '{src}' names no node in the GraphDef", n.name, n.op)
        for c in n.controls:
            if c not in by_name:
                raise error(f"control input '^{c}' names no node in the GraphDef", n.name, n.op)
    return by_name


@dataclass(frozen=True)
class _Body:
    """A function body being inlined for ``call``: its node names get ``prefix``;
    ``args`` maps each argument to the call's input it reads."""

    call: Node
    fname: str
    prefix: str
    args: dict
    names: set

    def resolve(self, ref_node: str, ref: Any, where: str) -> tuple[str, Any]:
        """A reference inside the body as a reference in the plan."""
        if ref_node in self.args and not isinstance(ref, tuple) and ref == 0:
            return self.args[ref_node]
        if ref_node not in self.names:
            raise error(f"input {ref_node!r} of function '{self.fname}' names neither an "
                         f"argument nor a node of the function", where, self.call.op)
        return self.prefix + ref_node, ref


def _function_results(body: _Body, f: Any) -> list:
    """The plan references of the function's return values, in output order."""
    call, results = body.call, []
    for arg in f.signature.output_arg:
        if arg.name not in f.ret:
            raise error(f"function '{body.fname}' returns no value for its output "
                         f"'{arg.name}'", call.name, call.op)
        m = _FUNC_REF.fullmatch(f.ret[arg.name])
        if m is None:
            raise error(f"function '{body.fname}' returns {f.ret[arg.name]!r}, not a tensor",
                         call.name, call.op)
        ref = (m["arg"], int(m["index"])) if m["arg"] else 0
        results.append(body.resolve(m["node"], ref, call.name))
    return results


def topological(nodes: list[Node], by_name: dict[str, Node]) -> list[Node]:
    """Inputs before consumers, otherwise in file order; a cycle is an error naming a node
    on it."""
    order, left_out = stable_topological_order(
        [n.name for n in nodes], {n.name: {s for s, _ in n.inputs} | set(n.controls)
                                  for n in nodes})
    if left_out:
        stuck = _on_cycle(nodes, by_name, left_out)
        raise error("the graph has a cycle through this node (graphflow imports acyclic "
                     "graphs: no control flow loops)", stuck.name, stuck.op)
    return [nodes[i] for i in order]


def _on_cycle(nodes: list[Node], by_name: dict[str, Node], left_out: set[str]) -> Node:
    """A node on a cycle (not merely downstream of one): walk inputs from a stuck node."""
    n = next(n for n in nodes if n.name in left_out)
    seen: list[str] = []
    while n.name not in seen:
        seen.append(n.name)
        n = next(by_name[s] for s in [s for s, _ in n.inputs] + n.controls if s in left_out)
    return n


__all__ = ["OP_ALIASES", "op_aliases", "LIBRARY_FIELD", "REF", "Node", "Planner", "FunctionBody",
           "V1_CONTROL_FLOW", "check_refs", "topological", "error"]
