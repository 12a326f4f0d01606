"""A top-2 mixture-of-experts layer (tensor2tensor's SparseDispatcher), trained.

A gate scores every token against every expert (MatMul), keeps each token's two best
experts (TopKV2) and their softmax weights. The (token, expert) pairs are split by
expert (DynamicPartition), each expert runs its own two-layer network on just its
tokens, the results are put back in pair order (DynamicStitch), weighted by the gate
and summed per token (UnsortedSegmentSum). The layer learns a teacher that is itself
a mixture; it prints the loss as it falls and how many tokens each expert took.

    python examples/moe.py [--tokens 512] [--experts 4] [--steps 300] [--logdir logs]
"""
import argparse

import numpy as np

import graphflow as gf
from _show import show


def build(s: gf.Scope, dim: int, experts: int, hidden: int, seed: int):
    rng = np.random.default_rng(seed)
    x = s.placeholder(gf.float32, shape=[None, dim], name="tokens")
    target = s.placeholder(gf.float32, shape=[None, dim], name="target")
    gate = s.variable(rng.normal(0, 0.1, (dim, experts)).astype(np.float32), name="gate")
    w_in = [s.variable(rng.normal(0, dim ** -0.5, (dim, hidden)).astype(np.float32),
                       name=f"expert{e}/w_in") for e in range(experts)]
    w_out = [s.variable(rng.normal(0, hidden ** -0.5, (hidden, dim)).astype(np.float32),
                        name=f"expert{e}/w_out") for e in range(experts)]

    scores, chosen = s.top_k(s.matmul(x, gate), k=2)                 # [T, 2] each
    weights = s.reshape(s.softmax(scores), [-1, 1])                   # [2T, 1]
    expert_of = s.reshape(chosen, [-1])                               # [2T]
    token_of = s.reshape(s.tile(s.expand_dims(s.range(0, s.shape(x)[0], 1), 1), [1, 2]), [-1])
    pair = s.range(0, s.size(expert_of), 1)
    inputs = s.dynamic_partition(s.gather_v2(x, token_of, 0), expert_of, experts)
    positions = s.dynamic_partition(pair, expert_of, experts)
    outputs = [s.matmul(s.relu(s.matmul(h, w_in[e])), w_out[e]) for e, h in enumerate(inputs)]
    per_pair = s.dynamic_stitch(positions, outputs)                   # [2T, dim], pair order
    y = s.unsorted_segment_sum(s.mul(per_pair, weights), token_of, s.shape(x)[0])
    loss = s.reduce_mean(s.square(s.sub(y, target)), name="loss")
    train = gf.train.AdamOptimizer(0.01).minimize(loss)
    load = [s.size(h) for h in positions]
    return x, target, loss, train, load


def teacher(rng, dim: int, parts: int):
    """A fixed mixture the layer can learn: each token goes to the part its first
    coordinates pick, and is mapped by that part's own matrix."""
    maps = rng.normal(0, dim ** -0.5, (parts, dim, dim)).astype(np.float32)
    keys = rng.normal(0, 1, (dim, parts)).astype(np.float32)

    def apply(x):
        part = np.argmax(x @ keys, axis=1)
        return np.einsum("td,tde->te", x, maps[part]).astype(np.float32)
    return apply


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--experts", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--logdir", default=None, help="TensorBoard events: the loss")
    args = parser.parse_args()

    g = gf.Graph()
    s = gf.Scope(g)
    x, target, loss, train, load = build(s, args.dim, args.experts, args.hidden, seed=0)
    rng = np.random.default_rng(1)
    truth = teacher(rng, args.dim, args.experts)
    writer = gf.summary.FileWriter(args.logdir, graph=g) if args.logdir else None
    with gf.Session(g) as sess:
        sess.run(gf.global_variables_initializer(g))
        step = sess.make_callable([loss, train, load], [x, target])
        every = max(1, args.steps // 5)
        for k in range(1, args.steps + 1):
            batch = rng.normal(0, 1, (args.tokens, args.dim)).astype(np.float32)
            value, _, tokens_per_expert = step(batch, truth(batch))
            if writer is not None:
                writer.add_scalar("loss", float(value), k)
            if k % every == 0 or k == 1:
                print(f"step {k:>{len(str(args.steps))}}/{args.steps}  loss {value:.4f}  "
                      f"tokens per expert {[int(t) for t in tokens_per_expert]}")
        show("tokens per expert, last step", [int(t) for t in tokens_per_expert])
    if writer is not None:
        writer.close()


if __name__ == "__main__":
    main()
