"""ScatterNd and TensorScatterUpdate/Add/Sub/Min/Max: the seed examples, a plain loop
reference over random ranks, depths, dtypes, duplicates and bad indices, TensorFlow's
run-time and build-time errors, dtype rules, and buffer forwarding."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError, InvalidDTypeError, NotFoundError, \
    ResourceExhaustedError
from graphflow.ops import ScatterNd, TensorScatterAdd, TensorScatterUpdate
from graphflow.ops.cpu_index import scatter_into

import ref_scatter

SLICES = np.array([[[5, 5, 5, 5], [6, 6, 6, 6], [7, 7, 7, 7], [8, 8, 8, 8]]] * 2, np.int32)
OPS = {"update": "tensor_scatter_update", "add": "tensor_scatter_add", "sub": "tensor_scatter_sub",
       "min": "tensor_scatter_min", "max": "tensor_scatter_max"}
REAL = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8,
        np.uint16, np.uint32, np.uint64]
KERNEL_DTYPES = {"update": REAL + [np.complex64, np.complex128, np.bool_, object],
                 "add": REAL + [np.complex64, np.complex128],
                 "sub": REAL + [np.complex64, np.complex128],
                 "min": REAL, "max": REAL}


def _values(dtype, shape, seed=0):
    """Small distinct-ish values of any dtype (bytes for object)."""
    flat = (np.arange(int(np.prod(shape))) * 7 + seed) % 11
    if dtype is object:
        return np.array([b"s%d" % v for v in flat], dtype=object).reshape(shape)
    return flat.astype(dtype).reshape(shape)


# -- the seed examples -------------------------------------------------------------------------
def test_seed_scatter_nd(scope, run):
    out = scope.scatter_nd(np.array([[4], [3], [1], [7]]), np.array([9, 10, 11, 12], np.int32),
                           np.array([8]))
    assert out.dtype is gf.int32 and out.shape == gf.TensorShape([8])
    assert out.op.type == "ScatterNd" and out.name == "ScatterNd:0"
    assert run(out).tolist() == [0, 11, 0, 10, 9, 0, 0, 12]
    rank3 = ScatterNd.create(scope, np.array([[0], [2]]), SLICES, np.array([4, 4, 4])).output()
    assert rank3.shape == gf.TensorShape([4, 4, 4])
    expected = np.zeros((4, 4, 4), np.int32)
    expected[[0, 2]] = SLICES
    np.testing.assert_array_equal(run(rank3), expected)


@pytest.mark.parametrize("style", ["builder", "class", "alias"])
def test_seed_tensor_scatter(scope, run, style):
    ones8, ones444 = np.ones(8, np.int32), np.ones((4, 4, 4), np.int32)
    idx, upd, idx3 = np.array([[4], [3], [1], [7]]), np.array([9, 10, 11, 12], np.int32), \
        np.array([[0], [2]])
    if style == "builder":
        upd8, add8 = scope.tensor_scatter_update(ones8, idx, upd), scope.tensor_scatter_add(ones8, idx, upd)
        upd3, add3 = scope.tensor_scatter_update(ones444, idx3, SLICES), \
            scope.tensor_scatter_add(ones444, idx3, SLICES)
    elif style == "class":
        upd8 = TensorScatterUpdate.create(scope, ones8, idx, upd).output()
        add8 = TensorScatterAdd.create(scope, ones8, idx, upd).as_output()
        upd3 = TensorScatterUpdate.create(scope, ones444, idx3, SLICES).output()
        add3 = TensorScatterAdd.create(scope, ones444, idx3, SLICES).output()
    else:
        upd8, add8 = scope.tensor_scatter_nd_update(ones8, idx, upd), \
            scope.tensor_scatter_nd_add(ones8, idx, upd)
        upd3, add3 = scope.tensor_scatter_nd_update(ones444, idx3, SLICES), \
            scope.tensor_scatter_nd_add(ones444, idx3, SLICES)
    assert run(upd8).tolist() == [1, 11, 1, 10, 9, 1, 1, 12]
    assert run(add8).tolist() == [1, 12, 1, 11, 10, 1, 1, 13]
    expected = np.ones((4, 4, 4), np.int32)
    expected[[0, 2]] = SLICES
    np.testing.assert_array_equal(run(upd3), expected)
    expected[[0, 2]] += 1
    np.testing.assert_array_equal(run(add3), expected)


# -- against the loop reference ----------------------------------------------------------------
@st.composite
def scatter_case(draw, dtypes):
    """(tensor, indices, updates, policy): random rank 1-4, depth 1..rank, outer dims 1-2
    (possibly empty), duplicates, sometimes negative or too large indices."""
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    depth = draw(st.integers(1, rank))
    outer = tuple(draw(st.lists(st.integers(0, 5), min_size=1, max_size=2)))
    n = int(np.prod(outer))
    bad = draw(st.integers(0, 3)) == 0
    cols = [draw(st.lists(st.integers(-2 if bad else 0, shape[d] + (2 if bad else -1)),
                          min_size=n, max_size=n)) for d in range(depth)]
    index_dtype = draw(st.sampled_from([np.int32, np.int64]))
    indices = np.array(cols, index_dtype).T.reshape(outer + (depth,))
    dtype = draw(st.sampled_from(dtypes))
    upd_shape = outer + shape[depth:]
    tensor = _values(dtype, shape, draw(st.integers(0, 10)))
    updates = _values(dtype, upd_shape, draw(st.integers(0, 10)))
    if dtype in (np.float32, np.float64) and updates.size and draw(st.booleans()):
        updates.reshape(-1)[draw(st.integers(0, updates.size - 1))] = np.nan
        tensor.reshape(-1)[0] = np.nan
    policy = draw(st.sampled_from(["", "ERROR", "IGNORE"]))
    return tensor, indices, updates, policy


def _expect(fn):
    """The reference result, or the BadIndex message it raises."""
    try:
        return fn(), None
    except ref_scatter.BadIndex as e:
        return None, str(e)


@pytest.mark.parametrize("op", sorted(OPS))
@given(data=st.data())
def test_tensor_scatter_matches_reference(op, data):
    tensor, indices, updates, policy = data.draw(scatter_case(KERNEL_DTYPES[op]))
    scope = gf.Scope(gf.Graph())
    out = getattr(scope, OPS[op])(tensor, indices, updates, bad_indices_policy=policy)
    assert out.shape == gf.TensorShape(tensor.shape)
    expected, message = _expect(lambda: ref_scatter.scatter(tensor, indices, updates, op, policy))
    with gf.Session(scope.graph) as sess:
        if message:
            with pytest.raises(InvalidArgumentError) as info:
                sess.run(out)
            assert info.value.message == message
        else:
            got = sess.run(out)
            assert got.dtype == tensor.dtype
            np.testing.assert_array_equal(got, expected)


@given(data=st.data())
def test_scatter_nd_matches_reference(data):
    tensor, indices, updates, policy = data.draw(scatter_case(KERNEL_DTYPES["update"]))
    scope = gf.Scope(gf.Graph())
    out = scope.scatter_nd(indices, updates, np.array(tensor.shape, indices.dtype),
                           bad_indices_policy=policy)
    assert out.shape == gf.TensorShape(tensor.shape)
    expected, message = _expect(lambda: ref_scatter.scatter_nd(indices, updates, tensor.shape,
                                                               policy))
    with gf.Session(scope.graph) as sess:
        if message:
            with pytest.raises(InvalidArgumentError) as info:
                sess.run(out)
            assert info.value.message == message
        else:
            np.testing.assert_array_equal(sess.run(out), expected)


@pytest.mark.parametrize("op", ["add", "sub", "min", "max"])
@pytest.mark.parametrize("num_slices", [6, 5000])  # bool-mark / sort uniqueness checks
@pytest.mark.parametrize("duplicates", [False, True])
def test_bulk_paths_agree_with_reference(op, num_slices, duplicates):
    """Unique and duplicate slice offsets, few and many output slices."""
    rng = np.random.default_rng(num_slices + duplicates)
    out = rng.integers(-5, 5, (num_slices, 3)).astype(np.float32)
    out[0, 0] = np.nan
    offsets = np.array([0, 4, 2, 4, 0] if duplicates else [0, 4, 2, 5, 1], np.int64)
    updates = rng.integers(-5, 5, (5, 3)).astype(np.float32)
    updates[1, 1] = np.nan
    expected = ref_scatter.scatter(out, offsets[:, None], updates, op)
    got = out.copy()
    with np.errstate(all="ignore"):
        scatter_into(got, offsets, updates, op)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.int32, np.bool_])
@pytest.mark.parametrize("pattern", ["unique", "duplicate early", "duplicate late", "many"])
@pytest.mark.parametrize("slice_size", [1, 3])
def test_scatter_into_zeros_is_bitwise_the_ordered_sum(dtype, pattern, slice_size):
    """ScatterNd's output starts as zeros: 0 + -0.0 gives 0.0, and duplicates anywhere
    sum in index order."""
    n = (1 << 14) + 7
    rng = np.random.default_rng(n)
    offsets = rng.permutation(4 * n)[:n].astype(np.int64)
    if pattern == "duplicate early":
        offsets[5] = offsets[2]
    elif pattern == "duplicate late":
        offsets[-1] = offsets[n // 2]
    elif pattern == "many":
        offsets = rng.integers(0, 100, n).astype(np.int64)
    updates = rng.standard_normal((n, slice_size)).astype(dtype)
    if updates.dtype.kind in "fc":
        updates[::3] = -0.0
        updates[1::7] = np.nan
    expected = np.zeros((4 * n, slice_size), dtype)
    flat = (offsets[:, None] * slice_size + np.arange(slice_size)).reshape(-1)
    np.add.at(expected.reshape(-1), flat, updates.reshape(-1))
    got = np.zeros((4 * n, slice_size), dtype)
    scatter_into(got, offsets, updates, "add")
    assert got.tobytes() == expected.tobytes()


# -- duplicates, strings, bools ----------------------------------------------------------------
def test_duplicates(scope, run):
    idx = np.array([[1], [1], [3], [1]])
    upd = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    assert run(scope.scatter_nd(idx, upd, [5])).tolist() == [0, 7, 0, 3, 0]
    base = np.full(5, 10.0, np.float32)
    assert run(scope.tensor_scatter_update(base, idx, upd)).tolist() == [10, 4, 10, 3, 10]
    assert run(scope.tensor_scatter_sub(base, idx, upd)).tolist() == [10, 3, 10, 7, 10]
    assert run(scope.tensor_scatter_min(base, idx, upd)).tolist() == [10, 1, 10, 3, 10]
    assert run(scope.tensor_scatter_max(base, idx, upd * 5)).tolist() == [10, 20, 10, 15, 10]


def test_update_last_duplicate_wins_for_elements_and_slices(scope, run):
    n = 1000
    idx = np.zeros((n, 1), np.int64)
    got = run(scope.tensor_scatter_update(np.zeros(3, np.int64), idx, np.arange(n)))
    assert got.tolist() == [n - 1, 0, 0]
    rows = np.arange(n * 4).reshape(n, 4)
    got = run(scope.tensor_scatter_update(np.zeros((2, 4), np.int64), idx, rows))
    assert got.tolist() == [rows[-1].tolist(), [0] * 4]


def test_float_duplicates_sum_in_index_order(scope, run):
    """((0 + 1e8) + 1) - 1e8 is 0 in float32; any other order gives 1 or 2**-..."""
    upd = np.array([1e8, 1.0, -1e8, 1.0], np.float32)
    got = run(scope.scatter_nd(np.zeros((4, 1), np.int32), upd, [1]))
    assert got.tolist() == [1.0]
    rows = np.stack([upd, upd[::-1]], axis=1)  # slices take the ufunc.at path too
    got = run(scope.scatter_nd(np.zeros((4, 1), np.int32), rows, [1, 2]))
    assert got.tolist() == [[1.0, 0.0]]


def test_strings(scope, run):
    idx = np.array([[1], [3], [1], [1], [0]])
    words = np.array([b"a", b"b", b"c", b"d", b"e"], object)
    out = scope.scatter_nd(idx, words, [5])
    assert out.dtype is gf.string
    assert run(out).tolist() == [b"e", b"acd", b"", b"b", b""]
    pairs = np.array([[b"x", b"y"], [b"p", b"q"], [b"X", b"Y"]], object)
    got = run(scope.scatter_nd(np.array([[1], [0], [1]]), pairs, [3, 2]))
    assert got.tolist() == [[b"p", b"q"], [b"xX", b"yY"], [b"", b""]]
    base = np.array([b"s7", b"s8", b"s9"], object)
    got = run(scope.tensor_scatter_update(base, np.array([[1], [2], [1]]),
                                          np.array([b"s0", b"s1", b"s2"], object)))
    assert got.tolist() == [b"s7", b"s2", b"s1"] and base.tolist() == [b"s7", b"s8", b"s9"]
    with pytest.raises(NotFoundError):
        scope.tensor_scatter_add(base, [[0]], np.array([b"z"], object))


def test_bools_and_integer_wraparound(scope, run):
    bools = scope.scatter_nd(np.array([[1], [1], [2], [2], [3]]),
                             np.array([True, True, False, True, False]), [5])
    assert run(bools).tolist() == [False, True, True, False, False]  # duplicates OR
    assert run(scope.scatter_nd([[1], [1]], np.array([100, 100], np.int8), [3])).tolist() == \
        [0, -56, 0]
    assert run(scope.tensor_scatter_sub(np.array([1, 5], np.uint8), [[0], [0]],
                                        np.array([1, 2], np.uint8))).tolist() == [254, 5]


def test_min_max_nan_rules(scope, run):
    t = np.array([1.0, np.nan, 3.0, 4.0], np.float32)
    idx, u = np.array([[0], [1], [2]]), np.array([np.nan, 5.0, -np.inf], np.float32)
    np.testing.assert_array_equal(run(scope.tensor_scatter_min(t, idx, u)), [1, np.nan, -np.inf, 4])
    np.testing.assert_array_equal(run(scope.tensor_scatter_max(t, idx, u)), [1, np.nan, 3, 4])
    np.testing.assert_array_equal(run(scope.tensor_scatter_add(t, idx, u)), [np.nan, np.nan, -np.inf, 4])
    extremes = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, 5])
    assert run(scope.tensor_scatter_min(np.zeros(3, np.int64), [[0], [1], [1]], extremes)).tolist() \
        == [np.iinfo(np.int64).min, 0, 0]


# -- dtypes ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("dtype", REAL + [np.complex64, np.bool_, object], ids=str)
def test_kernel_dtypes(scope, run, op, dtype):
    tensor, updates = _values(dtype, (4, 2)), _values(dtype, (2, 2), seed=3)
    if dtype not in KERNEL_DTYPES[op]:
        with pytest.raises(NotFoundError, match="OpKernel"):
            getattr(scope, OPS[op])(tensor, [[1], [3]], updates)
        return
    got = run(getattr(scope, OPS[op])(tensor, [[1], [3]], updates))
    np.testing.assert_array_equal(got, ref_scatter.scatter(tensor, np.array([[1], [3]]), updates, op))
    np.testing.assert_array_equal(run(scope.scatter_nd([[1], [3]], updates, [4, 2])),
                                  ref_scatter.scatter_nd(np.array([[1], [3]]), updates, (4, 2)))


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_index_dtypes(scope, run, index_dtype):
    idx = np.array([[3], [0]], index_dtype)
    shape = np.array([4], index_dtype)
    assert run(scope.scatter_nd(idx, np.array([1, 2], np.int32), shape)).tolist() == [2, 0, 0, 1]
    assert run(scope.tensor_scatter_max(np.zeros(4, np.int32), idx, np.array([1, 2], np.int32))) \
        .tolist() == [2, 0, 0, 1]


def test_index_dtype_rules(scope):
    upd = np.ones(2, np.float32)
    for name in ("scatter_nd", "tensor_scatter_update"):  # the op allows int16; no kernel has it
        args = ([[1], [3]], upd, [4]) if name == "scatter_nd" else (np.ones(4, np.float32),
                                                                       [[1], [3]], upd)
        args = [np.array(a, np.int16) if np.asarray(a).dtype.kind == "i" else a for a in args]
        with pytest.raises(NotFoundError):
            getattr(scope, name)(*args)
    with pytest.raises(NotFoundError):
        scope.tensor_scatter_update(np.ones(4, np.float32), np.array([[1]], np.uint16), upd[:1])
    with pytest.raises(InvalidDTypeError, match="not in list of allowed values: int32, int64"):
        scope.tensor_scatter_add(np.ones(4, np.float32), np.array([[1]], np.int16), upd[:1])
    with pytest.raises(TypeError, match="not in list of allowed values"):
        scope.scatter_nd(np.zeros((1, 1), np.float32), [1.0], [2])
    with pytest.raises(TypeError, match="does not match type int32 of argument 'indices'"):
        scope.scatter_nd(scope.constant(np.zeros((1, 1), np.int32)), [1.0],
                         scope.constant(np.array([2], np.int64)))


# -- empty and degenerate inputs -------------------------------------------------------------------
def test_empty_indices_and_zero_size_updates(scope, run):
    base = np.arange(12.0).reshape(3, 4)
    for idx, upd in [(np.zeros((0, 1), np.int32), np.zeros((0, 4))),
                     (np.zeros((0, 2), np.int64), np.zeros(0)),
                     (np.zeros((2, 0, 1), np.int32), np.zeros((2, 0, 4)))]:
        np.testing.assert_array_equal(run(scope.tensor_scatter_add(base, idx, upd)), base)
        np.testing.assert_array_equal(run(scope.scatter_nd(idx, upd, [3, 4])), np.zeros((3, 4)))
    empty = scope.scatter_nd(np.zeros((0, 1), np.int32), np.zeros(0, np.float32), [0])
    assert run(empty).shape == (0,)
    assert run(scope.tensor_scatter_update(np.zeros(0, np.float32), np.zeros((0, 1), np.int32),
                                           np.zeros(0, np.float32))).shape == (0,)


@pytest.mark.parametrize("indices, updates, shape, message", [
    # TensorFlow's own messages for inputs its shape functions let through
    ([[3]], 5.0, [5], "Updates shape must have rank at least one. Found:[]"),
    (np.zeros((1, 0), np.int32), [4.0], [5], "Indices and updates specified for empty output shape"),
    ([[0]], [1.0], [0], "Indices and updates specified for empty output.  indices shape: [1,1]"),
    ([1], [1.0, 2, 3, 4], [3, 4], "Dimensions [0,1) of indices[shape=[1]] = 1 must match "
                                  "dimensions [0,1) of updates[shape=[4]] = 4"),
    ([1, 3], [10.0, 20], [5], "Dimensions [2,1) of input[shape=[5]] must match dimensions [0,1) "
                              "of updates[shape=[2]]"),
    ([[[0], [1]], [[2], [3]]], [1.0, 2], [5], "Dimensions [0,2) of indices[shape=[2,2,1]] must "
                                              "match dimensions [0,2) of updates[shape=[2]]"),
    ([[0]], [1.0], [-1], "Dimension -1 must be >= 0"),
    ([[0]], [1.0], [[5]], "Shape must be a vector"),
])
def test_scatter_nd_run_time_shape_errors(scope, indices, updates, shape, message):
    """Placeholders hide the shapes, so TensorFlow's kernel checks decide, with its messages."""
    values = [np.asarray(indices, np.int32), np.asarray(updates, np.float32),
              np.asarray(shape, np.int32)]
    holders = [scope.placeholder(gf.as_dtype(v.dtype)) for v in values]
    out = scope.scatter_nd(*holders)
    with gf.Session(scope.graph) as sess:
        with pytest.raises(InvalidArgumentError) as info:
            sess.run(out, dict(zip(holders, values)))
    assert info.value.message == message and info.value.node_name == "ScatterNd"


