"""gf.train.Saver: exact round trips of every variable dtype and shape, restores into
fresh Sessions, rebuilt and loaded graphs, atomic saves, and corrupt, missing or
mismatched checkpoints that raise and leave every variable as it was. Checkpoints are
TensorFlow's tensor bundles (``<prefix>.index`` and ``<prefix>.data-*``); graphflow's
earlier one-file format still restores (a checked-in fixture)."""
from __future__ import annotations

import os
import pathlib
import re
import tempfile
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphflow as gf
from graphflow.errors import (DataLossError, FailedPreconditionError, InvalidArgumentError,
                              NotFoundError)

DATA = ".data-00000-of-00001"  # the data file of a checkpoint saved once
FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "tf"
DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
          np.uint8, np.uint16, np.uint32, np.uint64, np.bool_, np.complex64, np.complex128]
SHAPES = [(), (0,), (3, 0, 2), (4, 5)]


def random_value(dtype, shape, seed: int) -> np.ndarray:
    """Arbitrary bit patterns (NaN payloads, -0.0, infinities included) of ``dtype``."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    raw = rng.integers(0, 256, int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape).copy()


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype == object:  # strings: the same bytes objects' values, element by element
        return b.dtype == object and a.shape == b.shape and a.tolist() == b.tolist()
    return (a.dtype == b.dtype and a.shape == b.shape
            and a.tobytes() == np.ascontiguousarray(b).tobytes())


def zeros_like(value: np.ndarray) -> np.ndarray:
    """Zeros (empty strings for strings) of ``value``'s shape and dtype."""
    if value.dtype == object:
        return np.full(value.shape, b"", dtype=object)
    return np.zeros(value.shape, value.dtype)


def build(scope: gf.Scope, values: dict) -> dict:
    """One variable per entry, initialized to zeros (so a restore is visible)."""
    return {name: scope.variable(zeros_like(np.asarray(v)), name=name)
            for name, v in values.items()}


def set_values(sess: gf.Session, variables: dict, values: dict) -> None:
    """Assign ``values`` through placeholders (a plain, independent path to the state)."""
    s = gf.Scope(sess.graph)
    for name, value in values.items():
        ph = s.placeholder(variables[name].dtype, shape=value.shape)
        sess.run(variables[name].assign(ph, read_value=False), {ph: value})


def stored(sess: gf.Session, name: str):
    """The Session's value of variable ``name`` (None: uninitialized)."""
    value = sess.resources.variable(name).value
    return None if value is None else value.copy()


def folder_bytes(folder) -> dict:
    """{file name: bytes} of every file in ``folder``."""
    return {p.name: p.read_bytes() for p in pathlib.Path(folder).iterdir()}


ALL_VALUES = {f"v_{np.dtype(d).name}_{i}": random_value(d, shape, seed=i * 31 + k)
              for k, d in enumerate(DTYPES) for i, shape in enumerate(SHAPES)}


@pytest.fixture
def saved(tmp_path):
    """A graph of every dtype and shape, its Session with ALL_VALUES, and their checkpoint."""
    g = gf.Graph()
    variables = build(gf.Scope(g), ALL_VALUES)
    sess = gf.Session(g)
    sess.run(gf.global_variables_initializer(g))
    set_values(sess, variables, ALL_VALUES)
    path = gf.train.Saver().save(sess, tmp_path / "model.ckpt")
    yield g, variables, sess, path
    sess.close()


# -- exact round trips ---------------------------------------------------------------------
def test_save_returns_the_path_and_restores_every_dtype_exactly(saved):
    g, variables, _, path = saved
    assert path == os.fspath(pathlib.Path(path))
    assert os.path.isfile(path + ".index") and os.path.isfile(path + DATA)
    with gf.Session(g) as fresh:  # no initializer ever runs here
        gf.train.Saver().restore(fresh, path)
        got = fresh.run({name: v.read() for name, v in variables.items()})
    for name, value in ALL_VALUES.items():
        assert same_bits(got[name], value), name


