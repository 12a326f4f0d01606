"""``gf.load_saved_model``: one signature of a TensorFlow SavedModel directory as a
gf.Graph, with its variables' values from the directory's checkpoint.

A SavedModel directory holds ``saved_model.pb`` (a SavedModel message: MetaGraphDefs,
each with tags, a GraphDef, SignatureDefs, the SavedObjectGraph and a SaverDef) and
``variables/variables`` (a tensor bundle, :mod:`graphflow.tf_bundle`). Loading:

1. the MetaGraphDef whose tags equal ``tags`` and its SignatureDef ``signature``
   (TensorInfo names such as ``serving_default_x:0`` and ``StatefulPartitionedCall:0``);
2. the GraphDef pruned to the nodes the signature's outputs reach (so the saver's
   SaveV2/RestoreV2 calls and Keras' duplicate variables stay out), then imported with
   ``gf.import_tf_graph``, which inlines the function calls;
3. each VarHandleOp matched to its checkpoint key through the SavedObjectGraph: a call
   of a saved concrete function passes the function's ``bound_inputs`` (object ids) as
   its trailing inputs, and an object's key is the path of child names from the root
   (breadth first, as TensorFlow's checkpoint names them) plus
   ``/.ATTRIBUTES/VARIABLE_VALUE``; a handle no call binds (a TF 1.x SavedModel) is
   looked up by its ``shared_name``.

The message classes are TensorFlow's (``tensorflow.core.protobuf.saved_model_pb2``)
when TensorFlow is imported or tensorboard is not installed; otherwise the SavedModel
message (two fields) is built at run time over ``tensorboard.compat.proto``'s
``meta_graph.proto`` (DESIGN.md: generated classes, never a hand-written parser).
"""
from __future__ import annotations

import collections
import functools
import importlib
import os
import sys
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import InvalidArgumentError, NotFoundError, UnimplementedError
from ..graph import Graph, Operation, Output
from . import tf_proto as tp
from .tf_import import import_tf_graph

#: The checkpoint key suffix of a variable object's value (TF's trackable naming).
VARIABLE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
_CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
#: The session class SavedModel.session() makes: gf.Session, given by the facade
#: (the runtime is a layer above interop; see tests/test_layers.py).
_SESSION_CLASS: list[type] = []


def install_session(session_class: type) -> None:
    """Make ``session_class`` (gf.Session) the class SavedModel.session() returns."""
    _SESSION_CLASS[:] = [session_class]


# -- the message classes -------------------------------------------------------------------
@functools.cache
def _tensorboard_saved_model() -> type:
    """A SavedModel message class over tensorboard's MetaGraphDef, built once."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    meta = importlib.import_module("tensorboard.compat.proto.meta_graph_pb2")
    pool = descriptor_pool.Default()
    full_name = f"{meta.DESCRIPTOR.package}.SavedModel"
    try:
        descriptor = pool.FindMessageTypeByName(full_name)
    except KeyError:
        fdp = descriptor_pb2.FileDescriptorProto(
            name="graphflow/interop/saved_model.proto", package=meta.DESCRIPTOR.package,
            syntax="proto3", dependency=[meta.DESCRIPTOR.name])
        msg = fdp.message_type.add(name="SavedModel")
        f = descriptor_pb2.FieldDescriptorProto
        msg.field.add(name="saved_model_schema_version", number=1, type=f.TYPE_INT64,
                      label=f.LABEL_OPTIONAL)
        msg.field.add(name="meta_graphs", number=2, type=f.TYPE_MESSAGE,
                      label=f.LABEL_REPEATED,
                      type_name=f".{meta.DESCRIPTOR.package}.MetaGraphDef")
        pool.AddSerializedFile(fdp.SerializeToString())
        descriptor = pool.FindMessageTypeByName(full_name)
    return message_factory.GetMessageClass(descriptor)


def saved_model_class() -> type:
    """The SavedModel message class: TensorFlow's when it is imported (or tensorboard
    is absent), else one built over tensorboard's schema; ImportError naming the extra."""
    def tensorflow() -> type:
        return importlib.import_module("tensorflow.core.protobuf.saved_model_pb2").SavedModel

    makers: list[Callable[[], type]] = [tensorflow, _tensorboard_saved_model]
    if sys.modules.get("tensorflow") is None:  # importing TensorFlow costs seconds
        makers.reverse()
    for make in makers:
        try:
            return make()
        except ImportError:
            continue
    raise ImportError("Reading a SavedModel needs TensorFlow's MetaGraphDef and SavedObjectGraph "
                      "messages, from tensorboard or TensorFlow (tensorboardX's lack them); "
                      f"install them with: {tp.FULL_INSTALL_HINT}")


