"""Independent branches of a serial run side by side (runtime/branches.py): the same
bits as one step at a time, on every call after the compile; the first error in serial
order, naming its node, and a session that goes on; no group where a branch would
join another or a step is not pure."""
from __future__ import annotations

import numpy as np
import pytest
from support.plan_steps import bits

import graphflow as gf
from graphflow.ops import intra_op

CALLS = 4


def _code(sess) -> str:
    """Every serial plan's generated source (the specialized ones too)."""
    text = []
    for plan in sess._plans.values():
        for p in [plan, *(q for q in plan.specialized.values() if q is not None)]:
            if p._serial is not None or p.parallel:
                p._serial_function() if p._serial is None else None
                text.append(p.serial_code.source)
    return "\n".join(text)


def _experts(s, k=4, width=16, hidden=32, joined=True):
    """k experts' two products on partitioned rows, stitched back when ``joined``."""
    x = s.placeholder(gf.float32, shape=[None, width])
    expert_of = s.placeholder(gf.int32, shape=[None])
    w_in = s.placeholder(gf.float32, shape=[k, width, hidden])
    w_out = s.placeholder(gf.float32, shape=[k, hidden, width])
    parts = s.dynamic_partition(x, expert_of, k)
    rows = s.dynamic_partition(s.range(0, s.size(expert_of), 1), expert_of, k)
    outs = [s.matmul(s.relu(s.matmul(p, s.gather_v2(w_in, e, 0))), s.gather_v2(w_out, e, 0))
            for e, p in enumerate(parts)]
    fetches = [s.dynamic_stitch(rows, outs)] if joined else outs
    return fetches, [x, expert_of, w_in, w_out]


def _feeds(rng, k=4, width=16, hidden=32, n=300):
    return [rng.normal(size=(n, width)).astype(np.float32),
            rng.integers(0, k, n).astype(np.int32),
            rng.normal(size=(k, width, hidden)).astype(np.float32),
            rng.normal(size=(k, hidden, width)).astype(np.float32)]


def _run(config, build, feeds):
    s = gf.Scope(gf.Graph())
    fetches, placeholders = build(s)
    with gf.Session(s.graph, config) as sess:
        f = sess.make_callable(fetches, placeholders)
        return [bits(f(*feeds)) for _ in range(CALLS)], _code(sess)


def _errors(build, good, bad) -> list[tuple[str, str]]:
    """(the error of a call fed ``bad``, the plans' code) with branches side by side and
    one step at a time, each after CALLS good calls; a good call after the error gives
    the bits the good calls gave (the session goes on)."""
    found = []
    for config in (gf.SessionConfig(inter_op_threads=1),
                   gf.SessionConfig(inter_op_threads=1, intra_op_threads=1)):
        s = gf.Scope(gf.Graph())
        fetches, placeholders = build(s)
        with gf.Session(s.graph, config) as sess:
            f = sess.make_callable(fetches, placeholders)
            want = [bits(f(*good)) for _ in range(CALLS)]
            with pytest.raises(gf.errors.InvalidArgumentError) as caught:
                f(*bad)
            assert bits(f(*good)) == want[-1]
            found.append((str(caught.value), _code(sess)))
    return found


needs_cores = pytest.mark.skipif(intra_op.cores() < 2, reason="one core: no branches")


@needs_cores
@pytest.mark.parametrize("joined", [True, False])
def test_branches_give_one_at_a_times_bits(joined):
    rng = np.random.default_rng(1)
    feeds = _feeds(rng)
    build = lambda s: _experts(s, joined=joined)  # noqa: E731
    side, code = _run(gf.SessionConfig(inter_op_threads=1), build, feeds)
    alone, alone_code = _run(gf.SessionConfig(inter_op_threads=1, intra_op_threads=1), build,
                             feeds)
    assert side == alone
    assert "branches side by side" in code and "branches side by side" not in alone_code


@needs_cores
def test_a_training_step_with_branches_gives_the_same_bits():
    """An MoE-like step, forward and backward branches, its variables after 4 steps."""
    def step(config):
        rng = np.random.default_rng(2)
        s = gf.Scope(gf.Graph())
        x = s.placeholder(gf.float32, shape=[None, 8])
        expert_of = s.placeholder(gf.int32, shape=[None])
        ws = [s.variable(rng.normal(size=(8, 8)).astype(np.float32), name=f"w{e}")
              for e in range(3)]
        parts = s.dynamic_partition(x, expert_of, 3)
        rows = s.dynamic_partition(s.range(0, s.size(expert_of), 1), expert_of, 3)
        y = s.dynamic_stitch(rows, [s.tanh(s.matmul(p, w)) for p, w in zip(parts, ws)])
        loss = s.reduce_sum(s.square(y))
        train = gf.train.GradientDescentOptimizer(0.01).minimize(loss)
        with gf.Session(s.graph, config) as sess:
            sess.run(gf.global_variables_initializer(s.graph))
            f = sess.make_callable([train, loss], [x, expert_of])
            feeds = [rng.normal(size=(200, 8)).astype(np.float32),
                     rng.integers(0, 3, 200).astype(np.int32)]
            losses = [f(*feeds)[1] for _ in range(CALLS)]
            return bits(losses + sess.run(ws)), _code(sess)
    side, code = step(gf.SessionConfig(inter_op_threads=1))
    alone, _ = step(gf.SessionConfig(inter_op_threads=1, intra_op_threads=1))
    assert side == alone and "branches side by side" in code