def test_restore_overwrites_updated_values(saved):
    g, variables, sess, path = saved
    sess.run(gf.global_variables_initializer(g))  # back to zeros
    assert not np.any(sess.run(variables["v_float32_3"]))
    gf.train.Saver().restore(sess, path)
    for name, value in ALL_VALUES.items():
        assert same_bits(stored(sess, name), value), name


def test_restored_values_are_private_arrays_that_update_in_place(saved):
    g, variables, _, path = saved
    with gf.Session(g) as fresh:
        gf.train.Saver().restore(fresh, path)
        value = fresh.resources.variable("v_float32_3").value
        assert value.flags.writeable and value.flags.owndata and value.flags.c_contiguous
        v = variables["v_float32_3"]
        after = fresh.run(v.scatter_nd_add([[1]], np.ones((1, 5), np.float32)))
    expected = ALL_VALUES["v_float32_3"].copy()
    expected[1] += 1
    assert same_bits(after, expected)


def test_restore_into_a_rebuilt_graph(saved):
    _, _, _, path = saved
    g2 = gf.Graph()
    gf.Scope(g2).constant(1.0)  # other nodes first: names, not positions, match
    variables = build(gf.Scope(g2), ALL_VALUES)
    with gf.Session(g2) as sess:
        gf.train.Saver().restore(sess, path)
        got = sess.run({name: v for name, v in variables.items()})
    assert all(same_bits(got[n], ALL_VALUES[n]) for n in ALL_VALUES)


def test_variables_survive_graph_save_and_load_graph(saved, tmp_path):
    g, variables, _, path = saved
    g.save(tmp_path / "graph.json")
    loaded = gf.load_graph(tmp_path / "graph.json")
    found = {v.name: v for v in gf.global_variables(loaded)}
    assert list(found) == list(variables)
    for name, v in variables.items():
        op = loaded.operation(v.op.name)
        assert op.type == "VarHandleOp" and op.attrs == v.op.attrs
        assert (found[name].dtype, found[name].shape) == (v.dtype, v.shape)
        assert found[name].initializer is not None
    with gf.Session(loaded) as sess:
        gf.train.Saver().restore(sess, path)
        got = sess.run({name: v.read() for name, v in found.items()})
        # the loaded graph's update ops work on the restored values
        sess.run(found["v_int64_3"].assign_add(np.ones((4, 5), np.int64), read_value=False))
        bumped = sess.run(found["v_int64_3"])
    assert all(same_bits(got[n], ALL_VALUES[n]) for n in ALL_VALUES)
    assert same_bits(bumped, ALL_VALUES["v_int64_3"] + 1)


def test_var_list_as_a_list_or_a_dict_of_checkpoint_names(tmp_path):
    s = gf.Scope(gf.Graph())
    a, b = s.variable(np.float32([1, 2]), name="a"), s.variable(np.int32(7), name="b")
    with gf.Session(s.graph) as sess:
        sess.run(gf.global_variables_initializer(s.graph))
        gf.train.Saver([a]).save(sess, tmp_path / "only_a")
        gf.train.Saver({"renamed": b}).save(sess, tmp_path / "renamed")
    s2 = gf.Scope(gf.Graph())
    c = s2.variable(np.int32(0), name="c")
    with gf.Session(s2.graph) as sess:
        gf.train.Saver({"renamed": c}).restore(sess, tmp_path / "renamed")
        assert sess.run(c) == 7
        with pytest.raises(NotFoundError, match="c"):
            gf.train.Saver().restore(sess, tmp_path / "only_a")


def test_global_step_suffix(tmp_path):
    s = gf.Scope(gf.Graph())
    step = s.variable(np.int64(42), name="global_step")
    with gf.Session(s.graph) as sess:
        sess.run(step.initializer)
        saver = gf.train.Saver()
        assert saver.save(sess, str(tmp_path / "m"), global_step=3) == str(tmp_path / "m-3")
        assert saver.save(sess, str(tmp_path / "m"), global_step=step) == str(tmp_path / "m-42")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint", "m-3" + DATA, "m-3.index", "m-42" + DATA, "m-42.index"]
    assert gf.train.latest_checkpoint(tmp_path) == str(tmp_path / "m-42")


