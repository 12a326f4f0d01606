"""TF 1.x's Momentum, Adam and RMSProp optimizers (issue #35), global_step and the
learning-rate schedules.

The references below are numpy written out from TensorFlow 1.x's formulas
(training_ops.cc functors, and the Python of ``tf.compat.v1.train``: hyperparameters
float32 then cast to the variable's dtype, duplicates summed before a sparse update,
Adam's sparse update decaying every row of m and v, beta powers in float32), one row
at a time for the sparse updates: they share no code with graphflow's kernels. Each
run compares the variables and every slot after each of 20 steps, bit for bit.
"""
from __future__ import annotations


import numpy as np
import pytest

import graphflow as gf

STEPS = 20
W_SHAPE, T_SHAPE, N_IDS = (5, 3), (8, 3), 6


# -- numpy references --------------------------------------------------------------------------
def _h(value: float, dtype) -> np.ndarray:
    """A hyperparameter as TF 1.x makes it: float32, cast to the variable's dtype."""
    return np.asarray(np.float32(value)).astype(dtype)


def _dedup(ids: np.ndarray, values: np.ndarray) -> dict[int, np.ndarray]:
    """TF's _deduplicate_indexed_slices: row -> its values summed in index order."""
    summed: dict[int, np.ndarray] = {}
    for i, row in enumerate(ids.tolist()):
        summed[row] = (summed[row] if row in summed else np.zeros_like(values[i])) + values[i]
    return summed


class MomentumRef:
    slots = ("momentum",)

    def __init__(self, dtype, lr=0.05, momentum=0.9, use_nesterov=False):
        self.lr, self.m, self.nesterov = _h(lr, dtype), _h(momentum, dtype), use_nesterov

    def start(self, var):
        return {"momentum": np.zeros_like(var)}

    def dense(self, var, s, g):
        lr, m = self.lr, self.m
        s["momentum"] = s["momentum"] * m + g
        a = s["momentum"]
        return var - (g * lr + a * m * lr) if self.nesterov else var - a * lr

    def sparse(self, var, s, ids, values):
        lr, m = self.lr, self.m
        var = var.copy()
        for row, g in _dedup(ids, values).items():
            a = s["momentum"][row] * m + g
            s["momentum"][row] = a
            var[row] = var[row] - (lr * g + lr * m * a) if self.nesterov else var[row] - lr * a
        return var

    def finish(self):
        pass


class AdamRef:
    slots = ("m", "v")

    def __init__(self, dtype, lr=0.01, beta1=0.9, beta2=0.999, epsilon=1e-8):
        self.dtype = dtype
        self.lr, self.b1, self.b2, self.eps = (_h(x, dtype) for x in (lr, beta1, beta2, epsilon))
        self.b1_t, self.b2_t = np.float32(beta1), np.float32(beta2)
        self.b1_power, self.b2_power = np.float32(beta1), np.float32(beta2)

    def start(self, var):
        return {"m": np.zeros_like(var), "v": np.zeros_like(var)}

    def _alpha(self):
        one = self.dtype(1)
        b1p, b2p = (np.asarray(p).astype(self.dtype) for p in (self.b1_power, self.b2_power))
        return self.lr * np.sqrt(one - b2p) / (one - b1p)

    def dense(self, var, s, g):
        one = self.dtype(1)
        s["m"] = s["m"] + (g - s["m"]) * (one - self.b1)
        s["v"] = s["v"] + (g * g - s["v"]) * (one - self.b2)
        return var - (s["m"] * self._alpha()) / (np.sqrt(s["v"]) + self.eps)

    def sparse(self, var, s, ids, values):
        """TF 1.x _apply_sparse_shared: every row decays, the summed rows are added."""
        one = self.dtype(1)
        s["m"] = s["m"] * self.b1
        s["v"] = s["v"] * self.b2
        for row, g in _dedup(ids, values).items():
            s["m"][row] = s["m"][row] + g * (one - self.b1)
            s["v"][row] = s["v"][row] + (g * g) * (one - self.b2)
        return var - self._alpha() * s["m"] / (np.sqrt(s["v"]) + self.eps)

    def finish(self):
        self.b1_power = self.b1_power * self.b1_t
        self.b2_power = self.b2_power * self.b2_t


