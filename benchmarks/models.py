"""W10-W12: the training steps of the models the op set exists for, in graphflow and in
each peer (JAX jit, TF 2 tf.function, TF 1.x Session, PyTorch eager).

- W10: a 2-layer GCN step over a random graph (10k nodes, 110k edges + self loops, 64
  features, 16 classes; ``GRAPHFLOW_BENCH_BIG=1``: 100k nodes, 1.1M edges): gather
  along the edges, weight, segment-sum into the nodes, MatMul, Relu, the mean sparse
  softmax cross-entropy, plain SGD.
- W11: a top-2 mixture-of-experts step (4096 tokens of 64, 8 experts of 64 -> 128 -> 64):
  TopK gates, tokens dispatched by expert (DynamicPartition), each expert's two
  MatMuls on its tokens, DynamicStitch back, gate-weighted, segment-sum per token; the
  mean squared error to a fed target; SGD.
- W12: a word2vec step (skip-gram, negative sampling): two [100k, 64] tables, 1024 pairs
  and 5 negatives per pair (fed, so every engine sees the same ones), the logistic
  loss; sparse SGD updates of the looked-up rows.

Every engine starts from the same parameters and is fed the same arrays; the first
step's loss is what the peers are checked against (each timed call is one more step).
A peer writes the model as its users do: JAX needs static shapes, so its MoE runs
every expert on every token, weighted by the gate (zero where not chosen).
"""
from __future__ import annotations

import os

import numpy as np

import graphflow as gf

from .workloads import Case, _session

RATE = np.float32(0.1)
BIG = os.environ.get("GRAPHFLOW_BENCH_BIG", "0") == "1"


# -- the data -----------------------------------------------------------------------------------
def gcn_data() -> dict:
    nodes, edges = (100_000, 1_100_000) if BIG else (10_000, 110_000)
    rng = np.random.default_rng(10)
    src = np.concatenate([rng.integers(0, nodes, edges), np.arange(nodes)]).astype(np.int32)
    dst = np.concatenate([rng.integers(0, nodes, edges), np.arange(nodes)]).astype(np.int32)
    degree = np.bincount(dst, minlength=nodes).astype(np.float32)
    weight = (1 / np.sqrt(degree[src] * degree[dst])).astype(np.float32).reshape(-1, 1)
    return {"nodes": nodes, "src": src, "dst": dst, "weight": weight,
            "x": rng.normal(size=(nodes, 64)).astype(np.float32),
            "labels": rng.integers(0, 16, nodes).astype(np.int32),
            "w1": (rng.normal(size=(64, 64)) / 8).astype(np.float32),
            "w2": (rng.normal(size=(64, 16)) / 8).astype(np.float32)}


def moe_data() -> dict:
    rng = np.random.default_rng(11)
    experts = 8
    return {"experts": experts, "x": rng.normal(size=(4096, 64)).astype(np.float32),
            "target": rng.normal(size=(4096, 64)).astype(np.float32),
            "gate": (rng.normal(size=(64, experts)) / 8).astype(np.float32),
            "w_in": (rng.normal(size=(experts, 64, 128)) / 8).astype(np.float32),
            "w_out": (rng.normal(size=(experts, 128, 64)) / 11).astype(np.float32)}


def w2v_data() -> dict:
    rng = np.random.default_rng(12)
    vocab, dim, batch, negatives = 100_000, 64, 1024, 5
    return {"centre": rng.integers(0, vocab, batch).astype(np.int32),
            "context": rng.integers(0, vocab, batch).astype(np.int32),
            "noise": rng.integers(0, vocab, batch * negatives).astype(np.int32),
            "negatives": negatives,
            "u": rng.uniform(-0.5 / dim, 0.5 / dim, (vocab, dim)).astype(np.float32),
            "v": (rng.normal(size=(vocab, dim)) / 64).astype(np.float32)}


