"""JAX and TensorFlow beside graphflow: ``python -m benchmarks --peers``.

Each workload case names what it computes (``Case.peer_op``), the arrays
graphflow is fed (``Case.peer_inputs``) and its static parameters
(``Case.peer_params``). Here each peer writes the same computation in its own
API, once per op, and the result is checked against graphflow's before any
timing: shape and dtype first, then the bytes (bit-exact), else the values.

How each peer is called, so that it is timed as its users run it:

- JAX: ``jax.jit`` of the formulation, CPU backend; the inputs are placed on
  the device once (``jax.device_put``) before timing; every timed call ends in
  ``jax.block_until_ready``. ``jax_enable_x64`` is on, so int64 indices stay
  int64, as graphflow is fed (values stay float32). JAX does not check
  indices: an out-of-range gather clamps and an out-of-range scatter update is
  dropped, where graphflow and TensorFlow raise.
- TensorFlow: ``tf.function`` with ``jit_compile=False`` (the default: the
  graph executor, Grappler's rewrites and TensorFlow's CPU kernels, no XLA);
  the inputs are made tensors once before timing. A CPU call returns when its
  result is computed.

Neither peer's timing includes turning its result into a numpy array (only the
check does); graphflow returns numpy arrays, so its time has nothing to add.
Both peers run with their default thread pools (all cores).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import numpy as np

#: Peers whose columns ``--peers`` adds, in table order.
PEERS = ("jax", "tensorflow", "tf1", "torch")
INSTALL_HINT = "pip install '.[peers]'"


@dataclass(frozen=True)
class Formulation:
    """How one peer writes one op: the text the table shows, and a builder that
    takes the peer's module and the case's static parameters and returns a
    function of the inputs (compiled by the peer unless ``compiled`` is False)."""

    text: str
    build: Callable[..., Callable]
    compiled: bool = True
    note: str = ""


@dataclass
class PeerRun:
    """One peer on one case: what it runs, how its result compared, its callable."""

    status: str                      # "ok", "not installed", "not expressible", "failed"
    formulation: str = ""
    agreement: str = ""              # with graphflow's result: one of AGREEMENT, "" if not run
    check: str = ""                  # the comparison in words (or why the peer failed)
    run: Callable[[], object] | None = None
    note: str = ""                   # where the formulation differs from graphflow's op

    @property
    def comparable(self) -> bool:
        """Timed, and its result agreed with graphflow's (bit-exact or close)."""
        return self.run is not None and self.agreement != "mismatch"


# --- JAX formulations ---------------------------------------------------------------

def _jax_scatter_nd(jax, shape):
    jnp = jax.numpy

    def scatter_nd(indices, updates):
        return jnp.zeros(shape, updates.dtype).at[tuple(indices.T)].add(updates)
    return scatter_nd


def _jax_scatter_nd_constant(jax, indices, updates, shape):
    jnp = jax.numpy

    def scatter_nd():
        i, u = jnp.asarray(indices), jnp.asarray(updates)
        return jnp.zeros(shape, u.dtype).at[tuple(i.T)].add(u)
    return scatter_nd


def _jax_tensor_scatter(jax, combine, fill=None, shape=None):
    jnp = jax.numpy

    def tensor_scatter(*args):
        if fill is None:
            tensor, indices, updates = args
        else:
            indices, updates = args
            tensor = jnp.full(shape, fill, updates.dtype)
        return _jax_combine(tensor.at[tuple(indices.T)], combine, updates)
    return tensor_scatter


def _jax_combine(at, combine, updates):
    if combine == "sub":
        return at.add(-updates)
    return getattr(at, combine)(updates)


def _jax_tensor_scatter_chain(jax, chain, fill, shape):
    jnp = jax.numpy

    def chained(indices, updates):
        out = jnp.full(shape, fill, updates.dtype)
        for combine in chain:
            out = _jax_combine(out.at[tuple(indices.T)], combine, updates)
        return out
    return chained


def _jax_gather_nd(jax):
    def gather_nd(params, indices):
        return params[tuple(indices.T)]
    return gather_nd


def _jax_gather(jax):
    def gather(params, indices):
        return jax.numpy.take(params, indices, axis=0)
    return gather


