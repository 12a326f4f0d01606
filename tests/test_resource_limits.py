"""Resource limits: an output that cannot be allocated fails before anything is
allocated, with ResourceExhaustedError naming the node and the size; a MemoryError
inside any kernel becomes ResourceExhaustedError; the session stays usable. The limit
holds for every op's outputs, also a user op's and one of unknown size.

The sizes come from values (a shape tensor, an index, a broadcast), so only a
run-time check can catch them: without one numpy would try (and, under Linux
overcommit, often succeed) to reserve terabytes.
"""
import tracemalloc

import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import ResourceExhaustedError

from support import probe_ops, user_ops  # noqa: F401 - they register the test ops used here

MB = 1 << 20
HUGE = 10 ** 12


def _bcast(shape, dtype=np.float64):
    """A read-only array of ``shape`` that owns 8 bytes: a huge input made cheaply."""
    return np.broadcast_to(np.ones(1, dtype), shape)


# Each case: (name, build(scope) -> (fetch, feed_dict), elements the node asks for).
def _scatter_nd(shape):
    def build(s):
        sh = s.placeholder(gf.int64, shape=[len(shape)])
        idx = np.zeros((1, len(shape)), np.int64)
        return s.scatter_nd(idx, np.array([1.0]), sh), {sh: np.array(shape, np.int64)}
    return build


def _fill(dims, index_type=np.int64):
    def build(s):
        d = s.placeholder(gf.as_dtype(index_type), shape=[len(dims)])
        return s.fill(d, 1.0), {d: np.array(dims, index_type)}
    return build


def _dynamic_stitch(index, slice_len, parallel=False):
    def build(s):
        i = s.placeholder(gf.int32, shape=[1])
        d = s.placeholder(gf.float64, shape=[1, None])
        stitch = s.parallel_dynamic_stitch if parallel else s.dynamic_stitch
        return stitch([i], [d]), {i: np.array([index], np.int32), d: _bcast((1, slice_len))}
    return build


def _gather_nd(rows, cols):
    def build(s):
        p = s.placeholder(gf.float64, shape=[None, None])
        i = s.placeholder(gf.int64, shape=[None, 1])
        return s.gather_nd(p, i), {p: _bcast((2, cols)), i: np.zeros((rows, 1), np.int64)}
    return build


def _dynamic_partition(n):
    def build(s):
        d = s.placeholder(gf.float64, shape=[None])
        p = s.placeholder(gf.int32, shape=[None])
        return s.dynamic_partition(d, p, num_partitions=2)[0], {d: _bcast((n,)),
                                                                p: np.zeros(n, np.int32)}
    return build


def _tensor_scatter(op, n):
    def build(s):
        t = s.placeholder(gf.float64, shape=[None])
        return getattr(s, op)(t, [[0]], [2.0]), {t: _bcast((n,))}
    return build


def _like(op, n):
    def build(s):
        x = s.placeholder(gf.float64, shape=[None, None])
        return getattr(s, op)(x), {x: _bcast((n, n))}
    return build


def _broadcast_add(n):
    def build(s):
        x = s.placeholder(gf.float64, shape=[None, 1])
        y = s.placeholder(gf.float64, shape=[1, None])
        return s.add(x, y), {x: _bcast((n, 1)), y: _bcast((1, n))}
    return build


def _select(n):
    def build(s):
        c = s.placeholder(gf.bool, shape=[None, 1])
        t = s.placeholder(gf.float64, shape=[1, None])
        return s.select_v2(c, t, 0.0), {c: _bcast((n, 1), np.bool_), t: _bcast((1, n))}
    return build


def _range(n):
    def build(s):
        limit = s.placeholder(gf.int64, shape=[])
        return s.range(np.int64(0), limit, np.int64(1)), {limit: np.int64(n)}
    return build


# Outputs of 10**12 elements and more: past any machine's memory.
HUGE_CASES = [
    ("ScatterNd", _scatter_nd([HUGE]), HUGE),
    ("ScatterNd", _scatter_nd([10 ** 6, 10 ** 6]), HUGE),
    ("DynamicStitch", _dynamic_stitch(10 ** 6 - 1, 10 ** 6), HUGE),
    ("DynamicStitch", _dynamic_stitch(2 ** 31 - 1, 1000), 2 ** 31 * 1000),
    ("ParallelDynamicStitch", _dynamic_stitch(2 ** 31 - 1, 1000, parallel=True), 2 ** 31 * 1000),
    ("GatherNd", _gather_nd(10 ** 6, 10 ** 6), HUGE),
    ("Fill", _fill([10 ** 6, 10 ** 6]), HUGE),
    ("ZerosLike", _like("zeros_like", 10 ** 6), HUGE),
    ("OnesLike", _like("ones_like", 10 ** 6), HUGE),
    ("Add", _broadcast_add(10 ** 6), HUGE),
    ("SelectV2", _select(10 ** 6), HUGE),
    ("Range", _range(HUGE), HUGE),
]

