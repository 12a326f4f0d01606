"""Train the embedding model of train_embedding.py with its table sharded over 2 Dask workers.

The table is split into shards as TensorFlow splits a partitioned variable (``mod``:
row r lives in shard r % n; ``div``: contiguous blocks), shard k placed on
``/job:worker/task:k``. ``gf.nn.embedding_lookup`` partitions each batch's ids by
shard, gathers the rows on each shard's worker and stitches them back; the
gradient w.r.t. each shard is an IndexedSlices of its rows, so SGD updates each
shard in place on its own worker. The same batches then train the unsharded table
on one process, and the two loss curves are printed and compared.

    python examples/sharded_embeddings.py [--rows 10000] [--steps 200] [--strategy mod]
    python examples/sharded_embeddings.py --local    # the sharded graph, on one process

It prints a progress line every tenth of the steps and logs its phases (the cluster's
start, each first step's compile) at INFO on stderr (``--quiet``: warnings only).

The cluster needs Dask distributed: pip install 'graphflow[distributed]'.
"""
import argparse
import logging
import os
import sys
import time
import warnings

import numpy as np

import graphflow as gf
from _show import show
from train_embedding import build as build_one_table

LEARNING_RATE = 0.05  # train_embedding.build's
log = logging.getLogger("sharded_embeddings")


def split(table: np.ndarray, shards: int, strategy: str) -> list[np.ndarray]:
    """The shards TensorFlow's partitioned variables hold for ``strategy``."""
    if strategy == "mod":
        return [table[k::shards] for k in range(shards)]
    return np.array_split(table, shards)  # the first len(table) % shards one row longer


def build_sharded(scope: gf.Scope, table: np.ndarray, shards: int, strategy: str,
                  devices: list[str] | None):
    """train_embedding's model over a sharded table: shard k on ``devices[k]``."""
    variables = []
    for k, part in enumerate(split(table, shards, strategy)):
        on = scope.with_device(devices[k]) if devices else scope
        variables.append(on.variable(part, name=f"embedding_{k}"))
    ids = scope.placeholder(gf.int32, shape=[None], name="ids")
    targets = scope.placeholder(gf.float32, shape=[None, table.shape[1]], name="targets")
    rows = gf.nn.embedding_lookup(variables, ids, partition_strategy=strategy)
    error = scope.sub(rows, targets)
    loss = scope.reduce_sum(scope.mul(error, error), name="loss")
    train = gf.train.GradientDescentOptimizer(LEARNING_RATE).minimize(loss)
    return variables, ids, targets, loss, train


def batches(rows: int, dim: int, steps: int, batch: int):
    """train_embedding.py's data: batches with duplicates from a set of hot rows."""
    rng = np.random.default_rng(1)
    hot = rng.choice(rows, size=min(rows, 4 * batch), replace=False)
    wanted = np.tanh(rng.normal(0, 1, (rows, dim))).astype(np.float32)
    for _ in range(steps):
        chosen = rng.choice(hot, size=batch)
        yield chosen, wanted[chosen]


