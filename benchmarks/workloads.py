"""The workloads W1-W7 of the performance issue, each against the best plain
numpy a user would write by hand for the same result; T1 compares graphflow
with itself (tracing off / on against a plain run).

Every workload builds its graph once and times ``make_callable`` calls, so the
numbers include graphflow's whole per-run cost: feed checks, the executor loop
and the kernels. Data: float32 values, int64 indices, fixed seeds. Each case
also says what it computes for JAX and TensorFlow (``peer_op``, written out in
``benchmarks/peers.py``), on the same arrays graphflow is fed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import graphflow as gf


@dataclass
class Case:
    """One timed comparison."""

    workload: str
    name: str
    graphflow: Callable[[], object]
    baseline: Callable[[], object]
    baseline_name: str
    nbytes: int = 0            # bytes the result needs moved at least (see BYTES below)
    random_accesses: int = 0   # scattered element accesses the result needs
    per: str = ""              # "node" or "call": report per-unit latency instead of ms
    units: int = 1
    paired: bool = False       # time graphflow and baseline in alternating batches (ratio =
                               # median of per-round ratios): for comparisons near 1.00x
    peer_op: str = ""          # what JAX and TensorFlow compute for it (peers.py); "" for none
    peer_inputs: tuple = ()    # the arrays graphflow is fed, in the order the peers take them
    peer_params: dict = field(default_factory=dict)  # static: shapes, counts, constants

#: The byte formula behind GB/s: bytes of every input read plus every output
#: written once (indices included); a scatter also counts its output fill.
BYTES = "inputs read + outputs written, once each"


def _session(graph: gf.Graph, **config) -> gf.Session:
    return gf.Session(graph, gf.SessionConfig(**config) if config else None)


def _rng() -> np.random.Generator:
    return np.random.default_rng(20261202)


def w1_scatter_nd_elements(scale: float) -> list[Case]:
    n, m = int(10_000_000 * scale), int(1_000_000 * scale)
    rng = _rng()
    cases = []
    for label, positions in (("unique", None), ("dups from 100k", int(100_000 * scale))):
        if positions is None:
            idx = rng.permutation(n)[:m].astype(np.int64)
        else:
            idx = rng.integers(0, positions, m).astype(np.int64)
        upd = rng.standard_normal(m).astype(np.float32)
        g = gf.Graph()
        s = gf.Scope(g)
        pi = s.placeholder(gf.int64, shape=[m, 1])
        pu = s.placeholder(gf.float32, shape=[m])
        out = s.scatter_nd(pi, pu, np.array([n], np.int64))
        f = _session(g).make_callable(out, [pi, pu])
        idx2 = idx[:, None]
        if positions is None:
            def base(idx=idx, upd=upd):
                o = np.zeros(n, np.float32)
                o[idx] = upd
                return o
            name = "zeros + o[i] = u"
        else:
            def base(idx=idx, upd=upd):
                o = np.zeros(n, np.float32)
                np.add.at(o, idx, upd)
                return o
            name = "zeros + np.add.at"
        np.testing.assert_array_equal(f(idx2, upd), base())
        cases.append(Case("W1", f"ScatterNd [{n}] <- {m} {label}", lambda f=f, a=idx2, b=upd: f(a, b),
                          base, name, nbytes=4 * n + 12 * m, random_accesses=m,
                          peer_op="scatter_nd", peer_inputs=(idx2, upd), peer_params={"shape": (n,)}))
    return cases


def w2_scatter_nd_slices(scale: float) -> list[Case]:
    rows, width, m = int(100_000 * scale), 64, int(50_000 * scale)
    rng = _rng()
    idx = rng.integers(0, rows, m).astype(np.int64)
    upd = rng.standard_normal((m, width)).astype(np.float32)
    g = gf.Graph()
    s = gf.Scope(g)
    pi = s.placeholder(gf.int64, shape=[m, 1])
    pu = s.placeholder(gf.float32, shape=[m, width])
    out = s.scatter_nd(pi, pu, np.array([rows, width], np.int64))
    f = _session(g).make_callable(out, [pi, pu])
    def base():  # the faster of the two hand-written forms (rows are 2-4x slower)
        offsets = (idx[:, None] * width + np.arange(width)).reshape(-1)
        o = np.zeros(rows * width, np.float32)
        np.add.at(o, offsets, upd.reshape(-1))
        return o.reshape(rows, width)
    idx2 = idx[:, None]
    np.testing.assert_array_equal(f(idx2, upd), base())
    return [Case("W2", f"ScatterNd [{rows},{width}] <- {m} rows, dups",
                 lambda: f(idx2, upd), base, "np.add.at on element offsets",
                 nbytes=4 * rows * width + 4 * m * width + 8 * m, random_accesses=m,
                 peer_op="scatter_nd", peer_inputs=(idx2, upd),
                 peer_params={"shape": (rows, width)})]


def w3_tensor_scatter(scale: float) -> list[Case]:
    n, m = int(10_000_000 * scale), int(1_000_000 * scale)
    rng = _rng()
    idx = rng.permutation(n)[:m].astype(np.int64)
    upd = rng.standard_normal(m).astype(np.float32)
    tensor = rng.standard_normal(n).astype(np.float32)
    idx2 = idx[:, None]
    cases = []
    for op_name, combine in (("tensor_scatter_update", None), ("tensor_scatter_add", np.add)):
        peer_combine = "set" if combine is None else "add"
        # forwarded: the tensor is made inside the graph and dies at the scatter
        g = gf.Graph()
        s = gf.Scope(g)
        pi = s.placeholder(gf.int64, shape=[m, 1])
        pu = s.placeholder(gf.float32, shape=[m])
        work = s.fill(np.array([n], np.int64), np.float32(1.5))
        out = getattr(s, op_name)(work, pi, pu)
        sess = _session(g)
        f = sess.make_callable(out, [pi, pu])

        def base_fwd(combine=combine):
            w = np.full(n, 1.5, np.float32)
            if combine is None:
                w[idx] = upd
            else:
                w[idx] += upd  # unique indices: equal to np.add.at
            return w
        np.testing.assert_array_equal(f(idx[:, None], upd), base_fwd())
        before = sess.stats.forwarded
        f(idx[:, None], upd)
        assert sess.stats.forwarded == before + 1, "the Fill buffer was not forwarded"
        cases.append(Case("W3", f"{op_name} [{n}] <- {m}, forwarded",
                          lambda f=f: f(idx2, upd), base_fwd, "full + in-place w[i] (op)= u",
                          nbytes=4 * n + 12 * m, random_accesses=m,
                          peer_op="fill_tensor_scatter", peer_inputs=(idx2, upd),
                          peer_params={"combine": peer_combine, "fill": 1.5, "shape": (n,)}))
        # not forwardable: the tensor is a feed, so it must be copied
        g = gf.Graph()
        s = gf.Scope(g)
        pt = s.placeholder(gf.float32, shape=[n])
        pi = s.placeholder(gf.int64, shape=[m, 1])
        pu = s.placeholder(gf.float32, shape=[m])
        out = getattr(s, op_name)(pt, pi, pu)
        f2 = _session(g).make_callable(out, [pt, pi, pu])

        def base_copy(combine=combine):
            w = tensor.copy()
            if combine is None:
                w[idx] = upd
            else:
                w[idx] += upd
            return w
        np.testing.assert_array_equal(f2(tensor, idx[:, None], upd), base_copy())
        cases.append(Case("W3", f"{op_name} [{n}] <- {m}, copied (fed)",
                          lambda f2=f2: f2(tensor, idx2, upd), base_copy,
                          "copy + w[i] (op)= u", nbytes=8 * n + 12 * m, random_accesses=m,
                          peer_op="tensor_scatter", peer_inputs=(tensor, idx2, upd),
                          peer_params={"combine": peer_combine}))
    cases.append(_w3_chain(n, m, idx, upd))
    return cases


def _w3_chain(n: int, m: int, idx: np.ndarray, upd: np.ndarray) -> Case:
    """Fill, then TensorScatterUpdate/Add/Sub/Max/Min in a chain: every scatter writes
    into the buffer of the one before, so the peak stays at one tensor."""
    g = gf.Graph()
    s = gf.Scope(g)
    pi = s.placeholder(gf.int64, shape=[m, 1])
    pu = s.placeholder(gf.float32, shape=[m])
    chain = ("tensor_scatter_update", "tensor_scatter_add", "tensor_scatter_sub",
             "tensor_scatter_max", "tensor_scatter_min")
    out = s.fill(np.array([n], np.int64), np.float32(1.5))
    for op_name in chain:
        out = getattr(s, op_name)(out, pi, pu)
    sess = _session(g)
    f = sess.make_callable(out, [pi, pu])

    def base():
        w = np.full(n, 1.5, np.float32)
        w[idx] = upd
        w[idx] += upd
        w[idx] -= upd
        w[idx] = np.maximum(w[idx], upd)
        w[idx] = np.minimum(w[idx], upd)
        return w
    idx2 = idx[:, None]
    np.testing.assert_array_equal(f(idx2, upd), base())
    before = sess.stats.forwarded
    f(idx2, upd)
    assert sess.stats.forwarded == before + len(chain), "a buffer of the chain was copied"
    return Case("W3", f"chain of {len(chain)} TensorScatter* [{n}] <- {m}, forwarded",
                lambda: f(idx2, upd), base, "full + 5 in-place w[i] (op)= u",
                nbytes=4 * n + len(chain) * 12 * m, random_accesses=len(chain) * m,
                peer_op="fill_tensor_scatter_chain", peer_inputs=(idx2, upd),
                peer_params={"chain": ("set", "add", "sub", "max", "min"), "fill": 1.5,
                             "shape": (n,)})


def w4_gather_nd(scale: float) -> list[Case]:
    rng = _rng()
    cases = []
    m = int(1_000_000 * scale)
    params = rng.standard_normal((int(1_000_000 * scale), 32)).astype(np.float32)
    idx = rng.integers(0, params.shape[0], (m, 1)).astype(np.int64)
    g = gf.Graph()
    s = gf.Scope(g)
    pp = s.placeholder(gf.float32, shape=params.shape)
    pi = s.placeholder(gf.int64, shape=idx.shape)
    f = _session(g).make_callable(s.gather_nd(pp, pi), [pp, pi])
    base = lambda: np.take(params, idx[:, 0], axis=0)  # noqa: E731
    np.testing.assert_array_equal(f(params, idx), base())
    cases.append(Case("W4", f"GatherNd [{params.shape[0]},32] <- {m} depth-1",
                      lambda: f(params, idx), base, "np.take(axis=0)",
                      nbytes=2 * m * 32 * 4 + 8 * m, random_accesses=m,
                      peer_op="gather_nd", peer_inputs=(params, idx)))
    ids = idx[:, 0]  # the same rows by tf.gather (GatherV2): as fast as gather_nd's
    g = gf.Graph()
    s = gf.Scope(g)
    pp = s.placeholder(gf.float32, shape=params.shape)
    pv = s.placeholder(gf.int64, shape=ids.shape)
    fv = _session(g).make_callable(s.gather(pp, pv, 0), [pp, pv])
    np.testing.assert_array_equal(fv(params, ids), base())
    cases.append(Case("W4", f"gather (GatherV2) [{params.shape[0]},32] <- {m} ids",
                      lambda: fv(params, ids), lambda: np.take(params, ids, axis=0),
                      "np.take(axis=0)", nbytes=2 * m * 32 * 4 + 8 * m, random_accesses=m,
                      peer_op="gather", peer_inputs=(params, ids)))
    side = int(1000 * min(1.0, scale * 3.2))
    params3 = rng.standard_normal((side, 1000, 16)).astype(np.float32)
    idx3 = np.stack([rng.integers(0, side, m), rng.integers(0, 1000, m)], 1).astype(np.int64)
    g = gf.Graph()
    s = gf.Scope(g)
    pp = s.placeholder(gf.float32, shape=params3.shape)
    pi = s.placeholder(gf.int64, shape=idx3.shape)
    f3 = _session(g).make_callable(s.gather_nd(pp, pi), [pp, pi])
    flat = params3.reshape(-1, 16)
    lin = idx3[:, 0] * 1000 + idx3[:, 1]
    base3 = lambda: np.take(flat, lin, axis=0)  # noqa: E731
    np.testing.assert_array_equal(f3(params3, idx3), base3())
    cases.append(Case("W4", f"GatherNd [{side},1000,16] <- {m} depth-2",
                      lambda: f3(params3, idx3), base3, "np.take on linearized indices",
                      nbytes=2 * m * 16 * 4 + 16 * m, random_accesses=m,
                      peer_op="gather_nd", peer_inputs=(params3, idx3)))
    return cases


def w5_partition_stitch(scale: float) -> list[Case]:
    n = int(10_000_000 * scale)
    rng = _rng()
    x = rng.standard_normal(n).astype(np.float32)
    cases = []
    for k in (2, 16):
        parts = rng.integers(0, k, n).astype(np.int32)
        g = gf.Graph()
        s = gf.Scope(g)
        px = s.placeholder(gf.float32, shape=[n])
        pp = s.placeholder(gf.int32, shape=[n])
        f = _session(g).make_callable(s.dynamic_partition(px, pp, num_partitions=k), [px, pp])

        def base(parts=parts, k=k):
            return [np.compress(parts == i, x) for i in range(k)]
        for a, b in zip(f(x, parts), base()):
            np.testing.assert_array_equal(a, b)
        cases.append(Case("W5", f"DynamicPartition [{n}] into {k}", lambda f=f, p=parts: f(x, p),
                          base, "np.compress per partition", nbytes=2 * 4 * n + 4 * n,
                          peer_op="dynamic_partition", peer_inputs=(x, parts),
                          peer_params={"num_partitions": k}))
    half = n // 2
    perm = rng.permutation(n).astype(np.int32)
    i0, i1 = perm[:half], perm[half:]
    d0, d1 = x[:half], x[half:]
    g = gf.Graph()
    s = gf.Scope(g)
    pis = [s.placeholder(gf.int32, shape=[half]), s.placeholder(gf.int32, shape=[n - half])]
    pds = [s.placeholder(gf.float32, shape=[half]), s.placeholder(gf.float32, shape=[n - half])]
    f = _session(g).make_callable(s.dynamic_stitch(pis, pds), pis + pds)

    def base_stitch():
        o = np.empty(n, np.float32)
        o[i0] = d0
        o[i1] = d1
        return o
    np.testing.assert_array_equal(f(i0, i1, d0, d1), base_stitch())
    cases.append(Case("W5", f"DynamicStitch 2 inputs, {n} total", lambda f=f: f(i0, i1, d0, d1),
                      base_stitch, "preallocated o[i] = d", nbytes=4 * n * 3, random_accesses=n,
                      peer_op="dynamic_stitch", peer_inputs=(i0, i1, d0, d1),
                      peer_params={"size": n}))
    # the seed pipeline: partition by mask, +1 on one part, stitch back
    xs = np.where(rng.random(n) < 0.3, np.float32(-1), x).astype(np.float32)
    g = gf.Graph()
    s = gf.Scope(g)
    px = s.placeholder(gf.float32, shape=[n])
    mask = s.cast(s.not_equal(px, np.float32(-1)), gf.int32)
    data = s.dynamic_partition(px, mask, num_partitions=2)
    positions = s.dynamic_partition(s.range(0, s.size(px), 1), mask, num_partitions=2)
    out = s.dynamic_stitch(positions, [data[0], s.add(data[1], np.float32(1))])
    f = _session(g).make_callable(out, [px])
    base_pipe = lambda: np.where(xs != -1, xs + 1, xs)  # noqa: E731
    np.testing.assert_array_equal(f(xs), base_pipe())
    cases.append(Case("W5", f"seed pipeline partition/+1/stitch [{n}]", lambda: f(xs), base_pipe,
                      "np.where(mask, x + 1, x)", nbytes=2 * 4 * n,
                      peer_op="seed_pipeline", peer_inputs=(xs,)))
    return cases


def w6_executor_overhead(scale: float) -> list[Case]:
    v = np.ones(4, np.float32)
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.float32, shape=[4])
    h = x
    for _ in range(100):
        h = s.add(h, x)
    wide = [s.add(x, x) for _ in range(100)]
    sess = _session(g)
    chain, many = sess.make_callable(h, [x]), sess.make_callable(wide, [x])

    def loop_chain():
        a = v
        for _ in range(100):
            a = np.add(a, v)
        return a

    def loop_wide():
        return [np.add(v, v) for _ in range(100)]
    return [Case("W6", "chain of 100 tiny Add", lambda: chain(v), loop_chain, "Python loop of np.add",
                 per="node", units=100, peer_op="add_chain", peer_inputs=(v,),
                 peer_params={"length": 100}),
            Case("W6", "100 independent tiny Add", lambda: many(v), loop_wide,
                 "Python loop of np.add", per="node", units=100, peer_op="add_wide",
                 peer_inputs=(v,), peer_params={"width": 100})]


def w7_seed_latency(scale: float) -> list[Case]:
    g = gf.Graph()
    s = gf.Scope(g)
    indices, updates = np.array([[4], [3], [1], [7]]), np.array([9, 10, 11, 12], np.int32)
    out = s.scatter_nd(indices, updates, [8])
    f = _session(g).make_callable(out)
    idx = np.array([4, 3, 1, 7])
    upd = np.array([9, 10, 11, 12], np.int32)

    def base():
        o = np.zeros(8, np.int32)
        np.add.at(o, idx, upd)
        return o
    np.testing.assert_array_equal(f(), base())
    return [Case("W7", "seed ScatterNd [8] <- 4", f, base, "zeros + np.add.at", per="call",
                 peer_op="scatter_nd_constant",
                 peer_params={"indices": indices, "updates": updates, "shape": (8,)})]


def w7_fed(scale: float) -> list[Case]:
    """W7 with its indices and updates fed, as a serving call gets them."""
    g = gf.Graph()
    s = gf.Scope(g)
    i = s.placeholder(gf.int32, shape=[4, 1])
    u = s.placeholder(gf.int32, shape=[4])
    f = _session(g).make_callable(s.scatter_nd(i, u, [8]), [i, u])
    idx, upd = np.array([[4], [3], [1], [7]], np.int32), np.array([9, 10, 11, 12], np.int32)

    def base():
        o = np.zeros(8, np.int32)
        np.add.at(o, idx[:, 0], upd)
        return o
    np.testing.assert_array_equal(f(idx, upd), base())
    return [Case("W7", "ScatterNd [8] <- 4, indices and updates fed", lambda: f(idx, upd), base,
                 "zeros + np.add.at", per="call", peer_op="scatter_nd",
                 peer_inputs=(idx, upd), peer_params={"shape": (8,)})]


#: W8's model: a [100000, 64] float32 embedding table, batches of 32 ids.
SGD_ROWS, SGD_WIDTH, SGD_BATCH, SGD_RATE = 100_000, 64, 32, 0.01


def sgd_table() -> np.ndarray:
    return np.random.default_rng(8).standard_normal((SGD_ROWS, SGD_WIDTH)).astype(np.float32)


def w8_sparse_sgd_step(scale: float) -> list[Case]:
    """A sparse training step as a new user writes it: fed ids of unknown length,
    ``sparse_read``, a squared loss, GradientDescentOptimizer.minimize; fetch
    [train, loss]. Every contender starts from the same table; the first call's loss
    is what the peers are checked against."""
    g = gf.Graph()
    s = gf.Scope(g)
    table = s.variable(sgd_table(), name="table")
    ids = s.placeholder(gf.int32, shape=[None], name="ids")
    target = s.placeholder(gf.float32, shape=[None, SGD_WIDTH], name="target")
    d = s.sub(s.mul(table.sparse_read(ids), np.float32(0.5)), target)
    loss = s.sum(s.mul(d, d), [0, 1])
    train = gf.train.GradientDescentOptimizer(SGD_RATE).minimize(loss)
    sess = _session(g)
    sess.run(table.initializer)
    step = sess.make_callable([train, loss], [ids, target])
    rng = _rng()
    batch = rng.integers(0, SGD_ROWS, SGD_BATCH).astype(np.int32)
    goal = rng.standard_normal((SGD_BATCH, SGD_WIDTH)).astype(np.float32)
    state = sgd_table()

    def base():
        rows = state[batch]
        diff = rows * np.float32(0.5) - goal
        grad = np.float32(2 * 0.5) * diff
        np.subtract.at(state, batch, np.float32(SGD_RATE) * grad)
        return np.float32((diff * diff).sum())
    return [Case("W8", f"sparse SGD step: table [{SGD_ROWS},{SGD_WIDTH}], {SGD_BATCH} ids fed",
                 lambda: step(batch, goal)[1], base, "numpy: gather, loss, np.subtract.at",
                 per="call", peer_op="sgd_step", peer_inputs=(batch, goal))]


def mixed_chain_graph(groups: int):
    """W9's chain: per group Add, Mul, TensorScatterAdd of 2 rows into [64], GatherNd of
    64 rows and Reshape: 5 small nodes no rewrite fuses across."""
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.float32, shape=[64])
    h = x
    for _ in range(groups):
        h = s.mul(s.add(h, np.float32(1)), np.float32(0.5))
        h = s.tensor_scatter_add(h, CHAIN_ROWS, np.ones(2, np.float32))
        h = s.reshape(s.gather_nd(h, CHAIN_ORDER), [64])
    return g, x, h


CHAIN_ROWS = np.array([[3], [17]], np.int32)
CHAIN_ORDER = np.arange(64, dtype=np.int32)[::-1].reshape(64, 1).copy()


def w9_mixed_chain(scale: float) -> list[Case]:
    groups = 200
    g, x, h = mixed_chain_graph(groups)
    f = _session(g).make_callable(h, [x])
    v = np.linspace(-1, 1, 64).astype(np.float32)
    order = CHAIN_ORDER[:, 0]

    def base():
        a = v
        for _ in range(groups):
            a = (a + np.float32(1)) * np.float32(0.5)
            np.add.at(a, CHAIN_ROWS[:, 0], np.float32(1))
            a = a[order]
        return a
    np.testing.assert_array_equal(f(v), base())
    return [Case("W9", f"chain of {5 * groups} small mixed nodes (Add, Mul, TensorScatterAdd, "
                 "GatherNd, Reshape)", lambda: f(v), base, "numpy loop", per="node",
                 units=5 * groups, peer_op="mixed_chain", peer_inputs=(v,),
                 peer_params={"groups": groups})]


def t1_tracing_overhead(scale: float) -> list[Case]:
    """Tracing off costs nothing: ``sess.run`` with ``RunOptions(trace=False)``
    against ``sess.run`` without options (ratio ~1.00), and what tracing on
    costs, on W7's ScatterNd (fed: the constant one folds to no step at all) and on a
    chain of 100 tiny Adds (fed)."""
    g = gf.Graph()
    s = gf.Scope(g)
    i = s.placeholder(gf.int32, shape=[4, 1])
    u = s.placeholder(gf.int32, shape=[4])
    seed = s.scatter_nd(i, u, [8])
    seed_feeds = {i: np.array([[4], [3], [1], [7]], np.int32),
                  u: np.array([9, 10, 11, 12], np.int32)}
    x = s.placeholder(gf.float32, shape=[4])
    h = x
    for _ in range(100):
        h = s.add(h, x)
    v = np.ones(4, np.float32)
    sess = _session(g)
    off, on = gf.RunOptions(trace=False), gf.RunOptions(trace=True)
    cases = []
    for label, fetch, feeds, feed_list in (("ScatterNd [8] <- 4 (fed)", seed, seed_feeds, [i, u]),
                                           ("chain of 100 tiny Add", h, {x: v}, [x])):
        def plain(fetch=fetch, feeds=feeds):
            return sess.run(fetch, feeds)

        def trace_off(fetch=fetch, feeds=feeds):
            return sess.run(fetch, feeds, options=off)

        def trace_on(fetch=fetch, feeds=feeds):
            md = gf.RunMetadata()
            out = sess.run(fetch, feeds, options=on, run_metadata=md)
            assert md.events
            return out
        f = sess.make_callable(fetch, feed_list)
        args = [feeds[k] for k in feed_list]
        np.testing.assert_array_equal(trace_on(), plain())
        cases += [
            Case("T1", f"{label}: run(options=trace off)", trace_off, plain, "run(), no options",
                 per="call", paired=True),
            Case("T1", f"{label}: run(options=trace on)", trace_on, plain, "run(), no options",
                 per="call", paired=True),
            Case("T1", f"{label}: make_callable", lambda f=f, a=args: f(*a), plain,
                 "run(), no options", per="call", paired=True)]
    return cases


WORKLOADS = {
    "W1": w1_scatter_nd_elements, "W2": w2_scatter_nd_slices, "W3": w3_tensor_scatter,
    "W4": w4_gather_nd, "W5": w5_partition_stitch, "W6": w6_executor_overhead,
    "W7": w7_seed_latency, "W7F": w7_fed, "W8": w8_sparse_sgd_step, "W9": w9_mixed_chain,
    "T1": t1_tracing_overhead,
}
