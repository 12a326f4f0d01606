"""``gf.import_tf_graph``: a TensorFlow GraphDef as a new gf.Graph, TF's node names kept.

The import runs in three stages, so that nothing is half-imported (the Graph is new
and returned only when every node was built):

1. *read*: the source (a path to ``.pb``/``.pbtxt``, bytes, or a GraphDef message of
   any generated class) parsed with TensorFlow's generated messages (``tf_proto``);
2. *plan* (``tf_import_plan``): calls of library functions inlined as ``call/node``
   nodes; every input checked to name a node; every op graphflow lacks collected into
   ONE UnimplementedError; cycles found;
3. *build*: nodes created in topological order through the ordinary builder (shape
   inference and every build-time check run), attrs checked against graphflow's OpDefs
   (kind, and the inferred type attrs against what the inputs give).

Ops are TensorFlow's own where graphflow registers them; ``AddV2`` maps to ``Add``
(identical semantics: Add's ``TFForm.aliases``), and each op's TFForm (``op_def.tf``)
names TF's attrs for it (T for dtype), the ones graphflow lacks and their defaults. Attrs
whose names start with ``_`` (``_output_shapes``, ``_class``...) are TensorFlow's
bookkeeping and ignored.
"""
from __future__ import annotations

import os
import re
from typing import Any, Mapping

import numpy as np

from ..builder import create_operation
from ..device_spec import canonical_device
from ..errors import InvalidArgumentError, OpError, UnimplementedError
from ..graph import Graph, Operation, Output
from ..registry import OpDef
from . import tf_proto as tp
from .tf_functions import FunctionLibrary
from .tf_import_plan import (LIBRARY_FIELD, REF, V1_CONTROL_FLOW, Node, Planner, check_refs,
                             error, op_aliases, topological)
from .tf_v1_control_flow import convert_v1_control_flow

#: GraphDef's fields (graph.proto) by number, with the wire type each is written with:
#: node, library, version (an int), versions, debug_info.
_GRAPHDEF_FIELDS = {1: 2, LIBRARY_FIELD: 2, 3: 0, 4: 2, 5: 2}
#: SavedModel's fields (saved_model.proto): saved_model_schema_version (an int), meta_graphs.
_SAVED_MODEL_FIELDS = {1: 0, 2: 2}
_WIRE_TYPES = {0: "an integer", 1: "a 64-bit value", 2: "bytes", 3: "a group", 5: "a 32-bit value"}


# -- 1. read -------------------------------------------------------------------------------
def read_graph_def(source: Any, ps: tp.ProtoSet | None = None) -> Any:
    """A GraphDef message (of ``ps``'s classes) from a path, bytes or any GraphDef message;
    the caller's message is never modified. A directory, or a file that is not a
    GraphDef (a SavedModel's ``saved_model.pb``...), is an InvalidArgumentError naming it."""
    ps = ps or tp.protos()
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if os.path.isdir(path):
            raise _directory_error(path)
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


def _directory_error(path: str) -> InvalidArgumentError:
    if any(os.path.isfile(os.path.join(path, f)) for f in ("saved_model.pb", "saved_model.pbtxt")):
        return InvalidArgumentError(
            f"{path} is a SavedModel directory, not a GraphDef file: load it with "
            f"gf.load_saved_model({path!r}) (its signatures and variables), or import a "
            f"frozen GraphDef (.pb/.pbtxt)")
    return InvalidArgumentError(f"{path} is a directory, not a GraphDef file (.pb or .pbtxt)")


def _parse_binary(data: bytes, where: str, ps: tp.ProtoSet) -> Any:
    from google.protobuf.message import DecodeError

    graph_def = ps.GraphDef()
    try:
        graph_def.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        _refuse_other_messages(data, where)
        raise error(f"{where} could not be parsed as a binary GraphDef (truncated or not a "
                     f"GraphDef): {e}") from None
    unknown = tp.unknown_field_numbers(graph_def)
    if unknown or (data and not graph_def.node):  # what a GraphDef would not leave
        _refuse_other_messages(data, where)
    stray = unknown - set(_GRAPHDEF_FIELDS)
    if stray:
        raise error(f"{where} is not a GraphDef (it has fields numbered "
                     f"{sorted(stray)}, which a GraphDef does not)")
    return graph_def


