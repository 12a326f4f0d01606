"""Graphs as plain, versioned, JSON-ready dicts (TensorFlow's GraphDef), and back.

The format (``version`` 1)::

    {"format": "graphflow.GraphDef", "version": 1, "producer": "graphflow 0.1.0",
     "nodes": [{"name": "ScatterNd", "op": "ScatterNd",
                "inputs": ["Const:0", "Const_1:0", "Const_2:0"],
                "control_inputs": [], "device": "",
                "attrs": {"T": {"type": "int32"}, "Tindices": {"type": "int64"}}}, ...]}

Each attr is a one-key dict naming its kind: ``{"type": "int32"}``, ``{"int": 2}``,
``{"bool": true}``, ``{"float": 0.5}`` (or ``"nan"``, ``"inf"``, ``"-inf"``),
``{"string": "..."}``, ``{"shape": [2, null]}`` (``null``: unknown rank),
``{"list(int)": [0, 1]}`` and ``{"tensor": {"dtype", "shape", "data"}}`` whose
data is base64 of the raw little-endian bytes, or a list of base64 strings for a
string tensor, so every value (nan payloads, -0.0, non-UTF-8 bytes) round-trips
exactly. List arguments are flat in ``inputs``; their grouping follows from the
OpDef and the recorded length attrs (``N``).

Importing is atomic. A Graph only grows, so nothing can be taken back once
added; the importer therefore checks the structure of every node first, then
builds all of them through the normal builder into a scratch graph (shape
inference and every build-time check run there), and only when that succeeded
replays the same, now known-good, build into the target graph.
"""
from __future__ import annotations

import base64
import binascii
import json
import math
import os
import re
import reprlib
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from .builder import create_operation
from .convert import from_little_endian
from .device_spec import canonical_device
from .dtypes import ALL_TYPES, dtype_of_array, string
from .errors import InvalidArgumentError, OpError
from .graph import _VALID_OP_NAME, Graph, Operation
from .registry import Attr, OpDef, registered_ops
from .shapes import TensorShape
from .traversal import stable_topological_order

if TYPE_CHECKING:  # pragma: no cover
    from .scope import Scope

FORMAT = "graphflow.GraphDef"
VERSION = 1

_DTYPES = {t.name: t for t in ALL_TYPES}
_TOP_FIELDS = {"format", "version", "producer", "nodes"}
_NODE_FIELDS = {"name", "op", "inputs", "control_inputs", "device", "attrs"}
#: ``node:index``; the index in ASCII digits (``str.isdigit`` also takes '²' and '٠').
_INPUT_REF = re.compile(r"(?P<node>[^:]+):(?P<index>[0-9]{1,10})")
_INT64_MAX = 2 ** 63 - 1
#: numpy's limit on the rank of an array.
_MAX_RANK = 64

_short = reprlib.Repr()
_short.maxstring = _short.maxother = 60


def _show(value: Any) -> str:
    """A bounded repr for error messages: a file may hold huge or deeply nested values."""
    return _short.repr(value)


# -- writing ---------------------------------------------------------------------
def as_graph_def(graph: Graph) -> dict:
    """A JSON-ready description of ``graph``, nodes in creation (topological) order."""
    from .version import __version__

    return {"format": FORMAT, "version": VERSION, "producer": f"graphflow {__version__}",
            "nodes": [_node_def(op) for op in graph.operations()]}


def _node_def(op: Operation) -> dict:
    return {"name": op.name, "op": op.type,
            "inputs": [o.name for o in op.inputs],
            "control_inputs": [c.name for c in op.control_inputs],
            "device": op.device,
            "attrs": {k: encode_attr(op.op_def.attrs[k].kind, v) for k, v in op.attrs.items()}}


def encode_attr(kind: str, value: Any) -> dict:
    """One attr value as ``{kind: json_value}``."""
    if kind == "type":
        return {kind: value.name}
    if kind in ("int", "bool", "string"):
        return {kind: value}
    if kind == "float":
        return {kind: value if math.isfinite(value) else repr(value)}  # 'nan', 'inf', '-inf'
    if kind == "shape":
        return {kind: value.dims}
    if kind == "list(int)":
        return {kind: list(value)}
    if kind == "tensor":
        return {kind: encode_tensor(value)}
    if kind == "list(type)":
        return {kind: [t.name for t in value]}
    if kind == "list(shape)":
        return {kind: [s.dims for s in value]}
    if kind == "func":
        return {kind: encode_function(value)}
    raise NotImplementedError(f"No GraphDef encoding for attrs of kind '{kind}'")


