"""gf.import_tf_graph on a TF user's own files (issue 38): a SavedModel directory or its
saved_model.pb is refused naming gf.load_saved_model, whatever the protobuf schema;
TensorFlow's classes, tensorboard's, tensorboardX's in that order; device strings
without a job run locally; the missing-op list reaches into If/While functions; a
file's nodes are "defined at" the file.

The fixtures are TF 2.21's (tests/fixtures/tf/generate.py: devices_no_job, cond_while,
scale_saved_model); these tests need neither TensorFlow nor the script.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import types

import numpy as np
import pytest

pytest.importorskip("tensorboardX")

import graphflow as gf  # noqa: E402
from graphflow.errors import InvalidArgumentError, UnimplementedError  # noqa: E402
from graphflow.interop import tf_proto as tp  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "tf")
SAVED_MODEL = os.path.join(FIXTURES, "scale_saved_model")


def _importable(source: str) -> bool:
    if source == "tensorflow":  # installed: finding it costs nothing, importing seconds
        return importlib.util.find_spec("tensorflow") is not None
    try:
        tp.protos(source)
        return True
    except ImportError:
        return False


SCHEMAS = [pytest.param(s, marks=pytest.mark.skipif(not _importable(s), reason=f"no {s}"))
           for s in ("tensorboardX", "tensorboard", "tensorflow")]


@pytest.fixture
def schema(request, monkeypatch):
    """Import with one source's classes only."""
    ps = tp.protos(request.param)
    monkeypatch.setattr(tp, "protos", lambda source=None: ps)
    return ps


@pytest.fixture
def fresh_protos():
    tp._load.cache_clear()
    yield
    tp._load.cache_clear()


# -- (a), (b): SavedModels and files that are not GraphDefs ------------------------------
@pytest.mark.parametrize("schema", SCHEMAS, indirect=True)
def test_a_saved_model_directory_names_load_saved_model(schema):
    with pytest.raises(InvalidArgumentError, match=r"is a SavedModel directory.*"
                       r"gf\.load_saved_model\("):
        gf.import_tf_graph(SAVED_MODEL)
    with pytest.raises(InvalidArgumentError, match="is a directory, not a GraphDef file"):
        gf.import_tf_graph(os.path.join(SAVED_MODEL, "variables"))


@pytest.mark.parametrize("schema", SCHEMAS, indirect=True)
def test_saved_model_pb_is_refused_whatever_the_schema(schema):
    """tensorboardX's schema used to read it as an EMPTY GraphDef."""
    path = os.path.join(SAVED_MODEL, "saved_model.pb")
    with pytest.raises(InvalidArgumentError, match=r"saved_model\.pb is a SavedModel.*"
                       r"gf\.load_saved_model\('.*scale_saved_model'\)"):
        gf.import_tf_graph(path)
    with open(path, "rb") as f:
        data = f.read()
    with pytest.raises(InvalidArgumentError, match="the bytes is a SavedModel"):
        gf.import_tf_graph(data)


@pytest.mark.parametrize("schema", SCHEMAS, indirect=True)
def test_a_text_saved_model_is_refused(schema, tmp_path):
    path = tmp_path / "saved_model.pbtxt"
    path.write_text("saved_model_schema_version: 1\nmeta_graphs {\n  meta_info_def {\n"
                    "    tags: \"serve\"\n  }\n}\n")
    with pytest.raises(InvalidArgumentError, match="is a SavedModel .*gf.load_saved_model"):
        gf.import_tf_graph(str(path))


@pytest.mark.parametrize("schema", SCHEMAS, indirect=True)
@pytest.mark.parametrize("name", ["fingerprint.pb", "variables/variables.index",
                                  "variables/variables.data-00000-of-00001"])
def test_other_tf_files_are_not_graph_defs(schema, name):
    path = os.path.join(SAVED_MODEL, name)
    with pytest.raises(InvalidArgumentError, match=f"{os.path.basename(name)}.*not .*GraphDef"):
        gf.import_tf_graph(path)


