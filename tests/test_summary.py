"""gf.summary.FileWriter: TensorBoard event files, read back record by record.

The events are read with a reader written here from the TFRecord framing (length,
masked CRC32C of it, data, masked CRC32C of the data) and tensorboardX's Event class;
where the package tensorboard is installed, also with TensorBoard's own
EventAccumulator, as the TensorBoard server reads them.
"""
from __future__ import annotations

import os
import struct
import sys
import types

import numpy as np
import pytest

import graphflow as gf

pytest.importorskip("tensorboardX")

from tensorboardX.crc32c import crc32c  # noqa: E402
from google.protobuf import text_format  # noqa: E402
from tensorboardX.proto import event_pb2, graph_pb2  # noqa: E402


def _masked(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_events(path) -> list:
    """Every Event of one file, each record's checksums verified."""
    events, data = [], open(path, "rb").read()
    at = 0
    while at < len(data):
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        assert struct.unpack("<I", data[at + 8:at + 12])[0] == _masked(header)
        body = data[at + 12:at + 12 + length]
        assert struct.unpack("<I", data[at + 12 + length:at + 16 + length])[0] == _masked(body)
        events.append(event_pb2.Event.FromString(body))
        at += 16 + length
    return events


def event_files(logdir) -> list:
    return sorted(os.path.join(logdir, f) for f in os.listdir(logdir) if "tfevents" in f)


def small_training_graph():
    g = gf.Graph()
    s = gf.Scope(g)
    table = s.variable(np.arange(12, dtype=np.float32).reshape(6, 2), name="embedding")
    ids = s.placeholder(gf.int32, shape=[None], name="ids")
    with_scope = s.with_sub_scope("model")
    error = with_scope.sub(table.sparse_read(ids), 1.0)
    loss = with_scope.reduce_sum(with_scope.mul(error, error), name="loss")
    train = gf.train.GradientDescentOptimizer(0.1).minimize(loss)
    return g, table, ids, loss, train


def test_graph_view_holds_every_node_with_op_inputs_device_attrs_and_shapes(tmp_path):
    g, *_ = small_training_graph()
    s = gf.Scope(g).with_device("/cpu:0")
    s.with_control_dependencies([g.operation("model/loss")]).identity(
        g.output("ids:0"), name="after_loss")
    with gf.summary.FileWriter(tmp_path, graph=g) as writer:
        assert writer.get_logdir() == str(tmp_path)
    (path,) = event_files(tmp_path)
    events = read_events(path)
    assert events[0].file_version == "brain.Event:2"
    graphs = [e for e in events if e.HasField("graph_def")]
    assert len(graphs) == 1
    graph_def = graph_pb2.GraphDef.FromString(graphs[0].graph_def)
    by_name = {n.name: n for n in graph_def.node}
    assert list(by_name) == [op.name for op in g.operations()]
    for op in g.operations():
        node = by_name[op.name]
        assert node.op == op.type
        assert list(node.input) == [i.name if i.index else i.op.name for i in op.inputs] + \
            [f"^{c.name}" for c in op.control_inputs]
        assert node.device == op.device
        shapes = node.attr["_output_shapes"].list.shape
        assert len(shapes) == len(op.outputs)
        for proto, out in zip(shapes, op.outputs):
            dims = None if proto.unknown_rank else [d.size for d in proto.dim]
            assert dims == (None if out.shape.rank is None else
                            [-1 if d is None else d for d in out.shape.as_list()])
    assert by_name["after_loss"].device == "/device:CPU:0"
    assert by_name["ids"].attr["dtype"].type == 3  # DT_INT32
    scatter = next(n for n in graph_def.node if n.op == "ResourceScatterNdSub")
    assert scatter.attr["dtype"].type == 1  # graphflow's own attrs in the graph view


def test_scalars_with_steps_flush_and_close(tmp_path):
    writer = gf.summary.FileWriter(tmp_path / "new" / "dir")
    values = [np.float32(2.5), 1, np.array(0.125), np.array([[7.0]]), np.int64(-3)]
    for step, value in enumerate(values):
        writer.add_scalar("loss", value, step * 10)
    writer.add_scalar("other/rate", 0.5, np.int64(3), walltime=1234.5)
    writer.flush()  # on disk before close
    (path,) = event_files(tmp_path / "new" / "dir")
    events = [e for e in read_events(path) if e.HasField("summary")]
    loss = [(e.step, e.summary.value[0].simple_value) for e in events
            if e.summary.value[0].tag == "loss"]
    assert loss == [(10 * k, float(np.float32(np.asarray(v).reshape(()))))
                    for k, v in enumerate(values)]
    other = [e for e in events if e.summary.value[0].tag == "other/rate"]
    assert other[0].wall_time == 1234.5 and other[0].step == 3
    writer.close()
    writer.close()  # twice is harmless
    with pytest.raises(ValueError, match="closed"):
        writer.add_scalar("loss", 1.0, 99)


def test_writes_flush_after_flush_secs(tmp_path):
    with gf.summary.FileWriter(tmp_path, flush_secs=0) as writer:
        writer.add_scalar("x", 3.0, 1)
        (path,) = event_files(tmp_path)
        assert [e.summary.value[0].simple_value for e in read_events(path)
                if e.HasField("summary")] == [3.0]  # on disk, not flushed by hand
    with pytest.raises(ValueError, match="flush_secs"):
        gf.summary.FileWriter(tmp_path, flush_secs=-1)


def test_writers_never_share_a_file(tmp_path):
    with gf.summary.FileWriter(tmp_path) as a, gf.summary.FileWriter(tmp_path) as b:
        a.add_scalar("x", 1.0, 0)
        b.add_scalar("x", 2.0, 0)
    files = event_files(tmp_path)
    assert len(files) == 2
    values = sorted(e.summary.value[0].simple_value for f in files for e in read_events(f)
                    if e.HasField("summary"))
    assert values == [1.0, 2.0]


@pytest.mark.parametrize("call, error, match", [
    (lambda w: w.add_scalar("loss", "high", 0), TypeError, "real number"),
    (lambda w: w.add_scalar("loss", np.ones(2), 0), ValueError, r"one number, got shape \[2\]"),
    (lambda w: w.add_scalar("loss", 1 + 2j, 0), TypeError, "real number"),
    (lambda w: w.add_scalar("", 1.0, 0), TypeError, "tag"),
    (lambda w: w.add_scalar("loss", 1.0, 1.5), TypeError, "step must be an int"),
    (lambda w: w.add_scalar("loss", 1.0, True), TypeError, "step must be an int"),
    (lambda w: w.add_scalar("loss", 1.0, 2 ** 63), ValueError, "int64"),
    (lambda w: w.add_graph("graph"), TypeError, "gf.Graph"),
    (lambda w: w.add_run_metadata({"events": []}, "run"), TypeError, "gf.RunMetadata"),
])
def test_bad_arguments_are_refused_clearly(tmp_path, call, error, match):
    with gf.summary.FileWriter(tmp_path) as writer:
        with pytest.raises(error, match=match):
            call(writer)


@pytest.mark.parametrize("kwargs, error", [
    ({"graph": "g"}, TypeError), ({"flush_secs": float("nan")}, ValueError),
    ({"filename_suffix": "a/b"}, ValueError)])
def test_bad_writer_arguments_make_no_file(tmp_path, kwargs, error):
    with pytest.raises(error):
        gf.summary.FileWriter(tmp_path / "logs", **kwargs)
    assert not (tmp_path / "logs").exists()


def test_logdir_that_is_a_file(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(NotADirectoryError, match="not a directory"):
        gf.summary.FileWriter(tmp_path / "f")


def test_run_metadata_without_tensorboard_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard.compat.proto", None)
    with gf.summary.FileWriter(tmp_path) as writer:
        with pytest.raises(ImportError, match=r"graphflow\[tensorboard-full\]"):
            writer.add_run_metadata(gf.RunMetadata(), "run")


def traced_steps(steps: int = 2):
    g, table, ids, loss, train = small_training_graph()
    metadata = gf.RunMetadata()
    with gf.Session(g, gf.SessionConfig(optimize=False)) as sess:
        sess.run(gf.global_variables_initializer(g))
        losses = [sess.run([loss, train], {ids: np.array([1, 4, 1])},
                           options=gf.RunOptions(trace=True), run_metadata=metadata)[0]
                  for _ in range(steps)]
    return g, metadata, losses


def test_run_metadata_has_each_nodes_time_memory_and_shapes(tmp_path):
    config_pb2 = pytest.importorskip("tensorboard.compat.proto.config_pb2")
    g, metadata, _ = traced_steps()
    with gf.summary.FileWriter(tmp_path, graph=g) as writer:
        writer.add_run_metadata(metadata, "step 2", global_step=2)
        with pytest.raises(ValueError, match="already used"):
            writer.add_run_metadata(metadata, "step 2")
    (path,) = event_files(tmp_path)
    tagged = [e for e in read_events(path) if e.HasField("tagged_run_metadata")]
    assert len(tagged) == 1 and tagged[0].tagged_run_metadata.tag == "step 2"
    assert tagged[0].step == 2
    run = config_pb2.RunMetadata.FromString(tagged[0].tagged_run_metadata.run_metadata)
    stats = {s.node_name: (d.device, s) for d in run.step_stats.dev_stats for s in d.node_stats}
    assert {d.device for d in run.step_stats.dev_stats} == {e.device for e in metadata.events}
    assert len(stats) == len(metadata.events)
    for e in metadata.events:
        device, s = stats[e.node]
        assert device == e.device
        assert s.all_end_rel_micros == max(round(e.end_us - e.start_us), 1)
        assert sum(m.total_bytes for m in s.memory) == e.bytes_allocated
        assert [[d.size for d in o.tensor_description.shape.dim] for o in s.output] == \
            [list(shape) for shape in e.output_shapes]
    names = {op.name for op in g.operations()}
    assert {e.node for e in metadata.events if e.op_type != "_Copy"} <= names
    assert "model/loss" in stats


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # tensorboard's vendored html5lib
def test_tensorboard_reads_graph_scalars_and_run_metadata(tmp_path, monkeypatch):
    # TensorBoard's reader as it runs without TensorFlow (its stub; importing TF is slow)
    monkeypatch.setitem(sys.modules, "tensorboard.compat.notf",
                        types.ModuleType("tensorboard.compat.notf"))
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    g, metadata, losses = traced_steps(3)
    with gf.summary.FileWriter(tmp_path, graph=g) as writer:
        for step, value in enumerate(losses):
            writer.add_scalar("loss", value, step)
        writer.add_run_metadata(metadata, "last step")
    acc = accumulator.EventAccumulator(str(tmp_path))
    acc.Reload()
    tags = acc.Tags()
    assert tags["graph"] and tags["scalars"] == ["loss"] and tags["run_metadata"] == ["last step"]
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == \
        [(k, float(np.float32(v))) for k, v in enumerate(losses)]
    assert [n.name for n in acc.Graph().node] == [op.name for op in g.operations()]
    assert acc.RunMetadata("last step").step_stats.dev_stats[0].node_stats

    # what TensorBoard's graph dashboard is served: its plugin over the same directory
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.graph import graphs_plugin

    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(str(tmp_path))
    mux.Reload()
    plugin = graphs_plugin.GraphsPlugin(base_plugin.TBContext(
        logdir=str(tmp_path), multiplexer=mux,
        data_provider=data_provider.MultiplexerDataProvider(mux, str(tmp_path))))
    ctx = context.RequestContext()
    info = plugin.info_impl(ctx, "")["."]
    assert info["run_graph"] and info["tags"]["last step"]["profile"]
    served, _ = plugin.graph_impl(ctx, ".", None, False, "", 1024, "_too_large_attrs")
    shown = graph_pb2.GraphDef()
    text_format.Parse(served, shown)
    assert [n.name for n in shown.node] == [op.name for op in g.operations()]
    profile, _ = plugin.run_metadata_impl(ctx, "", ".", "last step")
    assert 'node_name: "model/loss"' in profile and "all_end_rel_micros" in profile


def test_a_fused_steps_time_shows_on_the_nodes_it_computed(tmp_path):
    config_pb2 = pytest.importorskip("tensorboard.compat.proto.config_pb2")
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.float32, [None], name="x")
    y = s.add(s.mul(s.neg(x), 2.0), 1.0, name="y")
    metadata = gf.RunMetadata()
    with gf.Session(g) as sess:  # optimize=True fuses the element-wise chain
        sess.run(y, {x: np.ones(100, np.float32)}, options=gf.RunOptions(trace=True),
                 run_metadata=metadata)
    fused = [e for e in metadata.events if e.replaces]
    assert fused, "expected the plan to fuse Neg, Mul and Add"
    proto = gf.summary.run_metadata_proto(metadata)
    stats = {s.node_name: s for d in proto.step_stats.dev_stats for s in d.node_stats}
    for e in fused:
        for name in e.replaces:
            assert stats[name].all_start_micros == stats[e.node].all_start_micros
            assert stats[name].all_end_rel_micros == stats[e.node].all_end_rel_micros
            assert e.node in stats[name].timeline_label
    assert isinstance(proto, config_pb2.RunMetadata)


def test_train_embedding_logs_its_loss_curve_and_graph(tmp_path):
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    steps = 20
    proc = subprocess.run(
        [sys.executable, "examples/train_embedding.py", "--rows", "300", "--steps", str(steps),
         "--batch", "16", "--plot", "", "--logdir", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=root)
    assert proc.returncode == 0, proc.stderr
    printed = {int(line.split()[1].split("/")[0]): float(line.split("loss per row ")[1].split()[0])
               for line in proc.stdout.splitlines() if line.startswith("step ")}
    (path,) = event_files(tmp_path)
    assert f"TensorBoard log: {path}" in proc.stdout
    events = read_events(path)
    curve = {e.step: e.summary.value[0].simple_value for e in events if e.HasField("summary")
             and e.summary.value[0].tag == "loss per row"}
    assert sorted(curve) == list(range(1, steps + 1))
    for step, value in printed.items():  # the printed lines are the logged curve
        assert f"{curve[step]:.4g}" == f"{value:.4g}"
    assert curve[steps] < curve[1]
    graph_def = graph_pb2.GraphDef.FromString(
        next(e.graph_def for e in events if e.HasField("graph_def")))
    assert {"embedding", "ids", "targets", "loss"} <= {n.name for n in graph_def.node}
    runs = [e.tagged_run_metadata.tag for e in events if e.HasField("tagged_run_metadata")]
    try:
        import tensorboard.compat.proto.config_pb2  # noqa: F401
    except ImportError:
        assert runs == [] and "no per-node run metadata" in proc.stdout
    else:
        assert runs == [f"step {steps}"]
