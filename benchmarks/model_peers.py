"""How JAX, TF 2, TF 1.x and PyTorch write the model steps of benchmarks/models.py
(W10 GCN, W11 MoE, W12 word2vec), each as its users would; filed into the peers'
formulation tables of benchmarks/peers.py. Each builder starts from the same
parameters as graphflow and returns ``step(*fed) -> loss`` (one SGD step per call)."""
from __future__ import annotations

import numpy as np

from .models import RATE, gcn_data, moe_data, w2v_data


# -- JAX ------------------------------------------------------------------------------------------
def _jax_sgd(jax, loss_of, params):
    """A jitted SGD step of ``loss_of(params, *fed)``, params donated (updated in place)."""
    def step(p, *fed):
        loss, grads = jax.value_and_grad(loss_of)(p, *fed)
        return jax.tree_util.tree_map(lambda a, g: a - RATE * g, p, grads), loss
    jitted = jax.jit(step, donate_argnums=0)
    state = [jax.device_put(params)]

    def run(*fed):
        state[0], loss = jitted(state[0], *fed)
        return loss
    return run


def _jax_ce(jnp, logits, labels):
    log_p = logits - jax_logsumexp(jnp, logits)
    return -jnp.mean(jnp.take_along_axis(log_p, labels[:, None], 1))


def jax_logsumexp(jnp, logits):
    peak = jnp.max(logits, axis=1, keepdims=True)
    return peak + jnp.log(jnp.sum(jnp.exp(logits - peak), axis=1, keepdims=True))


def _jax_gcn(jax):
    jnp, d = jax.numpy, gcn_data()
    src, dst, weight, x, labels = (jnp.asarray(d[k]) for k in ("src", "dst", "weight", "x",
                                                                "labels"))

    def propagate(h):
        return jax.ops.segment_sum(h[src] * weight, dst, num_segments=d["nodes"])

    def loss_of(p):
        h = jax.nn.relu(propagate(x @ p["w1"]))
        return _jax_ce(jnp, propagate(h @ p["w2"]), labels)
    return _jax_sgd(jax, loss_of, {"w1": d["w1"], "w2": d["w2"]})


def _jax_moe(jax):
    """Static shapes: every expert on every token, weighted by its gate (zero where the
    token did not choose it)."""
    jnp, d = jax.numpy, moe_data()

    def loss_of(p, x, target):
        scores, chosen = jax.lax.top_k(x @ p["gate"], 2)
        weights = jax.nn.softmax(scores, axis=1)
        dense = jnp.sum(jax.nn.one_hot(chosen, d["experts"], dtype=x.dtype) * weights[..., None],
                        axis=1)                                              # [T, E]
        hidden = jax.nn.relu(jnp.einsum("td,edh->eth", x, p["w_in"]))
        out = jnp.einsum("eth,ehd->etd", hidden, p["w_out"])
        y = jnp.einsum("te,etd->td", dense, out)
        return jnp.mean((y - target) ** 2)
    return _jax_sgd(jax, loss_of, {k: d[k] for k in ("gate", "w_in", "w_out")})


def _jax_w2v(jax):
    jnp, d = jax.numpy, w2v_data()
    k = d["negatives"]

    def loss_of(p, centre, context, noise):
        u, v, n = p["u"][centre], p["v"][context], p["v"][noise]
        logits = jnp.concatenate([jnp.sum(u * v, 1),
                                  jnp.sum(jnp.repeat(u, k, axis=0) * n, 1)])
        labels = jnp.concatenate([jnp.ones(len(centre), jnp.float32), jnp.zeros(len(noise), jnp.float32)])
        return jnp.mean(jnp.maximum(logits, 0) - logits * labels
                        + jnp.log1p(jnp.exp(-jnp.abs(logits))))
    return _jax_sgd(jax, loss_of, {"u": d["u"], "v": d["v"]})


# -- TensorFlow 2 ---------------------------------------------------------------------------------
def _tf_sgd_step(tf, variables, loss_of):
    @tf.function(jit_compile=False)
    def step(*fed):
        with tf.GradientTape() as tape:
            loss = loss_of(*fed)
        for var, grad in zip(variables, tape.gradient(loss, variables)):
            if isinstance(grad, tf.IndexedSlices):
                var.scatter_sub(tf.IndexedSlices(RATE * grad.values, grad.indices))
            else:
                var.assign_sub(RATE * grad)
        return loss
    return step


def _tf_gcn_loss(tf, d, w1, w2):
    def propagate(h):
        return tf.math.unsorted_segment_sum(tf.gather(h, d["src"]) * d["weight"], d["dst"],
                                            d["nodes"])
    h = tf.nn.relu(propagate(tf.matmul(d["x"], w1)))
    logits = propagate(tf.matmul(h, w2))
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=d["labels"],
                                                                         logits=logits))