# Shapes whose element count overflows an int64 product (it wraps to 0 or a small number).
OVERFLOW_CASES = [
    ("ScatterNd", _scatter_nd([2 ** 40] * 3), 2 ** 120),
    ("ScatterNd", _scatter_nd([2 ** 32, 2 ** 32]), 2 ** 64),
    ("Fill", _fill([2 ** 40] * 3), 2 ** 120),
    ("Fill", _fill([2 ** 30] * 3, np.int32), 2 ** 90),
    ("Fill", _fill([2 ** 32, 2 ** 32]), 2 ** 64),
]

# Outputs of 2-8 MB: fine by default, too big under a 1 MB limit.
SMALL_LIMIT_CASES = [
    ("ScatterNd", _scatter_nd([10 ** 6]), 10 ** 6),
    ("DynamicStitch", _dynamic_stitch(0, 300_000), 300_000),
    ("ParallelDynamicStitch", _dynamic_stitch(0, 300_000, parallel=True), 300_000),
    ("GatherNd", _gather_nd(300_000, 1), 300_000),
    ("DynamicPartition", _dynamic_partition(300_000), 300_000),
    ("Fill", _fill([1000, 300]), 300_000),
    ("ZerosLike", _like("zeros_like", 600), 360_000),
    ("OnesLike", _like("ones_like", 600), 360_000),
    ("Add", _broadcast_add(600), 360_000),
    ("Range", _range(300_000), 300_000),
] + [(op, _tensor_scatter(name, 300_000), 300_000) for op, name in [
    ("TensorScatterUpdate", "tensor_scatter_update"), ("TensorScatterAdd", "tensor_scatter_add"),
    ("TensorScatterSub", "tensor_scatter_sub"), ("TensorScatterMin", "tensor_scatter_min"),
    ("TensorScatterMax", "tensor_scatter_max")]]


def _ids(cases):
    return [f"{name}-{elements}" for name, _, elements in cases]


def _expect_oom(build, op_type, elements, limit=None):
    """Run the case; it must fail with ResourceExhaustedError naming the node and the
    size, allocate less than 1 MB meanwhile, and leave the session usable."""
    scope = gf.Scope(gf.Graph())
    fetch, feed = build(scope)
    ok = scope.add(scope.constant([1.0, 2.0]), 1.0)
    config = gf.SessionConfig(memory_limit_bytes=limit) if limit else None
    with gf.Session(scope.graph, config) as sess:
        # a first run compiles the plan's kernels (numba's compiler allocates in Python);
        # the traced second run shows what failing costs
        with pytest.raises(ResourceExhaustedError):
            sess.run(fetch, feed)
        tracemalloc.start()
        try:
            with pytest.raises(ResourceExhaustedError) as info:
                sess.run(fetch, feed)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        err = info.value
        assert err.op_type == op_type and err.node_name == fetch.op.name
        assert f"OOM when allocating tensor with {elements} elements" in str(err)
        assert f"[node {fetch.op.name}]" in str(err)
        assert peak < MB, f"{peak} bytes allocated before failing"
        assert sess.run(ok).tolist() == [2.0, 3.0]  # the session is still usable
    return err


@pytest.mark.parametrize("op_type,build,elements", HUGE_CASES, ids=_ids(HUGE_CASES))
def test_huge_output_fails_before_allocating(op_type, build, elements):
    _expect_oom(build, op_type, elements)


@pytest.mark.parametrize("op_type,build,elements", OVERFLOW_CASES, ids=_ids(OVERFLOW_CASES))
def test_shape_overflowing_int64_fails_before_allocating(op_type, build, elements):
    _expect_oom(build, op_type, elements)
    _expect_oom(build, op_type, elements, limit=MB)


@pytest.mark.parametrize("op_type,build,elements", SMALL_LIMIT_CASES,
                         ids=_ids(SMALL_LIMIT_CASES))
