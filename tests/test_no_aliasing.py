"""Nothing lost: no fed array, constant or fetched result is ever modified by a run,
and buffer forwarding (a TensorScatter* writing into its input) never touches a
buffer anyone else can still see.

Each test runs the same graph through ``sess.run`` and ``make_callable``, on the
sequential and the parallel executor (inputs of 2**17 elements make the plan
parallel), and checks values against numpy and, where it matters, that
forwarding did (or did not) happen, through ``sess.stats.forwarded``.
"""
import numpy as np
import pytest

import graphflow as gf

N = 1 << 17
IDX = np.array([[1], [5], [N - 1]], np.int64)
UPD = np.array([10.0, 20.0, 30.0])


def _ref_update(a, idx=IDX, upd=UPD):
    out = a.copy()
    out[idx[:, 0]] = upd
    return out


def _ref_add(a, idx=IDX, upd=UPD):
    out = a.copy()
    np.add.at(out, idx[:, 0], upd)
    return out


@pytest.fixture(params=["sequential", "parallel"])
def threads(request):
    return 1 if request.param == "sequential" else 2


@pytest.fixture(params=["run", "callable"])
def call(request):
    """``call(sess, fetches, feed_dict)``: through sess.run or a make_callable."""
    def via_run(sess, fetches, feeds=None):
        return sess.run(fetches, feeds)

    def via_callable(sess, fetches, feeds=None):
        feeds = feeds or {}
        return sess.make_callable(fetches, list(feeds))(*feeds.values())
    return via_run if request.param == "run" else via_callable


def _session(scope, threads):
    return gf.Session(scope.graph, gf.SessionConfig(inter_op_threads=threads))


def _assert_executor(sess, threads):
    """The plans ran on the executor the test asked for."""
    assert sess._plans and all(p.parallel == (threads > 1) for p in sess._plans.values())


def _frozen(*arrays):
    """Copies to compare with afterwards."""
    return [a.copy() for a in arrays]


def _twin(scope, x):
    """A second heavy branch beside ``x``'s consumer, so the plan can be parallel."""
    return scope.neg(scope.mul(x, 3.0))


def test_forwarding_happens_when_no_one_sees_the_input(scope, threads, call):
    p = scope.placeholder(gf.float64, shape=[N])
    x = scope.mul(p, 2.0)  # fresh, read once: forwarded
    y = scope.tensor_scatter_update(x, IDX, UPD)
    base = np.arange(N, dtype=np.float64)
    with _session(scope, threads) as sess:
        got, twin = call(sess, [y, _twin(scope, p)], {p: base})
        _assert_executor(sess, threads)
        assert sess.stats.forwarded == 1
    np.testing.assert_array_equal(got, _ref_update(base * 2))
    np.testing.assert_array_equal(twin, -base * 3)


def test_fetched_input_of_a_forwardable_node_is_not_overwritten(scope, threads, call):
    p = scope.placeholder(gf.float64, shape=[N])
    x = scope.mul(p, 2.0)
    y = scope.tensor_scatter_add(x, IDX, UPD)
    base = np.arange(N, dtype=np.float64)
    with _session(scope, threads) as sess:
        got_x, got_y, _ = call(sess, [x, y, _twin(scope, p)], {p: base})
        _assert_executor(sess, threads)
        assert sess.stats.forwarded == 0
    np.testing.assert_array_equal(got_x, base * 2)
    np.testing.assert_array_equal(got_y, _ref_add(base * 2))
    assert not np.shares_memory(got_x, got_y)


def test_input_read_by_two_scatters_is_copied_for_both(scope, threads, call):
    p = scope.placeholder(gf.float64, shape=[N])
    x = scope.mul(p, 2.0)
    a = scope.tensor_scatter_update(x, IDX, UPD)
    b = scope.tensor_scatter_max(x, IDX, -UPD)
    base = np.arange(N, dtype=np.float64)
    with _session(scope, threads) as sess:
        got_a, got_b = call(sess, [a, b], {p: base})
        _assert_executor(sess, threads)
        assert sess.stats.forwarded == 0
    np.testing.assert_array_equal(got_a, _ref_update(base * 2))
    np.testing.assert_array_equal(got_b, base * 2)  # max with smaller values: unchanged