def _refuse_other_messages(data: bytes, where: str) -> None:
    """InvalidArgumentError naming ``where`` if its top-level fields are not a GraphDef's
    (read schema-free: a schema that lacks a field keeps it unknown, so a SavedModel
    would otherwise read as an empty GraphDef through tensorboardX's classes)."""
    from google.protobuf import empty_pb2, unknown_fields
    from google.protobuf.message import DecodeError

    try:
        top = [(f.field_number, f.wire_type)
               for f in unknown_fields.UnknownFieldSet(empty_pb2.Empty.FromString(data))]
    except (DecodeError, RuntimeError, ValueError):
        return  # not even protobuf: the caller's parse error says so
    numbers = {number for number, _ in top}
    if numbers >= {1, 2} and all(_SAVED_MODEL_FIELDS.get(n) == w for n, w in top):
        folder = repr(os.path.dirname(where) or ".") if where.endswith(".pb") else "path"
        raise InvalidArgumentError(
            f"{where} is a SavedModel (saved_model.pb), not a GraphDef: load its directory "
            f"with gf.load_saved_model({folder}), or import a frozen GraphDef")
    for number, wire in top:
        if _GRAPHDEF_FIELDS.get(number, wire) != wire:
            raise error(f"{where} is not a GraphDef: its field {number} holds "
                        f"{_WIRE_TYPES.get(wire, f'wire type {wire}')}, where a GraphDef's "
                        f"holds {_WIRE_TYPES[_GRAPHDEF_FIELDS[number]]}")


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
        raise error(f"{where} is not a text GraphDef: byte {e.start} is not UTF-8") from None
    if re.search(r"(?m)^\s*(saved_model_schema_version|meta_graphs)\s*[:{]", text):
        raise InvalidArgumentError(f"{where} is a SavedModel (saved_model.pbtxt), not a "
                                   f"GraphDef: load its directory with gf.load_saved_model")
    if not ps.full:  # DataType values newer than tensorboardX's enum, by number
        text = _NEWER_ENUM.sub(lambda m: f"{m[1]}{_NEWER_ENUMS[m[2]]}", text)
    try:
        return text_format.Parse(text, ps.GraphDef())
    except text_format.ParseError as e:
        newer = _NO_FIELD.search(str(e))
        if ps.full or newer is None or newer["field"] not in _NEWER_FIELDS:
            raise error(f"{where} is not a text GraphDef: {e}") from None
    if re.search(r"(?m)^library\s*\{", text):  # its functions would be skipped unseen
        tp.require_full(ps, f"The function library of {where}")
    if re.search(r"\buint(32|64)_val\s*:", text):
        tp.require_full(ps, f"The uint32_val/uint64_val constants of {where}")
    try:  # TensorFlow's newer fields (experimental_type...) dropped: they change no result
        return text_format.Parse(text, ps.GraphDef(), allow_unknown_field=True)
    except text_format.ParseError as e:
        raise error(f"{where} is not a text GraphDef: {e}") from None


# -- 3. build ------------------------------------------------------------------------------
def _expect(n: Node, key: str, kind: str, got: tuple[str, Any]) -> Any:
    got_kind, value = got
    if got_kind == kind or (got_kind == "list" and kind.startswith("list(")):
        return value
    raise error(f"AttrValue had value with type '{got_kind}' when '{kind}' expected for "
                 f"attr '{key}'", n.name, n.op)


class _Scopes:
    """The new graph's root scope on each device string of the GraphDef, made once."""

    def __init__(self, graph: Graph):
        from ..scope import Scope

        self.root = Scope(graph)
        self.graph = graph
        self._on: dict[str, Any] = {}

    def on(self, n: Node) -> Any:
        scope = self._on.get(n.device)
        if scope is None:
            try:
                device = canonical_device(n.device)
            except OpError as e:
                raise error(f"device {n.device!r}: {e.message}", n.name, n.op) from None
            scope = self._on[n.device] = self.root.with_device(device)
        return scope


def _build_node(scopes: _Scopes, n: Node, op_def: OpDef, built: dict[str, Operation],
                input_map: dict[tuple[str, int], Any], mapped: dict[str, Output],
                library: FunctionLibrary | None = None) -> Operation:
    """Build plan node ``n`` as an op of ``op_def``; an error names the node. The
    functions an If/While names are built first (``library``)."""
    flat = [_output(scopes.graph, n, j, built[src], ref, input_map, mapped)
            for j, (src, ref) in enumerate(n.inputs)]
    args = op_def.group_inputs(flat, _arg_lengths(n, op_def, len(flat)))
    kwargs = _user_attrs(n, op_def)
    if library is not None and any(op_def.attrs[k].kind == "func" for k in kwargs):
        kwargs = library.call_attrs(n, op_def, args, kwargs, scopes.graph)
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
        raise error(f"was imported as '{op.name}'", n.name, n.op)
    _check_inferred_types(n, op_def, op)
    return op