def encode_function(function: Any) -> dict:
    """A graph function as its own GraphDef, with the names of its input placeholders
    (arguments, then captures: the op feeds them in this order) and of its outputs."""
    return {"name": function.name, "inputs": [p.name for p in function.inputs],
            "outputs": [o.name for o in function.outputs],
            "graph": as_graph_def(function.graph)}


def encode_tensor(array: np.ndarray) -> dict:
    """``{"dtype", "shape", "data"}``: base64 of little-endian bytes, or of each string."""
    dtype = dtype_of_array(array)
    if dtype is string:
        data: Any = [base64.b64encode(bytes(x)).decode("ascii") for x in array.reshape(-1)]
    else:
        le = np.ascontiguousarray(array, dtype=dtype.as_numpy_dtype.newbyteorder("<"))
        data = base64.b64encode(le.tobytes()).decode("ascii")
    return {"dtype": dtype.name, "shape": list(array.shape), "data": data}


def to_json(graph_def: Mapping) -> str:
    """Strict JSON text, one node per line (readable, and diffs show changed nodes)."""
    def dump(value: Any) -> str:
        return json.dumps(value, allow_nan=False)

    head = ", ".join(f"{dump(k)}: {dump(v)}" for k, v in graph_def.items() if k != "nodes")
    nodes = "".join(("\n " if i == 0 else ",\n ") + dump(n)
                    for i, n in enumerate(graph_def["nodes"]))
    return "{" + head + ', "nodes": [' + nodes + ("\n" if nodes else "") + "]}"