def test_same_array_fed_to_two_placeholders(scope, threads, call):
    p = scope.placeholder(gf.float64, shape=[N])
    q = scope.placeholder(gf.float64, shape=[N])
    a = scope.tensor_scatter_update(p, IDX, UPD)
    b = scope.tensor_scatter_sub(scope.identity(q), IDX, UPD)
    shared = np.arange(N, dtype=np.float64)
    (before,) = _frozen(shared)
    with _session(scope, threads) as sess:
        got_a, got_b, got_p = call(sess, [a, b, scope.identity(p)], {p: shared, q: shared})
        _assert_executor(sess, threads)
        assert sess.stats.forwarded == 0
    np.testing.assert_array_equal(shared, before)
    assert shared.flags.writeable  # the caller's array keeps its flags
    np.testing.assert_array_equal(got_a, _ref_update(before))
    np.testing.assert_array_equal(got_b, _ref_add(before, upd=-UPD))
    np.testing.assert_array_equal(got_p, before)
    assert not np.shares_memory(got_p, shared)  # a fetched feed is the caller's own copy


def test_fetched_result_fed_back_is_not_modified(scope, threads, call):
    p = scope.placeholder(gf.float64, shape=[N])
    x = scope.mul(p, 2.0)
    y = scope.tensor_scatter_add(x, IDX, UPD)
    twin = _twin(scope, p)
    with _session(scope, threads) as sess:
        first, _ = call(sess, [y, twin], {p: np.ones(N)})
        (kept,) = _frozen(first)
        again, _ = call(sess, [y, twin], {p: first})      # as a placeholder's feed
        np.testing.assert_array_equal(first, kept)
        np.testing.assert_array_equal(again, _ref_add(kept * 2))
        fed_x, _ = call(sess, [y, twin], {p: first, x: first})  # as the forwardable input
        _assert_executor(sess, threads)
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_array_equal(fed_x, _ref_add(kept))
    assert not np.shares_memory(fed_x, first)


def test_chain_with_fetched_intermediate(scope, threads, call):
    p = scope.placeholder(gf.float64, shape=[N])
    t0 = scope.mul(p, 2.0)  # (p * 1.0 would be simplified to the feed itself)
    t1 = scope.tensor_scatter_update(t0, IDX, UPD)       # forwards t0
    t2 = scope.tensor_scatter_add(t1, IDX, UPD)          # t1 is fetched: copies
    t3 = scope.tensor_scatter_max(t2, IDX, 4 * UPD)      # forwards t2
    t4 = scope.tensor_scatter_min(t3, IDX, UPD)          # t3 fetched: copies
    base = np.zeros(N)
    with _session(scope, threads) as sess:
        g1, g3, g4, _ = call(sess, [t1, t3, t4, _twin(scope, p)], {p: base})
        _assert_executor(sess, threads)
        assert sess.stats.forwarded == 2
    r1 = _ref_update(base)
    r2 = _ref_add(r1)
    r3 = r2.copy()
    r3[IDX[:, 0]] = np.maximum(r3[IDX[:, 0]], 4 * UPD)
    r4 = r3.copy()
    r4[IDX[:, 0]] = np.minimum(r4[IDX[:, 0]], UPD)
    np.testing.assert_array_equal(g1, r1)
    np.testing.assert_array_equal(g3, r3)
    np.testing.assert_array_equal(g4, r4)
    assert not any(np.shares_memory(a, b) for a, b in [(g1, g3), (g1, g4), (g3, g4)])