def _tf_moe_loss(tf, d, gate, w_in, w_out, x, target):
    scores, chosen = tf.math.top_k(tf.matmul(x, gate), 2)
    weights = tf.reshape(tf.nn.softmax(scores), [-1, 1])
    expert_of = tf.reshape(chosen, [-1])
    tokens = tf.shape(x)[0]
    token_of = tf.reshape(tf.tile(tf.expand_dims(tf.range(tokens), 1), [1, 2]), [-1])
    inputs = tf.dynamic_partition(tf.gather(x, token_of), expert_of, d["experts"])
    positions = tf.dynamic_partition(tf.range(tf.size(expert_of)), expert_of, d["experts"])
    outputs = [tf.matmul(tf.nn.relu(tf.matmul(h, w_in[e])), w_out[e]) for e, h in enumerate(inputs)]
    y = tf.math.unsorted_segment_sum(tf.dynamic_stitch(positions, outputs) * weights, token_of,
                                     tokens)
    return tf.reduce_mean(tf.square(y - target))


def _tf_w2v_loss(tf, d, u_table, v_table, centre, context, noise):
    k = d["negatives"]
    u, v, n = (tf.gather(u_table, centre), tf.gather(v_table, context),
               tf.gather(v_table, noise))
    rows = tf.reshape(tf.tile(tf.expand_dims(u, 1), [1, k, 1]), [-1, 64])
    logits = tf.concat([tf.reduce_sum(u * v, 1), tf.reduce_sum(rows * n, 1)], 0)
    labels = tf.concat([tf.ones_like(logits[:len(d["centre"])]),
                        tf.zeros_like(logits[len(d["centre"]):])], 0)
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))


def _tf_gcn(tf):
    d = gcn_data()
    w1, w2 = tf.Variable(d["w1"]), tf.Variable(d["w2"])
    return _tf_sgd_step(tf, [w1, w2], lambda: _tf_gcn_loss(tf, d, w1, w2))


def _tf_moe(tf):
    d = moe_data()
    gate = tf.Variable(d["gate"])
    w_in = [tf.Variable(d["w_in"][e]) for e in range(d["experts"])]
    w_out = [tf.Variable(d["w_out"][e]) for e in range(d["experts"])]
    return _tf_sgd_step(tf, [gate, *w_in, *w_out],
                        lambda x, t: _tf_moe_loss(tf, d, gate, w_in, w_out, x, t))


def _tf_w2v(tf):
    d = w2v_data()
    u, v = tf.Variable(d["u"]), tf.Variable(d["v"])
    return _tf_sgd_step(tf, [u, v], lambda c, o, n: _tf_w2v_loss(tf, d, u, v, c, o, n))


# -- TensorFlow 1.x -------------------------------------------------------------------------------
def _tf1_step(tf, build):
    """``build(tf1) -> (loss, placeholders)``; a callable of one GradientDescent step."""
    from .peers import _tf1_callable

    def graph(tf1):
        loss, feeds = build(tf1)
        return [tf1.train.GradientDescentOptimizer(RATE).minimize(loss), loss], feeds
    step = _tf1_callable(tf, graph)
    return lambda *fed: step(*fed)[1]


def _tf1_var(tf1, name, value):
    return tf1.get_variable(name, initializer=value, use_resource=True)


def _tf1_gcn(tf):
    d = gcn_data()
    return _tf1_step(tf, lambda tf1: (_tf_gcn_loss(tf, d, _tf1_var(tf1, "w1", d["w1"]),
                                                   _tf1_var(tf1, "w2", d["w2"])), []))


def _tf1_moe(tf):
    d = moe_data()

    def build(tf1):
        x, t = tf1.placeholder(tf.float32, [None, 64]), tf1.placeholder(tf.float32, [None, 64])
        gate = _tf1_var(tf1, "gate", d["gate"])
        w_in = [_tf1_var(tf1, f"w_in{e}", d["w_in"][e]) for e in range(d["experts"])]
        w_out = [_tf1_var(tf1, f"w_out{e}", d["w_out"][e]) for e in range(d["experts"])]
        return _tf_moe_loss(tf, d, gate, w_in, w_out, x, t), [x, t]
    return _tf1_step(tf, build)


def _tf1_w2v(tf):
    d = w2v_data()

    def build(tf1):
        ids = [tf1.placeholder(tf.int32, [None]) for _ in range(3)]
        u, v = _tf1_var(tf1, "u", d["u"]), _tf1_var(tf1, "v", d["v"])
        return _tf_w2v_loss(tf, d, u, v, *ids), ids
    return _tf1_step(tf, build)


# -- PyTorch --------------------------------------------------------------------------------------
def _torch_sgd(torch, params, loss_of):
    def step(*fed):
        loss = loss_of(*fed)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.add_(g, alpha=-float(RATE))  # a sparse gradient adds its rows only
        return loss.detach()
    return step


