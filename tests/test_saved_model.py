"""gf.load_saved_model: TF SavedModel directories (a tf.Module and a Keras model written by
TensorFlow: tests/fixtures/tf/generate.py and make_saved_models.py). Only the last test
imports TensorFlow (it compares with TF live); the rest read the fixtures through
tensorboard's (or TensorFlow's) generated message classes."""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys

import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import InvalidArgumentError, NotFoundError
from graphflow.interop import saved_model as sm

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("tensorboard") is None and importlib.util.find_spec("tensorflow")
    is None, reason="needs tensorboard or TensorFlow (TensorFlow's message classes)")

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "tf")
SCALE = os.path.join(FIXTURES, "scale_saved_model")
KERAS = os.path.join(FIXTURES, "keras_saved_model")
SAVER_OPS = {"SaveV2", "RestoreV2", "MergeV2Checkpoints", "ShardedFilename", "StringJoin"}


def _expected(name: str) -> dict:
    with np.load(os.path.join(FIXTURES, f"{name}.npz")) as data:
        return {k: data[k] for k in data.files}


def test_tf_module_runs_with_its_variable_restored():
    tf_was_imported = "tensorflow" in sys.modules
    model = gf.load_saved_model(SCALE)
    expected = _expected("scale_saved_model")
    assert model.signatures == ("serving_default",)
    assert model.variables == {"w": "w/.ATTRIBUTES/VARIABLE_VALUE"}
    x, y = model.inputs["x"], model.outputs["y"]
    assert (x.name, x.dtype, x.shape.dims) == ("serving_default_x:0", gf.float32, [None, 2])
    assert (y.dtype, y.shape.dims) == (gf.float32, [None, 2])
    result = model(x=expected["x"])
    assert list(result) == ["y"]
    np.testing.assert_array_equal(result["y"], expected["y"])
    model.close()
    if not tf_was_imported and importlib.util.find_spec("tensorboard") is not None:
        assert "tensorflow" not in sys.modules  # the messages came from tensorboard


def test_keras_model_matches_tensorflow():
    model = gf.load_saved_model(KERAS)
    expected = _expected("keras_saved_model")
    (name,), (out,) = model.inputs, model.outputs
    assert (name, out) == (str(expected["input_name"]), str(expected["output_name"]))
    assert model.signatures == ("serve", "serving_default")
    assert sorted(model.variables.values()) == [
        f"variables/{i}{sm.VARIABLE_SUFFIX}" for i in range(4)]
    got = model(**{name: expected["x"]})[out]
    assert got.dtype == np.float32 and got.shape == expected["y"].shape
    np.testing.assert_allclose(got, expected["y"], rtol=1e-6, atol=1e-7)
    other = gf.load_saved_model(KERAS, signature="serve")  # the same function, another name
    np.testing.assert_allclose(other(**{name: expected["x"]})[out], got, rtol=1e-6)


def test_only_what_the_signature_needs_is_imported():
    for path in (SCALE, KERAS):
        model = gf.load_saved_model(path)
        types = {op.type for op in model.graph.operations()}
        assert not types & SAVER_OPS, types & SAVER_OPS
        names = {op.name for op in model.graph.operations()}
        assert "saver_filename" not in names
        handles = [op.name for op in model.graph.operations() if op.type == "VarHandleOp"]
        assert sorted(handles) == sorted(model.variables)  # Keras' duplicates left out


def _restore_function_keys(path: str) -> dict[str, str]:
    """``{VarHandleOp: key}`` read the other way: the restore function the SaverDef names,
    its RestoreV2's tensor_names and the AssignVariableOps taking RestoreV2's outputs."""
    message = sm.read_saved_model(path)
    meta = sm._meta_graph(message, ("serve",), path)
    nodes = {n.name: n for n in meta.graph_def.node}
    call = nodes[meta.saver_def.restore_op_name]
    fn = {f.signature.name: f for f in meta.graph_def.library.function}[call.attr["f"].func.name]
    arg_to_handle = {a.name: ref for a, ref in zip(fn.signature.input_arg, call.input)}
    body = {n.name: n for n in fn.node_def}
    restore = next(n for n in fn.node_def if n.op == "RestoreV2")
    names_const = body[restore.input[1].split(":")[0]]
    tensor_names = [s.decode() for s in names_const.attr["value"].tensor.string_val]
    found = {}
    for n in fn.node_def:
        if n.op != "AssignVariableOp":
            continue
        src = n.input[1]
        while src.split(":")[0] in body and body[src.split(":")[0]].op == "Identity":
            src = body[src.split(":")[0]].input[0]
        node, _, index = src.split(":")
        assert node == restore.name
        found[arg_to_handle[n.input[0]]] = tensor_names[int(index)]
    return found