@pytest.mark.parametrize("tensor, indices, updates, message", [
    ([0.0, 1, 2, 3, 4], [[1], [3]], 9.0, "Updates shape must have rank at least one. Found:[]"),
    ([0.0, 1, 2, 3, 4], [1, 3], [10.0, 20], "Inner dimensions of output shape must match inner "
                                            "dimensions of updates shape. Output: [5] updates: [2]"),
    ([0.0, 1, 2, 3, 4], [[0], [1]], [1.0, 2, 3], "Outer dimensions of indices and update must "
                                                 "match. Indices shape: [2,1], updates shape:[3]"),
    ([0.0, 1, 2, 3, 4], [[[0], [1]], [[2], [3]]], [1.0, 2], "Outer dimensions of indices and update "
     "must match. Indices shape: [2,2,1], updates shape:[2]"),
    (np.zeros((5, 4)), [[0], [1]], np.zeros((2, 3)), "The inner 1 dimensions of output.shape=[5,4] "
     "must match the inner 1 dimensions of updates.shape=[2,3]"),
    ([0.0, 1, 2, 3], np.zeros((2, 0), np.int32), np.zeros((2, 4)),
     "Indices and updates specified for empty output shape"),
    ([0.0, 1, 2, 3, 4], [[1, 2]], [1.0], "indices.shape[-1] must be <= tensor rank"),
])
def test_tensor_scatter_run_time_shape_errors(scope, tensor, indices, updates, message):
    values = [np.asarray(tensor, np.float32), np.asarray(indices, np.int32),
              np.asarray(updates, np.float32)]
    holders = [scope.placeholder(gf.float32), scope.placeholder(gf.int32),
               scope.placeholder(gf.float32)]
    out = scope.tensor_scatter_add(*holders)
    with gf.Session(scope.graph) as sess:
        with pytest.raises(InvalidArgumentError) as info:
            sess.run(out, dict(zip(holders, values)))
    if message.startswith("indices.shape"):  # depth > rank: TensorFlow's run-time message
        message = "Inner dimensions of output shape must match inner dimensions of updates " \
                  "shape. Output: [5] updates: [1]"
    assert info.value.message == message


