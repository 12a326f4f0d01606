"""``gf.import_tf_graph``: a TensorFlow GraphDef as a new gf.Graph, TF's node names kept.

The import runs in three stages, so that nothing is half-imported (the Graph is new
and returned only when every node was built):

1. *read*: the source (a path to ``.pb``/``.pbtxt``, bytes, or a GraphDef message of
   any generated class) parsed with TensorFlow's generated messages (``tf_proto``);
2. *plan*: calls of library functions (``PartitionedCall``, ``StatefulPartitionedCall``,
   or a function's name as the op) inlined as ``call/node`` nodes, the call itself kept
   as an Identity of the function's result (so ``"call:0"`` still names it); every
   input checked to name a node; every op graphflow lacks collected into ONE
   UnimplementedError; cycles found;
3. *build*: nodes created in topological order through the ordinary builder (shape
   inference and every build-time check run), attrs checked against graphflow's OpDefs
   (kind, and the inferred type attrs against what the inputs give).

Ops are TensorFlow's own where graphflow registers them; ``AddV2`` maps to ``Add``
(identical semantics). Attrs whose names start with ``_`` (``_output_shapes``,
``_class``...) are TensorFlow's bookkeeping and ignored.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from .. import dtypes as _dt
from ..builder import create_operation
from ..device_spec import canonical_device
from ..errors import InvalidArgumentError, OpError, UnimplementedError
from ..graph import _VALID_OP_NAME, Graph, Operation, Output
from ..registry import OpDef, registered_ops
from . import tf_proto as tp

#: TensorFlow op types imported as a graphflow op of another name (same semantics).
OP_ALIASES = {"AddV2": "Add"}
#: Attrs TensorFlow has and graphflow's op lacks, accepted when they hold this value
#: (TensorFlow's default); any other value would change the semantics and is refused.
_DEFAULT_ONLY_ATTRS = {("Equal", "incompatible_shape_error"): True,
                       ("NotEqual", "incompatible_shape_error"): True,
                       ("VarHandleOp", "container"): "", ("VarHandleOp", "allowed_devices"): (),
                       ("AssignVariableOp", "validate_shape"): False,
                       ("ResourceGather", "batch_dims"): 0,
                       ("ResourceApplyAdagrad", "update_slots"): True,
                       ("ResourceSparseApplyAdagrad", "update_slots"): True}
#: Attrs that change no result, accepted at any value: graphflow's variable updates always
#: hold the variable's lock; names for debuggers; an index check TF itself ignores.
_INERT_ATTRS = frozenset({"use_locking", "debug_name", "validate_indices"})
#: TensorFlow's name for the variable dtype of ResourceScatterNd* is T, graphflow's dtype.
_RENAMED_ATTRS = {op: {"T": "dtype"} for op in (
    "ResourceScatterNdUpdate", "ResourceScatterNdAdd", "ResourceScatterNdSub",
    "ResourceScatterNdMin", "ResourceScatterNdMax")}
#: Ops that call a library function named by their attr ``f``.
_CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
#: GraphDef field numbers (graph.proto): node, library, version, versions, debug_info.
_GRAPHDEF_FIELDS = {1, 2, 3, 4, 5}
_LIBRARY_FIELD = 2
_REF = re.compile(r"(?P<node>[^:^]+)(?::(?P<index>[0-9]{1,10}))?")
#: inside a function body: 'node:output_arg:index', or an argument's name
_FUNC_REF = re.compile(r"(?P<node>[^:^]+)"
                       r"(?::(?P<arg>[A-Za-z_][A-Za-z0-9_]*):(?P<index>[0-9]{1,10}))?")


def _error(message: str, node: str | None = None, op_type: str | None = None
           ) -> InvalidArgumentError:
    return InvalidArgumentError(f"Invalid GraphDef: {message}", node, op_type)


# -- 1. read -------------------------------------------------------------------------------
def read_graph_def(source: Any, ps: tp.ProtoSet | None = None) -> Any:
    """A GraphDef message (of ``ps``'s classes) from a path, bytes or any GraphDef message;
    the caller's message is never modified."""
    ps = ps or tp.protos()
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        with open(path, "rb") as f:
            data = f.read()
        if path.endswith(".pbtxt"):
            return _parse_text(data, path, ps)
        return _parse_binary(data, path, ps)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _parse_binary(bytes(source), "the bytes", ps)
    descriptor = getattr(source, "DESCRIPTOR", None)
    if descriptor is not None and hasattr(source, "SerializeToString"):
        if descriptor.name != "GraphDef":
            raise TypeError(f"import_tf_graph() takes a GraphDef message, got a "
                            f"{descriptor.full_name}")
        return _parse_binary(source.SerializeToString(), "the GraphDef message", ps)
    raise TypeError(f"import_tf_graph() takes a path (.pb, .pbtxt), bytes or a GraphDef "
                    f"message, got {type(source).__name__}")


def _parse_binary(data: bytes, where: str, ps: tp.ProtoSet) -> Any:
    from google.protobuf.message import DecodeError

    graph_def = ps.GraphDef()
    try:
        graph_def.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise _error(f"{where} could not be parsed as a binary GraphDef (truncated or not a "
                     f"GraphDef): {e}") from None
    stray = tp.unknown_field_numbers(graph_def) - _GRAPHDEF_FIELDS
    if stray:
        raise _error(f"{where} is not a GraphDef (it has fields numbered "
                     f"{sorted(stray)}, which a GraphDef does not)")
    return graph_def


#: Fields of TensorFlow's schema that tensorboardX's older one lacks (text format names
#: them; binary keeps them as unknown fields): skipped when reading with tensorboardX's.
_NEWER_FIELDS = frozenset({"library", "debug_info", "experimental_type",
                           "experimental_debug_info", "uint32_val", "uint64_val",
                           "variant_val", "float8_val"})
_NO_FIELD = re.compile(r'has no field named "(?P<field>\w+)"')
_NEWER_ENUMS = {"DT_VARIANT": 21, "DT_UINT32": 22, "DT_UINT64": 23}
_NEWER_ENUM = re.compile(r"(\b(?:type|dtype):\s*)(DT_VARIANT|DT_UINT32|DT_UINT64)\b")


def _parse_text(data: bytes, where: str, ps: tp.ProtoSet) -> Any:
    from google.protobuf import text_format

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _error(f"{where} is not a text GraphDef: byte {e.start} is not UTF-8") from None
    if not ps.full:  # DataType values newer than tensorboardX's enum, by number
        text = _NEWER_ENUM.sub(lambda m: f"{m[1]}{_NEWER_ENUMS[m[2]]}", text)
    try:
        return text_format.Parse(text, ps.GraphDef())
    except text_format.ParseError as e:
        newer = _NO_FIELD.search(str(e))
        if ps.full or newer is None or newer["field"] not in _NEWER_FIELDS:
            raise _error(f"{where} is not a text GraphDef: {e}") from None
    if re.search(r"(?m)^library\s*\{", text):  # its functions would be skipped unseen
        tp.require_full(ps, f"The function library of {where}")
    if re.search(r"\buint(32|64)_val\s*:", text):
        tp.require_full(ps, f"The uint32_val/uint64_val constants of {where}")
    try:  # TensorFlow's newer fields (experimental_type...) dropped: they change no result
        return text_format.Parse(text, ps.GraphDef(), allow_unknown_field=True)
    except text_format.ParseError as e:
        raise _error(f"{where} is not a text GraphDef: {e}") from None


# -- 2. plan -------------------------------------------------------------------------------
@dataclass
class _Node:
    """One node to build: a GraphDef node, an inlined function-body node, or the
    Identity that stands for a function call's result."""

    name: str
    op: str                                   # TensorFlow's op type
    inputs: list[tuple[str, int | str]]        # (node, output index or output arg name)
    controls: list[str]
    device: str
    attrs: dict[str, tuple[str, Any]] = field(default_factory=dict)  # decoded


def _decode_attrs(node: Any, name: str, substitute: Mapping | None = None) -> dict:
    """``{attr: (kind, value)}`` of a NodeDef (TF's ``_bookkeeping`` attrs left out);
    ``substitute``: a calling function's attrs, for a body's placeholder attrs."""
    out = {}
    renamed = _RENAMED_ATTRS.get(node.op, {})
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
            raise _error(f"attr '{key}': {e.message}", name, node.op) from None
        if kind == "placeholder":  # a polymorphic function body: the call gives the value
            if substitute is None or decoded not in substitute:
                raise _error(f"attr '{key}' refers to the function attr '{decoded}', which "
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
                raise _error(f"input {j} '^' names no node", node.name, node.op)
            controls.append(ref[1:])
            continue
        if controls:
            raise _error(f"data input {ref!r} comes after control inputs (control inputs "
                         f"must come last)", node.name, node.op)
        m = pattern.fullmatch(ref)
        if m is None:
            raise _error(f"input {j} {ref!r} is not of the form 'node', 'node:index' or "
                         f"'^node'", node.name, node.op)
        arg = m.groupdict().get("arg")
        index = int(m["index"]) if m["index"] is not None else 0
        data.append((m["node"], (arg, index) if arg else index))
    return data, controls


class _Planner:
    """Turns a GraphDef into the flat list of nodes to build, inlining function calls."""

    def __init__(self, graph_def: Any, ps: tp.ProtoSet):
        self.ps = ps
        self.ops = {d.name: d for d in registered_ops(include_internal=False)}
        self.functions: dict[str, Any] = {}
        self.library_unreadable = False
        if ps.full:
            for f in graph_def.library.function:
                self.functions[f.signature.name] = f
        elif _LIBRARY_FIELD in tp.unknown_field_numbers(graph_def):
            self.library_unreadable = True
        self.nodes: list[_Node] = []
        self.names: set[str] = set()
        #: inlined call -> (its results as (node, ref), the function's output names)
        self.results: dict[str, tuple[list, list[str]]] = {}
        self.missing: dict[str, list[str]] = {}

    # -- top level --------------------------------------------------------------------
    def plan(self, graph_def: Any) -> list[_Node]:
        for i, node in enumerate(graph_def.node):
            where = f"node[{i}]"
            if not node.name or not _VALID_OP_NAME.fullmatch(node.name):
                raise _error(f"{where} has the invalid node name {node.name!r}", node.name or
                             None, node.op or None)
            if node.name in self.names:
                raise _error(f"duplicate node name ({where})", node.name, node.op)
            if not node.op:
                raise _error(f"{where} has no op", node.name)
            self.names.add(node.name)
        for node in graph_def.node:
            data, controls = _split_inputs(node, _REF)
            self._add(_Node(node.name, node.op, data, controls, node.device), node, (), None)
        for n in self.nodes:
            n.inputs = [self._redirect(n, src, ref) for src, ref in n.inputs]
        return self.nodes

    def _redirect(self, n: _Node, src: str, ref: Any) -> tuple[str, Any]:
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
            raise _error(f"input '{src}:{index}' names output {index} of the call '{src}', "
                         f"whose function returns {len(results)} values", n.name, n.op)
        return self._redirect(n, *results[index])

    def _add(self, n: _Node, raw: Any, stack: tuple, substitute: Mapping | None) -> None:
        """Plan node ``n`` (read from NodeDef ``raw``): a call is inlined, an op graphflow
        lacks is recorded as missing (its attrs not even read), any other kept."""
        calls = n.op in _CALL_OPS or n.op in self.functions or (
            self.library_unreadable and n.op not in self.ops and n.op not in OP_ALIASES)
        if not calls and n.op not in self.ops and OP_ALIASES.get(n.op) not in self.ops:
            self.missing.setdefault(n.op, []).append(n.name)
            self.nodes.append(n)
            return
        n.attrs = _decode_attrs(raw, n.name, substitute)
        if calls:
            self._inline(n, self._called_function(n), stack)
        else:
            self.nodes.append(n)

    def _called_function(self, n: _Node) -> str:
        if n.op in _CALL_OPS:
            kind, func = n.attrs.get("f", ("none", None))
            if kind != "func":
                raise _error(f"attr 'f' of a {n.op} must be a function, got kind '{kind}'",
                             n.name, n.op)
            name = func.name
        else:  # a function's name as the op
            name = n.op
        if name not in self.functions:
            if self.library_unreadable:
                tp.require_full(self.ps, f"The function library of this GraphDef (node "
                                         f"'{n.name}' calls '{name}')")
            raise _error(f"calls function '{name}', which the GraphDef's library does not "
                         f"define", n.name, n.op)
        return name

    # -- inlining --------------------------------------------------------------------
    def _inline(self, call: _Node, fname: str, stack: tuple) -> None:
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
            raise _error(f"calls function '{fname}' with {len(call.inputs)} inputs; it takes "
                         f"{len(sig.input_arg)}", call.name, call.op)
        func_attrs = dict(call.attrs["f"][1].attrs) if call.op in _CALL_OPS else \
            {k: v for k, v in call.attrs.items()}
        prefix = self._fresh_prefix(call.name)
        args = {a.name: src for a, src in zip(sig.input_arg, call.inputs)}
        body_names = {nd.name for nd in f.node_def}

        def resolve(ref_node: str, ref: Any, where: str) -> tuple[str, Any]:
            if ref_node in args and not isinstance(ref, tuple) and ref == 0:
                return args[ref_node]
            if ref_node not in body_names:
                raise _error(f"input {ref_node!r} of function '{fname}' names neither an "
                             f"argument nor a node of the function", where, call.op)
            return prefix + ref_node, ref

        for nd in f.node_def:
            if not nd.name or not _VALID_OP_NAME.fullmatch(prefix + nd.name):
                raise _error(f"function '{fname}' has the invalid node name {nd.name!r}",
                             call.name, call.op)
            data, controls = _split_inputs(nd, _FUNC_REF)
            inner = _Node(prefix + nd.name, nd.op,
                          [resolve(s, ref, prefix + nd.name) for s, ref in data],
                          [prefix + c if c in body_names else self._bad_control(c, fname, call)
                           for c in controls] + list(call.controls),
                          nd.device or call.device)
            self.names.add(inner.name)
            self._add(inner, nd, stack + (fname,), func_attrs)
        # the call's name stands for the function's results
        results = []
        for arg in sig.output_arg:
            if arg.name not in f.ret:
                raise _error(f"function '{fname}' returns no value for its output "
                             f"'{arg.name}'", call.name, call.op)
            m = _FUNC_REF.fullmatch(f.ret[arg.name])
            if m is None:
                raise _error(f"function '{fname}' returns {f.ret[arg.name]!r}, not a tensor",
                             call.name, call.op)
            ref = (m["arg"], int(m["index"])) if m["arg"] else 0
            results.append(resolve(m["node"], ref, call.name))
        control_ret = [prefix + n for n in f.control_ret.values() if n in body_names]
        # uses of the call's outputs read the function's results directly
        names = [a.name for a in sig.output_arg]
        self.results[call.name] = (results, names)
        if len(results) == 1:  # the call's name stands for its one result: "call:0" works
            self.nodes.append(_Node(call.name, "Identity", results, control_ret, call.device))
        else:  # a NoOp that waits for the whole function ("^call", or the call as a fetch)
            self.nodes.append(_Node(call.name, "NoOp", [], sorted(
                {src for src, _ in results} | set(control_ret)), call.device))

    def _bad_control(self, name: str, fname: str, call: _Node) -> str:
        raise _error(f"control input '^{name}' of function '{fname}' names no node of the "
                     f"function", call.name, call.op)

    def _fresh_prefix(self, base: str) -> str:
        prefix, k = base + "/", 0
        while any(n.startswith(prefix) for n in self.names):
            k += 1
            prefix = f"{base}/inlined_{k}/"
        return prefix


def _check_refs(nodes: list[_Node]) -> dict[str, _Node]:
    by_name = {n.name: n for n in nodes}
    if len(by_name) != len(nodes):
        seen: set[str] = set()
        dup = next(n for n in nodes if n.name in seen or seen.add(n.name))
        raise _error("duplicate node name (an inlined function node clashes with it)",
                     dup.name, dup.op)
    for n in nodes:
        for src, _ in n.inputs:
            if src not in by_name:
                raise _error(f"input '{src}' names no node in the GraphDef", n.name, n.op)
        for c in n.controls:
            if c not in by_name:
                raise _error(f"control input '^{c}' names no node in the GraphDef", n.name, n.op)
    return by_name


def _topological(nodes: list[_Node], by_name: dict[str, _Node]) -> list[_Node]:
    """Inputs before consumers, otherwise in file order; a cycle is an error naming a node
    on it."""
    index = {n.name: i for i, n in enumerate(nodes)}
    waiting = {n.name: len({s for s, _ in n.inputs} | set(n.controls)) for n in nodes}
    consumers: dict[str, list[str]] = {n.name: [] for n in nodes}
    for n in nodes:
        for src in {s for s, _ in n.inputs} | set(n.controls):
            consumers[src].append(n.name)
    import heapq

    ready = [index[n.name] for n in nodes if not waiting[n.name]]
    heapq.heapify(ready)
    order = []
    while ready:
        n = nodes[heapq.heappop(ready)]
        order.append(n)
        for c in consumers[n.name]:
            waiting[c] -= 1
            if not waiting[c]:
                heapq.heappush(ready, index[c])
    if len(order) != len(nodes):
        stuck = _on_cycle(nodes, by_name, waiting)
        raise _error("the graph has a cycle through this node (graphflow imports acyclic "
                     "graphs: no control flow loops)", stuck.name, stuck.op)
    return order


def _on_cycle(nodes, by_name, waiting) -> _Node:
    """A node on a cycle (not merely downstream of one): walk inputs from a stuck node."""
    n = next(n for n in nodes if waiting[n.name])
    seen: list[str] = []
    while n.name not in seen:
        seen.append(n.name)
        n = next(by_name[s] for s in [s for s, _ in n.inputs] + n.controls if waiting[s])
    return n


# -- 3. build ------------------------------------------------------------------------------
def _expect(n: _Node, key: str, kind: str, got: tuple[str, Any]) -> Any:
    got_kind, value = got
    if got_kind == kind or (got_kind == "list" and kind.startswith("list(")):
        return value
    raise _error(f"AttrValue had value with type '{got_kind}' when '{kind}' expected for "
                 f"attr '{key}'", n.name, n.op)


class _Scopes:
    """The new graph's root scope on each device string of the GraphDef, made once."""

    def __init__(self, graph: Graph):
        from ..scope import Scope

        self.root = Scope(graph)
        self.graph = graph
        self._on: dict[str, Any] = {}

    def on(self, n: _Node) -> Any:
        scope = self._on.get(n.device)
        if scope is None:
            try:
                device = canonical_device(n.device)
            except OpError as e:
                raise _error(f"device {n.device!r}: {e.message}", n.name, n.op) from None
            scope = self._on[n.device] = self.root.with_device(device)
        return scope


def _build_node(scopes: _Scopes, n: _Node, op_def: OpDef, built: dict[str, Operation],
                input_map: dict[tuple[str, int], Any], mapped: dict[str, Output]) -> Operation:
    graph = scopes.graph
    flat = []
    for j, (src, ref) in enumerate(n.inputs):
        flat.append(_output(graph, n, j, built[src], ref, input_map, mapped))
    # group list inputs by their length attrs (N); without N, the lists share what the
    # single inputs leave (TF always writes N; a hand-written GraphDef may not)
    lengths = {}
    lists = [s.number_attr for s in op_def.inputs if s.is_list]
    for attr in set(lists):
        if attr in n.attrs:
            lengths[attr] = _expect(n, attr, "int", n.attrs[attr])
        else:
            lengths[attr] = (len(flat) - (len(op_def.inputs) - len(lists))) // len(lists)
    expected = sum(lengths[s.number_attr] if s.is_list else 1 for s in op_def.inputs)
    if expected != len(flat):
        raise _error(f"op {n.op} takes {expected} inputs "
                     f"({', '.join(str(s) for s in op_def.inputs) or 'none'}), got {len(flat)}",
                     n.name, n.op)
    args, start = [], 0
    for spec in op_def.inputs:
        count = lengths[spec.number_attr] if spec.is_list else 1
        chunk = flat[start:start + count]
        args.append(chunk if spec.is_list else chunk[0])
        start += count
    kwargs = {}
    for key, got in n.attrs.items():
        spec = op_def.attrs.get(key)
        if spec is None:
            default = _DEFAULT_ONLY_ATTRS.get((n.op, key), _MISSING)
            value = got[1].decode() if isinstance(got[1], bytes) else got[1]
            if default is not _MISSING and value == default:
                continue
            if default is not _MISSING:
                raise UnimplementedError(f"attr '{key}' = {got[1]!r} of {n.op} is not "
                                         f"implemented (only {default!r})", n.name, n.op)
            raise _error(f"NodeDef mentions attr '{key}' not in Op<name={n.op}> "
                         f"(its attrs: {', '.join(op_def.attrs) or 'none'})", n.name, n.op)
        value = _expect(n, key, spec.kind, got)
        if key in op_def.user_attrs:
            kwargs[key] = value
    scope = scopes.on(n)
    if n.controls:
        scope = scope.with_control_dependencies(built[c] for c in n.controls)
    try:
        op = create_operation(scope, op_def, tuple(args), kwargs, name=n.name)
    except OpError as e:
        cls = type(e) if isinstance(e, (InvalidArgumentError, UnimplementedError)) \
            else InvalidArgumentError
        raise cls(f"Invalid GraphDef: {e.message}", e.node_name or n.name, e.op_type or n.op,
                  detail=e.detail) from e
    if op.name != n.name:  # pragma: no cover - names were checked unique
        raise _error(f"was imported as '{op.name}'", n.name, n.op)
    for key in op_def.inferred_attrs:
        if key in n.attrs and op_def.attrs[key].kind == "type":
            want = _expect(n, key, "type", n.attrs[key])
            if op.attrs[key] != want:
                raise _error(f"attr {key} is {want.name} but the inputs give "
                             f"{op.attrs[key].name}", n.name, n.op)
    return op


_MISSING = object()


def _output(graph: Graph, n: _Node, j: int, src: Operation, ref: Any,
            input_map: dict[tuple[str, int], Any], mapped: dict[str, Output]) -> Output:
    if isinstance(ref, tuple):  # a function body's 'node:arg:index'
        arg, index = ref
        specs = src.op_def.outputs
        if len(specs) == 1:
            flat = index
        else:
            names = [s.name for s in specs]
            if arg not in names:
                raise _error(f"input {j} names output '{arg}' of '{src.name}' ({src.type}), "
                             f"whose outputs are {', '.join(names)}", n.name, n.op)
            flat = sum(src.attrs[s.number_attr] if s.is_list else 1
                       for s in specs[:names.index(arg)]) + index
    else:
        flat = ref
    if flat >= len(src.outputs):
        raise _error(f"input {j} '{src.name}:{flat}' names output {flat} of '{src.name}', "
                     f"which has {len(src.outputs)} outputs", n.name, n.op)
    out = src.outputs[flat]
    if (src.name, flat) in input_map:
        if out.name not in mapped:
            mapped[out.name] = _mapped(graph, out, input_map[(src.name, flat)])
        return mapped[out.name]
    return out


def _mapped(graph: Graph, out: Output, value: Any) -> Output:
    """The Const standing for ``out`` under input_map (one per mapped tensor)."""
    from ..scope import Scope

    try:
        array = np.asarray(value, dtype=out.dtype.as_numpy_dtype)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"input_map['{out.name}']: cannot convert the value to "
                                   f"{out.dtype.name}: {e}", out.op.name, out.op.type) from None
    if not out.shape.is_compatible_with(array.shape):
        raise InvalidArgumentError(f"input_map['{out.name}']: a value of shape "
                                   f"{list(array.shape)} does not fit {out.shape}",
                                   out.op.name, out.op.type)
    return Scope(graph).constant(array, dtype=out.dtype,
                                 name=f"input_map/{out.op.name}_{out.index}")


def _parse_input_map(input_map: Mapping | None) -> dict[tuple[str, int], Any]:
    if input_map is None:
        return {}
    if not isinstance(input_map, Mapping):
        raise TypeError(f"input_map must be a dict {{tensor name: value}}, got "
                        f"{type(input_map).__name__}")
    out = {}
    for key, value in input_map.items():
        if not isinstance(key, str):
            raise TypeError(f"input_map keys are TensorFlow tensor names ('x:0'), got "
                            f"{key!r}")
        m = _REF.fullmatch(key)
        if m is None:
            raise InvalidArgumentError(f"input_map key {key!r} is not a tensor name "
                                       f"('node:index')")
        if isinstance(value, (Output, Operation)) or hasattr(value, "as_output"):
            raise TypeError(f"input_map['{key}']: graphflow imports into a new Graph, so a "
                            f"value must be an array-like (made a constant), not a "
                            f"graphflow tensor")
        out[(m["node"], int(m["index"] or 0))] = value
    return out


# -- entry point ---------------------------------------------------------------------------
def import_tf_graph(source: Any, input_map: Mapping[str, Any] | None = None) -> Graph:
    """A new gf.Graph holding a TensorFlow GraphDef, TF's node names kept.

    ``source``: a path (``.pb`` binary, ``.pbtxt`` text), bytes of a binary GraphDef, or a
    GraphDef message (TensorFlow's, tensorboard's or tensorboardX's). ``input_map``:
    ``{"x:0": value}`` replaces every use of a tensor by a constant of ``value`` (cast to
    the tensor's dtype), as TensorFlow's ``import_graph_def(input_map=...)`` does with a
    tensor. Function-library calls are inlined; the call's name stands for its result.

    UnimplementedError listing every op graphflow lacks, with the nodes using it;
    InvalidArgumentError naming the node for a malformed GraphDef (unparseable or
    truncated bytes, a missing input, a cycle, an attr of the wrong kind). Needs the
    ``tensorboard`` extra (TensorFlow's protobuf classes); a function library needs
    ``tensorboard-full``.
    """
    ps = tp.protos()
    mapping = _parse_input_map(input_map)
    graph_def = read_graph_def(source, ps)
    planner = _Planner(graph_def, ps)
    nodes = planner.plan(graph_def)
    by_name = _check_refs(nodes)
    if planner.missing:
        listing = "; ".join(f"{op} (nodes: {', '.join(names)})"
                            for op, names in sorted(planner.missing.items()))
        raise UnimplementedError(f"The GraphDef uses {len(planner.missing)} op type(s) "
                                 f"graphflow does not implement: {listing}")
    unknown = sorted(f"{name}:{index}" for name, index in mapping if name not in by_name)
    if unknown:
        raise InvalidArgumentError(f"Attempted to map inputs that were not found in the "
                                   f"GraphDef: {', '.join(unknown)}")
    order = _topological(nodes, by_name)
    graph = Graph()
    scopes = _Scopes(graph)
    built: dict[str, Operation] = {}
    mapped: dict[str, Output] = {}
    for n in order:
        op_def = planner.ops.get(n.op) or planner.ops[OP_ALIASES[n.op]]
        built[n.name] = _build_node(scopes, n, op_def, built, mapping, mapped)
    for name, index in mapping:
        if index >= len(built[name].outputs):
            raise InvalidArgumentError(f"input_map names '{name}:{index}', but '{name}' has "
                                       f"{len(built[name].outputs)} outputs", name,
                                       built[name].type)
    return graph


__all__ = ["import_tf_graph", "read_graph_def", "OP_ALIASES"]
