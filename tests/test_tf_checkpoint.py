"""TensorFlow's checkpoint format as gf.train.Saver's (issue 38, item 1).

Without TensorFlow: checkpoints TF 2.21 wrote (tests/fixtures/tf/ckpt_*, made by
tests/fixtures/tf/make_checkpoints.py) restore into graphflow with every dtype,
several data shards, a partitioned variable, Adam's slots (training continues as
TensorFlow's did) and TF 2 object-graph keys through ``name_map``; graphflow writes
TensorFlow's bytes exactly; ``max_to_keep``, the ``checkpoint`` state file and
``latest_checkpoint``; the table, crc32c and slice-key codecs. With TensorFlow (the
tests marked below skip without it): TF reads what graphflow writes and the other
way round, live.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import pathlib
import threading

import numpy as np
import pytest

import graphflow as gf
from graphflow import sstable, tf_bundle
from graphflow.crc32c import crc32c, mask, unmask
from graphflow.errors import (DataLossError, InvalidArgumentError, NotFoundError,
                              UnimplementedError)
from graphflow.tools.saver import list_variables

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "tf"
DATA = ".data-00000-of-00001"
_spec = importlib.util.spec_from_file_location("make_checkpoints",
                                               FIXTURES / "make_checkpoints.py")
make = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make)  # its values only: TensorFlow is imported by its main()


def same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype == object or b.dtype == object:
        return a.shape == b.shape and a.tolist() == b.tolist()
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def zeros_like(value) -> np.ndarray:
    value = np.asarray(value)
    return np.full(value.shape, b"", dtype=object) if value.dtype == object else \
        np.zeros(value.shape, value.dtype)


def graph_of(values: dict) -> tuple[gf.Graph, dict]:
    """A graph with one zero-initialized variable per entry."""
    g = gf.Graph()
    s = gf.Scope(g)
    return g, {name: s.variable(zeros_like(v), name=name) for name, v in values.items()}


def session_with(values: dict) -> tuple[gf.Session, dict]:
    """A Session whose variables hold ``values``."""
    g, variables = graph_of(values)
    sess = gf.Session(g)
    s = gf.Scope(g)
    for name, value in values.items():
        ph = s.placeholder(variables[name].dtype, shape=np.shape(value))
        sess.run(variables[name].assign(ph, read_value=False), {ph: np.asarray(value)})
    return sess, variables


# -- TensorFlow's checkpoints, restored (fixtures) ----------------------------------------------
def test_a_sharded_tf1_checkpoint_restores_every_dtype_and_a_partitioned_variable():
    prefix = FIXTURES / "ckpt_tf1_sharded"
    expected = {**make.dtype_values(), "part": make.PART}
    assert len(list(FIXTURES.glob("ckpt_tf1_sharded.data-*"))) > 1  # really sharded
    g, variables = graph_of(expected)
    with gf.Session(g) as sess:  # no initializer runs
        gf.train.Saver().restore(sess, prefix)
        got = sess.run({name: v for name, v in variables.items()})
    for name, value in expected.items():
        assert same_bits(got[name], value), name
    assert dict(list_variables(prefix))["part"] == [5, 3]  # the slices are not listed


def adam_model() -> tuple[gf.Graph, dict, tuple]:
    """The model of make_checkpoints.tf1_adam in graphflow: Adam on fed gradients."""
    g = gf.Graph()
    s = gf.Scope(g)
    start = make.adam_start()
    w, b = s.variable(start["w"], name="w"), s.variable(start["b"], name="b")
    step = gf.train.get_or_create_global_step(g)
    gw, gb = s.placeholder(gf.float32, [3, 2]), s.placeholder(gf.float32, [2])
    train = gf.train.AdamOptimizer(0.1).apply_gradients([(gw, w), (gb, b)], global_step=step)
    return g, {v.name: v for v in gf.global_variables(g)}, (train, gw, gb)


def test_a_tf1_adam_checkpoint_restores_its_slots_and_trains_on_as_tensorflow_did():
    expected = np.load(FIXTURES / "ckpt_tf1_adam.npz")
    g, variables, (train, gw, gb) = adam_model()
    assert sorted(variables) == sorted(k[len("saved/"):] for k in expected.files
                                       if k.startswith("saved/"))
    with gf.Session(g) as sess:
        gf.train.Saver().restore(sess, FIXTURES / "ckpt_tf1_adam")
        for name, v in variables.items():
            assert same_bits(sess.run(v), expected[f"saved/{name}"]), name
        grads = make.adam_gradients(3)
        sess.run(train, {gw: grads["w"], gb: grads["b"]})
        for name, v in variables.items():
            np.testing.assert_allclose(sess.run(v), expected[f"next/{name}"], rtol=1e-6,
                                       atol=1e-7, err_msg=name)


def tf2_graph(names: list[str]) -> tuple[gf.Graph, dict]:
    values = make.tf2_values(3)
    return graph_of({n: values[n.removeprefix("dense/").replace("kernel", "model/kernel")
                               .replace("bias", "model/bias")] if n != "step" else values["step"]
                     for n in names})


def test_tf2_object_graph_keys_restore_through_name_map():
    folder = FIXTURES / "ckpt_tf2_manager"
    latest = gf.train.latest_checkpoint(folder)  # TF 2's state file: relative names
    assert latest == str(folder / "ckpt-3")
    g, variables = graph_of(make.tf2_values(3))
    with gf.Session(g) as sess:
        with pytest.raises(NotFoundError, match=r"Key model/kernel not found.*TF 2 key "
                                                r"'model/kernel/\.ATTRIBUTES/VARIABLE_VALUE'"
                                                r".*name_map=gf\.train\.Saver\.tf2_name"):
            gf.train.Saver().restore(sess, latest)
        gf.train.Saver(name_map=gf.train.Saver.tf2_name).restore(sess, latest)
        for name, value in make.tf2_values(3).items():
            assert same_bits(sess.run(variables[name]), value), name
        gf.train.Saver(name_map=gf.train.Saver.tf2_name).restore(sess, folder / "ckpt-2")
        assert same_bits(sess.run(variables["step"]), make.tf2_values(2)["step"])
    g, renamed = graph_of({"dense/kernel": make.tf2_values(3)["model/kernel"]})
    with gf.Session(g) as sess:  # a dict, and a callable composed with the TF 2 rule
        gf.train.Saver(name_map={"model/kernel/.ATTRIBUTES/VARIABLE_VALUE": "dense/kernel"}
                       ).restore(sess, latest)
        assert same_bits(sess.run(renamed["dense/kernel"]), make.tf2_values(3)["model/kernel"])
        sess.run(renamed["dense/kernel"].assign(np.zeros((3, 2), np.float32), read_value=False))
        gf.train.Saver(name_map=lambda k: gf.train.Saver.tf2_name(k).replace("model/", "dense/")
                       ).restore(sess, folder / "ckpt-2")
        assert same_bits(sess.run(renamed["dense/kernel"]), make.tf2_values(2)["model/kernel"])


def test_name_map_rules(tmp_path):
    sess, _ = session_with({"a": np.float32(1), "b": np.float32(2)})
    with sess:
        path = gf.train.Saver().save(sess, tmp_path / "m")
    g, v = graph_of({"a": np.float32(0), "b": np.float32(0), "c": np.float32(0)})
    with gf.Session(g) as fresh:
        gf.train.Saver([v["a"], v["b"]], name_map={"a": "b", "b": "a"}).restore(fresh, path)
        assert fresh.run([v["a"], v["b"]]) == [2, 1]  # swapped
        with pytest.raises(NotFoundError, match="Key c not found"):
            gf.train.Saver([v["c"]], name_map={"a": "b"}).restore(fresh, path)
        with pytest.raises(NotFoundError, match="No key that name_map maps to 'a'"):
            gf.train.Saver([v["a"]], name_map={"a": "b"}).restore(fresh, path)  # "a" moved
        gf.train.Saver([v["c"]], name_map={"a": "c"}).restore(fresh, path)
        assert fresh.run(v["c"]) == 1
        with pytest.raises(InvalidArgumentError, match="'a', 'b' all map to variable 'c'"):
            gf.train.Saver([v["c"]], name_map=lambda k: "c").restore(fresh, path)
        gf.train.Saver([v["c"]], name_map=lambda k: "c" if k == "b" else None).restore(fresh,
                                                                                     path)
        assert fresh.run(v["c"]) == 2
    with pytest.raises(ValueError, match="maps both 'a' and 'b' to variable 'x'"):
        gf.train.Saver(name_map={"a": "x", "b": "x"})
    with pytest.raises(TypeError, match="name_map must be a dict or a callable"):
        gf.train.Saver(name_map="tf2")


# -- graphflow writes TensorFlow's bytes ----------------------------------------------------
def test_graphflow_writes_the_bytes_tensorflow_wrote(tmp_path):
    """Restoring TF's Adam checkpoint and saving it again (in TF's order, by name) gives
    TF's .index and .data files byte for byte."""
    prefix = FIXTURES / "ckpt_tf1_adam"
    g, variables, _ = adam_model()
    with gf.Session(g) as sess:
        gf.train.Saver().restore(sess, prefix)
        path = gf.train.Saver(dict(sorted(variables.items()))).save(sess, tmp_path / "again")
    for suffix in (".index", DATA):
        assert pathlib.Path(path + suffix).read_bytes() == \
            pathlib.Path(f"{prefix}{suffix}").read_bytes(), suffix