# -- bad indices ------------------------------------------------------------------------------------
def test_bad_index_messages_and_policies(scope, run):
    idx = np.array([[1], [9], [2], [-1]])
    ones = np.ones(4, np.float32)
    with pytest.raises(InvalidArgumentError, match=r"^indices\[3\] = \[-1\] does not index into "
                                                    r"shape \[8\] \[node ScatterNd\]"):
        run(scope.scatter_nd(idx, ones, [8]))  # the last bad tuple, as TensorFlow's CPU loop
    for policy in ("", "DEFAULT", "ERROR"):
        with pytest.raises(InvalidArgumentError, match=r"indices\[3\] = \[-1\]"):
            run(scope.tensor_scatter_max(np.zeros(8, np.float32), idx, ones,
                                         bad_indices_policy=policy))
    assert run(scope.scatter_nd(idx, ones, [8], bad_indices_policy="IGNORE")).tolist() == \
        [0, 1, 1, 0, 0, 0, 0, 0]
    two = np.array([[[0, 0], [1, 4]], [[1, 1], [0, 0]]])
    with pytest.raises(InvalidArgumentError, match=r"indices\[0,1\] = \[1, 4\] does not index "
                                                    r"into shape \[2,4\]"):
        run(scope.tensor_scatter_update(np.zeros((2, 4)), two, np.ones((2, 2))))
    with pytest.raises(InvalidArgumentError, match="'BOGUS' is not one of"):
        scope.scatter_nd(idx, ones, [8], bad_indices_policy="BOGUS")