class RMSPropRef:
    def __init__(self, dtype, lr=0.01, decay=0.9, momentum=0.0, epsilon=1e-10, centered=False):
        self.dtype, self.centered = dtype, centered
        self.lr, self.rho, self.m, self.eps = (_h(x, dtype) for x in (lr, decay, momentum,
                                                                      epsilon))
        self.slots = ("rms", "mg", "momentum") if centered else ("rms", "momentum")

    def start(self, var):
        s = {"rms": np.ones_like(var), "momentum": np.zeros_like(var)}
        if self.centered:
            s["mg"] = np.zeros_like(var)
        return s

    def dense(self, var, s, g):
        one = self.dtype(1)
        s["rms"] = s["rms"] + (g * g - s["rms"]) * (one - self.rho)
        if self.centered:
            s["mg"] = s["mg"] + (g - s["mg"]) * (one - self.rho)
            denom = (s["rms"] - s["mg"] * s["mg"]) + self.eps
        else:
            denom = s["rms"] + self.eps
        s["momentum"] = s["momentum"] * self.m + (g * self.lr) / np.sqrt(denom)
        return var - s["momentum"]

    def sparse(self, var, s, ids, values):
        one = self.dtype(1)
        var = var.copy()
        for row, g in _dedup(ids, values).items():
            ms = s["rms"][row] * self.rho + (g * g) * (one - self.rho)
            s["rms"][row] = ms
            if self.centered:
                mg = s["mg"][row] * self.rho + g * (one - self.rho)
                s["mg"][row] = mg
                denom = (ms + self.eps) - mg * mg
            else:
                denom = ms + self.eps
            mom = s["momentum"][row] * self.m + (one / np.sqrt(denom)) * self.lr * g
            s["momentum"][row] = mom
            var[row] = var[row] - mom
        return var

    def finish(self):
        pass


CONFIGS = {
    "momentum": (gf.train.MomentumOptimizer, MomentumRef, dict(learning_rate=0.05, momentum=0.9)),
    "nesterov": (gf.train.MomentumOptimizer, MomentumRef,
                 dict(learning_rate=0.05, momentum=0.9, use_nesterov=True)),
    "adam": (gf.train.AdamOptimizer, AdamRef, dict(learning_rate=0.01)),
    "rmsprop": (gf.train.RMSPropOptimizer, RMSPropRef, dict(learning_rate=0.01)),
    "rmsprop_momentum": (gf.train.RMSPropOptimizer, RMSPropRef,
                         dict(learning_rate=0.01, momentum=0.5)),
    "centered": (gf.train.RMSPropOptimizer, RMSPropRef, dict(learning_rate=0.01, centered=True)),
    "centered_momentum": (gf.train.RMSPropOptimizer, RMSPropRef,
                          dict(learning_rate=0.01, momentum=0.5, centered=True)),
}
_REF_ARGS = {"learning_rate": "lr"}


def _reference(config: str, dtype):
    _, ref, kwargs = CONFIGS[config]
    return ref(dtype, **{_REF_ARGS.get(k, k): v for k, v in kwargs.items()})


def _optimizer(config: str, **overrides):
    opt, _, kwargs = CONFIGS[config]
    return opt(**{**kwargs, **overrides})


