"""The compiled scatter and gather loops (ops/scatter_loops.py) against numpy's sequential
``ufunc.at`` and plain Python loops: bit-exact sums in index order with many duplicates,
Eigen's NaN and signed-zero rules for min/max, the last write wins, numpy's fallback for
float16 and strings, the split over the intra-op pool, and nothing written on a bad index."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import graphflow as gf
from graphflow.errors import InvalidArgumentError
from graphflow.ops import cpu_index, scatter_loops
from graphflow.ops.cpu_index import scatter_into

import ref_scatter
from support.tiering import NeverReady

SUM_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8,
              np.uint64, np.complex64, np.complex128]
REAL_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8,
               np.uint64]
ALL_DTYPES = SUM_DTYPES + [np.bool_, object]


def _values(dtype, n: int, rng: np.random.Generator) -> np.ndarray:
    """Values that make order matter: for floats, magnitudes far apart (so sums round
    differently in another order) with NaN, inf and signed zeros; for ints, the extremes
    (so sums wrap); strings for object."""
    dtype = np.dtype(dtype)
    if dtype == object:
        return np.array([b"s%d" % v for v in rng.integers(0, 100, n)], dtype=object)
    if dtype == np.bool_:
        return rng.integers(0, 2, n).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        special = np.array([info.min, info.max, 0, 1, info.max - 1], dtype)
        values = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        values[: len(special)] = special[:n]
        return rng.permutation(values)
    real = np.dtype(dtype.char.lower() if dtype.kind == "f" else f"f{dtype.itemsize // 2}")
    with np.errstate(all="ignore"):
        values = (rng.standard_normal(n) * 10.0 ** rng.integers(-4, 5, n)).astype(real)
        values[rng.random(n) < 0.05] = np.nan
        values[rng.random(n) < 0.05] = np.inf
        values[rng.random(n) < 0.1] = 0.0
        values[rng.random(n) < 0.1] = -0.0
        if dtype.kind == "c":
            values = values + 1j * rng.permutation(values)
        return values.astype(dtype)


def _in_order(op: str, out: np.ndarray, offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The reference: one update at a time, in index order (a Python loop)."""
    expected = out.copy()
    with np.errstate(all="ignore"):
        for o, row in zip(offsets, rows):
            expected[o] = ref_scatter._combine(op, expected[o], row)
    return expected


def _assert_bitwise(got: np.ndarray, expected: np.ndarray, nan_payloads: bool = True) -> None:
    """Equal to the bit (signed zeros included); NaN payloads too unless ``nan_payloads``
    is False (the reference's numpy scalar arithmetic may give another NaN than a loop,
    as TensorFlow's CPU and GPU kernels may)."""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if got.dtype == object:
        assert got.tolist() == expected.tolist()
    elif nan_payloads or got.dtype.kind not in "fc":
        assert got.tobytes() == expected.tobytes()
    else:
        real = np.dtype(f"f{got.dtype.itemsize // (2 if got.dtype.kind == 'c' else 1)}")
        a, b = got.reshape(-1).view(real), expected.reshape(-1).view(real)
        assert np.array_equal(np.isnan(a), np.isnan(b))
        assert a[~np.isnan(a)].tobytes() == b[~np.isnan(b)].tobytes()


# -- sums ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", SUM_DTYPES + [np.bool_, object])
@pytest.mark.parametrize("width", [1, 3])
@pytest.mark.parametrize("op", ["add", "sub"])
def test_sums_are_bitwise_ufunc_at_in_index_order(op, width, dtype):
    """Many duplicates on a few slices: float sums round in index order as ``np.add.at``
    (and TensorFlow's CPU loop); integers wrap; bools OR; strings concatenate."""
    if op == "sub" and dtype in (np.bool_, object):
        pytest.skip("TensorScatterSub has no bool or string kernel")
    rng = np.random.default_rng(width)
    n, slices = 2000, 7
    out = _values(dtype, slices * width, rng).reshape(slices, width)
    rows = _values(dtype, n * width, rng).reshape(n, width)
    offsets = rng.integers(0, slices, n).astype(np.int64)
    flat = (offsets[:, None] * width + np.arange(width)).reshape(-1)
    expected = out.copy()
    with np.errstate(all="ignore"):
        (np.add if op == "add" else np.subtract).at(expected.reshape(-1), flat, rows.reshape(-1))
    got = out.copy()
    with np.errstate(all="ignore"):
        scatter_into(got, offsets, rows, op)
    # a complex NaN's sign depends on the loop (numpy 1.24's np.add.at differs from 2.x)
    _assert_bitwise(got, expected, nan_payloads=np.dtype(dtype).kind != "c")