def test_nothing_written_on_error(scope):
    x = scope.placeholder(gf.float32, shape=[4])
    out = scope.tensor_scatter_update(scope.add(x, 0.0), np.array([[0], [7]]), np.ones(2, np.float32))
    feed = np.zeros(4, np.float32)
    with gf.Session(scope.graph) as sess:
        with pytest.raises(InvalidArgumentError):
            sess.run(out, {x: feed})
        assert feed.tolist() == [0, 0, 0, 0]
        ok = scope.tensor_scatter_update(x, np.array([[0]]), np.ones(1, np.float32))
        assert sess.run(ok, {x: feed}).tolist() == [1, 0, 0, 0] and feed.tolist() == [0] * 4


def test_output_size_is_checked_before_allocating(scope, run):
    out = scope.scatter_nd(np.zeros((1, 2), np.int64), np.ones(1, np.float32),
                           np.array([1 << 20, 1 << 20]))
    with pytest.raises(ResourceExhaustedError, match="OOM when allocating"):
        run(out, memory_limit_bytes=1 << 30)


# -- build time ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("indices, updates, shape, message", [
    (np.zeros((4, 1), np.int32), np.zeros(3), [8], "Dimensions [0,1) of indices[shape=[4,1]] = [4] "
     "must match dimensions [0,1) of updates[shape=[3]] = [3]: Dimension 0 in both shapes must be "
     "equal, but are 4 and 3. Shapes are [4] and [3]."),
    (np.zeros((2, 1), np.int32), np.zeros((2, 3)), [5, 4], "Dimensions [1,2) of input[shape=[5,4]] "
     "= [4] must match dimensions [1,2) of updates[shape=[2,3]] = [3]"),
    (np.zeros((2, 2, 1), np.int32), np.zeros(2), [5], "Shapes must be equal rank, but are 2 and 1"),
    (np.zeros((2, 3), np.int32), np.zeros(2), [5, 4], "indices.shape[-1] must be <= input rank"),
    (np.zeros((1, 1), np.int32), np.zeros(1), [0], "Indices and updates specified for empty output"),
    (np.zeros((2, 1), np.int32), np.float64(1.0), [5], "Shape must be at least rank 1 but is rank 0"),
    (np.int32(3), np.zeros(1), [5], "Shape must be at least rank 1 but is rank 0"),
    (np.zeros((1, 1), np.int32), np.zeros(1), [[5]], "Shape must be rank 1 but is rank 2"),
])
def test_build_time_shape_errors(scope, indices, updates, shape, message):
    with pytest.raises(InvalidArgumentError) as info:
        scope.scatter_nd(indices, updates, np.array(shape, np.int32))
    assert message in info.value.message
    assert isinstance(info.value, ValueError) and info.value.node_name == "ScatterNd"
    assert "ScatterNd" in str(info.value)