def test_memory_limit_is_configurable(op_type, build, elements):
    err = _expect_oom(build, op_type, elements, limit=MB)
    assert f"memory limit {MB} bytes" in str(err)
    scope = gf.Scope(gf.Graph())
    fetch, feed = build(scope)
    with gf.Session(scope.graph, gf.SessionConfig(memory_limit_bytes=64 * MB)) as sess:
        assert sess.run(fetch, feed).size == elements  # the same node fits a larger limit


def test_output_at_the_limit_is_allowed(scope):
    out = scope.fill(scope.placeholder(gf.int64, shape=[1], name="d"), 1.0)  # float32
    with gf.Session(scope.graph, gf.SessionConfig(memory_limit_bytes=4000)) as sess:
        assert sess.run(out, {"d:0": [1000]}).size == 1000
        with pytest.raises(ResourceExhaustedError, match="1001 elements"):
            sess.run(out, {"d:0": [1001]})


@pytest.mark.parametrize("threads", [1, 2])
def test_memory_error_in_a_kernel_becomes_resource_exhausted(scope, threads):
    n = 1 << 17  # heavy enough for the parallel executor
    x = scope.placeholder(gf.float64, shape=[n])
    bad = scope.reliability_probe(x, fail="MemoryError", name="alloc")
    other = scope.reliability_probe(x, 0.01, name="other")
    out = scope.add(bad, other)
    with gf.Session(scope.graph, gf.SessionConfig(inter_op_threads=threads)) as sess:
        assert sess._plan([out], [x]).parallel == (threads > 1)
        with pytest.raises(ResourceExhaustedError) as info:
            sess.run(out, {x: np.full(n, -1.0)})
        err = info.value
        assert err.node_name == "alloc" and err.op_type == "ReliabilityProbe"
        assert "probe could not allocate [node alloc]" in str(err)
        assert isinstance(err.__cause__, MemoryError)
        np.testing.assert_array_equal(sess.run(out, {x: np.ones(n)}), np.full(n, 2.0))


def test_numpy_allocation_failure_becomes_resource_exhausted(scope):
    """numpy's own MemoryError (an allocation the OS refuses) is reported the same way."""
    n = scope.placeholder(gf.int64, shape=[])
    out = scope.reliability_alloc(n, name="raw")
    with gf.Session(scope.graph) as sess:
        with pytest.raises(ResourceExhaustedError, match=r"OOM while running the kernel: "
                           r"Unable to allocate .* \[node raw\]"):
            sess.run(out, {n: np.int64(2 ** 50)})  # 8 PiB: refused by any OS
        with pytest.raises(ResourceExhaustedError, match=r"array is too big.* \[node raw\]"):
            sess.run(out, {n: np.int64(2 ** 62)})  # past an int64 byte count: numpy refuses
        assert sess.run(out, {n: np.int64(3)}).shape == (3,)


@pytest.mark.parametrize("field, value", [("memory_limit_bytes", -1), ("inter_op_threads", 0)])
def test_session_config_rejects_negative_limits(field, value):
    with pytest.raises(gf.errors.InvalidArgumentError, match=f"{field} must be >= "):
        gf.SessionConfig(**{field: value})


# -- the memory limit holds for every op's outputs -----------------------------------------------
LIMIT = 256  # bytes: 64 float32 elements
N = 100      # elements of the input: 400 bytes


def _binary(op):
    return lambda s, x: getattr(s, op)(x, x)


LIMITED = {
    "add(x, x)": (_binary("add"), N), "add(x, 1.0)": (lambda s, x: s.add(x, 1.0), N),
    "sub": (_binary("sub"), N), "mul": (_binary("mul"), N),
    "maximum": (_binary("maximum"), N), "real_div": (_binary("real_div"), N),
    "neg": (lambda s, x: s.neg(x), N),
    "cast": (lambda s, x: s.cast(x, gf.float64), N),
    "concat": (lambda s, x: s.concat([x, x], 0), 2 * N),
    "pack": (lambda s, x: s.pack([x, x]), 2 * N),
    "select": (lambda s, x: s.select_v2(s.less(x, 0.5), x, x), N),
    "zeros_like": (lambda s, x: s.zeros_like(x), N),
    "tensor_scatter_add": (lambda s, x: s.tensor_scatter_add(x, [[0]], [1.0]), N),
    "user op": (lambda s, x: s.test_fresh(x), N),
}