# -- what a Saver is given ---------------------------------------------------------------------
def test_saver_argument_errors(tmp_path):
    s = gf.Scope(gf.Graph())
    a = s.variable(np.float32(1), name="a")
    other = gf.Scope(gf.Graph())
    b = other.variable(np.float32(1), name="b")
    assert gf.train.Saver([b]).graph is other.graph
    with pytest.raises(ValueError, match="No variables"):
        gf.train.Saver([])
    with pytest.raises(TypeError, match="not a gf.Variable"):
        gf.train.Saver([a.read()])
    with pytest.raises(ValueError, match="twice"):
        gf.train.Saver({"x": a, "y": a})
    with pytest.raises(ValueError, match="several graphs"):
        gf.train.Saver([a, b])
    with gf.Session(other.graph) as sess:
        sess.run(b.initializer)
        with pytest.raises(ValueError, match="graph"):
            gf.train.Saver([a]).save(sess, tmp_path / "x")
        with pytest.raises(ValueError, match="graph"):
            gf.train.Saver(graph=s.graph).restore(sess, tmp_path / "x")
    with gf.Session(gf.Graph()) as empty, pytest.raises(ValueError, match="No variables"):
        gf.train.Saver().save(empty, tmp_path / "x")
    assert not list(tmp_path.iterdir())


# -- saving --------------------------------------------------------------------------------------
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002, 0o027])
def test_file_mode_follows_the_umask(tmp_path, umask):
    s = gf.Scope(gf.Graph())
    v = s.variable(np.float32(1), name="v")
    old = os.umask(umask)
    try:
        with gf.Session(s.graph) as sess:
            sess.run(v.initializer)
            path = gf.train.Saver().save(sess, tmp_path / "m")
    finally:
        os.umask(old)
    for name in (path + ".index", path + DATA, str(tmp_path / "checkpoint")):
        assert os.stat(name).st_mode & 0o777 == 0o666 & ~umask, name


def test_saving_an_uninitialized_variable_fails_and_writes_nothing(tmp_path):
    s = gf.Scope(gf.Graph())
    a, late = s.variable(np.float32(1), name="a"), s.variable(np.float32(2), name="late")
    with gf.Session(s.graph) as sess:
        sess.run(a.initializer)
        with pytest.raises(FailedPreconditionError, match="uninitialized variable 'late'"):
            gf.train.Saver([late]).save(sess, tmp_path / "new")
        assert not list(tmp_path.iterdir())
        gf.train.Saver([a]).save(sess, tmp_path / "m")  # a subset without it is fine
        before = folder_bytes(tmp_path)
        with pytest.raises(FailedPreconditionError, match="uninitialized variable 'late'"):
            gf.train.Saver().save(sess, tmp_path / "m")
    assert folder_bytes(tmp_path) == before


def test_save_paths(tmp_path):
    s = gf.Scope(gf.Graph())
    v = s.variable(np.float32([1, 2]), name="v")
    with gf.Session(s.graph) as sess:
        sess.run(v.initializer)
        with pytest.raises(ValueError, match="Parent directory of .*missing.* doesn't exist"):
            gf.train.Saver().save(sess, tmp_path / "missing" / "m")
        (tmp_path / "real").mkdir()
        os.symlink(tmp_path / "real", tmp_path / "link")  # a folder reached through a link
        assert gf.train.Saver().save(sess, tmp_path / "link" / "m") == \
            str(tmp_path / "link" / "m")
        assert (tmp_path / "link").is_symlink()  # the files are in the link's target
        assert sorted(os.listdir(tmp_path / "real")) == ["checkpoint", "m" + DATA, "m.index"]
        gf.train.Saver().restore(sess, tmp_path / "real" / "m")
        (tmp_path / "plain").write_bytes(b"old")  # a file at the prefix is left alone
        gf.train.Saver().save(sess, tmp_path / "plain")
        assert (tmp_path / "plain").read_bytes() == b"old"
        gf.train.Saver().restore(sess, tmp_path / "plain")


