"""The intra-op gathers (ops/parallel_gather.py): GatherNd, GatherV2 and ResourceGather
split over threads above the size threshold give the bits of a plain numpy reference,
and of the one-thread path, for dtypes, depths 1-3, batch_dims, IGNORE, empty inputs;
a bad index is the same error, in the same words, on both paths, on the first call of
a Session and on its third (specialized plans)."""
import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import InvalidArgumentError
from graphflow.ops import intra_op, parallel_gather

DTYPES = [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64,
          np.uint8, np.uint16, np.uint32, np.uint64, np.bool_, np.complex64, np.complex128]


@pytest.fixture(params=["small", "split"])
def path(request, monkeypatch):
    """"small": the one-call path below the threshold; "split": the threshold so low
    that every gather splits over the threads (4 of them, as on a 4-core machine). The
    fixture's value counts the gathers that split (checked where one must have)."""
    splits = []
    if request.param == "split":
        monkeypatch.setattr(parallel_gather, "PARALLEL_WORK", 1)
        monkeypatch.setattr(parallel_gather, "WORK_PER_THREAD", 1)
        monkeypatch.setattr(parallel_gather, "WORK_PER_CHUNK", 2000)  # chunks taken in turn
        monkeypatch.setattr(parallel_gather, "BLOCK_ROWS", 7)  # blocks of offsets
        monkeypatch.setattr(intra_op, "_CORES", max(4, intra_op._CORES))
        run_split = parallel_gather.run_split

        def counted(fn, n, parts, chunks=None):
            splits.append(parts)
            return run_split(fn, n, parts, chunks)
        monkeypatch.setattr(parallel_gather, "run_split", counted)
    yield splits
    if request.param == "split":
        assert any(parts > 1 for parts in splits), "no gather split over the threads"
    if request.param == "small":
        assert not splits


def _values(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    values = rng.standard_normal(shape) * 100
    if dtype.kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    values = values.astype(dtype)
    if values.size > 2 and dtype.kind == "f":  # NaN payloads and signed zeros move as bits
        flat = values.reshape(-1)
        flat[0], flat[1] = -0.0, np.nan
    return values


def _bitwise(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype == object:
        assert got.tolist() == want.tolist()
    else:
        assert got.tobytes() == want.tobytes()


def _calls(fetch, feeds, config=None, times=3):
    """The results of ``times`` runs of one Session (the later ones on specialized plans)."""
    with gf.Session(fetch.graph, config) as sess:
        return [sess.run(fetch, feeds) for _ in range(times)]


def _error(fetch, feeds, config=None, times=3) -> list[str]:
    """The message of each of ``times`` failing runs of one Session."""
    messages = []
    with gf.Session(fetch.graph, config) as sess:
        for _ in range(times):
            with pytest.raises(InvalidArgumentError) as e:
                sess.run(fetch, feeds)
            messages.append(str(e.value))
    return messages


ONE_THREAD = gf.SessionConfig(intra_op_threads=1)
CONFIGS = [None, ONE_THREAD, gf.SessionConfig(inter_op_threads=1, intra_op_threads=3)]


# -- GatherNd ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("static", [True, False])
def test_gather_nd_is_numpy_bit_for_bit(path, dtype, depth, static):
    rng = np.random.default_rng(depth)
    params = _values(rng, (7, 5, 3, 4), dtype)
    indices = np.stack([rng.integers(0, d, 301) for d in params.shape[:depth]], 1)
    want = params[tuple(indices.T)]
    s = gf.Scope(gf.Graph())
    pp = s.placeholder(gf.as_dtype(dtype), shape=params.shape if static else None)
    pi = s.placeholder(gf.int64, shape=indices.shape if static else None)
    out = s.gather_nd(pp, pi)
    for config in CONFIGS:
        for got in _calls(out, {pp: params, pi: indices}, config):
            _bitwise(got, want)


@pytest.mark.parametrize("index_dtype", [np.int16, np.int32, np.int64])
def test_gather_nd_index_dtypes_and_shapes(path, index_dtype):
    rng = np.random.default_rng(3)
    params = _values(rng, (40, 6, 2), np.float32)
    indices = np.stack([rng.integers(0, 40, (3, 50)), rng.integers(0, 6, (3, 50))],
                       -1).astype(index_dtype)
    want = params[indices[..., 0], indices[..., 1]]
    s = gf.Scope(gf.Graph())
    pp = s.placeholder(gf.float32)
    pi = s.placeholder(gf.as_dtype(index_dtype))
    for got in _calls(s.gather_nd(pp, pi), {pp: params, pi: indices}):
        _bitwise(got, want)


def test_gather_nd_constant_indices(path):
    rng = np.random.default_rng(4)
    params = _values(rng, (300, 9), np.float64)
    indices = rng.integers(0, 300, (500, 1))
    s = gf.Scope(gf.Graph())
    pp = s.placeholder(gf.float64, shape=params.shape)
    out = s.gather_nd(pp, indices)
    for config in CONFIGS:
        for got in _calls(out, {pp: params}, config):
            _bitwise(got, params[indices[:, 0]])


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.complex128])
def test_gather_nd_batch_dims(path, dtype):
    rng = np.random.default_rng(5)
    params = _values(rng, (4, 30, 6, 5), dtype)
    indices = np.stack([rng.integers(0, 30, (4, 70)), rng.integers(0, 6, (4, 70))], -1)
    want = np.stack([params[b][tuple(indices[b].reshape(-1, 2).T)] for b in range(4)])
    s = gf.Scope(gf.Graph())
    pp = s.placeholder(gf.as_dtype(dtype))
    pi = s.placeholder(gf.int64)
    out = s.gather_nd(pp, pi, batch_dims=1)
    for config in (None, ONE_THREAD):
        for got in _calls(out, {pp: params, pi: indices}, config):
            _bitwise(got, want)


