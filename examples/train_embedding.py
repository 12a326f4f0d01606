"""Train an embedding table with sparse, in-place updates.

Each step looks up a batch of rows of a table (a sparse read), compares them to
targets, and lets plain SGD update only the rows the batch touched: the
gradient of a sparse read is a gf.IndexedSlices, which the optimizer applies as
an in-place scatter (duplicates accumulate). Rows no batch touched stay
bit-identical. It prints the loss as it falls (one line per tenth of the
steps), plots the loss curve to a PNG when matplotlib is installed, then saves
the trained table to a checkpoint and restores it into a fresh Session. With
--logdir it also logs the graph, the loss at every step and a traced last step
for TensorBoard (`tensorboard --logdir DIR`; needs tensorboardX).

    python examples/train_embedding.py [--rows 10000] [--dim 16] [--steps 200]
                                       [--plot loss.png] [--logdir logs]
"""
import argparse
import os
import tempfile
import time

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
    parser.add_argument("--plot", default=None,
                        help="PNG of the loss curve (needs matplotlib; default: next to the "
                             "checkpoint; '' for none)")
    parser.add_argument("--logdir", default=None,
                        help="write TensorBoard events there: the graph, the loss per row at "
                             "every step, the last step's per-node time and memory")
    args = parser.parse_args()

    g = gf.Graph()
    scope = gf.Scope(g)
    table, ids, targets, loss, train = build(scope, args.rows, args.dim, seed=0)
    rng = np.random.default_rng(1)
    hot = rng.choice(args.rows, size=min(args.rows, 4 * args.batch), replace=False)
    wanted = np.tanh(rng.normal(0, 1, (args.rows, args.dim))).astype(np.float32)

    writer = None
    if args.logdir:
        try:
            writer = gf.summary.FileWriter(args.logdir, graph=g)
        except ImportError as e:
            parser.error(str(e))
    with gf.Session(g) as sess:
        sess.run(gf.global_variables_initializer(g))
        before = sess.run(table)
        losses, every, start = [], max(1, args.steps // 10), time.perf_counter()
        trace = gf.RunMetadata()
        for step in range(1, args.steps + 1):
            batch = rng.choice(hot, size=args.batch)          # duplicates on purpose
            feed = {ids: batch, targets: wanted[batch]}
            traced = writer is not None and step == args.steps
            # one run: the update waits for the gradient, which reads the rows first,
            # so the loss is the one before this step's update
            value, _ = sess.run([loss, train], feed, options=gf.RunOptions(trace=traced),
                                run_metadata=trace if traced else None)
            losses.append(float(value) / args.batch)
            if writer is not None:
                writer.add_scalar("loss per row", losses[-1], step)
            if step % every == 0 or step == args.steps:
                print(f"step {step:>{len(str(args.steps))}}/{args.steps}  loss per row "
                      f"{losses[-1]:.4g}  ({time.perf_counter() - start:.2f} s)")
        after = sess.run(table)
        cold = np.setdiff1d(np.arange(args.rows), hot)
        show("loss per row, first and last step", [float(f"{losses[0]:.4g}"), float(f"{losses[-1]:.4g}")])
        print(f"loss down {losses[0] / losses[-1]:.0f}x in {args.steps} steps")
        print(f"rows never looked up unchanged: {bool(np.array_equal(after[cold], before[cold]))}")
        if writer is not None:
            log(writer, trace, args.steps)

        folder = tempfile.mkdtemp(prefix="train_embedding-")  # kept: the outputs stay there
        path = gf.train.Saver().save(sess, os.path.join(folder, "embedding.ckpt"))
        print(f"checkpoint: {path}")
    with gf.Session(g) as fresh:                                   # initializers never run
        gf.train.Saver().restore(fresh, path)
        print(f"restored from checkpoint: {bool(np.array_equal(fresh.run(table), after))}")
    if args.plot != "":
        plot(losses, args.plot or os.path.join(folder, "loss.png"))


def log(writer: "gf.summary.FileWriter", trace: gf.RunMetadata, step: int) -> None:
    """The last step's per-node time and memory (TensorBoard: graph view, 'Session runs'),
    when the package tensorboard is there to encode it; then close the log."""
    try:
        writer.add_run_metadata(trace, f"step {step}", global_step=step)
    except ImportError as e:
        print(f"no per-node run metadata in the log: {e}")
    writer.close()
    print(f"TensorBoard log: {writer.path} (tensorboard --logdir {writer.logdir})")


def plot(losses: list, path: str) -> None:
    """The loss curve (log scale) as a PNG, when matplotlib is installed."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)")
        return
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.semilogy(range(1, len(losses) + 1), losses)
    ax.set(xlabel="step", ylabel="loss per row (squared error)",
           title="SGD on sparse gradients of an embedding table")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    print(f"loss curve: {path}")


if __name__ == "__main__":
    main()