@pytest.mark.parametrize("optimize", [True, False], ids=["optimized", "as written"])
@pytest.mark.parametrize("shape", [[N], [None], None], ids=["static", "dynamic", "no rank"])
@pytest.mark.parametrize("name", LIMITED)
def test_the_memory_limit_holds_for_every_op(name, shape, optimize):
    build, elements = LIMITED[name]
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=shape, name="x")
    y = build(s, x)
    feed = np.linspace(0, 1, N, dtype=np.float32)
    with gf.Session(s.graph, gf.SessionConfig(memory_limit_bytes=LIMIT, optimize=optimize)) as sess:
        with pytest.raises(ResourceExhaustedError, match="OOM when allocating tensor with "
                           f"{elements} elements") as info:
            sess.run(y, {x: feed})
        assert info.value.node_name == y.op.name
        assert sess.run(s.identity(x), {x: feed}).size == N  # the session is still usable
    with gf.Session(s.graph, gf.SessionConfig(memory_limit_bytes=64 * LIMIT)) as sess:
        assert sess.run(y, {x: feed}).size == elements  # the same graph fits a larger limit


@pytest.mark.parametrize("optimize", [True, False], ids=["optimized", "as written"])
def test_an_output_is_refused_before_it_is_allocated(optimize):
    """A broadcast input that owns 8 bytes, an output of 8 MB: refused before numpy
    allocates it (checked from the shapes, not from the result)."""
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float64, shape=[None], name="x")
    outs = [s.add(x, x), s.neg(x), s.cast(x, gf.float32), s.concat([x, x], 0)]
    huge = np.broadcast_to(np.ones(1), (1 << 20,))
    config = gf.SessionConfig(memory_limit_bytes=1 << 20, optimize=optimize)
    with gf.Session(s.graph, config) as sess:
        for out in outs:
            with pytest.raises(ResourceExhaustedError):
                sess.run(out, {x: huge})  # compiles the plan first
            tracemalloc.start()
            try:
                with pytest.raises(ResourceExhaustedError, match=f"node {out.op.name}"):
                    sess.run(out, {x: huge})
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert peak < (1 << 20), f"{out.op.type}: {peak} bytes allocated before failing"


def test_constants_past_the_limit_are_not_folded_away():
    s = gf.Scope(gf.Graph())
    c = s.constant(np.ones(N, np.float32))
    y = s.add(c, c, name="sum")
    with gf.Session(s.graph, gf.SessionConfig(memory_limit_bytes=LIMIT)) as sess:
        with pytest.raises(ResourceExhaustedError, match=r"\[node sum\]"):
            sess.run(y)


Grow = gf.register_op("TestGrow", inputs=["n: int64"], outputs=["y: float32"],
                      doc="np.zeros(n), no shape function (tests only).")
Grow.kernel("cpu")(lambda ctx, n: np.zeros(int(n), np.float32))
Zeros = gf.register_op("TestZeros", inputs=["n: int64"], outputs=["y: float32"],
                       doc="np.zeros(n); its shape function reads n (tests only).")
ZEROS_CALLS: list = []


@Zeros.kernel("cpu")
def _zeros(ctx, n):
    ZEROS_CALLS.append(int(n))
    return np.zeros(int(n), np.float32)


@Zeros.shape_fn
def _zeros_shape(ctx):
    """[n] when n is known."""
    n = ctx.value("n")
    return gf.TensorShape([None if n is None else int(n)])


def test_an_output_of_unknown_size_is_checked_after_its_kernel():
    """A user op without a shape function: its result is refused once it exists."""
    s = gf.Scope(gf.Graph())
    n = s.placeholder(gf.int64, shape=[], name="n")
    y = s.test_grow(n, name="grow")
    with gf.Session(s.graph, gf.SessionConfig(memory_limit_bytes=LIMIT)) as sess:
        assert sess.run(y, {n: 64}).size == 64  # 256 bytes: at the limit
        with pytest.raises(ResourceExhaustedError, match=r"65 elements .* \[node grow\]"):
            sess.run(y, {n: 65})


def test_shape_functions_that_read_values_are_remembered_per_value():
    """The output's size is a value (the kernel does not check it): a call with another
    value is checked again, before the kernel, not answered from an earlier verdict."""
    s = gf.Scope(gf.Graph())
    n = s.placeholder(gf.int64, shape=[], name="n")
    y = s.test_zeros(n, name="zeros")
    with gf.Session(s.graph, gf.SessionConfig(memory_limit_bytes=LIMIT)) as sess:
        ZEROS_CALLS.clear()
        for _ in range(2):
            assert sess.run(y, {n: 64}).size == 64
            with pytest.raises(ResourceExhaustedError, match=r"65 elements .*\[node zeros\]"):
                sess.run(y, {n: 65})
        assert ZEROS_CALLS == [64, 64]  # refused before the kernel ran