def save(graph: Graph, path: str | os.PathLike) -> None:
    """Write ``graph`` as GraphDef JSON; the file is replaced only once fully written.

    The file gets the permissions ``open(path, "w")`` would give (0666 less the umask);
    an OSError names ``path``, not the temporary file written next to it.
    """
    text = to_json(as_graph_def(graph)) + "\n"
    target = os.path.realpath(path)  # a symlink keeps pointing at the saved file
    tmp = os.path.join(os.path.dirname(target),
                       f".{os.path.basename(target)}.{secrets.token_hex(6)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as e:
        raise type(e)(e.errno, e.strerror, os.fspath(path)) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # on disk before the rename: a crash never leaves it empty
        os.replace(tmp, target)
    except BaseException as e:
        os.unlink(tmp)
        if isinstance(e, OSError):
            raise type(e)(e.errno, e.strerror, os.fspath(path)) from None
        raise


# -- reading: structure ------------------------------------------------------------
@dataclass(frozen=True)
class _Node:
    """One node of a GraphDef whose structure has been checked."""

    index: int
    name: str
    op_def: OpDef
    inputs: tuple[tuple[str, int], ...]   # (node name, output index)
    control_inputs: tuple[str, ...]
    device: str
    attrs: dict[str, Any]                # decoded, as given in the file


def _error(field: str, message: str, node: str | None = None,
           op_type: str | None = None) -> InvalidArgumentError:
    return InvalidArgumentError(f"Invalid GraphDef, field '{field}': {message}", node, op_type)


def _parse(graph_def: Any) -> list[_Node]:
    """Check everything that can be checked without building; nodes in file order."""
    if not isinstance(graph_def, Mapping):
        raise _error("<root>", f"expected an object, got {type(graph_def).__name__}")
    for key in ("format", "version", "nodes"):
        if key not in graph_def:
            raise _error(key, "missing")
    extra = sorted(set(graph_def) - _TOP_FIELDS)
    if extra:
        raise _error(extra[0], f"unknown field (a version {VERSION} GraphDef has "
                               f"{', '.join(sorted(_TOP_FIELDS))})")
    if graph_def["format"] != FORMAT:
        raise _error("format", f"expected '{FORMAT}', got {_show(graph_def['format'])}")
    version = graph_def["version"]
    if not _is_int(version) or version < 1:
        raise _error("version", f"expected a positive int, got {_show(version)}")
    if version > VERSION:
        raise _error("version", f"GraphDef version {version} is newer than this graphflow "
                                f"reads (up to {VERSION}); upgrade graphflow to load it")
    nodes = graph_def["nodes"]
    if not isinstance(nodes, list):
        raise _error("nodes", f"expected a list, got {type(nodes).__name__}")
    ops = {d.name: d for d in registered_ops(include_internal=True)}
    names: dict[str, int] = {}
    raw = []
    for i, node in enumerate(nodes):
        where = f"nodes[{i}]"
        if not isinstance(node, Mapping):
            raise _error(where, f"expected an object, got {type(node).__name__}")
        name = node.get("name")
        if name is None:
            raise _error(f"{where}.name", "missing")
        if not isinstance(name, str) or not _VALID_OP_NAME.fullmatch(name):
            raise _error(f"{where}.name", f"{_show(name)} is not a valid node name")
        if name in names:
            raise _error(f"{where}.name", f"duplicate node name (also nodes[{names[name]}])", name)
        names[name] = i
        raw.append(node)
    return [_parse_node(i, node, ops, names) for i, node in enumerate(raw)]


@dataclass(frozen=True)
class _NodeAt:
    """Where a node sits in the file, for its error messages: index, name, op type once known."""

    index: int
    name: str
    op_type: str | None = None

    def error(self, field: str, message: str) -> InvalidArgumentError:
        where = f"nodes[{self.index}]"
        return _error(f"{where}.{field}" if field else where, message, self.name, self.op_type)


def _parse_node(i: int, node: Mapping, ops: dict[str, OpDef], names: dict[str, int]) -> _Node:
    """Check one node's fields against its OpDef and the names of the file's nodes."""
    at = _NodeAt(i, node["name"])
    extra = sorted(set(node) - _NODE_FIELDS)
    if extra:
        raise at.error(extra[0], f"unknown field (a node has {', '.join(sorted(_NODE_FIELDS))})")
    definition = _node_op_def(node, ops, at)
    at = _NodeAt(i, at.name, definition.name)
    inputs = _node_inputs(node, names, at)
    controls = _node_control_inputs(node, names, at)
    device = _node_device(node, at)
    attrs = _node_attrs(node, definition, at)
    _check_input_count(definition, attrs, len(inputs), at)
    return _Node(i, at.name, definition, tuple(inputs), tuple(controls), device, attrs)


def _node_op_def(node: Mapping, ops: dict[str, OpDef], at: _NodeAt) -> OpDef:
    """The registered OpDef the node's ``op`` names."""
    op_type = node.get("op")
    if op_type is None:
        raise at.error("op", "missing")
    if not isinstance(op_type, str) or op_type not in ops:
        raise at.error("op", f"Op type not registered {_show(op_type)} in this graphflow")
    return ops[op_type]


def _node_inputs(node: Mapping, names: dict[str, int], at: _NodeAt) -> list[tuple[str, int]]:
    """The data inputs as (node name, output index), each naming a node of the file."""
    inputs = []
    for j, ref in enumerate(_list_of_str(node.get("inputs", []),
                                         lambda m: at.error("inputs", m))):
        match = _INPUT_REF.fullmatch(ref)
        if match is None:
            raise at.error(f"inputs[{j}]", f"{_show(ref)} is not of the form 'name:index' "
                                           f"(index in ASCII digits)")
        src = match["node"]
        if src not in names:
            raise at.error(f"inputs[{j}]", f"input {_show(ref)} names no node in the GraphDef")
        inputs.append((src, int(match["index"])))
    return inputs


def _node_control_inputs(node: Mapping, names: dict[str, int], at: _NodeAt) -> list[str]:
    """The control inputs, each naming a node of the file."""
    controls = _list_of_str(node.get("control_inputs", []),
                            lambda m: at.error("control_inputs", m))
    for j, ref in enumerate(controls):
        if ref not in names:
            raise at.error(f"control_inputs[{j}]", f"control input {_show(ref)} names no node "
                                                   f"in the GraphDef")
    return controls


def _node_device(node: Mapping, at: _NodeAt) -> str:
    """The requested device, canonical."""
    device = node.get("device", "")
    if not isinstance(device, str):
        raise at.error("device", f"expected a string, got {_show(device)}")
    try:
        return canonical_device(device)
    except InvalidArgumentError as e:
        raise at.error("device", e.message) from None


def _node_attrs(node: Mapping, definition: OpDef, at: _NodeAt) -> dict[str, Any]:
    """The attrs decoded and coerced by their specs; every required attr present."""
    attrs_in = node.get("attrs", {})
    if not isinstance(attrs_in, Mapping):
        raise at.error("attrs", f"expected an object, got {type(attrs_in).__name__}")
    attrs = {}
    for key, encoded in attrs_in.items():
        spec = definition.attrs.get(key)
        if spec is None:
            known = ", ".join(definition.attrs) or "none"
            raise at.error(f"attrs.{key}", f"'{key}' is not an attr of op {at.op_type} (its "
                                           f"attrs: {known})")
        try:
            attrs[key] = spec.coerce(key, decode_attr(spec, encoded), at.op_type)
        except InvalidArgumentError as e:
            raise at.error(f"attrs.{key}", e.message) from None
    for key in definition.user_attrs:
        if definition.attrs[key].required and key not in attrs:
            raise at.error(f"attrs.{key}", f"missing (op {at.op_type} requires it)")
    return attrs


def _check_input_count(definition: OpDef, attrs: dict[str, Any], count: int,
                       at: _NodeAt) -> None:
    """As many inputs as the OpDef takes, list inputs counted by their length attrs."""
    for spec in definition.inputs:
        length = spec.number_attr or spec.type_list_attr
        if spec.is_list and length not in attrs:
            raise at.error(f"attrs.{length}", f"missing; it gives the length of "
                                              f"list input '{spec.name}'")
    expected = sum(definition.input_counts(attrs))
    if count != expected:
        raise at.error("inputs", f"op {at.op_type} takes {expected} inputs "
                                 f"({', '.join(str(s) for s in definition.inputs) or 'none'}), "
                                 f"got {count}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _list_of_str(value: Any, fail) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise fail(f"expected a list of strings, got {_show(value)}")
    return value


def decode_attr(spec: Attr, encoded: Any) -> Any:
    """The attr value that ``encode_attr`` wrote; InvalidArgumentError if malformed."""
    kind = spec.kind
    if not isinstance(encoded, Mapping) or len(encoded) != 1:
        raise InvalidArgumentError(f"expected {{\"{kind}\": value}}, got {_show(encoded)}")
    (got, value), = encoded.items()
    if got != kind:
        raise InvalidArgumentError(f"attr has kind '{kind}', got a value of kind '{got}'")

    def bad(expected: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"expected {expected}, got {_show(value)}")

    if kind == "type":
        if value not in _DTYPES:
            raise bad(f"a dtype name ({', '.join(_DTYPES)})")
        return _DTYPES[value]
    if kind == "int":
        if not _is_int(value):
            raise bad("an int")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if kind == "float":
        if isinstance(value, str) and value in ("nan", "inf", "-inf"):
            return float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a number, 'nan', 'inf' or '-inf'")
        return float(value)
    if kind == "string":
        if not isinstance(value, str):
            raise bad("a string")
        return value
    if kind == "shape":
        if value is not None and not (isinstance(value, list) and all(
                d is None or (_is_int(d) and d >= 0) for d in value)):
            raise bad("null (unknown rank) or a list of dims, each >= 0 or null")
        return TensorShape(value)
    if kind == "list(int)":
        if not isinstance(value, list) or not all(_is_int(v) for v in value):
            raise bad("a list of ints")
        return tuple(value)
    if kind == "tensor":
        return decode_tensor(value)
    if kind == "list(type)":
        if not isinstance(value, list) or not all(v in _DTYPES for v in value):
            raise bad("a list of dtype names")
        return tuple(_DTYPES[v] for v in value)
    if kind == "list(shape)":
        if not isinstance(value, list):
            raise bad("a list of shapes")
        return tuple(decode_attr(Attr("shape"), {"shape": v}) for v in value)
    if kind == "func":
        return decode_function(value)
    raise InvalidArgumentError(f"No GraphDef decoding for attrs of kind '{kind}'")


def decode_function(value: Any) -> Any:
    """The graph function ``encode_function`` wrote: its GraphDef built into a function
    graph of its own (every check of an import), its inputs and outputs found by name."""
    from .functions import FuncGraph, finish, tracing
    from .scope import Scope

    if not isinstance(value, Mapping) or set(value) != {"name", "inputs", "outputs", "graph"}:
        raise InvalidArgumentError(f"expected a function {{name, inputs, outputs, graph}}, "
                                   f"got {_show(value)}")
    name = value["name"]
    if not isinstance(name, str):
        raise InvalidArgumentError(f"a function's name must be a string, got {_show(name)}")
    graph = FuncGraph(name, Graph())
    with tracing(graph):
        _build(_topological(_parse(value["graph"])), Scope(graph))
    try:
        inputs = [graph.output(n) for n in _list_of_str(value["inputs"], InvalidArgumentError)]
        outputs = [graph.output(n) for n in _list_of_str(value["outputs"],
                                                          InvalidArgumentError)]
    except OpError as e:
        raise InvalidArgumentError(f"function '{name}': {e.message}") from None
    return finish(graph, inputs, outputs, captured=[])


def decode_tensor(encoded: Any) -> np.ndarray:
    """The read-only array that ``encode_tensor`` wrote; InvalidArgumentError if malformed."""
    if not isinstance(encoded, Mapping):
        raise InvalidArgumentError(f"expected a tensor {{dtype, shape, data}}, got "
                                   f"{_show(encoded)}")
    for key in ("dtype", "shape", "data"):
        if key not in encoded:
            raise InvalidArgumentError(f"tensor field '{key}' is missing")
    dtype = _DTYPES.get(encoded["dtype"]) if isinstance(encoded["dtype"], str) else None
    if dtype is None:
        raise InvalidArgumentError(f"tensor field 'dtype': {_show(encoded['dtype'])} is not a "
                                   f"dtype")
    shape = encoded["shape"]
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise InvalidArgumentError(f"tensor field 'shape': expected a list of dims >= 0, "
                                   f"got {_show(shape)}")
    if len(shape) > _MAX_RANK:
        raise InvalidArgumentError(f"tensor field 'shape': rank {len(shape)} is more than the "
                                   f"{_MAX_RANK} dims an array can have")
    if math.prod(d for d in shape if d) * dtype.itemsize > _INT64_MAX:  # numpy's rule
        raise InvalidArgumentError(f"tensor field 'shape': {_show(shape)} of {dtype.name} is "
                                   f"too large for an array (more than 2**63 - 1 bytes)")
    count = math.prod(shape)
    data = encoded["data"]
    if dtype is string:
        if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
            raise InvalidArgumentError("tensor field 'data': expected a list of base64 strings "
                                       "for a string tensor")
        if len(data) != count:
            raise InvalidArgumentError(f"tensor field 'data': shape {shape} needs {count} "
                                       f"strings, got {len(data)}")
        array = np.empty(count, dtype=object)
        array[:] = [_b64(x) for x in data]
    else:
        if not isinstance(data, str):
            raise InvalidArgumentError("tensor field 'data': expected a base64 string")
        raw = _b64(data)
        array = from_little_endian(
            raw, count, dtype, bad_bool="tensor field 'data': a bool byte is not 0 or 1",
            wrong_size=lambda need: f"tensor field 'data': shape {shape} of {dtype.name} "
                                    f"needs {need} bytes, got {len(raw)}")
    array = array.reshape(shape)
    array.flags.writeable = False
    return array


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise InvalidArgumentError(f"tensor field 'data': {text[:40]!r} is not valid base64") \
            from None


def _topological(nodes: list[_Node]) -> list[_Node]:
    """Nodes ordered so that each comes after its inputs, otherwise in file order;
    a cycle is an error."""
    order, left_out = stable_topological_order(
        [n.name for n in nodes],
        {n.name: {s for s, _ in n.inputs} | set(n.control_inputs) for n in nodes})
    if left_out:
        stuck = next(n for n in nodes if n.name in left_out)
        raise _error(f"nodes[{stuck.index}].inputs", "the graph has a cycle through this node",
                     stuck.name, stuck.op_def.name)
    return [nodes[i] for i in order]


# -- reading: building ---------------------------------------------------------------
def _build(nodes: list[_Node], base: "Scope") -> dict[str, Operation]:
    """Create ``nodes`` (topologically ordered) in ``base``'s graph via the builder."""
    from .scope import Scope

    # A scope with the prefix and device of ``base`` but no with_name() override;
    # its control dependencies go on the nodes that depend on nothing imported.
    plain = Scope(base.graph, _prefix=base._prefix, _device=base.device)
    rooted = plain.with_control_dependencies(base.control_dependencies)
    built: dict[str, Operation] = {}
    for n in nodes:
        where = f"nodes[{n.index}]"
        flat = []
        for j, (src, idx) in enumerate(n.inputs):
            outputs = built[src].outputs
            if idx >= len(outputs):
                raise _error(f"{where}.inputs[{j}]", f"input '{src}:{idx}' names output {idx} "
                             f"of '{src}', which has {len(outputs)} outputs", n.name,
                             n.op_def.name)
            flat.append(outputs[idx])
        args = n.op_def.group_inputs(flat, n.op_def.input_counts(n.attrs))
        roots = not n.inputs and not n.control_inputs
        scope = (rooted if roots else plain).with_device(n.device or base.device)
        scope = scope.with_control_dependencies(built[c] for c in n.control_inputs)
        kwargs = {k: v for k, v in n.attrs.items() if k in n.op_def.user_attrs}
        try:
            op = create_operation(scope, n.op_def, tuple(args), kwargs, name=n.name)
        except OpError as e:
            cls = type(e) if isinstance(e, InvalidArgumentError) else InvalidArgumentError
            raise cls(f"Invalid GraphDef, field '{where}': {e.message}", e.node_name or n.name,
                      e.op_type or n.op_def.name, detail=e.detail) from e
        for key, value in n.attrs.items():
            if key in n.op_def.inferred_attrs and op.attrs[key] != value:
                raise _error(f"{where}.attrs.{key}", f"the file says {key}={value} but the inputs "
                             f"give {key}={op.attrs[key]}", n.name, n.op_def.name)
        built[n.name] = op
    return built


def import_graph_def(graph_def: Mapping, scope: "Scope | Graph | None" = None
                     ) -> dict[str, Operation]:
    """Add the nodes of ``graph_def`` to ``scope``'s graph (a new Graph if None).

    Names are kept, under the scope's prefix (made unique if the graph already
    has them); a node without a recorded device gets the scope's device, and
    the scope's control dependencies go on the imported nodes that depend on no
    other imported node. Returns {name in the file: new Operation}. A malformed
    or newer GraphDef raises InvalidArgumentError naming the node and the
    field, and leaves the graph unchanged.
    """
    from .scope import Scope

    if isinstance(scope, Graph):
        scope = Scope(scope)
    elif scope is not None and not isinstance(scope, Scope):
        raise TypeError(f"import_graph_def() imports into a gf.Scope or a gf.Graph, got "
                        f"{type(scope).__name__} {scope!r}")
    return _import(graph_def, scope if scope is not None else Scope(Graph()),
                   dry_run=scope is not None)


def _import(graph_def: Mapping, scope: "Scope", dry_run: bool) -> dict[str, Operation]:
    """Parse, then build; first in a scratch graph if ``scope``'s graph is someone's."""
    from .scope import Scope

    nodes = _topological(_parse(graph_def))
    if dry_run:
        _build(nodes, Scope(Graph()))  # every check, in a graph no one sees
    built = _build(nodes, scope)
    return {n.name: built[n.name] for n in sorted(nodes, key=lambda n: n.index)}


def from_graph_def(graph_def: Mapping) -> Graph:
    """A new Graph holding the nodes of ``graph_def``."""
    from .scope import Scope

    scope = Scope(Graph())
    _import(graph_def, scope, dry_run=False)
    return scope.graph


def load_graph(path: str | os.PathLike) -> Graph:
    """The Graph saved at ``path`` by ``graph.save(path)``.

    OSError if the file cannot be read; InvalidArgumentError naming the file if it is
    not UTF-8 JSON (or nests too deeply to read), naming the node and field if it is
    not a valid GraphDef. Its nodes' errors say they were defined at ``path``.
    """
    with open(path, "rb") as f:
        data = f.read()
    where = os.fspath(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidArgumentError(f"{where} is not GraphDef JSON: byte {e.start} is not "
                                   f"UTF-8 ({e.reason})") from None
    try:
        graph_def = json.loads(text)
    except RecursionError:
        raise InvalidArgumentError(f"{where} is not GraphDef JSON: its values nest too "
                                   f"deeply to read") from None
    except ValueError as e:  # JSONDecodeError; an int past Python's digit limit
        raise InvalidArgumentError(f"{where} is not GraphDef JSON: {e}") from None
    graph = from_graph_def(graph_def)
    for op in graph.operations():  # errors say "defined at model.json", not the loader's line
        op.site = where
    return graph


__all__ = ["FORMAT", "VERSION", "as_graph_def", "to_json", "import_graph_def", "from_graph_def",
           "load_graph", "save", "encode_attr", "decode_attr", "encode_tensor", "decode_tensor"]