def test_constant_through_identity_then_scattered(scope, threads, call):
    values = np.arange(N, dtype=np.float64)
    c = scope.constant(values)
    y = scope.tensor_scatter_update(scope.identity(c), IDX, UPD)
    z = scope.tensor_scatter_add(scope.identity(scope.identity(c)), IDX, UPD)
    with _session(scope, threads) as sess:
        for _ in range(3):  # a constant modified by one run would show in the next
            got_y, got_z, got_c = call(sess, [y, z, c])  # all folded: no heavy step left
            np.testing.assert_array_equal(got_y, _ref_update(values))
            np.testing.assert_array_equal(got_z, _ref_add(values))
            np.testing.assert_array_equal(got_c, values)
        assert sess.stats.forwarded == 0
    np.testing.assert_array_equal(c.op.attrs["value"], values)


def test_mutating_fetched_results_does_not_change_later_runs(scope, threads, call):
    """Every kind of fetched value is the caller's own: writeable, and not shared with
    a constant, a feed, a kernel's cache or the next run."""
    p = scope.placeholder(gf.float64, shape=[N])
    c = scope.constant(np.arange(N, dtype=np.float64))
    x = scope.add(p, c)
    fetches = {
        "const": c, "const_identity": scope.identity(c), "feed_identity": scope.identity(p),
        "reshaped": scope.reshape(p, [N // 2, 2]), "fresh": x,
        "forwarded": scope.tensor_scatter_update(scope.mul(x, 2.0), IDX, UPD),
        "gathered": scope.gather_nd(x, IDX), "scattered": scope.scatter_nd(IDX, UPD, [N]),
        "parts": scope.dynamic_partition(x, scope.cast(scope.less(p, 0.5), gf.int32), 2),
        "stitched": scope.dynamic_stitch([np.arange(N)], [x]),
        "shape": scope.shape(x), "range": scope.range(0, 8, 1), "filled": scope.fill([4], 1.5),
        "zeros": scope.zeros_like(x),
    }
    feed = np.linspace(0.0, 1.0, N)
    with _session(scope, threads) as sess:
        first = call(sess, fetches, {p: feed})
        _assert_executor(sess, threads)
        expected = {k: [a.copy() for a in v] if isinstance(v, list) else v.copy()
                    for k, v in first.items()}
        for name, value in first.items():
            for array in value if isinstance(value, list) else [value]:
                assert array.flags.writeable, name
                array[...] = 7  # the caller may do what it likes with its results
        second = call(sess, fetches, {p: feed})
        _assert_executor(sess, threads)
    np.testing.assert_array_equal(feed, np.linspace(0.0, 1.0, N))
    for name, want in expected.items():
        got = second[name]
        for g, w in zip(got if isinstance(got, list) else [got],
                        want if isinstance(want, list) else [want]):
            np.testing.assert_array_equal(g, w, err_msg=name)


# -- user ops that break their promise of fresh outputs ----------------------------------
# ``register_op`` declares outputs fresh by default (a later TensorScatter* may then write
# into them). The runtime does not take a user kernel's word for it: an output that is
# an input, a view, or a buffer the kernel keeps elsewhere is copied first.
_KEPT: dict = {}


def _user_op(name, kernel):
    op = gf.register_op(name, inputs=["x: T"], outputs=["y: T"], attrs={"T": gf.TypeAttr()})
    op.shape_fn(lambda ctx: ctx.shape("x"))
    op.kernel("cpu")(kernel)
    return op


_user_op("TestAliasPassThrough", lambda ctx, x: x)
_user_op("TestAliasView", lambda ctx, x: x[...])
_user_op("TestAliasKept", lambda ctx, x: _KEPT.setdefault("kept", np.array(x, copy=True)))
_user_op("TestAliasFresh", lambda ctx, x: x + 0)


@pytest.mark.parametrize("builder", ["test_alias_pass_through", "test_alias_view",
                                     "test_alias_kept", "test_alias_fresh"])
def test_user_op_aliasing_its_input_is_never_written(builder, threads, call):
    scope = gf.Scope(gf.Graph())
    p = scope.placeholder(gf.float64, shape=[N])
    a = scope.add(p, 1.0)   # fresh, read twice
    scattered = scope.tensor_scatter_update(getattr(scope, builder)(a), IDX, UPD)
    other = scope.mul(a, 1.0)
    _KEPT.clear()
    with _session(scope, threads) as sess:
        for _ in range(2):  # the second run reuses the plan's buffers
            got, seen = call(sess, [scattered, other], {p: np.zeros(N)})
            np.testing.assert_array_equal(got, _ref_update(np.ones(N)))
            np.testing.assert_array_equal(seen, np.ones(N))  # Mul saw a, not the update
        if "kept" in _KEPT:
            np.testing.assert_array_equal(_KEPT["kept"], np.ones(N))
        assert sess.stats.forwarded == 2  # a private copy (or fresh result) was written into


def test_dead_intermediates_are_reused_across_runs():
    """A plan keeps its dead intermediates and writes later ones into them: the second
    run allocates no new buffer for them, and results are unaffected."""
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float64, shape=[N])
    y = scope.scatter_nd(IDX, scope.gather_nd(x, IDX), [N])   # a fresh intermediate
    z = scope.gather_nd(scope.add(y, x), IDX)                 # y and y + x die here
    with gf.Session(scope.graph, gf.SessionConfig(inter_op_threads=1)) as sess:
        f = sess.make_callable(z, [x])
        feed = np.arange(N, dtype=np.float64)
        first = f(feed)
        (plan,) = sess._plans.values()
        before = plan.buffers.reused
        second = f(feed)
        np.testing.assert_array_equal(first, second)
        np.testing.assert_array_equal(second, 2 * feed[IDX[:, 0]])
        assert plan.buffers.reused > before
        assert feed.tolist() == np.arange(N, dtype=np.float64).tolist()


def _fetching_plan():
    """A session fetching x * x, a fresh [N] float64 from the plan's pool (``ctx.empty``)."""
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float64, shape=[N])
    y = scope.mul(x, x)
    sess = gf.Session(scope.graph, gf.SessionConfig(inter_op_threads=1))
    f = sess.make_callable(y, [x])
    return sess, f