# -- reading -------------------------------------------------------------------------------
def read_saved_model(path: str) -> Any:
    """The SavedModel message of directory ``path``: NotFoundError when ``path`` does not
    exist, InvalidArgumentError naming it when it is not a SavedModel."""
    if not os.path.exists(path):
        raise NotFoundError(f"SavedModel directory {path} does not exist")
    binary, text = (os.path.join(path, f"saved_model.{e}") for e in ("pb", "pbtxt"))
    if not os.path.isdir(path) or not (os.path.isfile(binary) or os.path.isfile(text)):
        raise InvalidArgumentError(f"{path} is not a SavedModel directory (it holds neither "
                                   f"saved_model.pb nor saved_model.pbtxt)")
    message = saved_model_class()()
    from google.protobuf import text_format
    from google.protobuf.message import DecodeError

    where = binary if os.path.isfile(binary) else text
    try:
        with open(where, "rb") as f:
            data = f.read()
        if where == binary:
            message.ParseFromString(data)
        else:
            text_format.Parse(data.decode("utf-8"), message)
    except (DecodeError, text_format.ParseError, UnicodeDecodeError, RuntimeError,
            ValueError) as e:
        raise InvalidArgumentError(f"{where} is not a SavedModel: {e}") from None
    if not message.meta_graphs:
        raise InvalidArgumentError(f"{where} is not a SavedModel: it holds no MetaGraphDef")
    return message


def _meta_graph(message: Any, tags: Sequence[str], path: str) -> Any:
    wanted = set(tags)
    for meta in message.meta_graphs:
        if set(meta.meta_info_def.tags) == wanted:
            return meta
    available = ", ".join(str(sorted(m.meta_info_def.tags)) for m in message.meta_graphs)
    raise NotFoundError(f"MetaGraphDef associated with tags {sorted(wanted)} could not be "
                        f"found in SavedModel {path}; available tag sets: {available}")


def _tensor_names(infos: Any, signature: str) -> dict[str, str]:
    """``{key: 'node:index'}`` of a SignatureDef's inputs or outputs (dense ones only)."""
    names = {}
    for key, info in sorted(infos.items()):
        if info.WhichOneof("encoding") != "name":
            raise UnimplementedError(f"Signature '{signature}': tensor '{key}' is "
                                     f"{info.WhichOneof('encoding')}; only dense tensors "
                                     f"(TensorInfo.name) are supported")
        names[key] = info.name if ":" in info.name else f"{info.name}:0"
    return names


def _node_name(ref: str) -> str:
    return ref.lstrip("^").split(":")[0]


def pruned_graph_def(graph_def: Any, roots: Sequence[str]) -> Any:
    """A copy of ``graph_def`` with only the nodes ``roots`` (node names) reach through
    data and control inputs, in their order, and its whole function library."""
    nodes = {n.name: n for n in graph_def.node}
    keep, stack = set(), list(roots)
    while stack:
        name = stack.pop()
        if name in keep:
            continue
        if name not in nodes:
            raise InvalidArgumentError(f"The signature names tensor of node '{name}', which "
                                       f"the SavedModel's graph does not have")
        keep.add(name)
        stack.extend(_node_name(ref) for ref in nodes[name].input)
    out = type(graph_def)()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    out.node.extend(n for n in graph_def.node if n.name in keep)
    return out


