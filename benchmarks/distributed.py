"""What running on a Dask cluster costs: a sharded embedding step against one process,
and graphflow's overhead per run and per stage against Dask's own round trip.

    python -m benchmarks.distributed [--quick] [--json PATH]

Starts a LocalCluster of 2 worker processes on the loopback (one thread each) and
times, in one round-robin (interleaved samples, medians):

- dask floor: ``client.submit`` of a trivial task pinned to a worker, ``wait``, then
  ``gather(direct=True)``: what any dask run pays (the client batches what it sends
  every 10 ms, the scheduler every 5 ms, a worker every 2 ms);
- graphflow run of 1 stage: a tiny op on task 0 (``Session.run``, feed and fetch);
- ping-pong of S stages: a chain of tiny ops alternating between the 2 tasks,
  S = 2, 4, 8 (the slope over S is the cost of one more stage, i.e. one more hop);
- sharded lookup: ids partitioned by shard (mod 2), a gather on each shard's task,
  a stitch back, fetched (the embedding_lookup pattern), and the same step plus a
  sparse scatter-add of gradients into each shard; each against the same graph run
  by a local Session in this process.

Overhead per run = the 1-stage run minus the same graph run locally; per stage = the
ping-pong slope. Then, outside the round robin:

- per run alone: Dask's floor, ``sess.run`` and ``make_callable`` of the 1-stage
  graph in rotating order (in the round robin a case always follows the same one,
  and the one after the sharded update pays for its commits);
- isolation: 4 threads each running the sharded lookup + sparse update (both shards
  written: the run takes its write locks by a chain of one lock task per task) on
  one Session, wall time per run with the write locks and without them (the plan
  made with ``plan._ISOLATE`` off: what runs cost before issue 28, when a failed
  run's rollback could undo other runs' commits);
- recovery: SIGKILL of worker 1, then the time until a run writing a variable on
  task 1 succeeds again (the nanny starts a new worker; the run sees the restart as
  one AbortedError, re-runs the initializer and the update).

Needs the `distributed` extra.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import platform

import numpy as np

from .harness import round_robin_times

RESULTS = pathlib.Path(__file__).with_name("results")


def _lookup_graph(gf, table: np.ndarray, devices: list[str], update: bool):
    """Sharded lookup (and optionally a sparse update) with shard k on ``devices[k]``."""
    scope = gf.Scope(gf.Graph())
    n = len(devices)
    shards = [scope.with_device(d).variable(table[k::n], name=f"shard{k}")
              for k, d in enumerate(devices)]
    ids = scope.placeholder(gf.int64, shape=[None], name="ids")
    shard = scope.cast(scope.floor_mod(ids, n), gf.int32)
    rows = scope.dynamic_partition(scope.floor_div(ids, n), shard, num_partitions=n)
    where = scope.dynamic_partition(scope.range(0, scope.size(ids), 1), shard,
                                    num_partitions=n)
    found = scope.dynamic_stitch(where, [v.sparse_read(r) for v, r in zip(shards, rows)])
    fetches = [found]
    if update:
        grads = scope.mul(found, np.float32(0.01))
        parts = scope.dynamic_partition(grads, shard, num_partitions=n)
        fetches += [v.scatter_nd_sub(scope.expand_dims(r, -1), p, read_value=False)
                    for v, r, p in zip(shards, rows, parts)]
    return scope.graph, ids, fetches


def _ping_pong(gf, stages: int, local: bool = False):
    """Tiny adds alternating between tasks 0 and 1 (all local with ``local``)."""
    scope = gf.Scope(gf.Graph())
    x = scope.placeholder(gf.float32, shape=[4], name="x")
    h = x
    for k in range(stages):
        h = scope.with_device("" if local else f"/job:worker/task:{k % 2}").add(h, np.float32(1))
    return scope.graph, x, h


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--json", default=str(RESULTS / "distributed.json"),
                        help="where to write the results ('' for nowhere)")
    args = parser.parse_args(argv)
    import distributed

    import graphflow as gf

    repeats = 9 if args.quick else 31
    rows, dim, batch = 100_000, 64, 1024
    rng = np.random.default_rng(0)
    table = rng.standard_normal((rows, dim)).astype(np.float32)
    ids = rng.integers(0, rows, batch)
    small = np.ones(4, np.float32)

    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  host="127.0.0.1", dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        on_cluster = gf.SessionConfig(cluster=client)
        workers = sorted(client.scheduler_info()["workers"])
        sessions, fns = [], {}

        def session(graph, config=None):
            sess = gf.Session(graph, config)
            sessions.append(sess)
            return sess

        def floor():
            future = client.submit(int, 1, workers=[workers[0]], allow_other_workers=False,
                                   pure=False)
            distributed.wait([future])
            return client.gather([future], direct=True)
        fns["dask floor: submit + wait + gather"] = floor
        one_graph, one_x, one_y = _ping_pong(gf, 1, local=True)
        local_one = session(one_graph).make_callable(one_y, [one_x])
        fns["1 stage, local Session"] = lambda: local_one(small)
        for stages in (1, 2, 4, 8):
            g, x, y = _ping_pong(gf, stages)
            f = session(g, on_cluster).make_callable(y, [x])
            fns[f"{stages} stage{'s' if stages > 1 else ''}, cluster"] = \
                lambda f=f: f(small)
        for update in (False, True):
            what = "lookup + sparse update" if update else "lookup"
            for where, devices, config in (
                    ("1 process", ["", ""], None),
                    ("2 workers", ["/job:worker/task:0", "/job:worker/task:1"], on_cluster)):
                graph, feed, fetches = _lookup_graph(gf, table, devices, update)
                sess = session(graph, config)
                sess.run(gf.global_variables_initializer(graph))
                f = sess.make_callable(fetches, [feed])
                fns[f"{what}, {where}"] = lambda f=f: f(ids)
        g1, x1, y1 = _ping_pong(gf, 1)
        by_run = session(g1, on_cluster)
        fns["1 stage, cluster, sess.run"] = lambda: by_run.run(y1, {x1: small})
        times = round_robin_times(fns, repeats)
        probe = _ping_pong(gf, 4)
        stages_of = len(session(probe[0], on_cluster)._plan([probe[2]], [probe[1]]).stages)
        overhead = _per_run(gf, client, on_cluster, small, 30 if args.quick else 60)
        isolation = _isolation_cost(gf, table, ids, on_cluster, 5 if args.quick else 15)
        recovery = _recovery_time(gf, client, on_cluster)
        for sess in sessions:
            sess.close()

    slope = np.polyfit([1, 2, 4, 8], [times[f"{s} stage{'s' if s > 1 else ''}, cluster"]
                                      for s in (1, 2, 4, 8)], 1)[0]
    result = {
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores, "
                   f"distributed {distributed.__version__}",
        "times_ms": {k: v * 1e3 for k, v in times.items()},
        "overhead_per_run_ms": (times["1 stage, cluster"] - times["1 stage, local Session"]) * 1e3,
        "overhead_per_stage_ms": slope * 1e3,
        "ping_pong_4_stages": stages_of,
        "per_run_alone_ms": overhead,
        "isolation_4_threads_ms_per_run": isolation,
        "recovery_after_worker_kill_s": recovery,
        "lookup": {"rows": rows, "dim": dim, "batch": batch},
    }
    print(f"machine: {result['machine']}; table {rows}x{dim} float32 in 2 shards, "
          f"batch {batch} ids")
    print("| case | median ms |\n|---|---|")
    for name, t in times.items():
        print(f"| {name} | {t * 1e3:.2f} |")
    print(f"overhead per run: {result['overhead_per_run_ms']:.2f} ms "
          f"(1-stage cluster run - local run); per extra stage (one hop): "
          f"{result['overhead_per_stage_ms']:.2f} ms (slope over 1-8 stages)")
    print("per run, 3 cases alone (rotating order, medians ms): " +
          ", ".join(f"{k} {v:.2f}" for k, v in overhead.items()))
    print(f"4 threads, sharded lookup + update, wall ms per run: with write locks "
          f"{isolation['locked']:.1f}, without {isolation['unlocked']:.1f}")
    print(f"recovery after SIGKILL of worker 1: {recovery['total']:.2f} s until a write on "
          f"task 1 succeeds ({recovery['unavailable']:.2f} s until the cluster had it back)")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1))
    return result


def _per_run(gf, client, config, small, samples: int) -> dict:
    """Dask's floor, ``sess.run`` and ``make_callable`` of a 1-stage graph, timed alone
    (in the round robin, the case after the sharded update pays for its commits):
    medians in ms of ``samples`` rounds, the three in rotating order."""
    import time

    import distributed
    graph, x, y = _ping_pong(gf, 1)
    worker = sorted(client.scheduler_info()["workers"])[0]

    def floor():
        future = client.submit(int, 1, workers=[worker], allow_other_workers=False,
                               pure=False)
        distributed.wait([future])
        return client.gather([future], direct=True)

    with gf.Session(graph, config) as sess:
        f = sess.make_callable(y, [x])
        fns = {"dask floor": floor, "sess.run": lambda: sess.run(y, {x: small}),
               "make_callable": lambda: f(small)}
        for fn in fns.values():
            fn()
        times: dict[str, list[float]] = {k: [] for k in fns}
        names = list(fns)
        for r in range(samples):
            for name in names[r % 3:] + names[:r % 3]:
                start = time.perf_counter()
                fns[name]()
                times[name].append((time.perf_counter() - start) * 1e3)
    return {k: float(np.median(v)) for k, v in times.items()}


def _isolation_cost(gf, table, ids, config, runs: int) -> dict:
    """Wall ms per run of 4 threads running the sharded step, with and without the
    write locks (each on its own graph, alternated 3 times; medians)."""
    import threading
    import time

    from graphflow.runtime.distributed import plan
    samples: dict[str, list[float]] = {"locked": [], "unlocked": []}
    for _ in range(3):
        for name, isolate in (("locked", True), ("unlocked", False)):
            graph, feed, fetches = _lookup_graph(
                gf, table, ["/job:worker/task:0", "/job:worker/task:1"], True)
            plan._ISOLATE = isolate
            try:
                with gf.Session(graph, config) as sess:
                    sess.run(gf.global_variables_initializer(graph))
                    step = sess.make_callable(fetches, [feed])  # its plan made here
                    step(ids)
                    threads = [threading.Thread(target=lambda: [step(ids) for _ in range(runs)])
                               for _ in range(4)]
                    start = time.perf_counter()
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join()
                    samples[name].append((time.perf_counter() - start) * 1e3 / (4 * runs))
            finally:
                plan._ISOLATE = True
    return {k: float(np.median(v)) for k, v in samples.items()}


def _recovery_time(gf, client, config) -> dict:
    """Seconds from SIGKILL of worker 1 until a write on task 1 succeeds again."""
    import os
    import signal
    import time
    scope = gf.Scope(gf.Graph())
    v = scope.with_device("/job:worker/task:1").variable(np.zeros(4, np.float32), name="rec")
    step = v.assign_add(np.ones(4, np.float32), read_value=False)
    info = client.scheduler_info()["workers"]
    address = next(a for a, i in info.items() if str(i["name"]) == "1")
    pid = next(iter(client.run(os.getpid, workers=[address]).values()))
    with gf.Session(scope.graph, config) as sess:
        sess.run(v.initializer)
        sess.run(step)
        start = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        back = None
        while time.perf_counter() - start < 120:
            try:
                sess.run(step)
                break
            except gf.errors.AbortedError:
                back = back or time.perf_counter() - start
                sess.run(v.initializer)
            except gf.errors.UnavailableError:
                time.sleep(0.01)
        total = time.perf_counter() - start
    return {"total": total, "unavailable": back if back is not None else total}


if __name__ == "__main__":
    main()
