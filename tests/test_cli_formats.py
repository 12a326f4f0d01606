"""`graphflow show`, `inspect` and `run` read every format `convert` reads (graphflow's
JSON, TensorFlow GraphDefs .pb/.pbtxt); `run --init`, `--restore CKPT`, `--target OP`;
a loaded graph's errors name the node and the file."""
from __future__ import annotations

import os

import numpy as np
import pytest

import graphflow as gf
from graphflow.tools.cli import main

pytest.importorskip("tensorboardX")

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "tf")


def _cli(capsys, *argv) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    out = capsys.readouterr()
    return status, out.out, out.err


@pytest.fixture
def ids(tmp_path) -> str:
    path = tmp_path / "ids.npy"
    np.save(path, np.int32([5, 0, 5, 2]))
    return str(path)


def _frozen_out() -> np.ndarray:
    data = np.load(os.path.join(FIXTURES, "frozen.npz"), allow_pickle=True)
    return data[f"fetch_{list(data['fetch_names']).index('out:0')}"]


@pytest.mark.parametrize("name", ["frozen.pb", "glue.pbtxt"])
def test_show_and_inspect_read_tf_graph_defs(capsys, name):
    status, out, err = _cli(capsys, "show", os.path.join(FIXTURES, name), "--no-legend")
    assert status == 0, err
    assert out.startswith("digraph") and ('"ids"' in out or '"x"' in out)
    status, out, err = _cli(capsys, "inspect", os.path.join(FIXTURES, name))
    assert status == 0, err
    assert "nodes" in out and "Placeholder" in out


def test_run_reads_a_tf_graph_def_and_gives_tensorflows_result(capsys, ids, tmp_path):
    status, out, err = _cli(capsys, "run", os.path.join(FIXTURES, "frozen.pb"), "--fetch", "out",
                            "--feed", f"ids={ids}", "--save", tmp_path / "saved")
    assert status == 0, err
    assert out.startswith("out:0  float32 [6]")
    assert np.load(tmp_path / "saved" / "out_0.npy").tobytes() == _frozen_out().tobytes()


def test_run_errors_name_the_node_and_the_file(capsys, tmp_path):
    bad = tmp_path / "bad.npy"
    np.save(bad, np.int32([9]))
    path = os.path.join(FIXTURES, "frozen.pb")
    status, _, err = _cli(capsys, "run", path, "--fetch", "out", "--feed", f"ids={bad}")
    assert status == 1
    assert "[node GatherV2]" in err and f"defined at {path}" in err
    assert "bin/graphflow" not in err and err.count("\n") == 1


def test_run_json_errors_name_the_file(capsys, tmp_path):
    s = gf.Scope(gf.Graph())
    s.gather_nd(s.constant([1.0, 2.0]), s.placeholder(gf.int32, [None, 1], name="i"), name="g")
    s.graph.save(tmp_path / "g.json")
    np.save(tmp_path / "i.npy", np.int32([[7]]))
    status, _, err = _cli(capsys, "run", tmp_path / "g.json", "--fetch", "g",
                          "--feed", f"i={tmp_path / 'i.npy'}")
    assert status == 1 and f"defined at {tmp_path / 'g.json'}" in err


def test_a_pb_is_not_read_as_json(capsys):
    status, _, err = _cli(capsys, "inspect", os.path.join(FIXTURES, "frozen.pb"))
    assert status == 0 and "UTF-8" not in err


def test_a_saved_model_directory_is_read_as_its_signatures_graph(capsys, tmp_path):
    pytest.importorskip("tensorboard")
    saved = os.path.join(FIXTURES, "scale_saved_model")
    for verb in ("show", "inspect"):
        status, out, err = _cli(capsys, verb, saved)
        assert status == 0 and "SavedModel" in err, err
    out_json = str(tmp_path / "scale.json")
    status, _, err = _cli(capsys, "convert", saved, out_json)
    assert status == 0, err
    names = {op.name for op in gf.load_graph(out_json).operations()}
    assert not any("RestoreV2" in n or "SaveV2" in n for n in names)
    # its saved_model.pb alone is not a GraphDef: refused naming the loader
    status, _, err = _cli(capsys, "run", os.path.join(saved, "saved_model.pb"), "--fetch", "y")
    assert status == 1 and "is a SavedModel" in err


# -- run: variables and targets --------------------------------------------------------------
def test_run_init_and_targets_on_a_tf_graph(capsys):
    """variables_v1: TF 1.x resource variables, initializers named NAME/Assign."""
    path = os.path.join(FIXTURES, "variables_v1.pb")
    status, _, err = _cli(capsys, "run", path, "--fetch", "table_now")
    assert status == 1 and "uninitialized" in err and "--init" in err and "--restore" in err
    data = np.load(os.path.join(FIXTURES, "variables_v1.npz"), allow_pickle=True)
    want = data[f"fetch_{list(data['fetch_names']).index('table_now:0')}"]
    for init in (["--init"], ["--target", "init"]):  # ours, or the graph's own init op
        status, out, err = _cli(capsys, "run", path, *init, "--target", "bump",
                                "--fetch", "table_now", "--threshold", "0")
        assert status == 0, err
        assert "ran bump" in out
        printed = out.split("table_now:0  float32 [4, 2]\n", 1)[1]
        assert np.array2string(want, threshold=0) in printed


def _training_graph():
    g = gf.Graph()
    s = gf.Scope(g)
    w = s.variable(np.float32([1.0, -2.0]), name="w")
    loss = s.reduce_sum(s.mul(w, w), name="loss")
    gf.train.GradientDescentOptimizer(0.25).minimize(loss, name="train")
    return g, w


def test_run_trains_restores_and_says_what_it_ran(capsys, tmp_path):
    g, w = _training_graph()
    g.save(tmp_path / "g.json")
    status, out, err = _cli(capsys, "run", tmp_path / "g.json", "--init", "--target", "train",
                            "--target", "train", "--fetch", "loss")
    assert status == 0, err
    assert out.count("ran train") == 2
    assert "loss:0  float32 []\n0.3125" in out  # w halves each step: 5 -> 1.25 -> 0.3125
    with gf.Session(g) as sess:
        sess.run(w.assign(np.float32([3.0, 4.0])))
        prefix = gf.train.Saver().save(sess, str(tmp_path / "ckpt"))
    status, out, err = _cli(capsys, "run", tmp_path / "g.json", "--restore", prefix,
                            "--fetch", "loss")
    assert status == 0, err
    assert "loss:0  float32 []\n25.\n" in out
    status, _, err = _cli(capsys, "run", tmp_path / "g.json", "--restore",
                          tmp_path / "no_such_ckpt", "--fetch", "loss")
    assert status == 1 and "no_such_ckpt" in err and "Traceback" not in err


def test_run_needs_a_fetch_or_a_target(capsys, tmp_path):
    _training_graph()[0].save(tmp_path / "g.json")
    with pytest.raises(SystemExit) as e:
        main(["run", str(tmp_path / "g.json")])
    assert e.value.code == 2
    assert "--fetch" in capsys.readouterr().err


def test_run_init_names_variables_without_an_initializer(capsys, tmp_path):
    g = gf.Graph()
    s = gf.Scope(g)
    handle = s.var_handle_op(dtype=gf.float32, shape=[2], shared_name="orphan", name="orphan")
    s.read_variable_op(handle, dtype=gf.float32, name="read")
    g.save(tmp_path / "g.json")
    status, _, err = _cli(capsys, "run", tmp_path / "g.json", "--init", "--fetch", "read")
    assert status == 1 and "orphan" in err and "--restore" in err