# -- variables -----------------------------------------------------------------------------
def object_keys(object_graph: Any) -> dict[int, str]:
    """The checkpoint key of each variable object: its first path of child names from the
    root, breadth first, plus ``/.ATTRIBUTES/VARIABLE_VALUE``."""
    paths: dict[int, str] = {0: ""} if len(object_graph.nodes) else {}
    queue = collections.deque([0] if paths else [])
    while queue:
        node_id = queue.popleft()
        for child in object_graph.nodes[node_id].children:
            if child.node_id not in paths and child.node_id < len(object_graph.nodes):
                parent = paths[node_id]
                paths[child.node_id] = f"{parent}/{child.local_name}" if parent else \
                    child.local_name
                queue.append(child.node_id)
    return {i: p + VARIABLE_SUFFIX for i, p in paths.items()
            if object_graph.nodes[i].WhichOneof("kind") == "variable"}


def handle_keys(graph_def: Any, object_graph: Any) -> dict[str, str]:
    """``{VarHandleOp node: checkpoint key}`` from the calls of saved concrete functions
    in ``graph_def``: a call's trailing inputs are its function's ``bound_inputs``."""
    keys = object_keys(object_graph)
    found: dict[str, str] = {}
    for node in graph_def.node:
        fn = node.attr["f"].func.name if node.op in _CALL_OPS else node.op
        saved = object_graph.concrete_functions.get(fn)
        if saved is None or not saved.bound_inputs:
            continue
        data = [ref for ref in node.input if not ref.startswith("^")]
        bound = list(saved.bound_inputs)
        if len(bound) > len(data):
            raise InvalidArgumentError(f"Call of '{fn}' has {len(data)} inputs, fewer than "
                                       f"its {len(bound)} captured objects", node.name, node.op)
        for ref, object_id in zip(data[len(data) - len(bound):], bound):
            if object_id in keys:
                found.setdefault(_node_name(ref), keys[object_id])
    return found


def _variable_handles(graph: Graph) -> list[Operation]:
    return [op for op in graph.operations() if op.type == "VarHandleOp"]


def _restore_values(graph: Graph, keys: dict[str, str], prefix: str) -> dict[str, tuple]:
    """``{VarHandleOp name: (checkpoint key, value)}`` for every variable of ``graph``,
    read from the bundle ``prefix`` and checked against the handle's dtype and shape."""
    handles = _variable_handles(graph)
    if not handles:
        return {}
    from ..tf_bundle import BundleReader

    out = {}
    with BundleReader(prefix) as reader:
        for op in handles:
            shared = op.attrs.get("shared_name") or op.name
            key = keys.get(op.name, shared)
            entry = reader.lookup(key)
            if entry is None:
                raise NotFoundError(f"Key {key} (variable {op.name}) not found in checkpoint "
                                    f"{prefix}", op.name, op.type)
            dtype = op.attrs["dtype"]
            if entry.dtype != dtype:
                raise InvalidArgumentError(f"Checkpoint {prefix}: {key} holds "
                                           f"{entry.dtype_name}, variable {op.name} is "
                                           f"{dtype.name}", op.name, op.type)
            value = reader.read(entry)
            if not op.attrs["shape"].is_compatible_with(value.shape):
                raise InvalidArgumentError(f"Checkpoint {prefix}: {key} has shape "
                                           f"{list(value.shape)}, variable {op.name} is "
                                           f"{op.attrs['shape']}", op.name, op.type)
            out[op.name] = (key, value)
    return out