@pytest.mark.parametrize("path", [SCALE, KERAS], ids=["tf.Module", "keras"])
def test_object_graph_rule_agrees_with_the_restore_function(path):
    """The saver's restore function assigns each handle the same value. (Keras 3 saves
    each variable twice, as ``variables/i`` and ``_all_variables/j``; the signature's
    bound_inputs name the first, as TensorFlow's loader reads them, its restore function
    the second: equal tensors.)"""
    from graphflow.tf_bundle import BundleReader

    by_restore = _restore_function_keys(path)
    model = gf.load_saved_model(path)
    assert model.variables
    with BundleReader(os.path.join(path, "variables", "variables")) as reader:
        for handle, key in model.variables.items():
            mine, theirs = (reader.read(reader.lookup(k)) for k in (key, by_restore[handle]))
            np.testing.assert_array_equal(mine, theirs)
    if path == SCALE:
        assert by_restore == model.variables


def test_session_restores_every_variable_each_time():
    model = gf.load_saved_model(SCALE)
    x = np.float32([[1, 1]])
    with model.session() as a, model.session() as b:
        assert isinstance(a, gf.Session)
        np.testing.assert_array_equal(a.run(model.outputs["y"], {model.inputs["x"]: x}),
                                      [[2, -1]])
        w = model.graph.operation("w").outputs[0]
        a.run(gf.Scope(model.graph).assign_variable_op(w, np.float32([0, 0])))
        np.testing.assert_array_equal(b.run("StatefulPartitionedCall:0",
                                            {"serving_default_x:0": x}), [[2, -1]])


def test_missing_path_and_not_a_saved_model(tmp_path):
    with pytest.raises(NotFoundError, match="does not exist"):
        gf.load_saved_model(tmp_path / "nothing")
    with pytest.raises(InvalidArgumentError, match=f"{tmp_path}.*not a SavedModel"):
        gf.load_saved_model(tmp_path)
    (tmp_path / "saved_model.pb").write_bytes(b"\xff\xff\xff garbage")
    with pytest.raises(InvalidArgumentError, match="saved_model.pb is not a SavedModel"):
        gf.load_saved_model(tmp_path)
    (tmp_path / "saved_model.pb").write_bytes(b"")
    with pytest.raises(InvalidArgumentError, match="no MetaGraphDef"):
        gf.load_saved_model(tmp_path)


def test_unknown_tags_and_signature_list_what_there_is():
    with pytest.raises(NotFoundError, match=r"\['gpu', 'serve'\].*available tag sets: "
                                            r"\['serve'\]"):
        gf.load_saved_model(SCALE, tags=("serve", "gpu"))
    with pytest.raises(NotFoundError, match="'predict' not found.*signatures: serve, "
                                            "serving_default"):
        gf.load_saved_model(KERAS, signature="predict")
    assert gf.load_saved_model(SCALE, tags="serve").signatures == ("serving_default",)


def test_feeds_must_be_the_signature_inputs():
    model = gf.load_saved_model(SCALE)
    with pytest.raises(InvalidArgumentError, match=r"inputs \['x'\]; missing \['x'\]; "
                                                   r"unknown \['z'\]"):
        model(z=np.zeros((1, 2), np.float32))


def test_missing_checkpoint_is_not_found(tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(SCALE, copy, ignore=shutil.ignore_patterns("variables"))
    with pytest.raises(NotFoundError, match="variables"):
        gf.load_saved_model(copy)


def test_message_class_built_over_tensorboard_reads_the_fixture():
    pytest.importorskip("tensorboard")
    cls = sm._tensorboard_saved_model()
    assert cls is sm._tensorboard_saved_model()  # built once
    message = cls.FromString(open(os.path.join(SCALE, "saved_model.pb"), "rb").read())
    (meta,) = message.meta_graphs
    assert list(meta.meta_info_def.tags) == ["serve"]
    assert meta.saver_def.restore_op_name == "StatefulPartitionedCall_2"
    assert message.SerializeToString(deterministic=True) == \
        cls.FromString(message.SerializeToString()).SerializeToString(deterministic=True)


def test_no_message_classes_names_what_to_install(monkeypatch):
    def absent():
        raise ImportError("no tensorboard")

    monkeypatch.setattr(sm, "_tensorboard_saved_model", absent)
    monkeypatch.setitem(sys.modules, "tensorflow.core.protobuf.saved_model_pb2", None)
    with pytest.raises(ImportError, match=r"tensorboard or TensorFlow.*pip install"):
        gf.load_saved_model(SCALE)


def test_against_tensorflow_live(tmp_path):
    tf = pytest.importorskip("tensorflow")
    keras_in = str(_expected("keras_saved_model")["input_name"])
    x = np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32)
    for path, name, value in ((SCALE, "x", x[:, :2]), (KERAS, keras_in, x)):
        want = tf.saved_model.load(path).signatures["serving_default"](
            **{name: tf.constant(value)})
        got = gf.load_saved_model(path)(**{name: value})
        assert sorted(got) == sorted(want)
        for key in got:
            np.testing.assert_allclose(got[key], want[key].numpy(), rtol=1e-6, atol=1e-7)
    # TensorFlow's own classes, once it is imported, read the same message
    cls = sm.saved_model_class()
    assert cls.DESCRIPTOR.full_name == "tensorflow.SavedModel"
    assert len(sm.read_saved_model(KERAS).meta_graphs) == 1
