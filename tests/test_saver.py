"""gf.train.Saver: exact round trips of every variable dtype and shape, restores into
fresh Sessions, rebuilt and loaded graphs, atomic saves, and corrupt, missing or
mismatched checkpoints that raise and leave every variable as it was."""
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
    assert path == os.fspath(pathlib.Path(path)) and os.path.isfile(path)
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
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m-3", "m-42"]


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
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask


def test_saving_an_uninitialized_variable_fails_and_writes_nothing(tmp_path):
    s = gf.Scope(gf.Graph())
    a, late = s.variable(np.float32(1), name="a"), s.variable(np.float32(2), name="late")
    with gf.Session(s.graph) as sess:
        sess.run(a.initializer)
        with pytest.raises(FailedPreconditionError, match="uninitialized variable 'late'"):
            gf.train.Saver([late]).save(sess, tmp_path / "new")
        assert not list(tmp_path.iterdir())
        gf.train.Saver([a]).save(sess, tmp_path / "m")  # a subset without it is fine
        before = (tmp_path / "m").read_bytes()
        with pytest.raises(FailedPreconditionError, match="uninitialized variable 'late'"):
            gf.train.Saver().save(sess, tmp_path / "m")
    assert [p.name for p in tmp_path.iterdir()] == ["m"]
    assert (tmp_path / "m").read_bytes() == before


def test_save_paths(tmp_path):
    s = gf.Scope(gf.Graph())
    v = s.variable(np.float32([1, 2]), name="v")
    with gf.Session(s.graph) as sess:
        sess.run(v.initializer)
        with pytest.raises(ValueError, match="Parent directory of .*missing.* doesn't exist"):
            gf.train.Saver().save(sess, tmp_path / "missing" / "m")
        (tmp_path / "real").write_bytes(b"old")
        os.symlink(tmp_path / "real", tmp_path / "link")
        assert gf.train.Saver().save(sess, tmp_path / "link") == str(tmp_path / "link")
        assert (tmp_path / "link").is_symlink()  # saving through a link updates its target
        gf.train.Saver().restore(sess, tmp_path / "real")


CRASH_POINTS = ["writing a tensor", "fsync", "rename", "interrupt"]


@pytest.mark.parametrize("crash", CRASH_POINTS)
def test_a_crash_during_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch, crash):
    s = gf.Scope(gf.Graph())
    v = s.variable(np.arange(1000, dtype=np.float64), name="v")
    s.variable(np.int32([1, 2, 3]), name="w")  # a second tensor, so a crash can come between
    path = tmp_path / "m"
    with gf.Session(s.graph) as sess:
        sess.run(gf.global_variables_initializer(s.graph))
        gf.train.Saver().save(sess, path)
        before = path.read_bytes()
        sess.run(v.assign_add(np.ones(1000), read_value=False))
        import graphflow.saver as saver_module
        if crash == "writing a tensor":
            real = saver_module.zlib.crc32
            calls = []

            def crc32_failing_on_second_tensor(data, *args):
                calls.append(1)
                if len(calls) == 2:
                    raise OSError(28, "No space left on device")
                return real(data, *args)
            monkeypatch.setattr(saver_module.zlib, "crc32", crc32_failing_on_second_tensor)
            expected = OSError
        elif crash == "fsync":
            def failing_fsync(fd):
                raise OSError(5, "Input/output error")
            monkeypatch.setattr(saver_module.os, "fsync", failing_fsync)
            expected = OSError
        elif crash == "rename":
            def failing_replace(src, dst):
                raise OSError(1, "Operation not permitted")
            monkeypatch.setattr(saver_module.os, "replace", failing_replace)
            expected = OSError
        else:
            def interrupted(*args):
                raise KeyboardInterrupt
            monkeypatch.setattr(saver_module, "_trailer", interrupted)
            expected = KeyboardInterrupt
        with pytest.raises(expected) as info:
            gf.train.Saver().save(sess, path)
        if expected is OSError:
            assert info.value.filename == str(path)  # the user's path, not the temp file
        monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m"]  # no temp file left behind
    with gf.Session(s.graph) as fresh:
        gf.train.Saver().restore(fresh, path)
        assert same_bits(fresh.run(v), np.arange(1000, dtype=np.float64))


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
@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory):
    """(graph, variables, the checkpoint's bytes, the values in it)."""
    values = {"a": np.float32([[1.5, -2], [3, 4]]), "b": np.int64(9),
              "c": np.array([True, False, True]), "d": np.complex64([1 + 1j, 2 - 3j]),
              "e": np.array([b"x", b"", b"\x00yz"], dtype=object)}
    g = gf.Graph()
    variables = build(gf.Scope(g), values)
    path = tmp_path_factory.mktemp("ckpt") / "m"
    with gf.Session(g) as sess:
        set_values(sess, variables, values)
        gf.train.Saver().save(sess, path)
    return g, variables, path.read_bytes(), values