CRASH_POINTS = ["writing a tensor", "fsync", "rename data", "rename index", "interrupt"]


@pytest.mark.parametrize("crash", CRASH_POINTS)
def test_a_crash_during_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch, crash):
    s = gf.Scope(gf.Graph())
    v = s.variable(np.arange(1000, dtype=np.float64), name="v")
    s.variable(np.int32([1, 2, 3]), name="w")  # a second tensor, so a crash can come between
    path = tmp_path / "m"
    with gf.Session(s.graph) as sess:
        sess.run(gf.global_variables_initializer(s.graph))
        gf.train.Saver().save(sess, path)
        before = folder_bytes(tmp_path)
        sess.run(v.assign_add(np.ones(1000), read_value=False))
        import graphflow.tools.saver as saver_module
        import graphflow.tf_bundle as bundle_module
        expected = OSError
        if crash == "writing a tensor":
            real, calls = bundle_module.crc32c, []

            def crc32c_failing_on_second_tensor(data, *args):
                calls.append(1)
                if len(calls) == 2:
                    raise OSError(28, "No space left on device")
                return real(data, *args)
            monkeypatch.setattr(bundle_module, "crc32c", crc32c_failing_on_second_tensor)
        elif crash == "fsync":
            def failing_fsync(fd):
                raise OSError(5, "Input/output error")
            monkeypatch.setattr(saver_module.os, "fsync", failing_fsync)
        elif crash.startswith("rename"):  # the data file's rename, or the index's after it
            real_replace, renames = os.replace, []

            def failing_replace(src, dst):
                renames.append(dst)
                if len(renames) == (1 if crash == "rename data" else 2):
                    raise OSError(1, "Operation not permitted")
                real_replace(src, dst)
            monkeypatch.setattr(saver_module.os, "replace", failing_replace)
        else:
            def interrupted(*args):
                raise KeyboardInterrupt
            monkeypatch.setattr(bundle_module, "index_bytes", interrupted)
            expected = KeyboardInterrupt
        with pytest.raises(expected) as info:
            gf.train.Saver().save(sess, path)
        if expected is OSError:
            assert info.value.filename == str(path)  # the user's path, not the temp file
        monkeypatch.undo()
    assert folder_bytes(tmp_path) == before  # no temp file, no new data file left behind
    with gf.Session(s.graph) as fresh:
        gf.train.Saver().restore(fresh, path)
        assert same_bits(fresh.run(v), np.arange(1000, dtype=np.float64))


def test_saving_over_a_checkpoint_renames_its_index_last(tmp_path, monkeypatch):
    """An overwrite puts its data under another shard count, so the old index never
    points at new data: the index's rename is the one moment the checkpoint changes."""
    s = gf.Scope(gf.Graph())
    v = s.variable(np.float32([1, 2]), name="v")
    path, seen = tmp_path / "m", []
    with gf.Session(s.graph) as sess, gf.Session(s.graph) as check:
        sess.run(v.initializer)
        saver = gf.train.Saver()
        saver.save(sess, path)
        real_replace = os.replace

        def watching_replace(src, dst):
            if dst.endswith(".index"):  # just before the commit, the old checkpoint is whole
                gf.train.Saver().restore(check, path)
                seen.append(check.run(v).tolist())
            real_replace(src, dst)
        monkeypatch.setattr(os, "replace", watching_replace)
        for k in range(1, 4):
            sess.run(v.assign_add([1.0, 1.0], read_value=False))
            saver.save(sess, path)
            names = sorted(os.listdir(tmp_path))
            count = 2 if k % 2 else 1
            assert names == sorted(["checkpoint", "m.index"] + [
                f"m.data-{shard:05d}-of-{count:05d}" for shard in range(count)]), names
            gf.train.Saver().restore(check, path)
            assert check.run(v).tolist() == [1.0 + k, 2.0 + k]
    assert seen == [[1.0, 2.0], [2.0, 3.0], [3.0, 4.0]]