def _jax_dynamic_partition(jax, num_partitions):
    def dynamic_partition(data, partitions):
        return [data[partitions == i] for i in range(num_partitions)]
    return dynamic_partition


def _jax_dynamic_stitch(jax, size):
    jnp = jax.numpy

    def dynamic_stitch(*args):
        half = len(args) // 2
        out = jnp.zeros(size, args[half].dtype)
        for idx, data in zip(args[:half], args[half:]):
            out = out.at[idx].set(data)
        return out
    return dynamic_stitch


def _jax_seed_pipeline(jax):
    jnp = jax.numpy

    def seed_pipeline(x):
        return jnp.where(x != -1, x + 1, x)
    return seed_pipeline


def _jax_add_chain(jax, length):
    def add_chain(x):
        h = x
        for _ in range(length):
            h = h + x
        return h
    return add_chain


def _jax_add_wide(jax, width):
    def add_wide(x):
        return [x + x for _ in range(width)]
    return add_wide


_COMBINE_TEXT = {"set": "set", "add": "add", "sub": "add(-u)", "max": "max", "min": "min"}

def _jax_sgd_step(jax):
    """The W8 step as JAX users write it: one jitted function of (table, ids, target)
    returning the new table (donated: updated in place) and the loss."""
    from .workloads import SGD_RATE, sgd_table
    jnp = jax.numpy

    def step(table, ids, target):
        def loss_of(rows):
            d = rows * jnp.float32(0.5) - target
            return jnp.sum(d * d)
        loss, grad = jax.value_and_grad(loss_of)(table[ids])
        return table.at[ids].add(-jnp.float32(SGD_RATE) * grad), loss
    jitted = jax.jit(step, donate_argnums=0)
    state = [jax.device_put(sgd_table())]

    def run(ids, target):
        state[0], loss = jitted(state[0], ids, target)
        return loss
    return run


JAX_FORMS: dict[str, Formulation] = {
    "sgd_step": Formulation("jax.jit(step, donate_argnums=0): table[ids], value_and_grad, "
                            "table.at[ids].add(-lr * g)", _jax_sgd_step, compiled=False),
    "scatter_nd": Formulation("jnp.zeros(shape).at[tuple(i.T)].add(u)", _jax_scatter_nd),
    "scatter_nd_constant": Formulation(
        "constants in the jitted function: jnp.zeros(shape).at[tuple(i.T)].add(u)",
        _jax_scatter_nd_constant, note="XLA may fold the constant scatter: this is its call cost"),
    "tensor_scatter": Formulation("t.at[tuple(i.T)].set(u) / .add(u), t an argument (copied)",
                                  _jax_tensor_scatter),
    "fill_tensor_scatter": Formulation("jnp.full(shape, v).at[tuple(i.T)].set(u) / .add(u)",
                                       _jax_tensor_scatter),
    "fill_tensor_scatter_chain": Formulation(
        "jnp.full(shape, v), then .at[tuple(i.T)].set / add / add(-u) / max / min",
        _jax_tensor_scatter_chain),
    "gather_nd": Formulation("params[tuple(i.T)]", _jax_gather_nd),
    "gather": Formulation("jnp.take(params, i, axis=0)", _jax_gather),
    "dynamic_partition": Formulation(
        "eager, not jit (output sizes depend on the data): [x[p == i] for i in range(k)]",
        _jax_dynamic_partition, compiled=False,
        note="a boolean mask is not jittable; a jitted stable argsort + split measured 10x slower"),
    "dynamic_stitch": Formulation("jnp.zeros(n).at[i0].set(d0).at[i1].set(d1)", _jax_dynamic_stitch,
                                  note="indices are unique here; among duplicates .set picks any"),
    "seed_pipeline": Formulation("jnp.where(x != -1, x + 1, x) (no partition/stitch under jit)",
                                 _jax_seed_pipeline),
    "add_chain": Formulation("h = h + x, 100 times (XLA fuses them)", _jax_add_chain),
    "add_wide": Formulation("[x + x for _ in range(100)]", _jax_add_wide),
}


# --- TensorFlow formulations ----------------------------------------------------------

def _tf_scatter_nd(tf, shape):
    def scatter_nd(indices, updates):
        return tf.scatter_nd(indices, updates, tf.constant(shape, indices.dtype))
    return scatter_nd