@pytest.mark.parametrize("fixture", ["ckpt_tf1_sharded", "ckpt_tf1_adam",
                                     "ckpt_tf2_manager/ckpt-3"])
def test_tf_index_tables_read_and_rewrite_byte_for_byte(fixture):
    data = (FIXTURES / f"{fixture}.index").read_bytes()
    rows = sstable.read_table(data)
    assert rows[0][0] == b"" and sstable.write_table(rows) == data


def test_every_dtype_round_trips_through_a_saved_checkpoint(tmp_path):
    values = make.dtype_values()
    sess, _ = session_with(values)
    with sess:
        path = gf.train.Saver().save(sess, tmp_path / "all")
    g, variables = graph_of(values)
    with gf.Session(g) as fresh:
        gf.train.Saver().restore(fresh, path)
        for name, value in values.items():
            got = fresh.run(variables[name])
            assert same_bits(got, value), name
    assert dict(list_variables(path)) == {k: list(np.shape(v)) for k, v in values.items()}


# -- max_to_keep, the checkpoint file, latest_checkpoint ----------------------------------------
def files(folder) -> list[str]:
    return sorted(os.listdir(folder))


def state_text(folder) -> str:
    return (pathlib.Path(folder) / "checkpoint").read_text()


def test_max_to_keep_deletes_the_oldest_and_the_state_names_the_kept(tmp_path):
    sess, _ = session_with({"v": np.float32([1, 2])})
    with sess:
        saver = gf.train.Saver(max_to_keep=3)
        paths = [saver.save(sess, tmp_path / "model.ckpt", global_step=k) for k in range(1, 6)]
        assert saver.last_checkpoints == paths[-3:]
        kept = [f"model.ckpt-{k}" for k in (3, 4, 5)]
        assert files(tmp_path) == sorted(["checkpoint"] + [n + s for n in kept
                                                           for s in (".index", DATA)])
        assert state_text(tmp_path) == (
            'model_checkpoint_path: "model.ckpt-5"\n'
            + "".join(f'all_model_checkpoint_paths: "{n}"\n' for n in kept))
        assert gf.train.latest_checkpoint(tmp_path) == paths[-1]
        saver.save(sess, tmp_path / "model.ckpt", global_step=3)  # saved again: newest now
        assert saver.last_checkpoints == [paths[3], paths[4], paths[2]]
        assert gf.train.latest_checkpoint(tmp_path) == paths[2]
        assert "model.ckpt-3.data-00001-of-00002" in files(tmp_path)  # saved over: 2 shards
        saver.save(sess, tmp_path / "other", write_state=False)  # no state, nothing deleted
        assert gf.train.latest_checkpoint(tmp_path) == paths[2] and len(files(tmp_path)) == 10