def train(graph, config, ids, targets, loss, step, data, batch: int, label: str,
          steps: int) -> tuple[list, float]:
    """The loss per row of each step, and the seconds per step after the first (which
    compiles the plan). One run per step: the loss it fetches is the one before the
    step's update (every update waits for the step's gradients, which wait for its reads).
    Prints a progress line every tenth of the steps; logs the first step's compile."""
    losses, every = [], max(1, steps // 10)
    with gf.Session(graph, config) as sess:
        sess.run(gf.global_variables_initializer(graph))
        begin = time.perf_counter()
        for chosen, wanted in data:
            if len(losses) == 1:
                start = time.perf_counter()
                log.info("%s: the first step (compiling its plan) took %.1f s", label,
                         start - begin)
            value, _ = sess.run([loss, step], {ids: chosen, targets: wanted})
            losses.append(float(value) / batch)
            if len(losses) % every == 0 or len(losses) == steps:
                print(f"{label}: step {len(losses):>{len(str(steps))}}/{steps}  loss per row "
                      f"{losses[-1]:.4g}", flush=True)
    per_step = (time.perf_counter() - start) / (len(losses) - 1) if len(losses) > 1 else 0.0
    return losses, per_step


def rounded(values) -> list[float]:
    return [float(f"{x:.4g}") for x in values]


def start_cluster(workers: int):
    """A LocalCluster of ``workers`` processes on loopback, or exit saying what to install."""
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")  # no teardown chatter
    warnings.filterwarnings("ignore", message="Port .* is already in use")  # another cluster's
    try:
        import distributed
    except ImportError:
        sys.exit("sharded_embeddings.py needs Dask distributed for its cluster: pip install "
                 "'graphflow[distributed]' (or run it on one process with --local)")
    cluster = distributed.LocalCluster(n_workers=workers, processes=True, threads_per_worker=1,
                                       host="127.0.0.1", dashboard_address=None)
    return cluster, distributed.Client(cluster)


def parse_args() -> argparse.Namespace:
    """The command line; logging set up as it asks (INFO unless --quiet)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--strategy", choices=["mod", "div"], default="mod")
    parser.add_argument("--local", action="store_true",
                        help="run the sharded graph on one process (no cluster)")
    parser.add_argument("--quiet", action="store_true", help="no progress log on stderr")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(name)s: %(message)s")
    logging.getLogger("distributed").setLevel(logging.ERROR)
    return args


def main() -> None:
    args = parse_args()

    # the unsharded model: train_embedding.py's, with its initial table
    one = gf.Graph()
    table, ids, targets, loss, step = build_one_table(gf.Scope(one), args.rows, args.dim, seed=0)
    with gf.Session(one) as sess:
        sess.run(table.initializer)
        initial = sess.run(table)

    cluster = client = None
    if not args.local:
        log.info("starting a Dask cluster of %d workers", args.shards)
        cluster, client = start_cluster(args.shards)
    try:
        sharded = gf.Graph()
        devices = None if args.local else [f"/job:worker/task:{k}" for k in range(args.shards)]
        _, s_ids, s_targets, s_loss, s_step = build_sharded(
            gf.Scope(sharded), initial, args.shards, args.strategy, devices)
        config = gf.SessionConfig(cluster=client) if client is not None else None
        where = "one process" if args.local else f"{args.shards} Dask workers"
        print(f"table of {args.rows} x {args.dim} in {args.shards} shards "
              f"({args.strategy}) on {where}")
        for op in sharded.operations():
            if op.type == "ResourceGather":
                print(f"  {op.name} reads {op.inputs[0].op.name} on {op.device or 'any device'}")
        sharded_losses, sharded_time = train(
            sharded, config, s_ids, s_targets, s_loss, s_step,
            batches(args.rows, args.dim, args.steps, args.batch), args.batch, "sharded",
            args.steps)
    finally:
        if client is not None:
            client.close()
            cluster.close()
    one_losses, one_time = train(one, None, ids, targets, loss, step,
                                 batches(args.rows, args.dim, args.steps, args.batch), args.batch,
                                 "one table", args.steps)

    every = max(1, args.steps // 10)
    show("sharded loss per row, every few steps", rounded(sharded_losses[::every]))
    show("one-table loss per row, every few steps", rounded(one_losses[::every]))
    show("loss per row, first and last step", rounded([sharded_losses[0], sharded_losses[-1]]))
    same = np.allclose(sharded_losses, one_losses, rtol=1e-5, atol=0)
    print(f"loss curves match: {same} (largest relative difference "
          f"{np.max(np.abs(np.subtract(sharded_losses, one_losses)) / np.abs(one_losses)):.1e})")
    print(f"time per step: {sharded_time * 1e3:.1f} ms sharded on {where}, "
          f"{one_time * 1e3:.1f} ms with one table on one process")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