def assert_restore_leaves_everything(g, data: bytes, error, match: str):
    """Restoring ``data`` raises ``error`` naming the file; an initialized Session and a
    fresh one keep what they held."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "bad.ckpt")
        with open(path, "wb") as f:
            f.write(data)
        with gf.Session(g) as sess, gf.Session(g) as fresh:
            sess.run(gf.global_variables_initializer(g))
            before = {v.name: stored(sess, v.name) for v in gf.global_variables(g)}
            for target in (sess, fresh):
                with pytest.raises(error, match=match) as info:
                    gf.train.Saver().restore(target, path)
                assert path in str(info.value)
            for name, value in before.items():
                assert same_bits(stored(sess, name), value)
                assert stored(fresh, name) is None


@settings(deadline=None)
@given(data=st.data())
def test_a_flipped_byte_anywhere_is_data_loss(small_checkpoint, data):
    g, _, raw, _ = small_checkpoint
    position = data.draw(st.integers(0, len(raw) - 1), label="position")
    flip = data.draw(st.integers(1, 255), label="xor")
    corrupt = bytearray(raw)
    corrupt[position] ^= flip
    assert_restore_leaves_everything(g, bytes(corrupt), DataLossError, "corrupt")


@pytest.mark.parametrize("where", ["magic", "first tensor", "last tensor", "header",
                                   "trailer offsets", "end magic"])
def test_a_flipped_byte_in_each_part_is_data_loss(small_checkpoint, where):
    g, _, raw, _ = small_checkpoint
    header_offset = int.from_bytes(raw[-32:-24], "little")
    position = {"magic": 3, "first tensor": 8, "last tensor": header_offset - 1,
                "header": (header_offset + len(raw) - 32) // 2, "trailer offsets": len(raw) - 30,
                "end magic": len(raw) - 1}[where]
    corrupt = bytearray(raw)
    corrupt[position] ^= 0x10
    assert_restore_leaves_everything(g, bytes(corrupt), DataLossError, "corrupt")


@settings(deadline=None)
@given(data=st.data())
def test_a_truncated_checkpoint_is_data_loss(small_checkpoint, data):
    g, _, raw, _ = small_checkpoint
    length = data.draw(st.integers(0, len(raw) - 1), label="length")
    assert_restore_leaves_everything(g, raw[:length], DataLossError, "corrupt or truncated")


def test_appended_bytes_and_other_files_are_data_loss(small_checkpoint, tmp_path):
    g, _, raw, _ = small_checkpoint
    assert_restore_leaves_everything(g, raw + b"\0", DataLossError, "corrupt")
    g.save(tmp_path / "graph.json")  # a graph file is not a checkpoint
    assert_restore_leaves_everything(g, (tmp_path / "graph.json").read_bytes(), DataLossError,
                                     "magic")


def test_a_missing_checkpoint_is_not_found(small_checkpoint, tmp_path):
    g, _, _, _ = small_checkpoint
    with gf.Session(g) as sess:
        for missing in (tmp_path / "nothing.ckpt", tmp_path):
            with pytest.raises(NotFoundError, match=re.escape(str(missing))):
                gf.train.Saver().restore(sess, missing)
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


def forge_string_tensor(raw: bytes, name: str, encoded: bytes) -> bytes:
    """``raw`` with string tensor ``name``'s bytes replaced by ``encoded``, every checksum
    recomputed: a well-formed file that only the string decoder can reject."""
    import json
    import struct
    import zlib
    header_offset, header_length = struct.unpack("<QQ", raw[-32:-16])
    header = json.loads(raw[header_offset:header_offset + header_length])
    parts, offset = [raw[:8]], 8
    for t in header["tensors"]:
        body = raw[t["offset"]:t["offset"] + t["nbytes"]]
        if t["name"] == name:
            body = encoded
            t["crc32"] = zlib.crc32(body)
        t["offset"], t["nbytes"] = offset, len(body)
        parts.append(body)
        offset += len(body)
    text = json.dumps(header).encode()
    fields = struct.pack("<QQI", offset, len(text), zlib.crc32(text))
    return b"".join(parts) + text + fields + struct.pack("<I", zlib.crc32(fields)) + b"GFCKEND\n"


@pytest.mark.parametrize("lengths, data", [
    ([1, 0, 3], b"x\x00y"),                # one byte short of the lengths' sum
    ([1, 0, 3], b"x\x00yzw"),              # one byte too many
    ([2**64 - 1, 1, 4], b"x\x00yz"),       # a sum that wraps around 2**64
    ([1, 0], b"x"),                        # fewer lengths than elements
])
def test_string_lengths_that_do_not_fill_the_tensor_are_data_loss(small_checkpoint, lengths,
                                                                   data):
    g, _, raw, _ = small_checkpoint
    encoded = np.array(lengths, dtype="<u8").tobytes() + data
    assert_restore_leaves_everything(g, forge_string_tensor(raw, "e", encoded), DataLossError,
                                     "corrupt")


def test_a_forged_string_tensor_with_consistent_lengths_restores_what_it_says(small_checkpoint,
                                                                              tmp_path):
    g, variables, raw, _ = small_checkpoint  # the forging itself is right: a control
    path = tmp_path / "forged.ckpt"
    path.write_bytes(forge_string_tensor(raw, "e", np.array([2, 0, 1], "<u8").tobytes() + b"abc"))
    with gf.Session(g) as sess:
        gf.train.Saver().restore(sess, path)
        assert sess.run(variables["e"]).tolist() == [b"ab", b"", b"c"]


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
def test_mismatched_or_missing_variables_change_nothing(small_checkpoint, tmp_path, changed,
                                                         error, match):
    _, _, raw, values = small_checkpoint
    g = graph_like(values, changed)
    assert_restore_leaves_everything(g, raw, error, match)