# -- a model with fed gradients: one dense variable, one table updated sparsely --------------------
class Model:
    """w (dense gradient) and t (an IndexedSlices of duplicate ids), gradients fed, so the
    optimizer alone is under test; ``step`` increments ``global_step``."""

    def __init__(self, config: str, dtype, **overrides):
        self.dtype = dtype
        rng = np.random.default_rng(7)
        self.graph = g = gf.Graph()
        s = gf.Scope(g)
        self.w = s.variable(rng.normal(size=W_SHAPE).astype(dtype), name="w")
        self.t = s.variable(rng.normal(size=T_SHAPE).astype(dtype), name="t")
        self.gw = s.placeholder(gf.as_dtype(dtype), shape=list(W_SHAPE), name="gw")
        self.gv = s.placeholder(gf.as_dtype(dtype), shape=[None, T_SHAPE[1]], name="gv")
        self.gi = s.placeholder(gf.int32, shape=[None], name="gi")
        sparse = gf.IndexedSlices(self.gv, self.gi, s.constant(np.array(T_SHAPE, np.int32)))
        self.global_step = gf.train.get_or_create_global_step(g)
        self.opt = _optimizer(config, **overrides)
        self.step = self.opt.apply_gradients([(self.gw, self.w), (sparse, self.t)],
                                             global_step=self.global_step)

    def feeds(self, seed: int):
        rng = np.random.default_rng(seed)
        ids = rng.integers(0, T_SHAPE[0], N_IDS).astype(np.int32)
        ids[1] = ids[0]  # a duplicate every step
        return (rng.normal(size=W_SHAPE).astype(self.dtype),
                rng.normal(size=(N_IDS, T_SHAPE[1])).astype(self.dtype), ids)

    def state(self, sess) -> dict[str, np.ndarray]:
        """Every variable of the graph by name: w, t, their slots, beta powers, global_step."""
        variables = gf.global_variables(self.graph)
        return dict(zip((v.name for v in variables), sess.run(variables)))


def _expected_state(model: Model, ref, sess) -> dict:
    start = model.state(sess)
    return {"w": start["w"], "t": start["t"], "w_slots": ref.start(start["w"]),
            "t_slots": ref.start(start["t"])}


def _ref_step(ref, expected: dict, feeds) -> None:
    gw, gv, gi = feeds
    expected["w"] = ref.dense(expected["w"], expected["w_slots"], gw)
    expected["t"] = ref.sparse(expected["t"], expected["t_slots"], gi, gv)
    ref.finish()


def _assert_matches(model: Model, got: dict, expected: dict, ref, step: int) -> None:
    for var in ("w", "t"):
        np.testing.assert_array_equal(got[var], expected[var], err_msg=f"{var} after step {step}")
        primary = model.w if var == "w" else model.t
        for slot in ref.slots:
            name = model.opt.get_slot(primary, slot).name
            np.testing.assert_array_equal(got[name], expected[f"{var}_slots"][slot],
                                          err_msg=f"slot {slot} of {var} after step {step}")
    if isinstance(ref, AdamRef):
        assert got["beta1_power"] == ref.b1_power and got["beta2_power"] == ref.b2_power
    assert got["global_step"] == step


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_matches_tf1_formulas_bit_for_bit_over_20_steps(config, dtype):
    """Dense and sparse (duplicate ids) updates, every slot, through make_callable (its
    third and later calls run the compiled plan)."""
    model, ref = Model(config, dtype), _reference(config, dtype)
    with gf.Session(model.graph) as sess:
        sess.run(gf.global_variables_initializer(model.graph))
        expected = _expected_state(model, ref, sess)
        run = sess.make_callable(model.step, [model.gw, model.gv, model.gi])
        for step in range(1, STEPS + 1):
            feeds = model.feeds(step)
            run(*feeds)
            _ref_step(ref, expected, feeds)
            _assert_matches(model, model.state(sess), expected, ref, step)