def test_tensor_scatter_build_time_rules(scope):
    with pytest.raises(InvalidArgumentError, match="Shape must be at least rank 1 but is rank 0"):
        scope.tensor_scatter_update(np.float32(3.0), np.zeros((1, 0), np.int32), [4.0])
    with pytest.raises(InvalidArgumentError, match=r"Dimensions \[1,2\) of tensor\[shape=\[\?,3\]\]"):
        scope.tensor_scatter_min(scope.placeholder(gf.float32, [None, 3]),
                                 scope.placeholder(gf.int32, [None, 1]),
                                 scope.placeholder(gf.float32, [None, 4]))
    scalar = scope.tensor_scatter_add(np.zeros(5, np.float32), [[1], [3]], np.float32(9.0))
    assert scalar.shape == gf.TensorShape([5])  # as TensorFlow: caught when the graph runs


def test_partial_shapes(scope):
    idx = scope.placeholder(gf.int64, shape=[None, 1])
    upd = scope.placeholder(gf.float32, shape=[None, 3])
    n = scope.placeholder(gf.int64, shape=[])
    assert scope.scatter_nd(idx, upd, scope.pack([n, 3])).shape == gf.TensorShape([None, 3])
    assert scope.scatter_nd(idx, upd, scope.pack([np.int64(4), n])).shape == gf.TensorShape([4, 3])
    assert scope.scatter_nd(idx, upd, scope.placeholder(gf.int64, shape=[2])).shape == \
        gf.TensorShape([None, 3])
    assert scope.scatter_nd(idx, upd, scope.placeholder(gf.int64, shape=[None])).shape.rank is None
    assert scope.scatter_nd(idx, upd, np.array([-1, 3])).shape == gf.TensorShape([None, 3])
    unknown = scope.placeholder(gf.float32)
    assert scope.tensor_scatter_update(unknown, idx, upd).shape.rank is None
    refined = scope.tensor_scatter_add(scope.placeholder(gf.float32, [None, None]), idx, upd)
    assert refined.shape == gf.TensorShape([None, 3])