@pytest.mark.parametrize("dtype", SUM_DTYPES + [np.bool_, object])
def test_scatter_nd_graph_over_dtypes(scope, run, dtype):
    """Zeros (empty strings), then the sum in index order; bools OR."""
    rng = np.random.default_rng(1)
    indices = rng.integers(0, 5, (60, 2))
    updates = _values(dtype, 60 * 3, rng).reshape(60, 3)
    out = run(scope.scatter_nd(indices, updates, [5, 5, 3]))
    with np.errstate(all="ignore"):
        expected = ref_scatter.scatter_nd(indices, updates, (5, 5, 3))
    _assert_bitwise(out, expected, nan_payloads=False)


# -- min / max -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", REAL_DTYPES)
@pytest.mark.parametrize("width", [1, 4])
@pytest.mark.parametrize("op", ["min", "max"])
def test_min_max_follow_eigen_in_index_order(op, width, dtype):
    """A NaN update never wins, a NaN already there stays, and of 0.0 and -0.0 the one
    that came first stays: the same as the reference's select, one update at a time."""
    rng = np.random.default_rng(width)
    n, slices = 1500, 9
    out = _values(dtype, slices * width, rng).reshape(slices, width)
    rows = _values(dtype, n * width, rng).reshape(n, width)
    offsets = rng.integers(0, slices, n).astype(np.int64)
    got = out.copy()
    scatter_into(got, offsets, rows, op)
    _assert_bitwise(got, _in_order(op, out, offsets, rows))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("op", ["min", "max"])
def test_min_max_signed_zeros_and_nans(op, dtype):
    z, nan = dtype(0.0), dtype(np.nan)
    out = np.array([z, -z, nan, 1, -z], dtype)[:, None]
    offsets = np.array([0, 0, 1, 1, 2, 2, 3, 4, 4], np.int64)
    rows = np.array([-z, -z, z, z, 5, -5, nan, z, -z], dtype)[:, None]
    got = out.copy()
    scatter_into(got, offsets, rows, op)
    # 0.0 stays 0.0 and -0.0 stays -0.0 (ties keep what was first), NaN there stays, a NaN
    # update is ignored, and the -0.0 at slot 4 meets only equal values
    assert np.signbit(got[:, 0]).tolist() == [False, True, False, False, True]
    assert np.isnan(got[2, 0]) and got[3, 0] == 1
    _assert_bitwise(got, _in_order(op, out, offsets, rows))


# -- update -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("width", [1, 3, 4])
def test_update_last_write_wins(width, dtype):
    """Assignment moves bits (rows as unsigned words: 3 x 1 byte, 4 x 8 bytes, ...), so
    NaN payloads and signed zeros come through; the last of duplicates wins."""
    rng = np.random.default_rng(width)
    out = _values(dtype, 10 * width, rng).reshape(10, width)
    rows = _values(dtype, 500 * width, rng).reshape(500, width)
    offsets = rng.integers(0, 10, 500).astype(np.int64)
    got = out.copy()
    scatter_into(got, offsets, rows, "update")
    _assert_bitwise(got, _in_order("update", out, offsets, rows))


# -- gather --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [d for d in ALL_DTYPES if d is not object])
@pytest.mark.parametrize("width", [1, 3, 4])
def test_gather_rows_with_ignored_offsets(width, dtype):
    rng = np.random.default_rng(width)
    source = _values(dtype, 50 * width, rng).reshape(50, width)
    offsets = rng.integers(-1, 50, 400).astype(np.int64)  # -1: zeros (IGNORE)
    expected = np.where((offsets < 0)[:, None], np.zeros((), dtype), source[offsets])
    got = np.empty((400, width), dtype)
    scatter_loops.gather(got, source, offsets, skipped=True)
    _assert_bitwise(got, expected)
    got = np.empty((400, width), dtype)
    scatter_loops.gather(got, source, np.abs(offsets))  # single words: the loop; else take
    _assert_bitwise(got, source[np.abs(offsets)])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("policy", ["", "IGNORE"])