@needs_cores
def test_the_first_error_in_serial_order_is_raised_and_the_session_goes_on():
    """Two branches whose products fail on the fed shapes: the earlier one's node is
    named, as a run one step at a time names it."""
    def build(s):
        x = s.placeholder(gf.float32, shape=[None, None])
        expert_of = s.placeholder(gf.int32, shape=[None])
        a = s.placeholder(gf.float32, shape=[None, 5], name="a")
        b = s.placeholder(gf.float32, shape=[None, 5], name="b")
        parts = s.dynamic_partition(x, expert_of, 2)
        first = s.matmul(s.matmul(parts[0], a, name="first"), a, transpose_b=True)
        second = s.matmul(s.matmul(parts[1], b, name="second"), b, transpose_b=True)
        return [first, second], [x, expert_of, a, b]
    rng = np.random.default_rng(3)
    good = [rng.normal(size=(40, 5)).astype(np.float32), rng.integers(0, 2, 40).astype(np.int32),
            rng.normal(size=(5, 5)).astype(np.float32), rng.normal(size=(5, 5)).astype(np.float32)]
    bad = list(good)
    bad[2] = rng.normal(size=(4, 5)).astype(np.float32)  # first's inner dims: 5 against 4
    bad[3] = rng.normal(size=(3, 5)).astype(np.float32)
    (side, side_code), (alone, alone_code) = _errors(build, good, bad)
    assert side == alone and "[node first]" in side
    assert "branches side by side" in side_code and "branches side by side" not in alone_code


@needs_cores
def test_no_group_where_branches_join_or_a_step_is_not_pure():
    """A stitch joins the branches; a variable's update is not pure: each ends a group
    before it, and a plan whose products mostly run alone makes none."""
    def build(s):
        x = s.placeholder(gf.float32, shape=[None, 6])
        expert_of = s.placeholder(gf.int32, shape=[None])
        w = s.placeholder(gf.float32, shape=[6, 6])
        parts = s.dynamic_partition(x, expert_of, 2)
        joined = s.matmul(s.concat([parts[0], parts[1]], 0), w)  # one product, both parts
        alone = [s.matmul(joined, w) for _ in range(3)]
        return alone, [x, expert_of, w]
    rng = np.random.default_rng(4)
    feeds = [rng.normal(size=(30, 6)).astype(np.float32), rng.integers(0, 2, 30).astype(np.int32),
             rng.normal(size=(6, 6)).astype(np.float32)]
    _, code = _run(gf.SessionConfig(inter_op_threads=1), build, feeds)
    assert "branches side by side" not in code


@needs_cores
def test_a_branch_error_before_a_failing_common_step_is_the_one_raised():
    """A step that reads no branch runs before the branches; when it fails, a branch
    step that comes first in serial order and fails too is the error raised."""
    def build(s):
        x = s.placeholder(gf.float32, shape=[None, None])
        expert_of = s.placeholder(gf.int32, shape=[None])
        a = s.placeholder(gf.float32, shape=[None, 5], name="a")
        table = s.placeholder(gf.float32, shape=[None, 5])
        pick = s.placeholder(gf.int32, shape=[None])
        parts = s.dynamic_partition(x, expert_of, 2)
        first = s.matmul(parts[0], a, name="first")  # serial order: first, then lookup
        looked_up = s.gather_v2(table, pick, 0, name="lookup")
        second = s.matmul(parts[1], a, name="second")
        return [s.matmul(first, looked_up, transpose_b=True), second], \
            [x, expert_of, a, table, pick]
    rng = np.random.default_rng(5)
    good = [rng.normal(size=(40, 5)).astype(np.float32), rng.integers(0, 2, 40).astype(np.int32),
            rng.normal(size=(5, 5)).astype(np.float32), rng.normal(size=(6, 5)).astype(np.float32),
            np.array([0, 1], np.int32)]
    bad = list(good)
    bad[2] = rng.normal(size=(4, 5)).astype(np.float32)  # both products fail
    bad[4] = np.array([0, 9], np.int32)  # and so does the lookup, after the first product
    (side, side_code), (alone, _) = _errors(build, good, bad)
    assert side == alone and "[node first]" in side
    assert "branches side by side" in side_code