def test_shape_rules_are_documented():
    for name in ("ScatterNd", "TensorScatterUpdate", "TensorScatterAdd", "TensorScatterSub",
                 "TensorScatterMin", "TensorScatterMax", "GatherNd"):
        definition = gf.op_def(name)
        assert definition.shape_rule and "\n" not in definition.shape_rule
        assert "bad_indices_policy" in definition.signature
    assert gf.op_def("tensor_scatter_nd_max").name == "TensorScatterMax"


# -- forwarding -----------------------------------------------------------------------------------------
def _forwarded(graph, fetches, feed=None):
    # optimize=False: graphs of constants would be folded at plan time, nothing to forward
    with gf.Session(graph, gf.SessionConfig(optimize=False)) as sess:
        values = sess.run(fetches, feed)
        return values, sess.stats.forwarded


def test_forwarding_in_a_chain(scope):
    x = scope.placeholder(gf.float32, shape=[6])
    idx = np.array([[1], [2]])
    a = scope.tensor_scatter_add(x, idx, np.ones(2, np.float32))        # fed input: copied
    b = scope.tensor_scatter_add(a, idx, np.ones(2, np.float32))        # a dies here: forwarded
    c = scope.tensor_scatter_update(b, idx, np.full(2, 7, np.float32))  # forwarded again
    feed = np.zeros(6, np.float32)
    value, forwarded = _forwarded(scope.graph, c, {x: feed})
    assert forwarded == 2 and value.tolist() == [0, 7, 7, 0, 0, 0] and feed.tolist() == [0] * 6
    s = scope.scatter_nd(idx, np.ones(2, np.float32), [6])             # ScatterNd's own buffer
    g = scope.gather_nd(np.arange(12.0, dtype=np.float32).reshape(2, 6), [[1]])
    value, forwarded = _forwarded(scope.graph, [scope.tensor_scatter_sub(s, idx, np.ones(2, np.float32)),
                                                scope.tensor_scatter_max(g, [[0, 0]], [100.0])])
    assert forwarded == 2 and value[0].tolist() == [0] * 6 and value[1][0, 0] == 100