def test_gather_nd_graph_over_dtypes(scope, run, dtype, policy):
    rng = np.random.default_rng(0)
    params = _values(dtype, 4 * 5 * 2, rng).reshape(4, 5, 2)
    indices = np.array([[[1, 2], [3, 4]], [[0, 0], [3, 1]]], np.int32)
    if policy:
        indices[1, 0] = [9, 0]
    out = run(scope.gather_nd(params, indices, bad_indices_policy=policy))
    _assert_bitwise(out, ref_scatter.gather_nd(params, indices, 0, policy))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("op", ["update", "add", "sub", "min", "max"])
def test_tensor_scatter_graph_over_dtypes(scope, run, op, dtype):
    if (op != "update" and dtype in (np.bool_, object)) or \
            (op in ("min", "max") and np.dtype(dtype).kind == "c"):
        pytest.skip("no kernel for this dtype")
    rng = np.random.default_rng(3)
    tensor = _values(dtype, 6 * 2, rng).reshape(6, 2)
    indices = rng.integers(0, 6, (40, 1))
    updates = _values(dtype, 40 * 2, rng).reshape(40, 2)
    out = run(getattr(scope, f"tensor_scatter_{op}")(tensor, indices, updates))
    with np.errstate(all="ignore"):
        expected = ref_scatter.scatter(tensor, indices, updates, op)
    _assert_bitwise(out, expected, nan_payloads=False)