def _tf_scatter_nd_constant(tf, indices, updates, shape):
    index_dtype = tf.as_dtype(np.asarray(indices).dtype)

    def scatter_nd():
        return tf.scatter_nd(tf.constant(indices), tf.constant(updates),
                             tf.constant(shape, index_dtype))
    return scatter_nd


_TF_TENSOR_SCATTER = {"set": "tensor_scatter_nd_update", "add": "tensor_scatter_nd_add",
                      "sub": "tensor_scatter_nd_sub", "max": "tensor_scatter_nd_max",
                      "min": "tensor_scatter_nd_min"}


def _tf_tensor_scatter(tf, combine, fill=None, shape=None):
    op = getattr(tf, _TF_TENSOR_SCATTER[combine])

    def tensor_scatter(*args):
        if fill is None:
            tensor, indices, updates = args
        else:
            indices, updates = args
            tensor = tf.fill(tf.constant(shape, tf.int64), tf.constant(fill, updates.dtype))
        return op(tensor, indices, updates)
    return tensor_scatter


def _tf_tensor_scatter_chain(tf, chain, fill, shape):
    def chained(indices, updates):
        out = tf.fill(tf.constant(shape, tf.int64), tf.constant(fill, updates.dtype))
        for combine in chain:
            out = getattr(tf, _TF_TENSOR_SCATTER[combine])(out, indices, updates)
        return out
    return chained


def _tf_gather_nd(tf):
    return lambda params, indices: tf.gather_nd(params, indices)


def _tf_gather(tf):
    return lambda params, indices: tf.gather(params, indices)


def _tf_dynamic_partition(tf, num_partitions):
    return lambda data, partitions: tf.dynamic_partition(data, partitions, num_partitions)


def _tf_dynamic_stitch(tf, size):
    def dynamic_stitch(*args):
        half = len(args) // 2
        return tf.dynamic_stitch(list(args[:half]), list(args[half:]))
    return dynamic_stitch


def _tf_seed_pipeline(tf):
    def seed_pipeline(x):
        mask = tf.cast(tf.not_equal(x, tf.constant(-1, x.dtype)), tf.int32)
        data = tf.dynamic_partition(x, mask, 2)
        positions = tf.dynamic_partition(tf.range(tf.size(x)), mask, 2)
        return tf.dynamic_stitch(positions, [data[0], data[1] + tf.constant(1, x.dtype)])
    return seed_pipeline


def _tf_add_chain(tf, length):
    def add_chain(x):
        h = x
        for _ in range(length):
            h = tf.add(h, x)
        return h
    return add_chain


def _tf_add_wide(tf, width):
    return lambda x: [tf.add(x, x) for _ in range(width)]


def _tf_sgd_step(tf):
    from .workloads import SGD_RATE, sgd_table
    table = tf.Variable(sgd_table())

    @tf.function(jit_compile=False)
    def step(ids, target):
        with tf.GradientTape() as tape:
            d = tf.gather(table, ids) * 0.5 - target
            loss = tf.reduce_sum(d * d)
        grad = tape.gradient(loss, table)  # IndexedSlices
        table.scatter_sub(tf.IndexedSlices(SGD_RATE * grad.values, grad.indices))
        return loss
    return step


def _tf_mixed_chain(tf, groups):
    from .workloads import CHAIN_ORDER, CHAIN_ROWS

    def chain(x):
        h = x
        for _ in range(groups):
            h = (h + 1.0) * 0.5
            h = tf.tensor_scatter_nd_add(h, CHAIN_ROWS, tf.ones([2]))
            h = tf.reshape(tf.gather_nd(h, CHAIN_ORDER), [64])
        return h
    return chain


