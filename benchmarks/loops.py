"""W13-W14: while loops, per iteration, in graphflow and in each peer.

    python -m benchmarks.loops [--n 1000] [--repeats 15] [--threads N] [--json PATH]

- W13: a small-body loop, ``while i < n: i, x = i + 1, x * 0.5 + 1.0`` over a [16]
  float32 vector, n (1000) fed: what one iteration of the loop machinery costs.
- W14: label propagation on the karate club (examples/label_propagation.py): gather
  the rows along the edges, segment-sum them into the nodes, clamp the two seeds,
  until no entry changes by more than 1e-6 (52 iterations).

Both are part of ``python -m benchmarks [--peers]`` (one column per peer, the JAX
column its ``lax.while_loop``). ``python -m benchmarks.loops`` times them alone with
every formulation, JAX's ``lax.fori_loop`` too, and every engine held to the same
threads: ``--threads`` (default ``GRAPHFLOW_BENCH_THREADS``, else the CPU count)
through the OMP / MKL / OpenBLAS / XLA variables of benchmarks/time_to_steps.py (it
re-runs itself in a child with them set), TensorFlow's intra- and inter-op pools
(the TF 1.x Session takes tf.config's), PyTorch's ``set_num_threads`` and
graphflow's ``SessionConfig``. Every peer's result is checked against graphflow's.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import time
import types
from typing import Any, Callable

import numpy as np

import graphflow as gf

from .workloads import Case, _session

ROOT = pathlib.Path(__file__).resolve().parents[1]
WIDTH = 16             # W13's vector
ITERATIONS = 1000      # W13's n at scale 1
LP_TOL = 1e-6          # W14's tolerance and bound, as the example's defaults
LP_MAX_ITERATIONS = 1000
_CHILD_MARK = "GRAPHFLOW_LOOPS_BOUNDED"


def bench_threads() -> int:
    """The threads every engine is held to (``GRAPHFLOW_BENCH_THREADS``, else the cores)."""
    return int(os.environ.get("GRAPHFLOW_BENCH_THREADS", os.cpu_count() or 1))


def _bounded_session(graph: gf.Graph) -> gf.Session:
    threads = bench_threads()
    return _session(graph, inter_op_threads=threads, intra_op_threads=threads)


@functools.lru_cache(maxsize=None)
def label_propagation_example() -> types.ModuleType:
    """examples/label_propagation.py as a module (examples/ is not a package)."""
    name = "graphflow_examples_label_propagation"
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" /
                                                  "label_propagation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# -- graphflow and the numpy baselines --------------------------------------------------------
def w13_small_while(scale: float) -> list[Case]:
    """``while i < n: i + 1, x * 0.5 + 1.0``; n and x fed (n captured by cond, so a loop
    variable of the While, as in TF 2's while_v2)."""
    n = max(10, int(ITERATIONS * scale))
    g = gf.Graph()
    s = gf.Scope(g)
    limit = s.placeholder(gf.int32, shape=[], name="n")
    x0 = s.placeholder(gf.float32, shape=[WIDTH], name="x")
    _, x = s.while_loop(lambda i, x: i < limit, lambda i, x: (i + 1, x * 0.5 + 1.0), [0, x0])
    call = _bounded_session(g).make_callable(x, [limit, x0])
    fed = (np.int32(n), np.ones(WIDTH, np.float32))

    def numpy_loop():
        i, x = 0, fed[1]
        while i < n:
            i, x = i + 1, x * np.float32(0.5) + np.float32(1.0)
        return x
    return [Case("W13", f"while i < n: x = x * 0.5 + 1.0, x [{WIDTH}] float32, n = {n} fed",
                 lambda: call(*fed), numpy_loop, "Python while loop of numpy ops",
                 per="iteration", units=n, peer_op="small_while", peer_inputs=fed,
                 peer_params={"n": n})]


def w14_label_propagation(scale: float) -> list[Case]:
    """The example's loop with its starting distributions fed (nothing to fold)."""
    example = label_propagation_example()
    data = example.karate_data()
    g = gf.Graph()
    s = gf.Scope(g)
    initial = s.placeholder(gf.float32, shape=list(data.initial.shape), name="initial")
    step, labels, _ = example.build(s, data, LP_TOL, LP_MAX_ITERATIONS, initial)
    call = _bounded_session(g).make_callable([step, labels], [initial])
    iterations = int(call(data.initial)[0])
    return [Case("W14", f"label propagation, karate club ({data.nodes} nodes, "
                 f"{len(data.src)} edges): {iterations} iterations to tol {LP_TOL:g}",
                 lambda: call(data.initial), lambda: numpy_label_propagation(data),
                 "numpy loop: y[src], np.add.at by dst", per="iteration", units=iterations,
                 peer_op="label_propagation", peer_inputs=(data.initial,))]


def numpy_label_propagation(data: Any) -> list:
    """The example's iteration in plain numpy: [iterations run, final distributions]."""
    labels, step, change = data.initial, 0, np.inf
    free, clamped = 1 - data.seed_mask, data.seed_mask * data.initial
    while change > LP_TOL and step < LP_MAX_ITERATIONS:
        summed = np.zeros_like(labels)
        np.add.at(summed, data.dst, labels[data.src])
        updated = summed * data.inv_degree * free + clamped
        change = float(np.max(np.abs(updated - labels)))
        labels, step = updated, step + 1
    return [np.int32(step), labels]


LOOP_WORKLOADS = {"W13": w13_small_while, "W14": w14_label_propagation}


# -- the peers' formulations -----------------------------------------------------------------
def _lp_constants():
    """The example's graph as arrays: (nodes, src, dst, inv_degree, free, clamped)."""
    d = label_propagation_example().karate_data()
    return d.nodes, d.src, d.dst, d.inv_degree, 1 - d.seed_mask, d.seed_mask * d.initial


def _jax_small_while(jax, n):
    lax = jax.lax

    def loop(limit, x):
        return lax.while_loop(lambda c: c[0] < limit, lambda c: (c[0] + 1, c[1] * 0.5 + 1.0),
                              (jax.numpy.int32(0), x))[1]
    return loop


def _jax_small_fori(jax, n):
    """n static: the compiled loop's trip count is a constant (n traced, fori_loop is
    lax.while_loop itself: 0.013 us per iteration, as while_loop's)."""
    return lambda limit, x: jax.lax.fori_loop(0, n, lambda i, x: x * 0.5 + 1.0, x)


def _jax_lp(jax):
    jnp = jax.numpy
    nodes, src, dst, inv_degree, free, clamped = _lp_constants()

    def body(c):
        step, labels, _ = c
        summed = jax.ops.segment_sum(labels[src], dst, num_segments=nodes)
        updated = summed * inv_degree * free + clamped
        return step + 1, updated, jnp.max(jnp.abs(updated - labels))

    def loop(initial):
        step, labels, _ = jax.lax.while_loop(
            lambda c: (c[2] > LP_TOL) & (c[0] < LP_MAX_ITERATIONS), body,
            (jnp.int32(0), initial, jnp.float32(jnp.inf)))
        return [step, labels]
    return loop


def _tf_small_while(tf, n):
    def loop(limit, x):
        return tf.while_loop(lambda i, x: i < limit, lambda i, x: (i + 1, x * 0.5 + 1.0),
                             (tf.constant(0), x))[1]
    return loop


def _tf_lp(tf):
    nodes, src, dst, inv_degree, free, clamped = _lp_constants()

    def body(step, labels, _):
        summed = tf.math.unsorted_segment_sum(tf.gather(labels, src), dst, nodes)
        updated = summed * inv_degree * free + clamped
        return step + 1, updated, tf.reduce_max(tf.abs(updated - labels))

    def loop(initial):
        step, labels, _ = tf.while_loop(lambda step, labels, change: change > LP_TOL, body,
                                        (tf.constant(0), initial, tf.constant(np.inf, tf.float32)),
                                        maximum_iterations=LP_MAX_ITERATIONS)
        return [step, labels]
    return loop


def _tf1_v1_loop(tf, build):
    """A Session callable of ``build(tf1)``, its while_loops TF 1.x's own dataflow loops
    (Enter / Merge / Switch / NextIteration / Exit frames), not TF 2's functional While."""
    from .peers import _tf1_callable
    tf.compat.v1.disable_control_flow_v2()
    try:
        return _tf1_callable(tf, build)
    finally:
        tf.compat.v1.enable_control_flow_v2()


def _tf1_small_while(tf, n):
    def build(tf1):
        limit, x = tf1.placeholder(tf.int32, []), tf1.placeholder(tf.float32, [WIDTH])
        return _tf_small_while(tf, n)(limit, x), [limit, x]
    return _tf1_v1_loop(tf, build)


def _tf1_lp(tf):
    def build(tf1):
        initial = tf1.placeholder(tf.float32, list(label_propagation_example().karate_data()
                                                   .initial.shape))
        return _tf_lp(tf)(initial), [initial]
    return _tf1_v1_loop(tf, build)


def _torch_small_while(torch, n):
    def loop(limit, x):
        i, stop = 0, int(limit)
        while i < stop:
            i, x = i + 1, x * 0.5 + 1.0
        return x
    return loop


def _torch_lp(torch):
    nodes, src, dst, inv_degree, free, clamped = _lp_constants()
    src, dst = torch.from_numpy(src.astype(np.int64)), torch.from_numpy(dst.astype(np.int64))
    inv_degree, free, clamped = (torch.from_numpy(a) for a in (inv_degree, free, clamped))

    def loop(initial):  # the check reads the change back every iteration, as users do
        labels, step, change = initial, 0, float("inf")
        while change > LP_TOL and step < LP_MAX_ITERATIONS:
            summed = torch.zeros_like(labels).index_add_(0, dst, labels.index_select(0, src))
            updated = summed * inv_degree * free + clamped
            change = (updated - labels).abs().max().item()
            labels, step = updated, step + 1
        return [torch.tensor(step, dtype=torch.int32), labels]
    return loop


def _forms():
    """{peer key: {op: Formulation}}: what ``install`` files in benchmarks/peers.py."""
    from .peers import Formulation
    return {
        "jax": {"small_while": Formulation("jax.jit of lax.while_loop, n traced", _jax_small_while),
                "label_propagation": Formulation(
                    "jax.jit of lax.while_loop: labels[src], jax.ops.segment_sum", _jax_lp)},
        "tensorflow": {
            "small_while": Formulation("tf.function of tf.while_loop", _tf_small_while),
            "label_propagation": Formulation("tf.function of tf.while_loop: tf.gather, "
                                             "unsorted_segment_sum", _tf_lp)},
        "tf1": {"small_while": Formulation("tf.compat.v1.while_loop (v1 dataflow frames), n "
                                           "and x placeholders", _tf1_small_while,
                                           compiled=False),
                "label_propagation": Formulation("the same tf.compat.v1.while_loop, v1 "
                                                 "frames", _tf1_lp, compiled=False)},
        "torch": {"small_while": Formulation("eager: a Python while loop of tensor ops",
                                             _torch_small_while, compiled=False),
                  "label_propagation": Formulation(
                      "eager: Python loop, index_select, index_add_, .item() per check",
                      _torch_lp, compiled=False)}}


#: Formulations only ``python -m benchmarks.loops`` times, each in a column of its own.
EXTRA_COLUMNS = {"jax_fori": ("JAX jit lax.fori_loop", "small_while",
                              "jax.jit of lax.fori_loop(0, n, ...), n static (a constant "
                              "trip count)",
                              _jax_small_fori)}


#: This table's column heads: what each engine's loop is.
COLUMN_LABELS = {"tf1": "TF 1.x while_loop (Session)", "tensorflow": "tf.function tf.while_loop",
                 "jax": "JAX jit lax.while_loop", "torch": "PyTorch eager loop"}


def install() -> None:
    """File the loop formulations in benchmarks/peers.py's tables."""
    from . import peers
    tables = {"jax": peers.JAX_FORMS, "tensorflow": peers.TF_FORMS, "tf1": peers.TF1_FORMS,
              "torch": peers.TORCH_FORMS}
    for key, forms in _forms().items():
        tables[key].update(forms)


# -- python -m benchmarks.loops ----------------------------------------------------------------
def _extra_peers(jax_peer) -> dict:
    """{column key: (label, a JAX peer whose forms are that column's one formulation)}."""
    from .peers import Formulation, JaxPeer
    extras = {}
    for key, (label, op, text, build) in EXTRA_COLUMNS.items():
        peer = JaxPeer.__new__(JaxPeer)
        peer.__dict__.update(jax_peer.__dict__)
        peer.key, peer.label, peer.forms = key, label, {op: Formulation(text, build)}
        extras[key] = peer
    return extras


def bound_peer_threads(peers: list, threads: int) -> None:
    """TensorFlow's pools (its TF 1.x Sessions take tf.config's) and PyTorch's, before
    either runs anything; numpy's, JAX's and torch's OpenMP come from the environment."""
    for peer in peers:
        if peer.missing:
            continue
        if peer.key == "tensorflow":
            peer.module.config.threading.set_intra_op_parallelism_threads(threads)
            peer.module.config.threading.set_inter_op_parallelism_threads(threads)
        elif peer.key == "torch":
            peer.module.set_num_threads(threads)
            try:
                peer.module.set_num_interop_threads(threads)
            except RuntimeError:  # already started: its inter-op pool runs nothing here
                pass


def batched(fn: Callable[[], object],
            sample_s: float = 0.02) -> tuple[Callable[[], object], int]:
    """``(calls of fn in a row, how many)``, about ``sample_s`` long: a one-call sample of
    a fast engine right after another engine's sample measures its threads waking up
    (JAX's 1000-iteration loop: 12 us alone, 170 us after a graphflow call), not its
    loop."""
    fn()
    t0 = time.perf_counter()
    fn()
    calls = max(1, int(sample_s / max(time.perf_counter() - t0, 1e-9)))
    return (lambda: [fn() for _ in range(calls)]), calls


def measure_case(case: Case, peers: list, repeats: int) -> dict:
    """graphflow, the numpy loop and every peer column in one round-robin; us/iteration."""
    from .__main__ import prepare_peers
    from .harness import round_robin_times
    runs = prepare_peers(case, peers)
    contenders = {"graphflow": case.graphflow, "baseline": case.baseline}
    contenders.update({key: run.run for key, run in runs.items() if run.run is not None})
    batches = {key: batched(fn) for key, fn in contenders.items()}
    times = round_robin_times({key: fn for key, (fn, _) in batches.items()}, repeats)
    per = {key: t / batches[key][1] / case.units * 1e6 for key, t in times.items()}
    timed = {key: per[key] for key, run in runs.items() if run.comparable}
    best = min(timed, key=timed.get) if timed else None
    return {"workload": case.workload, "name": case.name, "iterations": case.units,
            "graphflow_us": per["graphflow"], "baseline_us": per["baseline"],
            "baseline_name": case.baseline_name, "best_peer": best,
            "ratio_best_peer": per["graphflow"] / timed[best] if best else None,
            "peers": {key: {"status": run.status, "us": per.get(key), "formulation":
                            run.formulation, "agreement": run.agreement, "check": run.check}
                      for key, run in runs.items()}}


def table(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    """The Markdown table: microseconds per iteration, graphflow / the fastest peer."""
    from .__main__ import CHECK_MARKS
    lines = ["| loop | iterations | graphflow | numpy loop | "
             + " | ".join(label for _, label in columns) + " | graphflow / best peer |",
             "|---|---|---|---|" + "---|" * len(columns) + "---|"]
    for r in rows:
        cells = []
        for key, _ in columns:
            run = r["peers"].get(key)
            if run is None or run["us"] is None:
                cells.append(run["status"] if run else "-")
                continue
            mark = CHECK_MARKS.get(run["agreement"], "")
            cells.append(_us(run["us"]) + (f" ({mark})" if mark else ""))
        best = dict(columns).get(r["best_peer"], "-")
        ratio = f"{r['ratio_best_peer']:.2f}x ({best})" if r["best_peer"] else "-"
        lines.append(f"| {r['workload']} {r['name']} | {r['iterations']} | "
                     f"{_us(r['graphflow_us'])} | {_us(r['baseline_us'])} | "
                     + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines)


def _us(value: float) -> str:
    """Three significant digits at least: JAX's iterations take hundredths of a us."""
    return f"{value:.2f}" if value >= 1 else f"{value:.3g}"


def formulations(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    """What each column runs for each loop, and every check that was not bit-exact."""
    labels = dict(columns)
    lines = []
    for r in rows:
        for key, run in r["peers"].items():
            if run["formulation"]:
                lines.append(f"- {r['workload']}, {labels[key]}: {run['formulation']}"
                             + (f" ({run['check']})" if run["agreement"] not in
                                ("bit-exact", "") else ""))
    return "\n".join(lines)


def _in_bounded_child(argv: list[str], threads: int) -> int:
    """Re-run ``python -m benchmarks.loops`` with the thread variables set before any
    library starts its pools (time_to_steps' environment)."""
    from .time_to_steps import _environment
    env = _environment(threads, os.environ.get("GRAPHFLOW_CACHE_DIR", ""))
    if "GRAPHFLOW_CACHE_DIR" not in os.environ:
        env.pop("GRAPHFLOW_CACHE_DIR")
    env.update({_CHILD_MARK: "1", "GRAPHFLOW_BENCH_THREADS": str(threads)})
    return subprocess.run([sys.executable, "-m", "benchmarks.loops", *argv], env=env,
                          cwd=ROOT).returncode


def run_all(n: int, repeats: int, threads: int) -> tuple[list[dict], list[tuple[str, str]]]:
    """Every loop case against every peer column; the rows and the (key, label) columns."""
    from .peers import load_peers
    os.environ.setdefault("GRAPHFLOW_TIERED", "0")  # steady state, as the suite
    peers = load_peers()
    bound_peer_threads(peers, threads)
    jax_peer = next(p for p in peers if p.key == "jax")
    extras = [] if jax_peer.missing else list(_extra_peers(jax_peer).values())
    order = ["tf1", "tensorflow", "jax", *[p.key for p in extras], "torch"]
    everyone = sorted(peers + extras, key=lambda p: order.index(p.key))
    columns = [(p.key, COLUMN_LABELS.get(p.key, p.label)) for p in everyone]
    rows = []
    for case in w13_small_while(n / ITERATIONS) + w14_label_propagation(1.0):
        rows.append(measure_case(case, everyone, repeats))
        print(table(rows[-1:], columns).splitlines()[-1], file=sys.stderr, flush=True)
    return rows, columns


def main(argv: list[str] | None = None) -> int:
    """Run the loops with every engine bounded (in a child process, see
    ``_in_bounded_child``), print the table and the formulations; 0 when done."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks.loops",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=ITERATIONS, help="W13's iterations")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=bench_threads())
    parser.add_argument("--json", type=pathlib.Path, default=None)
    args = parser.parse_args(argv)
    if os.environ.get(_CHILD_MARK) != "1":
        return _in_bounded_child(argv, args.threads)
    rows, columns = run_all(args.n, args.repeats, args.threads)
    when = datetime.datetime.now().astimezone()
    print(f"`python -m benchmarks.loops {' '.join(argv)}`".replace(" `", "`") +
          f" on {when:%Y-%m-%d %H:%M %Z}; {os.cpu_count()} cores, every engine held to "
          f"{args.threads} thread(s); microseconds per iteration, median of {args.repeats}")
    print()
    print(table(rows, columns))
    print()
    print(formulations(rows, columns))
    if args.json:
        args.json.write_text(json.dumps({"threads": args.threads, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