@pytest.mark.parametrize("depth", [1, 2])
@pytest.mark.parametrize("inner", [(1,), (7,), ()])  # one-word rows at depth 1 and 2
def test_gather_nd_ignore_gives_zero_rows(path, depth, inner):
    rng = np.random.default_rng(6)
    params = _values(rng, (50, 4) + inner if depth == 2 or inner else (50, 1), np.float32)
    indices = np.stack([rng.integers(-3, 53, 400), rng.integers(-1, 5, 400)], 1)[:, :depth]
    good = np.all((indices >= 0) & (indices < np.array(params.shape[:depth])), axis=1)
    want = np.zeros((400,) + params.shape[depth:], np.float32)
    want[good] = params[tuple(indices[good].T)]
    s = gf.Scope(gf.Graph())
    pp = s.placeholder(gf.float32)
    pi = s.placeholder(gf.int64)
    out = s.gather_nd(pp, pi, bad_indices_policy="IGNORE")
    for config in (None, ONE_THREAD):
        for got in _calls(out, {pp: params, pi: indices}, config):
            _bitwise(got, want)


def test_gather_nd_strings_and_empty(path):
    params = np.array([b"a", b"bc", b"", b"d"], dtype=object).reshape(2, 2)
    s = gf.Scope(gf.Graph())
    out = s.gather_nd(params, np.array([[1], [0], [1]] * 20))
    for got in _calls(out, {}):
        _bitwise(got, params[[1, 0, 1] * 20])
    pp = s.placeholder(gf.float32)
    pi = s.placeholder(gf.int64)
    empty = s.gather_nd(pp, pi)
    for got in _calls(empty, {pp: np.ones((3, 4), np.float32), pi: np.zeros((0, 1), np.int64)}):
        _bitwise(got, np.zeros((0, 4), np.float32))
    with pytest.raises(InvalidArgumentError, match="params is empty"):  # as TensorFlow
        _calls(empty, {pp: np.ones((3, 0), np.float32), pi: np.ones((5, 1), np.int64)})
    for got in _calls(empty, {pp: np.arange(12.0, dtype=np.float32).reshape(3, 4),
                              pi: np.array([[2], [0]] * 30)}):  # beside them, a real one
        _bitwise(got, np.arange(12.0, dtype=np.float32).reshape(3, 4)[[2, 0] * 30])


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("static", [True, False])
def test_gather_nd_bad_index_same_error_on_both_paths(path, monkeypatch, depth, static):
    rng = np.random.default_rng(7)
    params = _values(rng, (20, 6, 3, 2), np.float32)
    indices = np.stack([rng.integers(0, d, 500) for d in params.shape[:depth]], 1)
    indices[100, depth - 1] = -1          # a negative index
    indices[321, 0] = params.shape[0]     # past the end: the last bad one is reported
    s = gf.Scope(gf.Graph())
    pp = s.placeholder(gf.float32, shape=params.shape if static else None)
    pi = s.placeholder(gf.int64, shape=indices.shape if static else None)
    out = s.gather_nd(pp, pi, name="the_gather")
    feeds = {pp: params, pi: indices}
    messages = [m for config in CONFIGS for m in _error(out, feeds, config)]
    bad = ", ".join(str(v) for v in indices[321])
    assert messages[0].startswith(f"indices[321] = [{bad}] does not index into param shape "
                                  f"[20,6,3,2], node name: the_gather")
    with monkeypatch.context() as m:  # the reference: the path below the threshold
        m.setattr(parallel_gather, "PARALLEL_WORK", 1 << 62)
        reference = _error(out, feeds)
    assert set(messages) == {reference[0]}


