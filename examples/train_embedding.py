"""Train an embedding table with sparse, in-place updates.

Each step looks up a batch of rows of a table (a sparse read), compares them to
targets, and lets plain SGD update only the rows the batch touched: the
gradient of a sparse read is a gf.IndexedSlices, which the optimizer applies as
an in-place scatter (duplicates accumulate). Rows no batch touched stay
bit-identical. The trained table is then saved to a checkpoint and restored
into a fresh Session.

    python examples/train_embedding.py [--rows 10000] [--dim 16] [--steps 200]
"""
import argparse
import os
import tempfile

import numpy as np

import graphflow as gf
from _show import show


def build(scope: gf.Scope, rows: int, dim: int, seed: int):
    rng = np.random.default_rng(seed)
    table = scope.variable(rng.normal(0, 1, (rows, dim)).astype(np.float32), name="embedding")
    ids = scope.placeholder(gf.int32, shape=[None], name="ids")
    targets = scope.placeholder(gf.float32, shape=[None, dim], name="targets")
    error = scope.sub(table.sparse_read(ids), targets)
    loss = scope.reduce_sum(scope.mul(error, error), name="loss")
    train = gf.train.GradientDescentOptimizer(0.05).minimize(loss)
    return table, ids, targets, loss, train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()

    g = gf.Graph()
    scope = gf.Scope(g)
    table, ids, targets, loss, train = build(scope, args.rows, args.dim, seed=0)
    rng = np.random.default_rng(1)
    hot = rng.choice(args.rows, size=min(args.rows, 4 * args.batch), replace=False)
    wanted = np.tanh(rng.normal(0, 1, (args.rows, args.dim))).astype(np.float32)

    with gf.Session(g) as sess:
        sess.run(gf.global_variables_initializer(g))
        before = sess.run(table)
        losses = []
        for _ in range(args.steps):
            batch = rng.choice(hot, size=args.batch)          # duplicates on purpose
            feed = {ids: batch, targets: wanted[batch]}
            losses.append(float(sess.run(loss, feed)) / args.batch)
            sess.run(train, feed)
        after = sess.run(table)
        cold = np.setdiff1d(np.arange(args.rows), hot)
        show("loss per row, first and last step", [float(f"{losses[0]:.4g}"), float(f"{losses[-1]:.4g}")])
        print(f"loss down {losses[0] / losses[-1]:.0f}x in {args.steps} steps")
        print(f"rows never looked up unchanged: {bool(np.array_equal(after[cold], before[cold]))}")

        path = os.path.join(tempfile.mkdtemp(), "embedding.ckpt")
        gf.train.Saver().save(sess, path)
    with gf.Session(g) as fresh:                                   # initializers never run
        gf.train.Saver().restore(fresh, path)
        print(f"restored from checkpoint: {bool(np.array_equal(fresh.run(table), after))}")


if __name__ == "__main__":
    main()
