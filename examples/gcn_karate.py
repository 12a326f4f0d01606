"""A two-layer graph convolutional network (Kipf & Welling) on Zachary's karate club.

Message passing is the op set's own: each layer gathers the neighbours' rows along
the edges (GatherV2), weights them by 1 / sqrt(deg(u) deg(v)) and sums them into
each node (UnsortedSegmentSum); MatMul, Relu, the sparse softmax cross-entropy and
Adam do the rest. Only four members are labelled (two per club); the network
predicts the club of all 34 from the friendship graph alone. It prints the loss as
it falls and the accuracy on every member. With --logdir it logs the loss and the
accuracy for TensorBoard (needs tensorboardX).

    python examples/gcn_karate.py [--steps 200] [--hidden 16] [--logdir logs]
"""
import argparse

import networkx as nx
import numpy as np

import graphflow as gf
from _show import show


def karate():
    """Edges (both directions and a self loop per node), their GCN weights, the labels."""
    graph = nx.karate_club_graph()
    n = graph.number_of_nodes()
    pairs = np.array(graph.edges(), np.int32)
    src = np.concatenate([pairs[:, 0], pairs[:, 1], np.arange(n, dtype=np.int32)])
    dst = np.concatenate([pairs[:, 1], pairs[:, 0], np.arange(n, dtype=np.int32)])
    degree = np.bincount(dst, minlength=n).astype(np.float32)
    weight = (1 / np.sqrt(degree[src] * degree[dst])).astype(np.float32)
    labels = np.array([graph.nodes[v]["club"] != "Mr. Hi" for v in range(n)], np.int32)
    return n, src, dst, weight, labels


def glorot(rng, rows: int, cols: int) -> np.ndarray:
    limit = np.sqrt(6 / (rows + cols))
    return rng.uniform(-limit, limit, (rows, cols)).astype(np.float32)


def build(s: gf.Scope, n: int, src, dst, weight, hidden: int, classes: int, seed: int):
    rng = np.random.default_rng(seed)
    w1 = s.variable(glorot(rng, n, hidden), name="w1")  # features: one-hot node ids
    w2 = s.variable(glorot(rng, hidden, classes), name="w2")
    edge_weight = s.constant(weight.reshape(-1, 1), name="edge_weight")

    def propagate(h, name):
        """sum over edges (u -> v) of weight(u, v) * h[u], into v."""
        with_weights = s.mul(s.gather_v2(h, src, 0), edge_weight)
        return s.unsorted_segment_sum(with_weights, dst, n, name=name)

    h = s.relu(propagate(w1.read(), "layer1"))  # one-hot features: X @ w1 is w1
    logits = propagate(s.matmul(h, w2), "logits")
    labelled = s.placeholder(gf.int32, shape=[None], name="labelled")
    labels = s.placeholder(gf.int32, shape=[None], name="labels")
    loss = s.reduce_mean(s.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=s.gather_v2(logits, labelled, 0)), name="loss")
    train = gf.train.AdamOptimizer(0.01).minimize(loss)
    predicted = s.argmax(logits, 1, output_type=gf.int32)
    return labelled, labels, loss, train, predicted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--logdir", default=None, help="TensorBoard events: loss and accuracy")
    args = parser.parse_args()

    n, src, dst, weight, labels = karate()
    g = gf.Graph()
    s = gf.Scope(g)
    labelled, label_in, loss, train, predicted = build(s, n, src, dst, weight, args.hidden,
                                                       classes=2, seed=0)
    train_nodes = np.array([0, 1, 33, 32], np.int32)  # two members of each club
    writer = gf.summary.FileWriter(args.logdir, graph=g) if args.logdir else None
    with gf.Session(g) as sess:
        sess.run(gf.global_variables_initializer(g))
        step_fn = sess.make_callable([loss, train], [labelled, label_in])
        every = max(1, args.steps // 5)
        for step in range(1, args.steps + 1):
            value, _ = step_fn(train_nodes, labels[train_nodes])
            accuracy = float(np.mean(sess.run(predicted) == labels))
            if writer is not None:
                writer.add_scalar("loss", float(value), step)
                writer.add_scalar("accuracy", accuracy, step)
            if step % every == 0 or step == 1:
                print(f"step {step:>{len(str(args.steps))}}/{args.steps}  loss {value:.4f}  "
                      f"accuracy {accuracy:.3f}")
        show("clubs predicted for members 0..9", sess.run(predicted)[:10].tolist())
        print(f"accuracy on all {n} members: {accuracy:.3f} (4 labelled)")
    if writer is not None:
        writer.close()


if __name__ == "__main__":
    main()