# -- GatherV2 ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index_shape", [(333,), (3, 111)])
def test_gather_v2_is_numpy_bit_for_bit(path, dtype, index_shape):
    rng = np.random.default_rng(8)
    params = _values(rng, (60, 3, 5), dtype)
    indices = rng.integers(0, 60, index_shape).astype(np.int32)
    s = gf.Scope(gf.Graph())
    pp = s.placeholder(gf.as_dtype(dtype))
    pi = s.placeholder(gf.int32)
    out = s.gather(pp, pi, 0)
    for config in (None, ONE_THREAD):
        for got in _calls(out, {pp: params, pi: indices}, config):
            _bitwise(got, np.take(params, indices, axis=0))


def test_gather_v2_other_axes_batch_dims_and_empty(path):
    rng = np.random.default_rng(9)
    params = _values(rng, (4, 30, 5), np.float64)
    indices = rng.integers(0, 30, (4, 20))
    s = gf.Scope(gf.Graph())
    pp = s.placeholder(gf.float64)
    pi = s.placeholder(gf.int64)
    for got in _calls(s.gather(pp, pi, 1), {pp: params, pi: indices}):
        _bitwise(got, np.take(params, indices, axis=1))
    for got in _calls(s.gather(pp, pi, 1, batch_dims=1), {pp: params, pi: indices}):
        _bitwise(got, np.stack([params[b][indices[b]] for b in range(4)]))
    for got in _calls(s.gather(pp, pi, 0), {pp: params, pi: np.zeros((0, 2), np.int64)}):
        _bitwise(got, np.zeros((0, 2, 30, 5)))
    for got in _calls(s.gather(pp, pi, -3), {pp: params, pi: indices % 4}):  # axis -3 is 0
        _bitwise(got, np.take(params, indices % 4, axis=0))


@pytest.mark.parametrize("bad", [-1, 60])
def test_gather_v2_bad_index_same_error_on_both_paths(path, monkeypatch, bad):
    rng = np.random.default_rng(10)
    params = _values(rng, (60, 8), np.float32)
    indices = rng.integers(0, 60, (5, 100))
    indices[2, 17] = bad
    indices[4, 3] = 99  # a later bad one: the first is reported
    s = gf.Scope(gf.Graph())
    pp = s.placeholder(gf.float32)
    pi = s.placeholder(gf.int64)
    out = s.gather(pp, pi, 0)
    feeds = {pp: params, pi: indices}
    messages = [m for config in CONFIGS for m in _error(out, feeds, config)]
    assert messages[0].startswith(f"indices[2,17] = {bad} is not in [0, 60)")
    with monkeypatch.context() as m:
        m.setattr(parallel_gather, "PARALLEL_WORK", 1 << 62)
        reference = _error(out, feeds)
    assert set(messages) == {reference[0]}


# -- ResourceGather -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float16, np.bool_])
def test_resource_gather_is_numpy_bit_for_bit(path, dtype):
    rng = np.random.default_rng(11)
    table = _values(rng, (80, 6), dtype)
    ids = rng.integers(0, 80, (4, 75)).astype(np.int32)
    s = gf.Scope(gf.Graph())
    v = s.variable(table, name="table")
    pi = s.placeholder(gf.int32, shape=ids.shape)
    out = v.sparse_read(pi)
    for config in (None, ONE_THREAD):
        with gf.Session(s.graph, config) as sess:
            sess.run(gf.global_variables_initializer(s.graph))
            for _ in range(3):
                _bitwise(sess.run(out, {pi: ids}), table[ids])
            ids[1, 2] = 80
            for _ in range(3):
                with pytest.raises(InvalidArgumentError, match=r"indices\[77\] = 80 is not in "
                                                                r"\[0, 80\)"):
                    sess.run(out, {pi: ids})
            ids[1, 2] = 0