TF_FORMS: dict[str, Formulation] = {
    "sgd_step": Formulation("tf.function: GradientTape over tf.gather(table, ids), "
                            "table.scatter_sub(lr * IndexedSlices)", _tf_sgd_step,
                            compiled=False),
    "mixed_chain": Formulation("the same chain in a tf.function", _tf_mixed_chain),
    "scatter_nd": Formulation("tf.scatter_nd(i, u, shape)", _tf_scatter_nd),
    "scatter_nd_constant": Formulation("constants in the tf.function: tf.scatter_nd(i, u, shape)",
                                       _tf_scatter_nd_constant,
                                       note="Grappler may fold the constant scatter: this is its call cost"),
    "tensor_scatter": Formulation("tf.tensor_scatter_nd_update / _add(t, i, u), t an argument",
                                  _tf_tensor_scatter),
    "fill_tensor_scatter": Formulation("tf.tensor_scatter_nd_update / _add(tf.fill(shape, v), i, u)",
                                       _tf_tensor_scatter),
    "fill_tensor_scatter_chain": Formulation(
        "tf.fill, then tf.tensor_scatter_nd_update / _add / _sub / _max / _min",
        _tf_tensor_scatter_chain),
    "gather_nd": Formulation("tf.gather_nd(params, i)", _tf_gather_nd),
    "gather": Formulation("tf.gather(params, i)", _tf_gather),
    "dynamic_partition": Formulation("tf.dynamic_partition(x, p, k)", _tf_dynamic_partition),
    "dynamic_stitch": Formulation("tf.dynamic_stitch([i0, i1], [d0, d1])", _tf_dynamic_stitch),
    "seed_pipeline": Formulation("the same graph: dynamic_partition by mask, +1, dynamic_stitch",
                                 _tf_seed_pipeline),
    "add_chain": Formulation("h = tf.add(h, x), 100 times", _tf_add_chain),
    "add_wide": Formulation("[tf.add(x, x) for _ in range(100)]", _tf_add_wide),
}


# --- the peers ---------------------------------------------------------------------------

class Peer:
    """One framework: its import, how it places inputs, compiles a formulation,
    waits for a result and turns it into numpy."""

    key = ""
    label = ""
    how = ""                         # one line: how it is compiled, fed and waited for
    forms: dict[str, Formulation] = {}

    def __init__(self):
        self.module = None
        self.version = ""
        self.missing = ""
        try:
            self.module = self._load()
            self.version = self.module.__version__
        except ModuleNotFoundError:
            self.missing = f"not installed ({INSTALL_HINT})"
        except ImportError as e:
            self.missing = f"not installed: its import failed ({e})"

    def describe(self) -> str:
        return f"{self.label}: {self.missing}" if self.missing else f"{self.label} {self.version}"

    def prepare(self, case, reference) -> PeerRun:
        """Compile this peer's formulation of ``case`` and check it against
        ``reference`` (graphflow's result); its callable is what gets timed."""
        if self.missing:
            return PeerRun("not installed")
        form = self.forms.get(case.peer_op)
        if form is None:
            return PeerRun("not expressible")
        try:
            fn = form.build(self.module, **case.peer_params)
            if form.compiled:
                fn = self._compile(fn)
            args = self._place(case.peer_inputs)
            run = self._runner(fn, args)
            result = self._to_numpy(run())
        except Exception as e:  # a peer's failure is reported, never fatal
            return PeerRun("failed", form.text, check=f"{type(e).__name__}: {e}", note=form.note)
        return PeerRun("ok", form.text, *compare(result, reference), run=run, note=form.note)

    def _load(self):
        raise NotImplementedError

    def _compile(self, fn):
        raise NotImplementedError

    def _place(self, inputs):
        raise NotImplementedError

    def _runner(self, fn, args) -> Callable[[], object]:
        raise NotImplementedError

    def _to_numpy(self, result):
        if isinstance(result, (list, tuple)):
            return [np.asarray(r) for r in result]
        return np.asarray(result)


class JaxPeer(Peer):
    key = "jax"
    label = "JAX jit"
    how = "JAX: jax.jit, inputs placed once, block_until_ready per call, x64 on (int64 indices)."
    forms = JAX_FORMS

    def _load(self):
        import jax
        jax.config.update("jax_enable_x64", True)
        jax.config.update("jax_platforms", "cpu")
        return jax

    def _compile(self, fn):
        return self.module.jit(fn)

    def _place(self, inputs):
        return [self.module.device_put(a) for a in inputs]

    def _runner(self, fn, args):
        block = self.module.block_until_ready
        return lambda: block(fn(*args))