# -- graphflow ------------------------------------------------------------------------------------
def w10_gcn_step(scale: float) -> list[Case]:
    d = gcn_data()
    g = gf.Graph()
    s = gf.Scope(g)
    w1, w2 = s.variable(d["w1"], name="w1"), s.variable(d["w2"], name="w2")

    def propagate(h):
        return s.unsorted_segment_sum(s.mul(s.gather_v2(h, d["src"], 0), d["weight"]),
                                      d["dst"], d["nodes"])
    h = s.relu(propagate(s.matmul(d["x"], w1)))
    logits = propagate(s.matmul(h, w2))
    loss = s.reduce_mean(s.sparse_softmax_cross_entropy_with_logits(labels=d["labels"],
                                                                     logits=logits))
    train = gf.train.GradientDescentOptimizer(RATE).minimize(loss)
    sess = _session(g)
    sess.run(gf.global_variables_initializer(g))
    step = sess.make_callable([train, loss])
    return [Case("W10", f"GCN training step: {d['nodes']} nodes, {len(d['src'])} edges, 64 "
                 f"features", lambda: step()[1], lambda: None, "-",
                 peer_op="gcn_step")]


def w11_moe_step(scale: float) -> list[Case]:
    d = moe_data()
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.float32, shape=[None, 64])
    target = s.placeholder(gf.float32, shape=[None, 64])
    gate = s.variable(d["gate"], name="gate")
    w_in = [s.variable(d["w_in"][e], name=f"w_in{e}") for e in range(d["experts"])]
    w_out = [s.variable(d["w_out"][e], name=f"w_out{e}") for e in range(d["experts"])]
    scores, chosen = s.top_k(s.matmul(x, gate), k=2)
    weights = s.reshape(s.softmax(scores), [-1, 1])
    expert_of = s.reshape(chosen, [-1])
    tokens = s.shape(x)[0]
    token_of = s.reshape(s.tile(s.expand_dims(s.range(0, tokens, 1), 1), [1, 2]), [-1])
    inputs = s.dynamic_partition(s.gather_v2(x, token_of, 0), expert_of, d["experts"])
    positions = s.dynamic_partition(s.range(0, s.size(expert_of), 1), expert_of, d["experts"])
    outputs = [s.matmul(s.relu(s.matmul(h, w_in[e])), w_out[e]) for e, h in enumerate(inputs)]
    y = s.unsorted_segment_sum(s.mul(s.dynamic_stitch(positions, outputs), weights), token_of,
                               tokens)
    loss = s.reduce_mean(s.square(s.sub(y, target)))
    train = gf.train.GradientDescentOptimizer(RATE).minimize(loss)
    sess = _session(g)
    sess.run(gf.global_variables_initializer(g))
    step = sess.make_callable([train, loss], [x, target])
    return [Case("W11", "top-2 MoE training step: 4096 tokens, 8 experts 64 -> 128 -> 64",
                 lambda: step(d["x"], d["target"])[1], lambda: None, "-",
                 peer_op="moe_step", peer_inputs=(d["x"], d["target"]))]


def w12_word2vec_step(scale: float) -> list[Case]:
    d = w2v_data()
    g = gf.Graph()
    s = gf.Scope(g)
    centre = s.placeholder(gf.int32, shape=[None])
    context = s.placeholder(gf.int32, shape=[None])
    noise = s.placeholder(gf.int32, shape=[None])
    u_table, v_table = s.variable(d["u"], name="u"), s.variable(d["v"], name="v")
    logits = _w2v_logits(s, u_table.sparse_read(centre), v_table.sparse_read(context),
                         v_table.sparse_read(noise), d["negatives"])
    labels = np.concatenate([np.ones(len(d["centre"])),
                             np.zeros(len(d["noise"]))]).astype(np.float32)
    loss = s.reduce_mean(s.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    train = gf.train.GradientDescentOptimizer(RATE).minimize(loss)
    sess = _session(g)
    sess.run(gf.global_variables_initializer(g))
    step = sess.make_callable([train, loss], [centre, context, noise])
    inputs = (d["centre"], d["context"], d["noise"])
    return [Case("W12", "word2vec step: two [100000, 64] tables, 1024 pairs, 5 negatives each",
                 lambda: step(*inputs)[1], lambda: None, "-",
                 peer_op="w2v_step", peer_inputs=inputs)]


def _w2v_logits(s, u, v, n, negatives: int):
    """[positive scores of the pairs; the scores of each centre against its negatives]."""
    positive = s.reduce_sum(s.mul(u, v), 1)
    rows = s.reshape(s.tile(s.expand_dims(u, 1), [1, negatives, 1]), [-1, 64])
    return s.concat([positive, s.reduce_sum(s.mul(rows, n), 1)], 0)


MODEL_WORKLOADS = {"W10": w10_gcn_step, "W11": w11_moe_step, "W12": w12_word2vec_step}