def test_save_snapshots_each_variable_under_its_lock(tmp_path):
    """Updates of the whole table race with saves; every saved table is one value."""
    s = gf.Scope(gf.Graph())
    v = s.variable(np.zeros((2000, 16), np.float32), name="table")
    bump = v.assign_add(np.ones((2000, 16), np.float32), read_value=False)
    with gf.Session(s.graph) as sess, gf.Session(s.graph) as check:
        sess.run(v.initializer)
        stop = threading.Event()

        def train():
            while not stop.is_set():
                sess.run(bump)
        worker = threading.Thread(target=train)
        worker.start()
        try:
            seen = []
            for i in range(12):
                gf.train.Saver().save(sess, tmp_path / "m")
                gf.train.Saver().restore(check, tmp_path / "m")
                table = check.run(v)
                assert np.all(table == table[0, 0]), "a torn snapshot"
                seen.append(table[0, 0])
        finally:
            stop.set()
            worker.join()
    assert seen == sorted(seen)


class RecordingLock:
    """A variable's lock that records what the variable held when taken and released."""

    def __init__(self, state):
        self.state, self.inner, self.events = state, threading.RLock(), []

    def __enter__(self):
        self.inner.acquire()
        self.events.append(("acquire", self.state.value))
        return self

    def __exit__(self, *exc):
        self.events.append(("release", self.state.value))
        self.inner.release()


def test_restore_assigns_with_every_lock_held(saved):
    g, _, _, path = saved
    with gf.Session(g) as fresh:
        names = ["v_float32_3", "v_bool_0", "v_complex128_2"]
        locks = {n: RecordingLock(fresh.resources.variable(n)) for n in names}
        for n, lock in locks.items():
            fresh.resources.variable(n).lock = lock
        gf.train.Saver().restore(fresh, path)
    for n, lock in locks.items():
        (taken, before), (released, after) = lock.events
        assert (taken, released) == ("acquire", "release")
        assert before is None and same_bits(after, ALL_VALUES[n])


# -- restoring what cannot be restored ---------------------------------------------------------
SMALL_VALUES = {"a": np.float32([[1.5, -2], [3, 4]]), "b": np.int64(9),
                "c": np.array([True, False, True]), "d": np.complex64([1 + 1j, 2 - 3j]),
                "e": np.array([b"x", b"", b"\x00yz"], dtype=object)}
#: SMALL_VALUES as graphflow's one-file format (version 1) wrote them: still restores.
LEGACY_FIXTURE = FIXTURES / "ckpt_graphflow_v1"


@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory):
    """(graph, variables, the checkpoint's files {suffix: bytes}, the values in it)."""
    g = gf.Graph()
    variables = build(gf.Scope(g), SMALL_VALUES)
    path = tmp_path_factory.mktemp("ckpt") / "m"
    with gf.Session(g) as sess:
        set_values(sess, variables, SMALL_VALUES)
        gf.train.Saver().save(sess, path)
    files = {suffix: pathlib.Path(f"{path}{suffix}").read_bytes() for suffix in (".index", DATA)}
    return g, variables, files, SMALL_VALUES