def test_max_to_keep_none_keeps_every_file(tmp_path):
    sess, _ = session_with({"v": np.int64(3)})
    with sess:
        saver = gf.train.Saver(max_to_keep=None)
        for k in range(4):
            saver.save(sess, tmp_path / "m", global_step=k)
        saver.save(sess, tmp_path / "m", global_step=9, latest_filename="state")
    assert len([n for n in files(tmp_path) if n.endswith(".index")]) == 5
    assert state_text(tmp_path).splitlines() == ['model_checkpoint_path: "m-3"',
                                                  'all_model_checkpoint_paths: "m-3"']
    assert gf.train.latest_checkpoint(tmp_path, latest_filename="state") == str(tmp_path / "m-9")
    with pytest.raises(ValueError, match="max_to_keep"):
        gf.train.Saver(max_to_keep=-1)


def test_latest_checkpoint_without_state_or_checkpoint_is_none(tmp_path, caplog):
    assert gf.train.latest_checkpoint(tmp_path) is None
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "gone"\n')
    assert gf.train.latest_checkpoint(tmp_path) is None
    (tmp_path / "checkpoint").write_text("model_checkpoint_path: [not text format\n")
    with caplog.at_level(logging.WARNING, logger="graphflow.train"):
        assert gf.train.latest_checkpoint(tmp_path) is None
    assert "not a CheckpointState" in caplog.text
    legacy = FIXTURES / "ckpt_graphflow_v1"  # graphflow's earlier one-file checkpoints count
    (tmp_path / "checkpoint").write_text(f'model_checkpoint_path: "{legacy}"\n')
    assert gf.train.latest_checkpoint(tmp_path) == str(legacy)