class TensorFlowPeer(Peer):
    key = "tensorflow"
    label = "TF tf.function"
    how = ("TensorFlow: tf.function with jit_compile=False (the default: no XLA), inputs made "
           "tensors once.")
    forms = TF_FORMS

    def _load(self):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf
        tf.config.set_visible_devices([], "GPU")
        return tf

    def _compile(self, fn):
        return self.module.function(fn, jit_compile=False)

    def _place(self, inputs):
        return [self.module.constant(a) for a in inputs]

    def _runner(self, fn, args):
        return lambda: fn(*args)

    def _to_numpy(self, result):
        if isinstance(result, (list, tuple)):
            return [r.numpy() for r in result]
        return result.numpy()


# --- TensorFlow 1.x graph mode: the natural anchor for per-call cost -----------------------
def _tf1_callable(tf, build):
    """``build(tf1)`` makes (fetch, placeholders) in a new tf.Graph; the result is
    ``Session.make_callable(fetch, feed_list=placeholders)``, after the initializers."""
    tf1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        fetch, feeds = build(tf1)
        init = tf1.global_variables_initializer()
    sess = tf1.Session(graph=graph)
    sess.run(init)
    return sess.make_callable(fetch, feed_list=feeds)


def _tf1_scatter_nd(tf, shape):
    made = []

    def scatter_nd(indices, updates):  # placeholders of the fed arrays' dtypes and shapes
        if not made:
            def build(tf1):
                i = tf1.placeholder(tf.as_dtype(indices.dtype), indices.shape)
                u = tf1.placeholder(tf.as_dtype(updates.dtype), updates.shape)
                return tf.scatter_nd(i, u, shape), [i, u]
            made.append(_tf1_callable(tf, build))
        return made[0](indices, updates)
    return scatter_nd


def _tf1_fed(tf, op):
    """``op(tf, *placeholders)`` in a TF 1.x graph, fed the arrays it is called with
    (placeholders of their dtypes and shapes, made on the first call)."""
    made = []

    def run(*arrays):
        if not made:
            def build(tf1):
                feeds = [tf1.placeholder(tf.as_dtype(a.dtype), a.shape) for a in arrays]
                return op(tf, *feeds), feeds
            made.append(_tf1_callable(tf, build))
        return made[0](*arrays)
    return run


def _tf1_gather_nd(tf):
    return _tf1_fed(tf, lambda tf, params, indices: tf.gather_nd(params, indices))


def _tf1_gather(tf):
    return _tf1_fed(tf, lambda tf, params, indices: tf.gather(params, indices))


def _tf1_scatter_nd_constant(tf, indices, updates, shape):
    return _tf1_callable(tf, lambda tf1: (tf.scatter_nd(indices, updates, shape), []))


def _tf1_sgd_step(tf):
    from .workloads import SGD_RATE, SGD_WIDTH, sgd_table

    def build(tf1):
        table = tf1.get_variable("table", initializer=sgd_table(), use_resource=True)
        ids = tf1.placeholder(tf.int32, [None])
        target = tf1.placeholder(tf.float32, [None, SGD_WIDTH])
        d = tf.gather(table, ids) * 0.5 - target
        loss = tf.reduce_sum(d * d)
        train = tf1.train.GradientDescentOptimizer(SGD_RATE).minimize(loss)
        return [train, loss], [ids, target]
    step = _tf1_callable(tf, build)
    return lambda ids, target: step(ids, target)[1]


def _tf1_mixed_chain(tf, groups):
    def build(tf1):
        x = tf1.placeholder(tf.float32, [64])
        return _tf_mixed_chain(tf, groups)(x), [x]
    return _tf1_callable(tf, build)


def _tf1_add_chain(tf, length):
    def build(tf1):
        x = tf1.placeholder(tf.float32, [4])
        return _tf_add_chain(tf, length)(x), [x]
    return _tf1_callable(tf, build)


def _tf1_add_wide(tf, width):
    def build(tf1):
        x = tf1.placeholder(tf.float32, [4])
        return _tf_add_wide(tf, width)(x), [x]
    return _tf1_callable(tf, build)