@pytest.mark.parametrize("config", ["momentum", "adam", "centered_momentum"])
def test_minimize_differentiates_and_applies_as_the_reference(config):
    """minimize(loss, global_step): loss = sum(w^2) + sum(t[ids]^2), so the gradients are
    2w and the rows 2 t[ids] (ids with a duplicate)."""
    g = gf.Graph()
    s = gf.Scope(g)
    w0 = np.linspace(-1, 1, 15, dtype=np.float32).reshape(W_SHAPE)
    t0 = np.linspace(2, -2, 24, dtype=np.float32).reshape(T_SHAPE)
    w, t = s.variable(w0, name="w"), s.variable(t0, name="t")
    ids = np.array([1, 4, 1, 6], np.int32)
    rows = t.sparse_read(ids)
    loss = s.add(s.reduce_sum(s.mul(w, w)), s.reduce_sum(s.mul(rows, rows)))
    step_var = gf.train.get_or_create_global_step(g)
    opt = _optimizer(config)
    step = opt.minimize(loss, step_var)  # TF 1.x's positional order
    ref = _reference(config, np.float32)
    expected = {"w": w0, "t": t0, "w_slots": ref.start(w0), "t_slots": ref.start(t0)}
    with gf.Session(g) as sess:
        sess.run(gf.global_variables_initializer(g))
        run = sess.make_callable(step)
        for k in range(1, 6):
            run()
            two = np.float32(2)
            _ref_step(ref, expected, (two * expected["w"], two * expected["t"][ids], ids))
            np.testing.assert_allclose(sess.run(w), expected["w"], rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(sess.run(t), expected["t"], rtol=1e-6, atol=1e-7)
        assert sess.run(step_var) == 5


# -- TF 1.x semantics worth a test of their own ----------------------------------------------------
def test_adam_sparse_update_moves_every_row_momentum_does_not():
    """tf.compat.v1.train.AdamOptimizer decays m and v everywhere and moves every row whose
    m is not zero; Momentum and RMSProp touch only the gradient's rows."""
    for config, moves in (("adam", True), ("momentum", False), ("rmsprop", False)):
        model = Model(config, np.float32)
        with gf.Session(model.graph) as sess:
            sess.run(gf.global_variables_initializer(model.graph))
            zeros = np.zeros(W_SHAPE, np.float32)
            sess.run(model.step, {model.gw: zeros, model.gv: np.ones((1, 3), np.float32),
                                  model.gi: [2]})
            before = sess.run(model.t)
            sess.run(model.step, {model.gw: zeros, model.gv: np.ones((1, 3), np.float32),
                                  model.gi: [5]})
            after = sess.run(model.t)
            assert (after[2] != before[2]).all() == moves, config
            untouched = [0, 1, 3, 4, 6, 7]
            np.testing.assert_array_equal(after[untouched], before[untouched])


def test_float64_variables_see_float32_hyperparameters_as_tf1():
    """convert_to_tensor(0.1) is float32; the update casts it: float64(float32(0.1))."""
    g = gf.Graph()
    s = gf.Scope(g)
    w = s.variable(np.array([1.0]), name="w")
    step = gf.train.MomentumOptimizer(0.1, 0.0).apply_gradients([(np.array([1.0]), w)])
    exact = gf.train.MomentumOptimizer(s.constant(0.1, dtype=gf.float64), 0.0) \
        .apply_gradients([(np.array([1.0]), w)])
    with gf.Session(g) as sess:
        sess.run(gf.global_variables_initializer(g))
        sess.run(step)
        assert sess.run(w)[0] == 1.0 - np.float64(np.float32(0.1))
        sess.run(exact)
        assert sess.run(w)[0] == 1.0 - np.float64(np.float32(0.1)) - 0.1


def test_raw_sparse_kernels_apply_duplicates_one_after_another():
    """TF's kernel, called directly: a duplicate row gets two momentum steps (the
    optimizer sums duplicates first, so it gets one step of the sum)."""
    g = gf.Graph()
    s = gf.Scope(g)
    var = s.variable(np.ones((2, 1), np.float32), name="var")
    accum = s.variable(np.zeros((2, 1), np.float32), name="accum")
    lr, m = np.float32(0.5), np.float32(0.9)
    op = s.resource_sparse_apply_momentum(var.handle, accum.handle, lr,
                                          np.ones((2, 1), np.float32), np.array([0, 0]), m)
    with gf.Session(g) as sess:
        sess.run(gf.global_variables_initializer(g))
        sess.run(op)
        a1 = np.float32(1)
        a2 = a1 * m + np.float32(1)
        assert sess.run(accum)[0, 0] == a2
        assert sess.run(var)[0, 0] == np.float32(1) - lr * a1 - lr * a2


# -- slots, names, checkpoints ---------------------------------------------------------------------
def test_slot_and_non_slot_variables_are_named_as_tf1():
    g = gf.Graph()
    s = gf.Scope(g)
    w = s.variable(np.ones((2, 2), np.float32), name="layer/w")
    a = s.variable(np.ones(2, np.float32), name="a")
    loss = s.add(s.reduce_sum(s.mul(w, w)), s.reduce_sum(a))
    adam, adam2 = gf.train.AdamOptimizer(), gf.train.AdamOptimizer()
    adam.minimize(loss, var_list=[w, a])
    adam2.minimize(loss, var_list=[w])
    assert adam.get_slot_names() == ["m", "v"]
    assert [adam.get_slot(w, n).name for n in ("m", "v")] == ["layer/w/Adam", "layer/w/Adam_1"]
    assert [adam2.get_slot(w, n).name for n in ("m", "v")] == ["layer/w/Adam_2", "layer/w/Adam_3"]
    assert adam.get_slot(a, "m").name == "a/Adam"
    names = {v.name for v in gf.global_variables(g)}
    assert {"beta1_power", "beta2_power", "beta1_power_1", "beta2_power_1"} <= names
    assert adam._get_beta_accumulators(g)[0].device == a.device  # beside min(var_list) by name
    rms = gf.train.RMSPropOptimizer(0.1, centered=True)
    rms.minimize(loss, var_list=[w])
    assert rms.get_slot_names() == ["mg", "momentum", "rms"]
    assert [rms.get_slot(w, n).name for n in ("rms", "mg", "momentum")] == \
        ["layer/w/RMSProp", "layer/w/RMSProp_1", "layer/w/RMSProp_2"]
    plain = gf.train.RMSPropOptimizer(0.1, name="Plain")
    plain.minimize(loss, var_list=[w])
    assert plain.get_slot_names() == ["momentum", "rms"] and plain.get_slot(w, "mg") is None
    assert plain.get_slot(w, "momentum").name == "layer/w/Plain_1"
    mom = gf.train.MomentumOptimizer(0.1, 0.9)
    assert mom.get_slot(w, "momentum") is None  # before minimize
    mom.minimize(loss, var_list=[w])
    assert mom.get_slot_names() == ["momentum"] and mom.get_slot(w, "momentum").name == \
        "layer/w/Momentum"
    with pytest.raises(ValueError, match="has no slot 'accumulator'"):
        mom.get_slot(w, "accumulator")
    with gf.Session(g) as sess:
        sess.run(gf.global_variables_initializer(g))
        np.testing.assert_array_equal(sess.run(rms.get_slot(w, "rms")), np.ones((2, 2)))
        assert sess.run(adam._get_beta_accumulators(g)[1]) == np.float32(0.999)


def _checkpoint_names(path) -> set[str]:
    """The tensor names of a checkpoint (TF's tensor bundle, graphflow/tools/saver.py)."""
    return {k for k, _ in gf.saver.list_variables(path)}


@pytest.mark.parametrize("config", ["nesterov", "adam", "centered_momentum"])
def test_checkpoint_mid_training_restores_slots_and_continues_bit_for_bit(config, tmp_path):
    model = Model(config, np.float32)
    with gf.Session(model.graph) as sess:
        sess.run(gf.global_variables_initializer(model.graph))
        for k in range(4):
            sess.run(model.step, dict(zip((model.gw, model.gv, model.gi), model.feeds(k))))
        path = gf.train.Saver().save(sess, tmp_path / "mid.ckpt")
        for k in range(4, 8):
            sess.run(model.step, dict(zip((model.gw, model.gv, model.gi), model.feeds(k))))
        continued = model.state(sess)
    slots = {model.opt.get_slot(v, n).name for v in (model.w, model.t)
             for n in model.opt.get_slot_names() if model.opt.get_slot(v, n) is not None}
    assert slots | {"w", "t", "global_step"} <= _checkpoint_names(path)
    with gf.Session(model.graph) as fresh:  # no initializer runs: the checkpoint holds all
        gf.train.Saver().restore(fresh, path)
        assert fresh.run(model.global_step) == 4
        for k in range(4, 8):
            fresh.run(model.step, dict(zip((model.gw, model.gv, model.gi), model.feeds(k))))
        restored = model.state(fresh)
    assert continued.keys() == restored.keys()
    for name in continued:
        assert continued[name].tobytes() == restored[name].tobytes(), name


# -- errors: TF's classes, the node named, nothing written ---------------------------------------
@pytest.mark.parametrize("config", ["momentum", "adam", "rmsprop", "centered"])
def test_bad_gradients_are_refused_at_build_time_naming_the_node(config):
    g = gf.Graph()
    s = gf.Scope(g)
    w = s.variable(np.ones((3, 2), np.float32), name="w")
    op_type = {"momentum": "ResourceApplyMomentum", "adam": "ResourceApplyAdam",
               "rmsprop": "ResourceApplyRMSProp", "centered": "ResourceApplyCenteredRMSProp"}
    with pytest.raises(gf.errors.InvalidArgumentError,
                       match=rf"var and grad do not have the same shape: \[3,2\] \[3,3\] "
                             rf"\[node \w+/update_w/{op_type[config]}\]"):
        _optimizer(config).apply_gradients([(s.placeholder(gf.float32, [3, 3]), w)])
    with pytest.raises(TypeError, match=r"Input 'grad' of '\w+' Op has type float64 that "
                                        r"does not match type float32"):
        _optimizer(config).apply_gradients([(s.placeholder(gf.float64, [3, 2]), w)])
    rows = gf.IndexedSlices(s.placeholder(gf.float32, [2, 3]), s.constant([0, 1]),
                            s.constant([3, 2]))
    with pytest.raises(gf.errors.InvalidArgumentError, match="var and grad must match in "
                                                            "dimension 1"):
        _optimizer(config).apply_gradients([(rows, w)])
    with pytest.raises(gf.errors.InvalidArgumentError, match="learning_rate must be a scalar"):
        _optimizer(config, learning_rate=s.placeholder(gf.float32, [2]))
    with pytest.raises(TypeError, match="learning_rate must be a number or a scalar Output"):
        _optimizer(config, learning_rate="fast")


def _snapshot(sess, graph) -> dict[str, bytes]:
    variables = gf.global_variables(graph)
    return {v.name: value.tobytes() for v, value in zip(variables, sess.run(variables))}


@pytest.mark.parametrize("config", ["nesterov", "adam", "centered_momentum"])
def test_a_failed_step_writes_nothing(config):
    """A fed non-scalar learning rate (TF's "lr is not a scalar", naming the node) or an
    out-of-range row leaves every variable, slot, beta power and the global step as it was."""
    g = gf.Graph()
    s = gf.Scope(g)
    w = s.variable(np.ones((4, 2), np.float32), name="w")
    rate = s.placeholder(gf.float32, shape=None, name="rate")
    ids = s.placeholder(gf.int32, shape=[None], name="ids")
    values = s.placeholder(gf.float32, shape=[None, 2], name="values")
    sparse = gf.IndexedSlices(values, ids, s.constant(np.array([4, 2], np.int32)))
    gs = gf.train.get_or_create_global_step(g)
    step = _optimizer(config, learning_rate=rate).apply_gradients([(sparse, w)], global_step=gs)
    good = {rate: np.float32(0.1), ids: [0, 1], values: np.ones((2, 2), np.float32)}
    with gf.Session(g) as sess:
        sess.run(gf.global_variables_initializer(g))
        sess.run(step, good)  # slots hold something other than their start
        before = _snapshot(sess, g)
        with pytest.raises(gf.errors.InvalidArgumentError,
                           match=r"lr is not a scalar: \[3\] \[node \w+/update_w/"):
            sess.run(step, {**good, rate: np.full(3, 0.1, np.float32)})
        assert _snapshot(sess, g) == before
        with pytest.raises(gf.errors.InvalidArgumentError,
                           match=r"Index 4 at offset \d in indices is out of range \[0, 4\)"):
            sess.run(step, {**good, ids: [0, 4]})
        assert _snapshot(sess, g) == before
        sess.run(step, good)
        assert sess.run(gs) == 2


@pytest.mark.parametrize("config", ["nesterov", "adam", "centered_momentum"])
def test_a_cluster_run_journals_every_write_so_a_rollback_restores_all(config):
    """A distributed run's undo journal (runtime/resources.py) gets what each update
    overwrites (the rows of a sparse one, every row for Adam's): a rollback brings every
    variable, slot, beta power and the global step back bit for bit."""
    from graphflow.runtime.resources import Journal, journaling
    model = Model(config, np.float32)
    serial = gf.SessionConfig(inter_op_threads=1)  # kernels run on the journaling thread
    with gf.Session(model.graph, serial) as sess:
        sess.run(gf.global_variables_initializer(model.graph))
        start = _snapshot(sess, model.graph)
        journal = Journal()
        with journaling(journal):
            for k in range(2):
                sess.run(model.step, dict(zip((model.gw, model.gv, model.gi), model.feeds(k))))
        assert _snapshot(sess, model.graph) != start
        journal.rollback()
        assert _snapshot(sess, model.graph) == start


def test_an_uninitialized_slot_is_a_failed_precondition_naming_it():
    g = gf.Graph()
    s = gf.Scope(g)
    w = s.variable(np.ones(2, np.float32), name="w")
    step = gf.train.MomentumOptimizer(0.1, 0.9).apply_gradients([(np.ones(2, np.float32), w)])
    with gf.Session(g) as sess:
        sess.run(w.initializer)
        with pytest.raises(gf.errors.FailedPreconditionError, match="'w/Momentum'"):
            sess.run(step)
        assert sess.run(w).tolist() == [1.0, 1.0]


# -- global_step and minimize's signature ----------------------------------------------------------
def test_global_step_and_minimize_arguments():
    g = gf.Graph()
    s = gf.Scope(g)
    w = s.variable(np.ones(2, np.float32), name="w")
    loss = s.reduce_sum(s.mul(w, w))
    gs = gf.train.get_or_create_global_step(g)
    assert gs is not None and gs.name == "global_step" and gs.dtype == gf.int64
    assert gs.shape == gf.TensorShape([])
    assert gf.train.get_or_create_global_step(g).handle is gs.handle
    assert gf.train.get_global_step(g).name == "global_step"
    step = gf.train.MomentumOptimizer(0.1, 0.9).minimize(loss, gs, [w], name="train")
    assert step.name == "train" and step.type == "AssignAddVariableOp"
    plain = gf.train.MomentumOptimizer(0.1, 0.9).minimize(loss, var_list=[w])
    assert plain.type == "NoOp"
    with pytest.raises(TypeError, match="global_step must be a gf.Variable.*var_list="):
        gf.train.AdamOptimizer().minimize(loss, [w])
    with pytest.raises(TypeError, match="no default graph"):
        gf.train.get_or_create_global_step()
    with gf.Session(g) as sess:
        sess.run(gf.global_variables_initializer(g))
        for _ in range(3):
            sess.run(step)
        assert sess.run(gs) == 3
        sess.run(plain)
        assert sess.run(gs) == 3
    other = gf.Graph()
    gf.Scope(other).variable(np.float32(0), name="global_step")
    with pytest.raises(TypeError, match='Existing "global_step" must be an integer variable'):
        gf.train.get_or_create_global_step(other)


# -- learning-rate schedules --------------------------------------------------------------------
def _needs(*ops: str):
    names = {d.name for d in gf.registered_ops()}
    return pytest.mark.skipif(not set(ops) <= names, reason=f"needs {ops} (dense math ops)")


@_needs("Pow", "Floor")
@pytest.mark.parametrize("staircase", [False, True])
def test_exponential_decay_as_tf1_builds_it(staircase):
    g = gf.Graph()
    gs = gf.train.get_or_create_global_step(g)
    lr = gf.train.exponential_decay(0.1, gs, 10, 0.5, staircase=staircase)
    assert lr.dtype == gf.float32 and lr.op.name == "ExponentialDecay"
    with gf.Session(g) as sess:
        for step in (0, 5, 10, 15, 25, 1000):
            sess.run(gs.assign(np.int64(step)))
            p = np.float32(step) / np.float32(10)
            p = np.floor(p) if staircase else p
            want = np.float32(0.1) * np.power(np.float32(0.5), p)
            np.testing.assert_allclose(sess.run(lr), want, rtol=1e-6)
    with pytest.raises(ValueError, match="global_step is required for exponential_decay"):
        gf.train.exponential_decay(0.1, None, 10, 0.5)


@_needs("Pow", "Floor")
def test_a_schedule_drives_an_optimizer_step_by_step():
    """The step's rate reads global_step before the step increments it."""
    g = gf.Graph()
    s = gf.Scope(g)
    w = s.variable(np.zeros(1, np.float32), name="w")
    gs = gf.train.get_or_create_global_step(g)
    lr = gf.train.exponential_decay(1.0, gs, 1, 0.5, staircase=True)
    step = gf.train.MomentumOptimizer(lr, 0.0).apply_gradients([(np.ones(1, np.float32), w)],
                                                               global_step=gs)
    with gf.Session(g) as sess:
        sess.run(gf.global_variables_initializer(g))
        for _ in range(4):
            sess.run(step)
        assert sess.run(w)[0] == -(1 + 0.5 + 0.25 + 0.125)


def test_piecewise_constant_as_tf1():
    g = gf.Graph()
    s = gf.Scope(g)
    gs = gf.train.get_or_create_global_step(g)  # int64; Python int boundaries are promoted
    lr = gf.train.piecewise_constant(gs, [10, 20], [1.0, 0.5, 0.1])
    assert lr.dtype == gf.float32 and lr.op.name == "PiecewiseConstant"
    with gf.Session(g) as sess:
        for step, want in ((0, 1.0), (10, 1.0), (11, 0.5), (20, 0.5), (21, 0.1), (10**6, 0.1)):
            sess.run(gs.assign(np.int64(step)))
            assert sess.run(lr) == np.float32(want), step
    x = s.placeholder(gf.float32, shape=[])
    rate = gf.train.piecewise_constant(x, [0.5], [3.0, 4.0])
    with gf.Session(g) as sess:
        assert [sess.run(rate, {x: v}) for v in (0.5, 0.75, np.nan)] == [3.0, 4.0, 3.0]
    with pytest.raises(ValueError, match=r"Boundaries \(float32\) must have the same dtype as "
                                         r"x \(int64\)"):
        gf.train.piecewise_constant(gs, [1.5], [1.0, 2.0])
    with pytest.raises(ValueError, match="1 less than the length of values"):
        gf.train.piecewise_constant(gs, [1, 2], [1.0, 2.0])
    with pytest.raises(ValueError, match="same dtype"):
        gf.train.piecewise_constant(gs, [1], [1.0, 2])