@pytest.mark.parametrize("schema", SCHEMAS, indirect=True)
def test_an_integer_where_a_graph_def_holds_nodes_is_refused(schema):
    with pytest.raises(InvalidArgumentError, match="field 1 holds an integer"):
        gf.import_tf_graph(b"\x08\x05")


@pytest.mark.parametrize("schema", SCHEMAS, indirect=True)
def test_graph_defs_without_nodes_still_read(schema, tmp_path):
    assert len(gf.import_tf_graph(b"")) == 0
    empty = schema.GraphDef()
    empty.versions.producer = 1882
    assert len(gf.import_tf_graph(empty.SerializeToString())) == 0


def test_convert_of_saved_model_pb_fails_and_writes_nothing(tmp_path, capsys):
    from graphflow.tools.cli import main

    out = tmp_path / "out.json"
    assert main(["convert", os.path.join(SAVED_MODEL, "saved_model.pb"), str(out)]) == 1
    assert "is a SavedModel" in capsys.readouterr().err and not out.exists()
    # the directory itself converts: its signature's graph (tests/test_cli_formats.py)


# -- (c): which protobuf classes -----------------------------------------------------------
def _fake_tensorflow(monkeypatch) -> None:
    """An imported 'tensorflow' whose core.framework modules are tensorboard's (or
    tensorboardX's) generated modules: the order is tested without TensorFlow."""
    base = "tensorboard.compat.proto" if _importable("tensorboard") else "tensorboardX.proto"
    for name in ("tensorflow", "tensorflow.core", "tensorflow.core.framework"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    for module in tp._MODULES:
        real = __import__(f"{base}.{module}", fromlist=[module])
        monkeypatch.setitem(sys.modules, f"tensorflow.core.framework.{module}", real)


def test_tensorflows_classes_first_when_it_is_imported(monkeypatch, fresh_protos):
    _fake_tensorflow(monkeypatch)
    ps = tp.protos()
    assert ps.source == "tensorflow" and ps.full


def test_tensorboards_classes_when_tensorflow_is_absent(monkeypatch, fresh_protos):
    if not _importable("tensorboard"):
        pytest.skip("tensorboard is not installed")
    _hide(monkeypatch, "tensorflow")
    ps = tp.protos()
    assert ps.source == "tensorboard" and ps.full


def _hide(monkeypatch, *packages: str) -> None:
    """Make ``packages`` (and every module of theirs already imported) unimportable."""
    for name in [m for m in sys.modules if m.split(".")[0] in packages] + list(packages):
        monkeypatch.setitem(sys.modules, name, None)


def test_tensorboardx_classes_last(monkeypatch, fresh_protos):
    _hide(monkeypatch, "tensorflow", "tensorboard")
    ps = tp.protos()
    assert ps.source == "tensorboardX" and not ps.full
    with pytest.raises(UnimplementedError, match="tensorboard.*or TensorFlow"):
        gf.import_tf_graph(os.path.join(FIXTURES, "function.pb"))


def test_a_broken_source_is_skipped(monkeypatch, fresh_protos):
    """A TensorFlow whose generated modules do not load (a protobuf too old for them)
    is passed over for the next source."""
    real = tp.importlib.import_module

    def import_module(name, *args):
        if name.startswith("tensorflow."):
            raise TypeError("Descriptors cannot be created directly")
        return real(name, *args)
    _fake_tensorflow(monkeypatch)
    monkeypatch.setattr(tp.importlib, "import_module", import_module)
    assert tp.protos().source in ("tensorboard", "tensorboardX")


def _child(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=240, cwd=tempfile.gettempdir())  # not the checkout's graphflow/
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_installed_tensorflow_is_not_imported_while_tensorboard_serves():
    if not _importable("tensorboard"):
        pytest.skip("tensorboard is not installed")
    out = _child("import sys; from graphflow.interop import tf_proto as tp; "
                 "print(tp.protos().source, 'tensorflow' in sys.modules)")
    assert out == ["tensorboard", "False"]


def test_tensorflow_alone_reads_function_libraries():
    """TF 2.21 without the tensorboard package: TF's own classes read tf.function graphs."""
    if not _importable("tensorflow"):
        pytest.skip("TensorFlow is not installed")
    out = _child("import sys; sys.modules['tensorboard'] = None\n"
                 "import graphflow as gf; from graphflow.interop import tf_proto as tp\n"
                 f"g = gf.import_tf_graph({os.path.join(FIXTURES, 'function.pb')!r})\n"
                 "print(tp.protos().source, tp.protos().GraphDef.__module__, len(g) > 0)")
    assert out == ["tensorflow", "tensorflow.core.framework.graph_pb2", "True"]


# -- (d): device strings without a job -----------------------------------------------------
def _expected(name: str):
    data = np.load(os.path.join(FIXTURES, name + ".npz"), allow_pickle=True)  # our own files
    feeds = {str(k): data[f"feed_{i}"] for i, k in enumerate(data["feed_names"])}
    fetches = {str(k): data[f"fetch_{i}"] for i, k in enumerate(data["fetch_names"])}
    return feeds, fetches


def test_devices_without_a_job_run_in_a_local_session():
    g = gf.import_tf_graph(os.path.join(FIXTURES, "devices_no_job.pb"))
    assert {op.device for op in g.operations()} >= {
        "/replica:0/task:0/device:CPU:0", "/task:0/device:CPU:0", "/task:0"}
    feeds, fetches = _expected("devices_no_job")
    with gf.Session(g) as sess:
        got = sess.run(list(fetches), feeds)
    for value, want in zip(got, fetches.values()):
        assert value.dtype == want.dtype and value.tobytes() == want.tobytes()


@pytest.mark.parametrize("device", ["/task:1", "/replica:1/task:0", "/job:worker/task:0",
                                    "/job:localhost/task:1"])
def test_other_tasks_still_need_a_cluster(device):
    s = gf.Scope(gf.Graph())
    y = s.with_device(device).identity(s.placeholder(gf.float32, [2], name="x"), name="y")
    with gf.Session(s.graph) as sess, pytest.raises(InvalidArgumentError,
                                                    match="Session has no cluster"):
        sess.run(y, {"x:0": np.ones(2, np.float32)})


# -- (e): ops missing inside If/While functions --------------------------------------------
def test_missing_ops_inside_cond_and_while_functions_are_listed():
    """graphflow has StatelessIf/StatelessWhile now: what it lacks is inside their
    functions (Cos, Sin in the branches, Atan in the body), listed as function/node."""
    if not tp.protos().full:
        pytest.skip("the function library needs TensorFlow's full schema")
    with pytest.raises(UnimplementedError) as info:
        gf.import_tf_graph(os.path.join(FIXTURES, "cond_while.pb"))
    message = str(info.value)
    assert "3 op type(s)" in message
    assert "StatelessIf" not in message and "StatelessWhile" not in message
    for op, fn in (("Cos", "cond_true"), ("Sin", "cond_false"), ("Atan", "while_body")):
        listed = message.split(f"{op} (nodes: ", 1)[1].split(")", 1)[0]
        assert listed.startswith(fn) and listed.endswith(f"/{op}"), listed
    assert "library function" in message
    assert "Exp" not in message and "Sqrt" not in message  # graphflow has those


# -- the file a node came from ---------------------------------------------------------
def test_errors_of_an_imported_file_name_the_file():
    path = os.path.join(FIXTURES, "frozen.pb")
    g = gf.import_tf_graph(path)
    assert {op.site for op in g.operations()} == {path}
    with gf.Session(g) as sess, pytest.raises(InvalidArgumentError) as info:
        sess.run("out:0", {"ids:0": np.int32([9])})
    assert f"defined at {path}" in str(info.value)


def test_errors_of_a_loaded_json_file_name_the_file(tmp_path):
    s = gf.Scope(gf.Graph())
    s.gather_nd(s.constant([1.0, 2.0]), s.placeholder(gf.int32, [None, 1], name="i"), name="g")
    path = str(tmp_path / "g.json")
    s.graph.save(path)
    g = gf.load_graph(path)
    with gf.Session(g) as sess, pytest.raises(InvalidArgumentError) as info:
        sess.run("g:0", {"i:0": np.int32([[5]])})
    assert f"defined at {path}" in str(info.value)