TF1_FORMS: dict[str, Formulation] = {
    "scatter_nd": Formulation("tf.scatter_nd(i, u, shape), i and u placeholders",
                              _tf1_scatter_nd, compiled=False),
    "scatter_nd_constant": Formulation("tf.scatter_nd of constants", _tf1_scatter_nd_constant,
                                       compiled=False),
    "gather_nd": Formulation("tf.gather_nd(params, i), params and i placeholders",
                             _tf1_gather_nd, compiled=False),
    "gather": Formulation("tf.gather(params, i), params and i placeholders", _tf1_gather,
                          compiled=False),
    "sgd_step": Formulation("GradientDescentOptimizer.minimize over tf.gather of a resource "
                            "variable; fetch [train, loss]", _tf1_sgd_step, compiled=False),
    "mixed_chain": Formulation("the same chain, x a placeholder", _tf1_mixed_chain,
                               compiled=False),
    "add_chain": Formulation("h = h + x, 100 times, x a placeholder", _tf1_add_chain,
                             compiled=False),
    "add_wide": Formulation("[x + x for _ in range(100)], x a placeholder", _tf1_add_wide,
                            compiled=False),
}


class TensorFlow1Peer(TensorFlowPeer):
    key = "tf1"
    label = "TF 1.x Session"
    how = ("TF 1.x: tf.compat.v1.Session.make_callable over placeholders (graph mode, "
           "Grappler on), numpy inputs fed per call.")
    forms = TF1_FORMS

    def _place(self, inputs):
        return list(inputs)

    def _to_numpy(self, result):
        return Peer._to_numpy(self, result)


#: PyTorch's formulations: the model steps (benchmarks/model_peers.py) only.
TORCH_FORMS: dict[str, Formulation] = {}


class TorchPeer(TensorFlowPeer):
    """Called and read back as TensorFlow's eager results are (``fn(*args)``, ``.numpy()``)."""

    key = "torch"
    label = "PyTorch"
    how = "PyTorch: eager mode (as its users train), CPU, inputs made tensors once."
    forms = TORCH_FORMS

    def _load(self):
        import torch
        return torch

    def _place(self, inputs):
        return [self.module.from_numpy(np.ascontiguousarray(a)) for a in inputs]


def load_peers() -> list[Peer]:
    """Every peer, installed or not (a missing one says so in its columns)."""
    from . import loops, model_peers
    model_peers.install()
    loops.install()
    return [JaxPeer(), TensorFlowPeer(), TensorFlow1Peer(), TorchPeer()]


#: How a peer's result can compare with graphflow's, best first.
AGREEMENT = ("bit-exact", "equal", "close", "mismatch")


def compare(result, reference) -> tuple[str, str]:
    """How a peer's result compares with graphflow's (``reference``): one of
    AGREEMENT, and the comparison in words. Shape and dtype first, then the
    bytes; "equal": the same values with other bits (signed zeros, NaN
    payloads); "close": float values within rtol 1e-5 / atol 1e-6."""
    if isinstance(reference, (list, tuple)):
        if not isinstance(result, (list, tuple)) or len(result) != len(reference):
            return "mismatch", f"{len(reference)} outputs expected"
        verdicts = [compare(r, e) for r, e in zip(result, reference)]
        worst = max(range(len(verdicts)), key=lambda i: AGREEMENT.index(verdicts[i][0]), default=0)
        if not verdicts or verdicts[worst][0] == "bit-exact":
            return "bit-exact", "bit-exact"
        return verdicts[worst][0], f"output {worst}: {verdicts[worst][1]}"
    result, reference = np.asarray(result), np.asarray(reference)
    if result.shape != reference.shape or result.dtype != reference.dtype:
        return "mismatch", (f"{result.dtype}{list(result.shape)}, graphflow gives "
                            f"{reference.dtype}{list(reference.shape)}")
    if result.tobytes() == reference.tobytes():
        return "bit-exact", "bit-exact"
    floating = result.dtype.kind in "fc"
    if np.array_equal(result, reference, equal_nan=floating):
        return "equal", "equal values, not bit-identical (signed zeros or NaN payloads)"
    if floating and np.allclose(result, reference, rtol=1e-5, atol=1e-6, equal_nan=True):
        diff = np.abs(result.astype(np.float64) - reference.astype(np.float64))
        return "close", (f"close, not bit-exact: {np.count_nonzero(diff)} of {diff.size} "
                         f"elements differ, max |diff| {np.nanmax(diff):.2g}")
    return "mismatch", f"{np.count_nonzero(result != reference)} of {result.size} elements differ"
