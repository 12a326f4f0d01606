"""The undo journal of a run's writes (runtime/resources.py), which lets a distributed
run commit only when every stage succeeded: checked locally, without dask. Every
variable update saves what it overwrites (rows for sparse updates), and a rollback
restores the variables bit for bit; without a journal the hooks do nothing."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import graphflow as gf
from graphflow.runtime.resources import Journal, active_journal, journaling

SERIAL = gf.SessionConfig(inter_op_threads=1)  # kernels run on the journaling thread


def _updates(scope, v, kind, rng):
    """One update of variable ``v`` (shape [6, 2]) of the given kind, with duplicates."""
    ids = rng.integers(0, 6, (4, 1))
    rows = rng.standard_normal((4, 2)).astype(np.float32)
    if kind == "assign":
        return v.assign(rng.standard_normal((6, 2)).astype(np.float32), read_value=False)
    if kind == "assign_add":
        return v.assign_add(np.ones((6, 2), np.float32), read_value=False)
    if kind == "assign_sub":
        return v.assign_sub(np.ones((6, 2), np.float32), read_value=False)
    if kind == "ignore_bad_rows":
        ids[0, 0] = 99  # skipped under IGNORE: saves nothing, writes nothing
        return v.scatter_nd_add(ids, rows, read_value=False, bad_indices_policy="IGNORE")
    if kind == "elements":
        return v.scatter_nd_update(rng.integers(0, 2, (3, 2)), rows[:3, 0], read_value=False)
    if kind == "adagrad":
        acc = scope.variable(np.ones((6, 2), np.float32), name="acc")
        return acc, scope.resource_sparse_apply_adagrad(
            v.handle, acc.handle, np.float32(0.1), rows, ids[:, 0], name="adagrad")
    return getattr(v, f"scatter_nd_{kind}")(ids, rows, read_value=False)


KINDS = ["assign", "assign_add", "assign_sub", "add", "sub", "update", "min", "max",
         "ignore_bad_rows", "elements", "adagrad"]


@pytest.mark.parametrize("kind", KINDS)
def test_rollback_restores_every_kind_of_write(scope, kind):
    rng = np.random.default_rng(KINDS.index(kind))
    start = rng.standard_normal((6, 2)).astype(np.float32)
    v = scope.variable(start, name="v")
    made = _updates(scope, v, kind, rng)
    extra, update = made if isinstance(made, tuple) else (None, made)
    with gf.Session(scope.graph, SERIAL) as sess:
        sess.run(gf.global_variables_initializer(scope.graph))
        journal = Journal()
        with journaling(journal):
            sess.run(update)
            sess.run(update)
        changed = sess.run(v.read())
        assert len(journal) >= 2 or kind == "ignore_bad_rows"
        journal.rollback()
        np.testing.assert_array_equal(sess.run(v.read()), start)
        if extra is not None:
            np.testing.assert_array_equal(sess.run(extra.read()), np.ones((6, 2)))
        assert len(journal) == 0
        if kind not in ("ignore_bad_rows",):
            assert not np.array_equal(changed, start)


def test_rollback_of_an_initializer_uninitializes(scope):
    v = scope.variable(np.ones(3, np.float32), name="v")
    with gf.Session(scope.graph, SERIAL) as sess:
        journal = Journal()
        with journaling(journal):
            sess.run(v.initializer)
        journal.rollback()
        with pytest.raises(gf.errors.FailedPreconditionError, match="uninitialized"):
            sess.run(v.read())


def test_sparse_writes_save_only_their_rows(scope):
    v = scope.variable(np.zeros((1000, 8), np.float32), name="v")
    add = v.scatter_nd_add([[3], [3], [999]], np.ones((3, 8), np.float32), read_value=False)
    with gf.Session(scope.graph, SERIAL) as sess:
        sess.run(v.initializer)
        journal = Journal()
        with journaling(journal):
            sess.run(add)
        saved = journal._entries[0][2]
        assert saved.shape == (3, 8)  # 3 rows (duplicates included), not the table


def test_no_journal_no_cost(scope):
    assert active_journal() is None
    v = scope.variable(np.zeros((4, 2), np.float32), name="v")
    add = v.scatter_nd_add([[1]], np.ones((1, 2), np.float32), read_value=False)
    with gf.Session(scope.graph, SERIAL) as sess:
        sess.run(v.initializer)
        journal = Journal()
        with journaling(journal):
            assert active_journal() is journal
        assert active_journal() is None
        sess.run(add)  # outside: nothing saved
        assert len(journal) == 0
    with journaling(None):
        assert active_journal() is None


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(KINDS[:-1]), min_size=1, max_size=6), st.integers(0, 2 ** 16))
def test_any_sequence_of_writes_rolls_back_exactly(kinds, seed):
    rng = np.random.default_rng(seed)
    scope = gf.Scope(gf.Graph())
    start = rng.standard_normal((6, 2)).astype(np.float32)
    v = scope.variable(start, name="v")
    updates = [_updates(scope, v, kind, rng) for kind in kinds]
    with gf.Session(scope.graph, SERIAL) as sess:
        sess.run(v.initializer)
        journal = Journal()
        with journaling(journal):
            for u in updates:
                sess.run(u)
        journal.rollback()
        np.testing.assert_array_equal(sess.run(v.read()), start)