@pytest.mark.parametrize("hold", ["array", "view", "weakref", "list", "nothing"])
def test_a_fetched_result_is_reused_only_once_the_caller_drops_it(hold):
    """A result the caller still holds (itself, through a view or a weak reference, in
    a list) is never written by a later call; one it dropped is the pool's again and
    the next call writes into it (no fresh pages)."""
    import weakref
    sess, f = _fetching_plan()
    feed = np.arange(N, dtype=np.float64) / N
    try:
        f(feed)
        (plan,) = sess._plans.values()
        kept = []
        for k in range(4):
            result = f(feed + k)
            kept.append({"array": result, "view": result[1:], "weakref": weakref.ref(result),
                         "list": [result], "nothing": None}[hold])
            del result
        before = plan.buffers.reused
        for k in range(3):
            f(feed)
        for k, held in enumerate(kept):
            value = {"array": lambda h: h, "view": lambda h: h.base, "weakref": lambda h: h(),
                     "list": lambda h: h[0], "nothing": lambda h: None}[hold](held)
            if value is not None:
                np.testing.assert_array_equal(value, (feed + k) * (feed + k))
        if hold == "nothing":
            assert plan.buffers.reused > before
        assert feed.tolist() == (np.arange(N, dtype=np.float64) / N).tolist()
    finally:
        sess.close()


_MIX = np.random.default_rng(6).normal(size=(8, 8))