# -- the loaded model ----------------------------------------------------------------------
class SavedModel:
    """One signature of a SavedModel: ``graph``, ``inputs``/``outputs`` (signature keys to
    Outputs), ``signatures`` (every signature's name), ``variables`` (VarHandleOp name to
    checkpoint key); ``session()`` opens a gf.Session with every variable restored, and
    calling the model runs the signature in a session of its own."""

    def __init__(self, graph: Graph, inputs: dict[str, Output], outputs: dict[str, Output],
                 signatures: tuple[str, ...], values: dict[str, tuple], path: str):
        self.graph, self.inputs, self.outputs = graph, inputs, outputs
        self.signatures, self.path = signatures, path
        self.variables = {name: key for name, (key, _) in values.items()}
        self._restore_feeds, self._restore_ops = self._build_restore(values)
        self._session: Any = None

    def _build_restore(self, values: dict[str, tuple]) -> tuple[dict, list]:
        """A placeholder and an AssignVariableOp per variable, as TF's Saver builds them."""
        from ..scope import Scope

        feeds, ops = {}, []
        for name, (_, value) in values.items():
            handle = self.graph.operation(name)
            scope = Scope(self.graph).beside(handle)
            value_in = scope.placeholder(handle.attrs["dtype"], shape=handle.attrs["shape"],
                                         name=f"saved_model_restore/{name}/value")
            ops.append(scope.assign_variable_op(handle.outputs[0], value_in,
                                                name=f"saved_model_restore/{name}/assign"))
            feeds[value_in] = value
        return feeds, ops

    def session(self, config: Any = None) -> Any:
        """A new gf.Session of ``graph`` (``config``: a gf.SessionConfig) whose variables
        hold the SavedModel's values; the caller closes it."""
        if not _SESSION_CLASS:
            raise RuntimeError("SavedModel.session() needs graphflow's runtime: import "
                               "graphflow (gf.load_saved_model) rather than this module")
        sess = _SESSION_CLASS[0](self.graph, config)
        if self._restore_ops:
            sess.run(self._restore_ops, feed_dict=self._restore_feeds)
        return sess

    def __call__(self, **feeds: Any) -> dict[str, np.ndarray]:
        """``{output key: array}`` for the signature's inputs given by key."""
        missing = sorted(set(self.inputs) - set(feeds))
        unknown = sorted(set(feeds) - set(self.inputs))
        if missing or unknown:
            raise InvalidArgumentError(
                f"The signature takes inputs {sorted(self.inputs)}; "
                + (f"missing {missing}" if missing else "")
                + ("; " if missing and unknown else "")
                + (f"unknown {unknown}" if unknown else ""))
        if self._session is None:
            self._session = self.session()
        keys = sorted(self.outputs)
        values = self._session.run([self.outputs[k] for k in keys],
                                   {self.inputs[k]: v for k, v in feeds.items()})
        return dict(zip(keys, values))

    def close(self) -> None:
        """Close the session ``__call__`` opened (if any)."""
        if self._session is not None:
            self._session.close()
            self._session = None

    def __repr__(self) -> str:
        return (f"<gf.SavedModel {self.path!r} inputs={sorted(self.inputs)} "
                f"outputs={sorted(self.outputs)} variables={len(self.variables)}>")


def load_saved_model(path: str | os.PathLike, tags: Sequence[str] = ("serve",),
                     signature: str = "serving_default") -> SavedModel:
    """The signature ``signature`` of the MetaGraphDef tagged ``tags`` in the SavedModel
    directory ``path``, imported as a new gf.Graph with its variables' values.

    NotFoundError: ``path`` missing, no MetaGraphDef with exactly these tags (the error
    lists the tag sets there are), no such signature (it lists the signatures), a variable
    not in the checkpoint. InvalidArgumentError naming ``path``: not a SavedModel.
    UnimplementedError: ops graphflow lacks (listed, as ``gf.import_tf_graph`` does).
    """
    path = os.fspath(path)
    if isinstance(tags, str):
        tags = (tags,)
    meta = _meta_graph(read_saved_model(path), tags, path)
    names = tuple(sorted(k for k in meta.signature_def if not k.startswith("__")))
    if signature not in meta.signature_def:
        raise NotFoundError(f"Signature '{signature}' not found in SavedModel {path} (tags "
                            f"{sorted(tags)}); its signatures: {', '.join(names) or 'none'}")
    sig = meta.signature_def[signature]
    inputs, outputs = _tensor_names(sig.inputs, signature), _tensor_names(sig.outputs, signature)
    roots = [_node_name(n) for n in (*outputs.values(), *inputs.values())]
    graph_def = pruned_graph_def(meta.graph_def, roots)
    graph = import_tf_graph(graph_def)
    keys = handle_keys(graph_def, meta.object_graph_def)
    values = _restore_values(graph, keys, os.path.join(path, "variables", "variables"))
    return SavedModel(graph, {k: graph.output(n) for k, n in inputs.items()},
                      {k: graph.output(n) for k, n in outputs.items()}, names, values, path)


__all__ = ["load_saved_model", "SavedModel", "saved_model_class", "read_saved_model",
           "pruned_graph_def", "object_keys", "handle_keys", "install_session",
           "VARIABLE_SUFFIX"]