def test_no_forwarding_for_feeds_constants_second_consumers_and_fetches(scope):
    const = scope.constant(np.zeros(4, np.float32))
    idx = np.array([[0]])
    one = np.ones(1, np.float32)
    _, forwarded = _forwarded(scope.graph, scope.tensor_scatter_add(const, idx, one))
    assert forwarded == 0
    x = scope.placeholder(gf.float32, [4])
    feed = np.zeros(4, np.float32)
    (v,), forwarded = _forwarded(scope.graph, [scope.tensor_scatter_add(x, idx, one)], {x: feed})
    assert forwarded == 0 and v.tolist() == [1, 0, 0, 0] and feed.tolist() == [0] * 4
    mid = scope.add(const, 1.0)
    first = scope.tensor_scatter_add(mid, idx, one)
    second = scope.mul(mid, 2.0)  # mid has a second consumer: must not be overwritten
    (f, s), forwarded = _forwarded(scope.graph, [first, second])
    assert forwarded == 0 and f.tolist() == [2, 1, 1, 1] and s.tolist() == [2, 2, 2, 2]
    (m, f2), forwarded = _forwarded(scope.graph, [mid, first])  # mid is fetched
    assert forwarded == 0 and m.tolist() == [1, 1, 1, 1] and f2.tolist() == [2, 1, 1, 1]
    assert scope.graph.operation(const.op.name).attrs["value"].tolist() == [0, 0, 0, 0]