def test_saves_and_restores_of_one_prefix_from_many_threads(tmp_path):
    """Whole values only: a restore never sees one save's index with another's data."""
    sess, variables = session_with({"t": np.zeros((64, 8), np.float32)})
    bump = variables["t"].assign_add(np.ones((64, 8), np.float32), read_value=False)
    path, errors = tmp_path / "m", []
    with sess:
        gf.train.Saver().save(sess, path)

        def saving():
            try:
                for _ in range(15):
                    sess.run(bump)
                    gf.train.Saver(max_to_keep=None).save(sess, path)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
        threads = [threading.Thread(target=saving) for _ in range(2)]
        for t in threads:
            t.start()
        g, check = graph_of({"t": np.zeros((64, 8), np.float32)})
        with gf.Session(g) as reader:
            while any(t.is_alive() for t in threads):
                gf.train.Saver().restore(reader, path)
                table = reader.run(check["t"])
                assert np.all(table == table[0, 0])
        for t in threads:
            t.join()
    assert not errors
    assert len([n for n in files(tmp_path) if ".data-" in n]) <= 2  # old data files deleted


# -- malformed bundles ----------------------------------------------------------------------
def rewrite_index(prefix: str, change, num_shards: int | None = None) -> None:
    """Rewrite ``prefix``'s index with ``change(entries)`` applied (entries: key bytes ->
    BundleEntryProto), a valid table again."""
    from graphflow.tf_bundle_proto import messages
    rows = sstable.read_table(pathlib.Path(prefix + ".index").read_bytes())
    header = messages().BundleHeaderProto.FromString(rows[0][1])
    entries = {k: messages().BundleEntryProto.FromString(v) for k, v in rows[1:]}
    change(header, entries)
    rows = [(b"", header.SerializeToString())] + sorted(
        (k, e.SerializeToString()) for k, e in entries.items())
    pathlib.Path(prefix + ".index").write_bytes(sstable.write_table(rows))


