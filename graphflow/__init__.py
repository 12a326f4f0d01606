"""graphflow: a small, fast dataflow engine with TensorFlow's graph-mode semantics.

Build a graph with a :class:`Scope`, run it with a :class:`Session`::

    import graphflow as gf
    g = gf.Graph(); scope = gf.Scope(g)
    out = scope.scatter_nd([[4], [3], [1], [7]], [9, 10, 11, 12], [8])
    with gf.Session(g) as sess:
        print(sess.run(out))   # [ 0 11  0 10  9  0  0 12]

The package is built in layers, each importing only its own and those below it
(tests/test_layers.py holds it): core (graphflow/*.py: dtypes, shapes, Graph,
the op registry, Scope, the kernel-facing interface, gradients, variables,
serialization, interop) < ops (graphflow.ops: the operator set and its kernels) <
runtime (graphflow.runtime: devices, plans, Session) < tools (graphflow.tools:
what acts on a Session: saver, gradient_check, summary, visualize, cli, train;
reached here as gf.train, gf.summary, gf.gradient_check) < this facade,
which also installs what a lower layer's class gets from a higher one: Output's
operators (graphflow.operators, once the op set is loaded) and Graph.to_dot.
"""
from __future__ import annotations

import pathlib as _pathlib

from .checkout import find_layers_beside as _find_layers_beside

_find_layers_beside(_pathlib.Path(__file__).resolve().parent)  # in a checkout: ops/, runtime/
from . import errors, registry  # noqa: E402
from .dtypes import (DType, as_dtype, bool_, complex64, complex128, float16, float32, float64,
                     int8, int16, int32, int64, string, uint8, uint16, uint32, uint64)
from .graph import Graph, Operation, Output
from .registry import (Attr, BoolAttr, FloatAttr, IntAttr, IntListAttr, OpDef, ShapeAttr,
                       StringAttr, TensorAttr, TypeAttr, op_def, register_op, registered_ops)
from .scope import Scope
from .serialization import import_graph_def, load_graph
from .shapes import TensorShape

bool = bool_  # noqa: A001 - gf.bool, as tf.bool

with registry.own_kernels():  # graphflow's own kernels: run unchecked (output_check.py)
    from . import ops  # noqa: E402  (registers the operator set)
from . import operators  # noqa: E402
operators.install_operators(Output)  # x + y, x[1:]... build ops of the set just loaded
from .runtime import RunMetadata, RunOptions, Session, SessionConfig, list_devices  # noqa: E402
from .indexed_slices import IndexedSlices, convert_to_tensor  # noqa: E402
from .gradients import GradContext, gradients  # noqa: E402
from .tools.gradient_check import GradientCheck, gradient_check  # noqa: E402
from .variables import Variable, global_variables, global_variables_initializer  # noqa: E402
from .tools import train  # noqa: E402  (gf.train)
from .tools import saver  # noqa: E402  (gf.saver.list_variables; gf.train.Saver)
from . import control_flow  # noqa: E402  (scope.cond, scope.while_loop)
from .functions import Function  # noqa: E402
from . import nn  # noqa: E402
from .interop.tf_import import import_tf_graph  # noqa: E402  (extra `tensorboard`, lazily)
from .interop.saved_model import load_saved_model  # noqa: E402
from .interop import saved_model as _saved_model  # noqa: E402
_saved_model.install_session(Session)  # SavedModel.session() gives a gf.Session (a layer up)
from .interop.onnx_export import export_onnx  # noqa: E402  (imports onnx only when called)
from .interop.tf_export import export_tf_graph  # noqa: E402  (protobuf only when called)
from .tools import summary  # noqa: E402  (gf.summary; tensorboardX only when used)
from .tools import visualize  # noqa: E402
visualize.install_to_dot(Graph)  # graph.to_dot(): a tool's, as it may ask the runtime's planner

from .version import __version__  # noqa: E402

__all__ = [
    "DType", "Graph", "Operation", "Output", "Scope", "Session", "SessionConfig", "TensorShape",
    "RunOptions", "RunMetadata",
    "Attr", "TypeAttr", "IntAttr", "BoolAttr", "FloatAttr", "StringAttr", "ShapeAttr",
    "TensorAttr", "IntListAttr", "OpDef", "register_op", "op_def", "registered_ops",
    "as_dtype", "errors", "list_devices", "ops",
    "gradients", "GradContext", "IndexedSlices", "convert_to_tensor", "gradient_check",
    "GradientCheck", "Variable", "global_variables", "global_variables_initializer", "train",
    "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
    "uint32", "uint64", "bool", "complex64", "complex128", "string",
    "export_tf_graph", "import_tf_graph", "load_saved_model", "summary",
]