# -- big calls -------------------------------------------------------------------------------
def test_big_gathers_on_the_pool_are_exact():
    """Gathers past the threshold split by rows over the real pool (two threads on a
    2-core machine), through the loop and through np.take."""
    rng = np.random.default_rng(6)
    n, m = 1 << 20, 1 << 19
    offsets = rng.integers(0, n // 4, m).astype(np.int64)
    for width in (1, 16):  # the loop, np.take
        source = rng.standard_normal((n // 8, width)).astype(np.float32)
        gathered = np.empty((m, width), np.float32)
        scatter_loops.gather(gathered, source, offsets % (n // 8))
        _assert_bitwise(gathered, source[offsets % (n // 8)])


# -- compiles and errors ------------------------------------------------------------------------
def test_read_only_and_writeable_inputs_share_one_compile():
    """Inputs always reach the loops read-only, so a feed (read-only) and a computed value
    (writeable) of the same dtype use one compiled signature."""
    out = np.zeros((4, 1), np.int16)
    rows = np.ones((3, 1), np.int16)
    offsets = np.array([0, 1, 1], np.int64)
    scatter_into(out, offsets, rows, "add")
    before = len(scatter_loops._add_rows.signatures)
    rows.flags.writeable = False
    offsets.flags.writeable = False
    scatter_into(out, offsets, rows, "add")
    assert len(scatter_loops._add_rows.signatures) == before
    assert out[:, 0].tolist() == [2, 4, 0, 0]


@pytest.mark.parametrize("op", ["update", "add", "sub", "min", "max"])
def test_a_bad_index_writes_nothing(scope, monkeypatch, op):
    """Every index is validated before the first write: the loops never run, and the
    input, which the kernel may write into when it is forwarded, is unchanged."""
    calls = []
    monkeypatch.setattr(scatter_loops, "scatter", lambda *a, **k: calls.append(a))
    x = scope.placeholder(gf.float32, shape=[6])
    tensor = scope.add(x, np.float32(0))  # computed in the graph: its buffer is forwardable
    indices = np.array([[1], [2], [0], [6]])  # the last one is out of bounds
    out = getattr(scope, f"tensor_scatter_{op}")(tensor, indices, np.ones(4, np.float32))
    nd = scope.scatter_nd(indices, np.ones(4, np.float32), [6])
    feed = np.arange(6, dtype=np.float32)
    with gf.Session(scope.graph) as sess:
        for fetch in (out, nd):
            with pytest.raises(InvalidArgumentError, match=r"indices\[3\] = \[6\] does not index"):
                sess.run(fetch, {x: feed})
    assert calls == [] and feed.tolist() == list(range(6))


def test_float16_sums_stay_on_numpy():
    """numba has no float16 arithmetic: sums and min/max take numpy's ufunc.at, assignment
    and gathers (bit moves) the compiled loops."""
    assert not scatter_loops.can_combine("add", np.float16)
    assert not scatter_loops.can_combine("max", np.float16)
    assert scatter_loops.can_combine("update", np.float16)
    assert not scatter_loops.can_combine("min", np.complex64)
    assert not scatter_loops.can_combine("update", object)
    assert cpu_index.scatter_loops is scatter_loops


# -- locate ------------------------------------------------------------------------------------
@pytest.mark.parametrize("index_type", [np.int16, np.int32, np.int64])
@pytest.mark.parametrize("depth", [0, 1, 2, 3])
def test_locate_against_ravel_multi_index(index_type, depth):
    """Depth 1 checks with numpy, other depths in one compiled pass: the same offsets,
    the same kept tuples, the last bad position reported."""
    rng = np.random.default_rng(depth)
    dims = [5, 7, 3][:depth]
    tuples = np.stack([rng.integers(-2, d + 2, 200) for d in dims], axis=1) if depth else \
        np.zeros((200, 0), np.int64)
    tuples = tuples.astype(index_type)
    good = np.all((tuples >= 0) & (tuples < np.array(dims, np.int64)), axis=1)
    expected = np.ravel_multi_index(tuples[good].T, dims) if depth else np.zeros(200, np.int64)
    offsets, keep = cpu_index.locate(tuples, dims, "IGNORE", str)
    assert offsets.dtype == np.int64 and offsets.tolist() == expected.tolist()
    assert (keep is None) == bool(good.all()) and (keep is None or keep.tolist() == good.tolist())
    if not good.all():
        with pytest.raises(InvalidArgumentError, match=f"^{np.flatnonzero(~good)[-1]}$"):
            cpu_index.locate(tuples, dims, "ERROR", str)
    offsets, keep = cpu_index.locate(tuples[good], dims, "", str)
    assert keep is None and offsets.tolist() == expected.tolist()


@pytest.mark.parametrize("op", ["update", "add", "sub"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.complex64, np.uint8])
def test_the_numpy_path_before_the_loop_compiles_gives_the_loops_bits(op, dtype, monkeypatch):
    """Until its loop is compiled (tiered compilation), ``scatter`` assigns the last of
    duplicate offsets and adds in index order with numpy: the loop's bits, NaN and
    signed zeros included."""
    from graphflow.ops import scatter_loops
    rng = np.random.default_rng(7)
    rows = (rng.normal(size=(40, 3)) * 100).astype(dtype)
    if np.dtype(dtype).kind in "fc":
        rows[[3, 9]] = np.nan
        rows[5] = -0.0
    offsets = rng.integers(0, 6, 40)
    start = (np.arange(18) % 7).astype(dtype).reshape(6, 3)
    compiled = start.copy()
    scatter_loops.scatter(compiled, offsets, rows, op)
    for loop in ("_ASSIGN", "_ADD"):  # neither loop is ready: the numpy path runs
        monkeypatch.setattr(scatter_loops, loop, NeverReady(getattr(scatter_loops, loop).fn))
    by_numpy = start.copy()
    scatter_loops.scatter(by_numpy, offsets, rows, op)
    assert by_numpy.tobytes() == compiled.tobytes()


@settings(max_examples=60, deadline=None)
@given(offsets=st.lists(st.integers(-1, 7), max_size=40))
def test_the_last_writers_before_the_loop_compiles_are_the_loops(offsets):
    """Until its loop is compiled, ``last_writers`` finds each slot's last writer with a
    sort: the loop's answer, skipped (-1) updates never winning."""
    from graphflow.ops import scatter_loops
    offsets = np.array(offsets, np.int64)
    compiled = scatter_loops.last_writers(offsets, 8)
    loop = scatter_loops._LAST_WRITERS
    try:
        scatter_loops._LAST_WRITERS = NeverReady(loop.fn)
        by_numpy = scatter_loops.last_writers(offsets, 8)
    finally:
        scatter_loops._LAST_WRITERS = loop
    expected = [o >= 0 and o not in offsets[k + 1:] for k, o in enumerate(offsets)]
    assert by_numpy.tolist() == compiled.tolist() == expected