# -- the threads ---------------------------------------------------------------------------------
def test_threads_follow_the_intra_op_rule():
    class Ctx:
        config = None
    cores = intra_op._CORES
    assert intra_op.kernel_threads(Ctx) == cores  # build-time evaluation: one kernel at a time
    Ctx.config = gf.SessionConfig(intra_op_threads=1)
    assert intra_op.kernel_threads(Ctx) == 1
    Ctx.config = gf.SessionConfig(inter_op_threads=2)  # a serial run (the calling thread)
    assert intra_op.kernel_threads(Ctx) == cores
    rows = -(-parallel_gather.PARALLEL_WORK // (parallel_gather.ROW_COST_BYTES + 4))
    assert parallel_gather.parts_for(rows - 1, 4 * (rows - 1), 8) == 1  # below: one thread
    assert parallel_gather.parts_for(rows, 4 * rows, 8) >= 2
    assert parallel_gather.parts_for(1 << 30, 1 << 40, 1) == 1
    assert parallel_gather.parts_for(1 << 30, 1 << 40, 3) == 3


def test_a_big_gather_on_the_threads_is_exact():
    """A real size above the threshold, no patching: GatherNd depth 1 and 2, GatherV2."""
    rng = np.random.default_rng(12)
    rows = parallel_gather.PARALLEL_WORK // (16 * 4) + 1000
    params = rng.standard_normal((rows // 4, 16)).astype(np.float32)
    ids = rng.integers(0, len(params), rows)
    s = gf.Scope(gf.Graph())
    pp = s.placeholder(gf.float32, shape=params.shape)
    pi = s.placeholder(gf.int64, shape=(rows, 1))
    pv = s.placeholder(gf.int64, shape=(rows,))
    p2 = s.placeholder(gf.float32, shape=(rows // 4, 4, 4))
    i2 = s.placeholder(gf.int64, shape=(rows, 2))
    tuples = np.stack([ids, rng.integers(0, 4, rows)], 1)
    fetches = [s.gather_nd(pp, pi), s.gather(pp, pv, 0), s.gather_nd(p2, i2)]
    feeds = {pp: params, pi: ids[:, None], pv: ids, p2: params.reshape(-1, 4, 4), i2: tuples}
    for config in (None, ONE_THREAD):
        with gf.Session(s.graph, config) as sess:
            for _ in range(3):
                a, b, c = sess.run(fetches, feeds)
                _bitwise(a, params[ids])
                _bitwise(b, params[ids])
                _bitwise(c, params.reshape(-1, 4, 4)[ids, tuples[:, 1]])


def test_run_split_chunks_in_order_and_errors():
    seen = []

    def part(lo, hi):
        seen.append((lo, hi))
        return hi - lo
    assert intra_op.run_split(part, 10, 1, 5) == [10]  # one thread: one call
    assert sorted(seen) == [(0, 10)]
    seen.clear()
    assert intra_op.run_split(part, 10, 2, 4) == [2, 3, 2, 3]  # chunk k's result at k
    assert sorted(seen) == [(0, 2), (2, 5), (5, 7), (7, 10)]

    def fails(lo, hi):
        if lo >= 5:
            raise ValueError(f"chunk at {lo}")
        return lo
    with pytest.raises(ValueError, match="chunk at"):
        intra_op.run_split(fails, 10, 2, 4)


def test_under_tiered_compilation_results_are_the_same(monkeypatch):
    """With tiered compilation on (ops/tiering.py) a loop not compiled yet is not
    compiled in the call: the gather takes the one-thread path until it is."""
    monkeypatch.setenv("GRAPHFLOW_TIERED", "1")
    monkeypatch.setattr(parallel_gather, "PARALLEL_WORK", 1)
    monkeypatch.setattr(parallel_gather, "WORK_PER_THREAD", 1)
    rng = np.random.default_rng(13)
    params = _values(rng, (90, 3), np.uint16)
    indices = rng.integers(0, 90, (400, 1)).astype(np.int16)
    s = gf.Scope(gf.Graph())
    pp = s.placeholder(gf.uint16)
    pi = s.placeholder(gf.int16)
    for got in _calls(s.gather_nd(pp, pi), {pp: params, pi: indices}, times=4):
        _bitwise(got, params[indices[:, 0]])