def copy_fixture(name: str, folder) -> str:
    for f in FIXTURES.glob(f"{name}.*"):
        if not f.name.endswith(".npz"):
            (folder / f.name).write_bytes(f.read_bytes())
    return str(folder / name)


def test_slices_that_do_not_cover_a_partitioned_tensor_are_data_loss(tmp_path):
    prefix = copy_fixture("ckpt_tf1_sharded", tmp_path)
    rewrite_index(prefix, lambda h, e: e[b"part"].slices.pop())
    g, _ = graph_of({"part": make.PART})
    with gf.Session(g) as sess, pytest.raises(DataLossError, match=r"ckpt_tf1_sharded\.index.*"
                                                                   r"slices of tensor 'part'"):
        gf.train.Saver().restore(sess, prefix)


def test_a_dtype_graphflow_lacks_is_listed_and_refused_by_name(tmp_path):
    sess, _ = session_with({"h": np.float16([1, 2]), "f": np.float32(3)})
    with sess:
        path = gf.train.Saver().save(sess, tmp_path / "m")
    rewrite_index(path, lambda h, e: setattr(e[b"h"], "dtype", 14))  # bfloat16: 2 bytes too
    g, v = graph_of({"h": np.float16([0, 0]), "f": np.float32(0)})
    with gf.Session(g) as fresh:
        gf.train.Saver([v["f"]]).restore(fresh, path)  # the others restore
        assert fresh.run(v["f"]) == 3
        with pytest.raises(InvalidArgumentError, match="'h' has dtype DT_BFLOAT16"):
            gf.train.Saver().restore(fresh, path)
    assert ("h", [2]) in list_variables(path)


@pytest.mark.parametrize("change, error, match", [
    (lambda h, e: setattr(h, "endianness", 1), UnimplementedError, "big-endian"),
    (lambda h, e: setattr(h.version, "min_consumer", 2), UnimplementedError, "newer reader"),
    (lambda h, e: setattr(h, "num_shards", 0), DataLossError, "a bad header"),
    (lambda h, e: setattr(e[b"v"], "shard_id", 1), DataLossError, "a bad shard"),
    (lambda h, e: setattr(e[b"v"], "size", 4), DataLossError, "cannot hold shape"),
    (lambda h, e: setattr(e[b"v"], "dtype", 99), DataLossError, "an unknown dtype 99"),
    (lambda h, e: e[b"v"].shape.dim.add(size=-2), DataLossError, "a bad shape"),
    (lambda h, e: setattr(h, "num_shards", 2), DataLossError, r"data-00000-of-00002 is missing"),
])
def test_well_formed_indexes_that_lie_are_refused(tmp_path, change, error, match):
    sess, _ = session_with({"v": np.float32([1, 2])})
    with sess:
        path = gf.train.Saver().save(sess, tmp_path / "m")
    rewrite_index(path, change)
    g, v = graph_of({"v": np.float32([0, 0])})
    with gf.Session(g) as fresh, pytest.raises(error, match=match):
        gf.train.Saver().restore(fresh, path)