def _arg_lengths(n: Node, op_def: OpDef, count: int) -> tuple[int, ...]:
    """How many of the ``count`` flat inputs each declared input takes: a list input by
    its length attr (N); without N, the lists share what the single inputs leave (TF
    always writes N; a hand-written GraphDef may not)."""
    lengths = {}
    lists = [s.number_attr or s.type_list_attr for s in op_def.inputs if s.is_list]
    for attr in set(lists):
        if attr in n.attrs and op_def.attrs[attr].kind == "int":
            lengths[attr] = _expect(n, attr, "int", n.attrs[attr])
        elif attr in n.attrs:  # an If's Tin, a While's T: one dtype per input
            lengths[attr] = len(_expect(n, attr, "list(type)", n.attrs[attr]))
        else:
            lengths[attr] = (count - (len(op_def.inputs) - len(lists))) // len(lists)
    per_input = tuple(lengths[s.number_attr or s.type_list_attr] if s.is_list else 1
                      for s in op_def.inputs)
    if sum(per_input) != count:
        raise error(f"op {n.op} takes {sum(per_input)} inputs "
                     f"({', '.join(str(s) for s in op_def.inputs) or 'none'}), got {count}",
                     n.name, n.op)
    return per_input


def _user_attrs(n: Node, op_def: OpDef) -> dict[str, Any]:
    """The attrs a user passes to the builder, read from the NodeDef's; an attr the op
    lacks is an error unless its TFForm (``op_def.tf``) says TF's graphs hold it: then
    it must hold TF's default, the only value graphflow implements (any other would
    change the semantics), unless it only hints at how to compute (``TFForm.hints``:
    accepted at any value)."""
    kwargs = {}
    form = op_def.tf
    for key, got in n.attrs.items():
        spec = op_def.attrs.get(key)
        if spec is None and form is not None and key in form.hints:
            continue
        if spec is None:
            default = form.defaults[key][1] if form is not None and key in form.defaults \
                else _MISSING
            value = got[1].decode() if isinstance(got[1], bytes) else got[1]
            if default is not _MISSING and value == default:
                continue
            if default is not _MISSING:
                raise UnimplementedError(f"attr '{key}' = {got[1]!r} of {n.op} is not "
                                         f"implemented (only {default!r})", n.name, n.op)
            raise error(f"NodeDef mentions attr '{key}' not in Op<name={n.op}> "
                         f"(its attrs: {', '.join(op_def.attrs) or 'none'})", n.name, n.op)
        value = _expect(n, key, spec.kind, got)
        if key in op_def.user_attrs:
            kwargs[key] = value
    return kwargs


def _check_inferred_types(n: Node, op_def: OpDef, op: Operation) -> None:
    """A type attr the NodeDef states and graphflow inferred from the inputs must agree."""
    for key in op_def.inferred_attrs:
        if key in n.attrs and op_def.attrs[key].kind == "type":
            want = _expect(n, key, "type", n.attrs[key])
            if op.attrs[key] != want:
                raise error(f"attr {key} is {want.name} but the inputs give "
                             f"{op.attrs[key].name}", n.name, n.op)
        elif key in n.attrs and op_def.attrs[key].kind == "list(type)":
            want = tuple(_expect(n, key, "list(type)", n.attrs[key]))
            if tuple(op.attrs[key]) != want:
                raise error(f"attr {key} is [{', '.join(t.name for t in want)}] but the "
                             f"inputs give [{', '.join(t.name for t in op.attrs[key])}]",
                             n.name, n.op)


_MISSING = object()


