"""What interop knows of an op lives on its OpDef (issue #34): ``op_def.tf`` (a
``TFForm``: the TensorFlow op of one node, both ways), ``op_def.exporters`` and
``op_def.export_checks`` (per format: "tf", "onnx"). The export and the import read
them, and nothing else keyed by op names; the tables they replaced are reproduced."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import UnimplementedError
from graphflow.interop import onnx_export  # noqa: F401  (files every ONNX lowering)
from graphflow.interop import onnx_lowering, tf_export, tf_import, tf_import_plan, tf_lowering
from graphflow.registry import TFForm, exporters_of, same_as_tf
from support.registered_ops import package_ops

# -- the former tables (graphflow/interop/tf_lowering.py, tf_import*.py before #34) --------
OLD_SAME_AS_TF = frozenset({
    "Add", "AddN", "AssignAddVariableOp", "AssignSubVariableOp", "BroadcastGradientArgs",
    "BroadcastTo", "Cast", "ConcatV2", "Conj", "Const", "DynamicPartition", "DynamicStitch",
    "ExpandDims", "Fill", "FloorDiv", "FloorMod", "GatherNd", "Greater", "Identity", "Less",
    "LogicalAnd", "LogicalNot", "LogicalOr", "Maximum", "Minimum", "Mul", "Neg", "NoOp",
    "OnesLike", "Pack", "Pad", "ParallelDynamicStitch", "Placeholder", "Range", "Rank",
    "ReadVariableOp", "RealDiv", "Reshape", "ScatterNd", "SelectV2", "Shape", "Size", "Slice",
    "Squeeze", "StopGradient", "Sub", "Sum", "TensorScatterAdd", "TensorScatterMax",
    "TensorScatterMin", "TensorScatterSub", "TensorScatterUpdate", "Unpack", "ZerosLike",
    "Equal", "NotEqual", "VarHandleOp", "AssignVariableOp", "ResourceGather",
    "ResourceApplyAdagrad", "ResourceSparseApplyAdagrad",
    "StridedSlice", "StridedSliceGrad", "GatherV2", "Prod", "Transpose", "Tile",
    "VarIsInitializedOp",
    "Exp", "Log", "Log1p", "Expm1", "Sqrt", "Rsqrt", "Square", "Reciprocal", "Abs", "Sign",
    "Floor", "Ceil", "Round", "Sigmoid", "Tanh", "Relu", "Relu6", "Elu", "Selu", "Softplus",
    "Softsign", "LeakyRelu", "Pow", "SquaredDifference", "MatMul", "BatchMatMulV2", "BiasAdd",
    "Mean", "Max", "Min", "Any", "All", "Softmax", "LogSoftmax", "SoftmaxCrossEntropyWithLogits",
    "SparseSoftmaxCrossEntropyWithLogits", "L2Loss",
    "UnsortedSegmentSum", "UnsortedSegmentMax", "UnsortedSegmentMin", "UnsortedSegmentProd",
    "SegmentSum", "SegmentMean", "SegmentMax", "SegmentMin", "SegmentProd",
    "ArgMax", "ArgMin", "TopKV2", "OneHot", "Where", "Split", "SplitV", "Unique",
    "RandomUniform", "RandomStandardNormal", "TruncatedNormal", "RandomUniformInt",
    "RandomShuffle", "StatelessRandomUniform", "StatelessRandomNormal",
    "StatelessTruncatedNormal", "StatelessRandomUniformInt", "StatelessRandomUniformFullInt",
    "ResourceApplyMomentum", "ResourceSparseApplyMomentum", "ResourceApplyAdam",
    "ResourceApplyRMSProp", "ResourceApplyCenteredRMSProp", "ResourceSparseApplyRMSProp",
    "ResourceSparseApplyCenteredRMSProp",
})
OLD_RESOURCE_OPS = frozenset({"ResourceScatterNdAdd", "ResourceScatterNdSub",
                              "ResourceScatterNdMin", "ResourceScatterNdMax",
                              "ResourceScatterNdUpdate"})
OLD_TF_DEFAULTS = {
    "Equal": {"incompatible_shape_error": ("bool", True)},
    "NotEqual": {"incompatible_shape_error": ("bool", True)},
    "VarHandleOp": {"container": ("string", ""), "debug_name": ("string", ""),
                    "allowed_devices": ("list(string)", ())},
    "AssignVariableOp": {"validate_shape": ("bool", False)},
    "ResourceGather": {"batch_dims": ("int", 0), "validate_indices": ("bool", True)},
    "ResourceApplyAdagrad": {"use_locking": ("bool", False), "update_slots": ("bool", True)},
    "ResourceSparseApplyAdagrad": {"use_locking": ("bool", False),
                                   "update_slots": ("bool", True)},
    **{op: {"use_locking": ("bool", True)} for op in OLD_RESOURCE_OPS},
    "MatMul": {"grad_a": ("bool", False), "grad_b": ("bool", False)},
    "BatchMatMulV2": {"grad_x": ("bool", False), "grad_y": ("bool", False)},
}
OLD_DROPPED = {"GatherNd": ("batch_dims",), "Any": ("T",), "All": ("T",)}
OLD_TF_LOWERINGS = frozenset({
    "If", "StatelessIf", "While", "StatelessWhile", "GatherNd", "_BatchIndexTuples",
    "_AssertEqual", "ResourceSparseApplyAdagrad", "_ResourceSparseApplyAdam", "_StitchWinners",
    "_ScatterWinners", "_ScatterMinMaxShares"})
OLD_OP_ALIASES = {"AddV2": "Add"}
OLD_RENAMED_ON_IMPORT = {op: {"T": "dtype"} for op in OLD_RESOURCE_OPS}
#: accepted on import only at TF's default (the inert use_locking, debug_name and
#: validate_indices are dropped before, for every op)
OLD_DEFAULT_ONLY_ATTRS = {("Equal", "incompatible_shape_error"): True,
                          ("NotEqual", "incompatible_shape_error"): True,
                          ("VarHandleOp", "container"): "", ("VarHandleOp", "allowed_devices"): (),
                          ("AssignVariableOp", "validate_shape"): False,
                          ("ResourceGather", "batch_dims"): 0,
                          ("ResourceApplyAdagrad", "update_slots"): True,
                          ("ResourceSparseApplyAdagrad", "update_slots"): True}
OLD_HINT_ATTRS = {("MatMul", "grad_a"), ("MatMul", "grad_b"), ("BatchMatMulV2", "grad_x"),
                  ("BatchMatMulV2", "grad_y")}
INERT_ON_IMPORT = {"use_locking", "debug_name", "validate_indices"}
OLD_ONNX_SIMPLE = {"Add": "Add", "Sub": "Sub", "Mul": "Mul", "RealDiv": "Div", "Maximum": "Max",
                   "Minimum": "Min", "Equal": "Equal", "Less": "Less", "Greater": "Greater",
                   "LogicalAnd": "And", "LogicalOr": "Or", "LogicalNot": "Not", "Neg": "Neg",
                   "SelectV2": "Where", "Identity": "Identity", "StopGradient": "Identity"}

#: graphflow's ops with neither a TFForm nor a TF exporter: the plans' internal ops and
#: the while loop's gradient bookkeeping (export_tf_graph refuses them, naming the nodes)
NO_TF_COUNTERPART = frozenset({"_FusedElementwise", "_PartitionedSelect", "_GatherReduce",
                               "_ProductSum", "_GatherPartition", "_StitchSegmentSum",
                               "_StitchProductSum", "_ScaledGatherRows",
                               "_WhileRecorded", "_WhileGrad"})


def _all_ops():
    return package_ops(include_internal=True)


def test_the_tf_forms_reproduce_the_former_tables():
    defs = {d.name: d for d in _all_ops()}
    forms = {name: d.tf for name, d in defs.items() if d.tf is not None}
    assert {n for n, f in forms.items() if not f.renamed} == OLD_SAME_AS_TF
    assert {n for n, f in forms.items() if dict(f.renamed) == {"dtype": "T"}} == OLD_RESOURCE_OPS
    assert set(forms) == OLD_SAME_AS_TF | OLD_RESOURCE_OPS
    assert {n: dict(f.defaults) for n, f in forms.items() if f.defaults} == OLD_TF_DEFAULTS
    for name, defaults in OLD_TF_DEFAULTS.items():  # written in this order
        assert list(forms[name].defaults) == list(defaults), name
    assert {n: f.dropped for n, f in forms.items() if f.dropped} == OLD_DROPPED
    assert {n for n, d in defs.items() if "tf" in d.exporters} == OLD_TF_LOWERINGS
    # the import's direction, from the same declarations
    assert tf_import.OP_ALIASES == OLD_OP_ALIASES
    assert tf_import_plan._INERT_ATTRS == INERT_ON_IMPORT
    assert {n: {t: o for o, t in f.renamed.items()} for n, f in forms.items()
            if f.renamed} == OLD_RENAMED_ON_IMPORT
    assert {(n, k): v for n, f in forms.items() for k, (_, v) in f.defaults.items()
            if k not in f.hints and k not in INERT_ON_IMPORT} == OLD_DEFAULT_ONLY_ATTRS
    assert {(n, k) for n, f in forms.items() for k in f.hints} == OLD_HINT_ATTRS


def test_the_former_names_are_views_of_the_op_defs():
    assert tf_export.SAME_AS_TF == tf_lowering.SAME_AS_TF == OLD_SAME_AS_TF
    assert tf_export.RESOURCE_OPS == OLD_RESOURCE_OPS
    assert tf_export.TF_DEFAULTS == OLD_TF_DEFAULTS and tf_export.DROPPED == OLD_DROPPED
    assert set(tf_export.LOWERINGS) == OLD_TF_LOWERINGS
    assert tf_export.LOWERINGS["GatherNd"] is gf.op_def("GatherNd").exporters["tf"]
    assert set(onnx_lowering.LOWERINGS) == {d.name for d in _all_ops() if "onnx" in d.exporters}
    assert set(onnx_lowering.CHECKS) == {d.name for d in _all_ops() if "onnx" in d.export_checks}
    assert dict(exporters_of("onnx")) == dict(onnx_lowering.LOWERINGS)


def test_every_op_has_a_tf_counterpart_or_is_listed_as_having_none():
    for d in _all_ops():
        has = d.tf is not None or "tf" in d.exporters
        assert has == (d.name not in NO_TF_COUNTERPART), d.name
        assert tf_export.has_tf_counterpart(d.name) == has, d.name
    for d in package_ops():  # every public op of graphflow's is exportable to TF
        assert tf_export.has_tf_counterpart(d.name), d.name
    assert not tf_export.has_tf_counterpart("NoSuchOp")
    assert not tf_export.has_tf_counterpart("add")  # a builder name is not an op type


def test_every_tf_form_fits_its_op():
    for d in _all_ops():
        form = d.tf
        if form is None:
            continue
        assert isinstance(form, TFForm) and form.op == d.name, d.name
        assert set(form.renamed) <= set(d.attrs), d.name
        assert set(form.dropped) <= set(d.attrs), d.name
        assert not set(form.defaults) & set(d.attrs), d.name  # TF attrs graphflow lacks
        assert not set(form.renamed.values()) & (set(d.attrs) - set(form.renamed)), d.name
        assert form.hints <= set(form.defaults), d.name
        assert not d.internal, d.name  # internal ops are lowered, never written as is


def test_onnx_checks_and_lowerings_are_on_the_op_defs():
    for d in _all_ops():
        if "onnx" in d.export_checks:  # a check only of an op that can be lowered
            assert "onnx" in d.exporters, d.name
    for name, onnx_op in OLD_ONNX_SIMPLE.items():  # each one ONNX node of that type
        assert f"_simple_{onnx_op}" == gf.op_def(name).exporters["onnx"].__name__, name


def test_tf_form_checks_its_hints():
    with pytest.raises(ValueError, match="hints"):
        TFForm("X", hints=("fast",))
    form = TFForm("X", renamed={"dtype": "T"}, defaults={"flag": ("bool", True)},
                  dropped=("mine",))
    assert form.describe() == "X (T for dtype; + flag = True; - mine)"
    with pytest.raises(TypeError):
        form.renamed["other"] = "U"  # read-only


# -- a user's op: the declaration is all both directions need ---------------------------------
USER_OP = gf.register_op("TestTraitsScale", inputs=["x: float32"], outputs=["y: float32"],
                         attrs={"dtype": gf.TypeAttr(default=gf.float32),
                                "factor": gf.FloatAttr(2.0)},
                         doc="x * factor, for the interop trait tests.")


@USER_OP.shape_fn
def _(ctx):
    return ctx.shape("x")


@USER_OP.kernel("cpu")
def _(ctx, x):
    return (x * ctx.attrs["factor"]).astype(np.float32)


@pytest.fixture
def user_tf_form():
    """The user op declared as TF's op of its name, for one test (other modules' tests
    read the views of every op's TFForm, TensorFlow's op registry beside them)."""
    same_as_tf(USER_OP, renamed={"dtype": "T"}, defaults={"exact": ("bool", True),
                                                         "fast": ("bool", False)},
               hints=("fast",))
    try:
        yield USER_OP.tf
    finally:
        USER_OP.tf = None


def _user_graph():
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.float32, shape=[3], name="x")
    s.test_traits_scale(x, factor=3.0, name="scaled")
    return g


def test_a_users_op_is_written_and_read_by_its_tf_form(user_tf_form):
    assert "TestTraitsScale" in tf_export.RESOURCE_OPS  # the views read the OpDefs
    graph_def = tf_export.tf_graph_def(_user_graph())
    node = next(n for n in graph_def.node if n.name == "scaled")
    assert node.op == "TestTraitsScale"
    assert set(node.attr) - {"_output_shapes"} == {"T", "factor", "exact", "fast"}
    assert node.attr["exact"].b is True and node.attr["fast"].b is False
    back = gf.import_tf_graph(graph_def)
    op = back.operation("scaled")
    assert op.attrs["dtype"] == gf.float32 and op.attrs["factor"] == 3.0
    with gf.Session(back) as sess:
        out = sess.run("scaled:0", {"x:0": np.array([1, 2, 3], np.float32)})
    assert out.tolist() == [3.0, 6.0, 9.0]

    node.attr["fast"].b = True  # a hint: read at any value
    gf.import_tf_graph(graph_def)
    node.attr["exact"].b = False  # another value would change the semantics
    with pytest.raises(UnimplementedError, match="exact"):
        gf.import_tf_graph(graph_def)


def test_a_users_tf_exporter_is_asked_first(user_tf_form):
    calls = []

    @USER_OP.export("tf")
    def _(w, op):
        calls.append(op.name)
        return None  # then written as its TFForm
    try:
        assert tf_export.has_tf_counterpart("TestTraitsScale")
        assert "TestTraitsScale" in tf_export.LOWERINGS
        graph_def = tf_export.tf_graph_def(_user_graph())
    finally:
        del USER_OP.exporters["tf"]
    assert calls == ["scaled"]
    assert next(n for n in graph_def.node if n.name == "scaled").op == "TestTraitsScale"
    assert "TestTraitsScale" not in tf_export.LOWERINGS


def test_an_op_without_a_tf_form_or_exporter_is_refused():
    assert USER_OP.tf is None and not tf_export.has_tf_counterpart("TestTraitsScale")
    with pytest.raises(UnimplementedError, match="TestTraitsScale"):
        tf_export.tf_graph_def(_user_graph())


# -- docs/extending.md's "Export to TensorFlow and ONNX" ---------------------------------------
def _doc_clip_op():
    """The page's running example, declared as its first block does."""
    try:
        return gf.op_def("ClipByValue")
    except gf.errors.NotFoundError:
        pass
    clip = gf.register_op(
        "ClipByValue", inputs=["x: T", "lo: T", "hi: T"], outputs=["y: T"],
        attrs={"T": gf.TypeAttr([gf.float32, gf.float64])},
        doc="min(max(x, lo), hi), element-wise.")
    clip.shape_fn(lambda ctx: ctx.shape("x"))
    clip.kernel("cpu")(lambda ctx, x, lo, hi: np.clip(x, lo, hi))
    return clip


def test_the_export_block_of_docs_extending_md(tmp_path, monkeypatch):
    pytest.importorskip("onnx")
    text = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text()
    block = text.split("# the export of docs/extending.md")[1].split("```")[0].split("\n", 1)[1]
    clip = _doc_clip_op()
    monkeypatch.chdir(tmp_path)
    namespace = {"gf": gf, "ClipByValue": clip}
    try:
        exec(compile(block, "docs/extending.md", "exec"), namespace)  # noqa: S102
        assert tf_export.has_tf_counterpart("ClipByValue")
        feed = np.array([-0.5, 0.25, 2.0], np.float32)
        with gf.Session(namespace["back"]) as sess:
            assert sess.run("y:0", {"x:0": feed}).tolist() == [0.0, 0.25, 1.0]
        assert [n.op_type for n in namespace["model"].graph.node][-1] == "Clip"
        ort = pytest.importorskip("onnxruntime")
        run = ort.InferenceSession(namespace["model"].SerializeToString(),
                                   providers=["CPUExecutionProvider"])
        assert run.run(None, {"x:0": feed})[0].tolist() == [0.0, 0.25, 1.0]
    finally:  # other modules' tests read every op's TFForm and exporters
        clip.tf = None
        clip.exporters.pop("onnx", None)