# -- the codecs -----------------------------------------------------------------------------
def crc32c_reference(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_crc32c_and_tensorflows_mask():
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value
    assert crc32c(bytes(32)) == 0x8A9136AA and crc32c(b"\xff" * 32) == 0x62A8AB43
    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 8, 9, 63, 1000):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert crc32c(data) == crc32c_reference(data)
        assert crc32c(data[n // 3:], crc32c(data[:n // 3])) == crc32c(data)
        assert crc32c(np.frombuffer(data, np.uint8)[1:]) == crc32c_reference(data[1:])
    assert mask(0) == 0xA282EAD8 and all(unmask(mask(c)) == c for c in (0, 1, 2**32 - 1, 12345))
    with pytest.raises(ValueError, match="contiguous"):
        crc32c(np.zeros((4, 4), np.uint8)[:, 1])


def test_tables_of_many_blocks_round_trip():
    rng = np.random.default_rng(1)
    rows = sorted({f"layer_{rng.integers(0, 10**6)}/{'x' * int(rng.integers(0, 40))}".encode():
                   rng.bytes(int(rng.integers(0, 90))) for _ in range(800)}.items())
    for block_size in (1, 64, 4096, sstable.BLOCK_SIZE):
        table = sstable.write_table(rows, block_size=block_size)
        assert sstable.read_table(table) == rows
    big = [(b"a", b"x" * 600), (b"b", b""), (b"c", b"y" * 1000)]  # entries past 2 blocks
    assert sstable.read_table(sstable.write_table(big, block_size=256)) == big
    with pytest.raises(ValueError, match="strictly increase"):
        sstable.write_table([(b"b", b""), (b"a", b"")])
    assert sstable.read_table(sstable.write_table([])) == []


def test_slice_keys_are_tensorflows_ordered_code():
    assert tf_bundle.slice_key(b"part", [(0, 3), (0, 3)]) == \
        b"\x00part\x00\x01\x01\x02\x80\x83\x80\x83"
    assert tf_bundle.slice_key(b"a\x00\xff", [(0, -1)]) == \
        b"\x00a\x00\xff\xff\x00\x00\x01\x01\x01\x80\x7f"  # escapes; -1: all of the dim
    cases = {64: "c040", -65: "3fbf", 8192: "e02000", -2**63: "003f8000000000000000",
             2**63 - 1: "ffc07fffffffffffffff"}
    for value, encoded in cases.items():
        assert tf_bundle._signed_increasing(value).hex() == encoded, value


# -- live TensorFlow ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return pytest.importorskip("tensorflow")


def tf1_variables(tf, values: dict):
    """A TF 1.x graph with a variable per entry (initialized to zeros)."""
    v1 = tf.compat.v1
    g = tf.Graph()
    with g.as_default():
        variables = {n: v1.Variable(zeros_like(v), name=n) for n, v in values.items()}
    return g, variables


def test_tensorflow_reads_graphflows_checkpoints(tf, tmp_path):
    values = {**make.dtype_values(), "big/table": np.arange(20000, dtype=np.float64)}
    sess, _ = session_with(values)
    with sess:
        saver = gf.train.Saver()
        path = saver.save(sess, tmp_path / "gf.ckpt", global_step=7)
        path = saver.save(sess, tmp_path / "gf.ckpt", global_step=7)  # saved over: 2 shards
    assert os.path.exists(path + ".data-00001-of-00002")
    reader = tf.train.load_checkpoint(path)
    assert reader.get_variable_to_shape_map() == {k: list(np.shape(v)) for k, v in values.items()}
    for name, value in values.items():
        assert same_bits(reader.get_tensor(name), value), name
    assert tf.train.latest_checkpoint(str(tmp_path)) == path
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert list(state.all_model_checkpoint_paths) == [path]
    g, variables = tf1_variables(tf, values)  # and TF 1.x's Saver restores it
    with g.as_default(), tf.compat.v1.Session(graph=g) as tf_sess:
        tf.compat.v1.train.Saver().restore(tf_sess, path)
        got = tf_sess.run(variables)
    for name, value in values.items():
        assert same_bits(got[name], value), name


def test_tensorflow_reads_a_table_of_many_blocks(tf, tmp_path):
    values = {f"layer_{k:05d}/some/long/variable/name": np.float32([k]) for k in range(12000)}
    prefix = str(tmp_path / "many")
    with open(prefix + DATA, "wb") as f:
        writer = tf_bundle.DataWriter(f)
        for name, value in values.items():
            writer.add(name, value, gf.float32)
    index = tf_bundle.index_bytes(writer.entries, 1)
    assert len(index) > 2 * sstable.BLOCK_SIZE  # three data blocks or more
    pathlib.Path(prefix + ".index").write_bytes(index)
    reader = tf.train.load_checkpoint(prefix)
    for name in list(values)[::997] + [list(values)[-1]]:
        assert reader.get_tensor(name).tolist() == values[name].tolist()
    assert len(reader.get_variable_to_shape_map()) == 12000


def test_tensorflows_savev2_writes_graphflows_bytes(tf, tmp_path):
    values = make.dtype_values()
    sess, _ = session_with(values)
    with sess:
        path = gf.train.Saver().save(sess, tmp_path / "gf")
    names = list(values)
    tf.raw_ops.SaveV2(prefix=str(tmp_path / "tf"), tensor_names=names,
                      shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(values[n]) for n in names])
    for suffix in (".index", DATA):
        assert (tmp_path / f"tf{suffix}").read_bytes() == pathlib.Path(path + suffix).read_bytes()


def test_training_continues_across_engines(tf, tmp_path):
    """graphflow's Adam checkpoint restores into TF 1.x's Adam, and back: each next step
    agrees."""
    v1 = tf.compat.v1
    g, variables, (train, gw, gb) = adam_model()
    with gf.Session(g) as sess:
        sess.run(gf.global_variables_initializer(g))
        for k in range(3):
            grads = make.adam_gradients(k)
            sess.run(train, {gw: grads["w"], gb: grads["b"]})
        path = gf.train.Saver().save(sess, tmp_path / "adam")
        grads = make.adam_gradients(3)
        sess.run(train, {gw: grads["w"], gb: grads["b"]})
        ours = {n: sess.run(v) for n, v in variables.items()}
    with tf.Graph().as_default() as tg:
        start = make.adam_start()
        w, b = v1.Variable(start["w"], name="w"), v1.Variable(start["b"], name="b")
        step = v1.train.get_or_create_global_step()
        tgw, tgb = v1.placeholder(tf.float32, [3, 2]), v1.placeholder(tf.float32, [2])
        tf_train = v1.train.AdamOptimizer(0.1).apply_gradients([(tgw, w), (tgb, b)],
                                                               global_step=step)
        with v1.Session(graph=tg) as tf_sess:
            v1.train.Saver().restore(tf_sess, path)
            tf_sess.run(tf_train, {tgw: grads["w"], tgb: grads["b"]})
            theirs = {v.op.name: tf_sess.run(v) for v in v1.global_variables()}
            v1.train.Saver().save(tf_sess, str(tmp_path / "from_tf"), write_meta_graph=False)
    assert sorted(theirs) == sorted(ours)
    for name in ours:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-6, atol=1e-7,
                                   err_msg=name)
    with gf.Session(g) as again:
        gf.train.Saver().restore(again, tmp_path / "from_tf")
        for name, v in variables.items():
            assert same_bits(again.run(v), theirs[name]), name


def test_graphflow_restores_what_tensorflow_writes_now(tf, tmp_path):
    values = make.dtype_values()
    g, variables = tf1_variables(tf, values)
    with g.as_default(), tf.compat.v1.Session(graph=g) as tf_sess:
        for name, v in variables.items():
            tf_sess.run(v.assign(values[name]))
        tf.compat.v1.train.Saver().save(tf_sess, str(tmp_path / "tf1"), write_meta_graph=False)
    module = tf.Module()
    module.kernel = tf.Variable(np.float64([[1, 2], [3, 4]]))
    tf.train.Checkpoint(model=module).write(str(tmp_path / "tf2"))
    gg, ours = graph_of(values)
    with gf.Session(gg) as sess:
        gf.train.Saver().restore(sess, tmp_path / "tf1")
        for name, v in ours.items():
            assert same_bits(sess.run(v), values[name]), name
    gg, kernel = graph_of({"model/kernel": np.zeros((2, 2))})
    with gf.Session(gg) as sess:
        gf.train.Saver(name_map=gf.train.Saver.tf2_name).restore(sess, tmp_path / "tf2")
        assert sess.run(kernel["model/kernel"]).tolist() == [[1, 2], [3, 4]]