def _output(graph: Graph, n: Node, j: int, src: Operation, ref: Any,
            input_map: dict[tuple[str, int], Any], mapped: dict[str, Output]) -> Output:
    if isinstance(ref, tuple):  # a function body's 'node:arg:index'
        arg, index = ref
        specs = src.op_def.outputs
        if len(specs) == 1:
            flat = index
        else:
            names = [s.name for s in specs]
            if arg not in names:
                raise error(f"input {j} names output '{arg}' of '{src.name}' ({src.type}), "
                             f"whose outputs are {', '.join(names)}", n.name, n.op)
            flat = sum(s.length(src.attrs) for s in specs[:names.index(arg)]) + index
    else:
        flat = ref
    if flat >= len(src.outputs):
        raise error(f"input {j} '{src.name}:{flat}' names output {flat} of '{src.name}', "
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
        m = REF.fullmatch(key)
        if m is None:
            raise InvalidArgumentError(f"input_map key {key!r} is not a tensor name "
                                       f"('node:index')")
        if isinstance(value, (Output, Operation)) or hasattr(value, "as_output"):
            raise TypeError(f"input_map['{key}']: graphflow imports into a new Graph, so a "
                            f"value must be an array-like (made a constant), not a "
                            f"graphflow tensor")
        out[(m["node"], int(m["index"] or 0))] = value
    return out


def _missing_ops_error(planner: Planner) -> UnimplementedError:
    """ONE error listing every op graphflow lacks, with the nodes using it; a node inside
    a library function (an If/While branch or body) is named ``function/node``."""
    listing = "; ".join(f"{op} (nodes: {', '.join(names)})"
                        for op, names in sorted(planner.missing.items()))
    inside = ", ".join(f"'{f}'" for f in sorted(planner.missing_in))
    where = f" (nodes named f/node are in library function f: {inside})" if inside else ""
    return UnimplementedError(f"The GraphDef uses {len(planner.missing)} op type(s) "
                              f"graphflow does not implement: {listing}{where}")


# -- entry point ---------------------------------------------------------------------------
def import_tf_graph(source: Any, input_map: Mapping[str, Any] | None = None) -> Graph:
    """A new gf.Graph holding a TensorFlow GraphDef, TF's node names kept.

    ``source``: a path (``.pb`` binary, ``.pbtxt`` text), bytes of a binary GraphDef, or a
    GraphDef message (TensorFlow's, tensorboard's or tensorboardX's). ``input_map``:
    ``{"x:0": value}`` replaces every use of a tensor by a constant of ``value`` (cast to
    the tensor's dtype), as TensorFlow's ``import_graph_def(input_map=...)`` does with a
    tensor. Function-library calls are inlined; the call's name stands for its result.
    TF 2's functional control flow (If, StatelessIf, While, StatelessWhile) imports with
    its library functions as gf.Functions; TF 1.x's (Switch/Merge conds, Enter/Exit
    while frames) is converted to that functional form (``tf_v1_control_flow``).

    UnimplementedError listing every op graphflow lacks, with the nodes using it;
    InvalidArgumentError naming the node for a malformed GraphDef (unparseable or
    truncated bytes, a missing input, a cycle, an attr of the wrong kind). Needs the
    ``tensorboard`` extra (TensorFlow's protobuf classes); a function library needs
    TensorFlow's full schema (TensorFlow or ``tensorboard-full``). A directory (a
    SavedModel's: use ``gf.load_saved_model``) or a file that is not a GraphDef is an
    InvalidArgumentError naming it. The nodes of a file are "defined at" its path.
    """
    ps = tp.protos()
    mapping = _parse_input_map(input_map)
    graph_def = read_graph_def(source, ps)
    planner = Planner(graph_def, ps)
    nodes = planner.plan(graph_def)
    by_name = check_refs(nodes)
    if planner.missing:
        raise _missing_ops_error(planner)
    unknown = sorted(f"{name}:{index}" for name, index in mapping if name not in by_name)
    if unknown:
        raise InvalidArgumentError(f"Attempted to map inputs that were not found in the "
                                   f"GraphDef: {', '.join(unknown)}")
    if any(n.op in V1_CONTROL_FLOW for n in nodes):  # TF 1.x frames as If/While
        nodes = convert_v1_control_flow(nodes, planner)
        by_name = check_refs(nodes)
    order = topological(nodes, by_name)
    graph = Graph()
    scopes = _Scopes(graph)
    built: dict[str, Operation] = {}
    mapped: dict[str, Output] = {}

    def op_of(n: Node) -> OpDef:
        return planner.ops.get(n.op) or planner.ops[planner.aliases[n.op]]

    library = FunctionLibrary(planner.bodies, op_of)
    for n in order:
        built[n.name] = _build_node(scopes, n, op_of(n), built, mapping, mapped, library)
    for name, index in mapping:
        if index >= len(built[name].outputs):
            raise InvalidArgumentError(f"input_map names '{name}:{index}', but '{name}' has "
                                       f"{len(built[name].outputs)} outputs", name,
                                       built[name].type)
    if isinstance(source, (str, os.PathLike)):  # errors say "defined at model.pb"
        for op in graph.operations():
            op.site = os.fspath(source)
    return graph


def __getattr__(name: str) -> Any:
    if name == "OP_ALIASES":  # the former table: a view of the OpDefs
        return op_aliases()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["import_tf_graph", "read_graph_def", "OP_ALIASES"]