def test_fortran_order_feed(scope, run):
    x = scope.placeholder(gf.float32, [2, 3])
    out = scope.tensor_scatter_update(scope.add(x, 0.0), [[1, 2]], [9.0])
    feed = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert run(out, {x: feed}).tolist() == [[0, 1, 2], [3, 4, 9]]


def test_shape_checks_rerun_when_the_shapes_change(scope):
    """The kernel keeps the layout of its last shapes; new shapes are checked again."""
    idx = scope.placeholder(gf.int64, shape=None)
    upd = scope.placeholder(gf.float32, shape=None)
    out = scope.scatter_nd(idx, upd, [6])
    with gf.Session(scope.graph) as sess:
        f = sess.make_callable(out, [idx, upd])
        np.testing.assert_array_equal(f(np.array([[1], [1]]), np.array([1, 2], np.float32)),
                                      [0, 3, 0, 0, 0, 0])
        with pytest.raises(InvalidArgumentError, match="must match dimensions"):
            f(np.array([[1], [2]]), np.array([[1, 2]], np.float32))
        with pytest.raises(InvalidArgumentError, match=r"indices\[0\] = \[7\] does not index"):
            f(np.array([[7], [2]]), np.array([1, 2], np.float32))
        np.testing.assert_array_equal(f(np.array([[5]]), np.array([4], np.float32)),
                                      [0, 0, 0, 0, 0, 4])