def assert_restore_leaves_everything(g, files: dict, error, match: str, named: str = ""):
    """Restoring the checkpoint ``files`` ({suffix: bytes}; suffix "" is a one-file
    checkpoint) raises ``error`` naming the checkpoint (and the file ``named``, a
    suffix); an initialized Session and a fresh one keep what they held."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "bad.ckpt")
        for suffix, data in files.items():
            with open(path + suffix, "wb") as f:
                f.write(data)
        with gf.Session(g) as sess, gf.Session(g) as fresh:
            sess.run(gf.global_variables_initializer(g))
            before = {v.name: stored(sess, v.name) for v in gf.global_variables(g)}
            for target in (sess, fresh):
                with pytest.raises(error, match=match) as info:
                    gf.train.Saver().restore(target, path)
                assert path + named in str(info.value)
            for name, value in before.items():
                assert same_bits(stored(sess, name), value)
                assert stored(fresh, name) is None


def corrupted(files: dict, suffix: str, position: int, flip: int = 0x10) -> dict:
    data = bytearray(files[suffix])
    data[position] ^= flip
    return {**files, suffix: bytes(data)}


@settings(deadline=None)
@given(data=st.data())
def test_a_flipped_byte_anywhere_is_data_loss(small_checkpoint, data):
    g, _, files, _ = small_checkpoint
    suffix = data.draw(st.sampled_from(sorted(files)), label="file")
    position = data.draw(st.integers(0, len(files[suffix]) - 1), label="position")
    flip = data.draw(st.integers(1, 255), label="xor")
    assert_restore_leaves_everything(g, corrupted(files, suffix, position, flip), DataLossError,
                                     "corrupt", named=suffix)


def index_layout(index: bytes) -> dict:
    """Byte positions of each part of an index table (its footer gives the handles)."""
    from graphflow.sstable import _handle
    footer = len(index) - 48
    (meta_offset, _), pos = _handle(index, footer, "metaindex")
    (index_offset, index_size), pos = _handle(index, pos, "index")
    return {"index: first data block": 0, "index: a block trailer": meta_offset - 1,
            "index: metaindex block": meta_offset, "index: index block": index_offset + 1,
            "index: footer handles": footer + 1, "index: footer padding": pos,
            "index: magic": len(index) - 1}


@pytest.mark.parametrize("where", ["index: first data block", "index: a block trailer",
                                   "index: metaindex block", "index: index block",
                                   "index: footer handles", "index: footer padding",
                                   "index: magic", "data: first tensor", "data: last tensor"])
def test_a_flipped_byte_in_each_part_is_data_loss(small_checkpoint, where):
    g, _, files, _ = small_checkpoint
    if where.startswith("index"):
        suffix, position = ".index", index_layout(files[".index"])[where]
    else:
        suffix = DATA
        position = 0 if where == "data: first tensor" else len(files[DATA]) - 1
    assert_restore_leaves_everything(g, corrupted(files, suffix, position), DataLossError,
                                     "corrupt", named=suffix)


@settings(deadline=None)
@given(data=st.data())
def test_a_truncated_checkpoint_is_data_loss(small_checkpoint, data):
    g, _, files, _ = small_checkpoint
    suffix = data.draw(st.sampled_from(sorted(files)), label="file")
    length = data.draw(st.integers(0, len(files[suffix]) - 1), label="length")
    assert_restore_leaves_everything(g, {**files, suffix: files[suffix][:length]},
                                     DataLossError, "corrupt or truncated", named=suffix)


def test_appended_bytes_missing_and_other_files_are_data_loss(small_checkpoint, tmp_path):
    g, _, files, _ = small_checkpoint
    for suffix in files:
        assert_restore_leaves_everything(g, {**files, suffix: files[suffix] + b"\0"},
                                         DataLossError, "corrupt", named=suffix)
    assert_restore_leaves_everything(g, {".index": files[".index"]}, DataLossError,
                                     "incomplete: its data file .*missing", named=DATA)
    g.save(tmp_path / "graph.json")  # a graph file is neither an index nor a checkpoint
    graph_json = (tmp_path / "graph.json").read_bytes()
    assert_restore_leaves_everything(g, {**files, ".index": graph_json}, DataLossError,
                                     "bad magic number", named=".index")
    assert_restore_leaves_everything(g, {"": graph_json}, DataLossError, "magic")


def test_a_missing_checkpoint_is_not_found(small_checkpoint, tmp_path):
    g, _, files, _ = small_checkpoint
    (tmp_path / ("only_data" + DATA)).write_bytes(files[DATA])  # a data file is not enough
    with gf.Session(g) as sess:
        for missing in (tmp_path / "nothing.ckpt", tmp_path, tmp_path / "only_data"):
            with pytest.raises(NotFoundError, match=re.escape(str(missing))):
                gf.train.Saver().restore(sess, missing)
        with pytest.raises(NotFoundError, match="Failed to find any matching files for"):
            gf.train.Saver().restore(sess, tmp_path / "nothing.ckpt")
        assert all(stored(sess, v.name) is None for v in gf.global_variables(g))


STRING_VALUES = {"s_scalar": np.array(b"one", dtype=object),
                 "s_empty": np.zeros((0, 3), dtype=object),
                 "s_table": np.array([[b"", b"\x00\xff\x00"], ["é".encode(), b"x" * 1000],
                                      [b"\n", b"GFCKEND\n"]], dtype=object)}


def test_string_variables_round_trip_exactly(tmp_path):
    g = gf.Graph()
    variables = build(gf.Scope(g), STRING_VALUES)
    with gf.Session(g) as sess:
        set_values(sess, variables, STRING_VALUES)
        path = gf.train.Saver().save(sess, tmp_path / "strings.ckpt")
    with gf.Session(g) as fresh:
        gf.train.Saver().restore(fresh, path)
        for name, value in STRING_VALUES.items():
            got = fresh.run(variables[name])
            assert same_bits(got, value) and all(type(x) is bytes for x in got.flat), name


def forge_string_tensor(files: dict, name: str, lengths: list, data: bytes,
                        lengths_ok: bool = True, varints: bytes | None = None) -> dict:
    """``files`` with string tensor ``name``'s bytes replaced by ``lengths`` (as varints)
    and ``data``, every checksum recomputed as TensorFlow defines it (the length
    checksum spoiled unless ``lengths_ok``): a well-formed bundle that only the string
    decoder can reject."""
    from graphflow.crc32c import crc32c, mask
    from graphflow.sstable import read_table
    from graphflow.tf_bundle import _encode_varints, _lengths_for_crc, index_bytes
    from graphflow.tf_bundle_proto import messages
    raw = np.array(lengths, dtype=np.uint64)
    crc = crc32c(_lengths_for_crc(raw))
    checksum = np.uint32(mask(crc) ^ (0 if lengths_ok else 1)).tobytes()
    body = (varints if varints is not None else _encode_varints(raw).tobytes()) + checksum + data
    crc = crc32c(data, crc32c(checksum, crc))
    entries, parts, offset = {}, [], 0
    for key, value in read_table(files[".index"])[1:]:
        entry = messages().BundleEntryProto.FromString(value)
        piece = files[DATA][entry.offset:entry.offset + entry.size]
        if key.decode() == name:
            piece, entry.crc32c = body, mask(crc)
        entry.offset, entry.size = offset, len(piece)
        entries[key.decode()] = entry
        parts.append(piece)
        offset += len(piece)
    return {".index": index_bytes(entries, 1), DATA: b"".join(parts)}


@pytest.mark.parametrize("lengths, data", [
    ([1, 0, 3], b"x\x00y"),                # one byte short of the lengths' sum
    ([1, 0, 3], b"x\x00yzw"),              # one byte too many
    ([2**64 - 1, 1, 4], b"x\x00yz"),       # a sum that wraps around 2**64
    ([1, 0], b"x"),                        # fewer lengths than elements
])
def test_string_lengths_that_do_not_fill_the_tensor_are_data_loss(small_checkpoint, lengths,
                                                                   data):
    g, _, files, _ = small_checkpoint
    assert_restore_leaves_everything(g, forge_string_tensor(files, "e", lengths, data),
                                     DataLossError, "corrupt", named=DATA)


def test_a_bad_length_checksum_or_varint_is_data_loss(small_checkpoint):
    g, _, files, _ = small_checkpoint
    forged = forge_string_tensor(files, "e", [1, 0, 3], b"x\x00yz", lengths_ok=False)
    assert_restore_leaves_everything(g, forged, DataLossError, "length checksum", named=DATA)
    forged = forge_string_tensor(files, "e", [1, 0, 3], b"x\x00yz", varints=b"\x80" * 11)
    assert_restore_leaves_everything(g, forged, DataLossError, "malformed lengths", named=DATA)


def test_a_forged_string_tensor_with_consistent_lengths_restores_what_it_says(small_checkpoint,
                                                                              tmp_path):
    g, variables, files, _ = small_checkpoint  # the forging itself is right: a control
    for suffix, data in forge_string_tensor(files, "e", [2, 0, 1], b"abc").items():
        (tmp_path / f"forged{suffix}").write_bytes(data)
    with gf.Session(g) as sess:
        gf.train.Saver().restore(sess, tmp_path / "forged")
        assert sess.run(variables["e"]).tolist() == [b"ab", b"", b"c"]


# -- graphflow's earlier one-file format: restored, checked as before ---------------------------
def test_a_legacy_checkpoint_restores(small_checkpoint, tmp_path):
    g, variables, _, values = small_checkpoint
    with gf.Session(g) as sess:
        gf.train.Saver().restore(sess, LEGACY_FIXTURE)
        got = sess.run({name: v for name, v in variables.items()})
    assert all(same_bits(got[n], np.asarray(values[n])) for n in values)
    assert gf.saver.list_variables(LEGACY_FIXTURE) == [
        ("a", [2, 2]), ("b", []), ("c", [3]), ("d", [2]), ("e", [3])]


@settings(deadline=None)
@given(data=st.data())
def test_a_flipped_or_truncated_legacy_checkpoint_is_data_loss(small_checkpoint, data):
    g, _, _, _ = small_checkpoint
    raw = LEGACY_FIXTURE.read_bytes()
    if data.draw(st.booleans(), label="truncate"):
        bad = raw[:data.draw(st.integers(0, len(raw) - 1), label="length")]
    else:
        bad = corrupted({"": raw}, "", data.draw(st.integers(0, len(raw) - 1), label="position"),
                        data.draw(st.integers(1, 255), label="xor"))[""]
    assert_restore_leaves_everything(g, {"": bad}, DataLossError, "corrupt")


def test_appended_bytes_to_a_legacy_checkpoint_are_data_loss(small_checkpoint):
    g, _, _, _ = small_checkpoint
    assert_restore_leaves_everything(g, {"": LEGACY_FIXTURE.read_bytes() + b"\0"},
                                     DataLossError, "corrupt")


def graph_like(values: dict, changed: dict) -> gf.Graph:
    """A graph of the checkpoint's variables with ``changed`` replacing (or adding) some."""
    g = gf.Graph()
    build(gf.Scope(g), {**values, **changed})
    return g


@pytest.mark.parametrize("changed, error, match", [
    ({"b": np.int32(0)}, InvalidArgumentError, "variable 'b' of dtype int32.*dtype int64"),
    ({"d": np.complex128([0, 0])}, InvalidArgumentError, "variable 'd'.*complex64"),
    ({"a": np.zeros((2, 3), np.float32)}, InvalidArgumentError, r"'a' of shape \[2,3\].*\[2,2\]"),
    ({"c": np.zeros((), np.bool_)}, InvalidArgumentError, r"'c' of shape \[\].*\[3\]"),
    ({"zz": np.float32(0)}, NotFoundError, "Key zz not found"),
    ({"e": np.zeros(3, np.uint8)}, InvalidArgumentError, "variable 'e' of dtype uint8.*string"),
])
@pytest.mark.parametrize("form", ["tf_bundle", "legacy"])
def test_mismatched_or_missing_variables_change_nothing(small_checkpoint, tmp_path, changed,
                                                         error, match, form):
    _, _, files, values = small_checkpoint
    g = graph_like(values, changed)
    if form == "legacy":
        files = {"": LEGACY_FIXTURE.read_bytes()}
    assert_restore_leaves_everything(g, files, error, match)