def _partition_plan(threads: int):
    """Parts of a fed [n, 8] by a fed mask: part 0 fetched as it is, part 1 doubled, each
    part times a [8, 8] (products that die in the run: their shapes are the parts'),
    and those stitched back."""
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float64, shape=[None, 8])
    mask = scope.placeholder(gf.int32, shape=[None])
    parts = scope.dynamic_partition(x, mask, 2)
    positions = scope.dynamic_partition(scope.range(0, scope.shape(mask)[0], 1), mask, 2)
    doubled = scope.mul(parts[1], 2.0)
    stitched = scope.dynamic_stitch(positions, [scope.matmul(p, _MIX) for p in parts])
    sess = gf.Session(scope.graph, gf.SessionConfig(inter_op_threads=threads))
    return sess, sess.make_callable([parts[0], doubled, stitched], [x, mask])


def _partition_reference(x, mask):
    return x[mask == 0], 2 * x[mask == 1], x @ _MIX


@pytest.mark.parametrize("threads", [1, 2])
def test_a_fetched_part_keeps_the_partition_buffer_from_reuse(threads):
    """The parts of a partition are views of one buffer, which returns to the pool once
    its last part dies; a part the caller holds keeps it (on the 3rd and later calls,
    after the compile, too)."""
    rng = np.random.default_rng(7)
    n = 1 << 14
    sess, f = _partition_plan(threads)
    try:
        held = []
        for k in range(6):
            x, mask = rng.normal(size=(n, 8)), (rng.random(n) < 0.5).astype(np.int32)
            got = f(x, mask)
            for value, want in zip(got, _partition_reference(x, mask)):
                np.testing.assert_allclose(value, want, rtol=1e-12)
            held.append((got[0], x[mask == 0]))
        for part, want in held:
            np.testing.assert_array_equal(part, want)
    finally:
        sess.close()


def test_the_partition_buffer_returns_to_the_pool(monkeypatch):
    """With no part fetched, the buffer behind the parts is given back to the pool each
    call (else it went back to the allocator and its successor cost a fresh page per 4
    KiB), and results are unchanged by the reuse."""
    from graphflow.runtime import memory
    given = []
    give = memory.BufferPool.give
    monkeypatch.setattr(memory.BufferPool, "give",
                        lambda pool, buffer: (given.append(buffer.shape), give(pool, buffer)))
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float64, shape=[None, 8])
    mask = scope.placeholder(gf.int32, shape=[None])
    parts = scope.dynamic_partition(x, mask, 2)
    total = scope.add(scope.reduce_sum(scope.mul(parts[0], 2.0)), scope.reduce_sum(parts[1]))
    n = 1 << 14
    rng = np.random.default_rng(8)
    with gf.Session(scope.graph, gf.SessionConfig(inter_op_threads=1)) as sess:
        f = sess.make_callable(total, [x, mask])
        for k in range(5):
            given.clear()
            feed, m = rng.normal(size=(n, 8)), (rng.random(n) < 0.5).astype(np.int32)
            np.testing.assert_allclose(f(feed, m), 2 * feed[m == 0].sum() + feed[m == 1].sum())
            assert (n, 8) in given


def test_the_pool_keeps_no_buffers_of_shapes_that_do_not_recur():
    """Parts whose sizes change every call: the pool holds the buffers of the last two
    runs at most, not every shape it ever saw (which filled it to its 1 GiB limit; an
    MoE step grew to 1.4 GB in 1500 steps)."""
    rng = np.random.default_rng(9)
    n = 1 << 14
    sess, f = _partition_plan(1)
    try:
        for k in range(40):
            x, mask = rng.normal(size=(n, 8)), (rng.random(n) < 0.3 + k / 100).astype(np.int32)
            f(x, mask)
        pools = [p.buffers.nbytes for p in _all_plans(sess)]
        one_run = 3 * x.nbytes  # the partition buffer and the parts' two products
        assert max(pools) <= 2 * one_run, pools
    finally:
        sess.close()


def _all_plans(sess):
    """A session's plans and the plans specialized from them."""
    plans = list(sess._plans.values())
    return plans + [p for plan in plans for p in getattr(plan, "_specialized", {}).values()
                    if p is not None]