def _torch_gcn(torch):
    d = gcn_data()
    t = {k: torch.from_numpy(np.ascontiguousarray(d[k])) for k in ("x", "weight")}
    src, dst = torch.from_numpy(d["src"].astype(np.int64)), torch.from_numpy(d["dst"].astype(np.int64))
    labels = torch.from_numpy(d["labels"].astype(np.int64))
    w1, w2 = (torch.tensor(d[k], requires_grad=True) for k in ("w1", "w2"))

    def propagate(h):
        out = torch.zeros(d["nodes"], h.shape[1])
        return out.index_add(0, dst, h.index_select(0, src) * t["weight"])

    def loss_of():
        h = torch.relu(propagate(t["x"] @ w1))
        return torch.nn.functional.cross_entropy(propagate(h @ w2), labels)
    return _torch_sgd(torch, [w1, w2], loss_of)


def _torch_moe(torch):
    d = moe_data()
    gate = torch.tensor(d["gate"], requires_grad=True)
    w_in = [torch.tensor(d["w_in"][e], requires_grad=True) for e in range(d["experts"])]
    w_out = [torch.tensor(d["w_out"][e], requires_grad=True) for e in range(d["experts"])]

    def loss_of(x, target):
        scores, chosen = torch.topk(x @ gate, 2, dim=1)
        weights = torch.softmax(scores, dim=1).reshape(-1, 1)
        expert_of = chosen.reshape(-1)
        token_of = torch.arange(x.shape[0]).repeat_interleave(2)
        y = torch.zeros_like(x)
        for e in range(d["experts"]):
            pairs = (expert_of == e).nonzero().squeeze(1)
            tokens = token_of[pairs]
            out = torch.relu(x[tokens] @ w_in[e]) @ w_out[e]
            y = y.index_add(0, tokens, out * weights[pairs])
        return torch.mean((y - target) ** 2)
    return _torch_sgd(torch, [gate, *w_in, *w_out], loss_of)


def _torch_w2v(torch):
    d = w2v_data()
    k = d["negatives"]
    u_table, v_table = (torch.tensor(d[key], requires_grad=True) for key in ("u", "v"))
    embed = torch.nn.functional.embedding

    def loss_of(centre, context, noise):  # sparse=True: gradients of the looked-up rows only
        u = embed(centre.long(), u_table, sparse=True)
        v, n = embed(context.long(), v_table, sparse=True), embed(noise.long(), v_table,
                                                                   sparse=True)
        logits = torch.cat([(u * v).sum(1), (u.repeat_interleave(k, 0) * n).sum(1)])
        labels = torch.cat([torch.ones(len(centre)), torch.zeros(len(noise))])
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
    return _torch_sgd(torch, [u_table, v_table], loss_of)


def install() -> None:
    """File the formulations in benchmarks/peers.py's tables."""
    from .peers import JAX_FORMS, TF1_FORMS, TF_FORMS, TORCH_FORMS, Formulation
    JAX_FORMS.update({
        "gcn_step": Formulation("jax.jit(value_and_grad): h[src] * w, jax.ops.segment_sum, "
                                "relu, log-softmax CE; params donated", _jax_gcn, compiled=False),
        "moe_step": Formulation("jax.jit: lax.top_k gates, every expert on every token "
                                "(einsum), weighted by the gate", _jax_moe, compiled=False,
                                note="static shapes: 4x the expert FLOPs of a dispatch"),
        "w2v_step": Formulation("jax.jit: table[ids], logistic loss, dense gradient of the "
                                "tables (XLA scatters the rows)", _jax_w2v, compiled=False)})
    TF_FORMS.update({
        "gcn_step": Formulation("tf.function: tf.gather, unsorted_segment_sum, "
                                "sparse_softmax_cross_entropy_with_logits, assign_sub",
                                _tf_gcn, compiled=False),
        "moe_step": Formulation("tf.function: top_k, dynamic_partition, per-expert matmuls, "
                                "dynamic_stitch, unsorted_segment_sum", _tf_moe, compiled=False),
        "w2v_step": Formulation("tf.function: tf.gather, sigmoid CE, scatter_sub of the "
                                "IndexedSlices", _tf_w2v, compiled=False)})
    TF1_FORMS.update({
        "gcn_step": Formulation("the same graph, GradientDescentOptimizer.minimize", _tf1_gcn,
                                compiled=False),
        "moe_step": Formulation("the same graph, x and target placeholders", _tf1_moe,
                                compiled=False),
        "w2v_step": Formulation("the same graph, ids placeholders", _tf1_w2v, compiled=False)})
    TORCH_FORMS.update({
        "gcn_step": Formulation("eager: index_select * w, index_add, cross_entropy, "
                                "autograd.grad, sub_", _torch_gcn, compiled=False),
        "moe_step": Formulation("eager: topk, per-expert index_select, matmuls, index_add",
                                _torch_moe, compiled=False),
        "w2v_step": Formulation("eager: F.embedding(sparse=True), "
                                "binary_cross_entropy_with_logits, sparse add_", _torch_w2v,
                                compiled=False)})
