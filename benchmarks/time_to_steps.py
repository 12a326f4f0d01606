"""Time to K steps: what a user's script waits for, not the steady state.

    python -m benchmarks.time_to_steps [--only W8,W10] [--ks 1,10,100,1000,5000]
                                       [--engines graphflow] [--budget-s 60] [--json PATH]

Each (workload, engine) runs in a fresh interpreter: seconds from starting to build
the graph (or, for a peer, its formulation) to K steps done, for each K, the
engine's import timed apart, and the longest call after the first (a compile
stalling the caller). graphflow runs twice, with an empty kernel cache
(cold: numba compiles) and with the cache the cold run left (warm); the peers (JAX
jit, tf.function, TF 1.x Session, PyTorch, where installed) as they come. A run stops
at the first K past ``--budget-s`` seconds (that K and the later ones read "-").
Every engine is held to the same threads (``GRAPHFLOW_BENCH_THREADS``, default the
CPU count, through OMP/MKL/OpenBLAS variables and each peer's own setting).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

WORKLOADS = ("W8", "W9", "W10", "W11", "W12")
ENGINES = ("graphflow (cold cache)", "graphflow (warm cache)", "jax", "tensorflow", "tf1",
           "torch")
KS = (1, 10, 100, 1000, 5000)

_CHILD = r'''
import json, os, sys, time
workload, engine, ks, budget = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), float(sys.argv[4])
t0 = time.perf_counter()
import numpy as np
import graphflow as gf
from benchmarks.workloads import WORKLOADS
from benchmarks.models import MODEL_WORKLOADS
builders = {**WORKLOADS, **MODEL_WORKLOADS}
imported = time.perf_counter() - t0
if engine == "graphflow":
    start = time.perf_counter()
    case = builders[workload](1.0)[-1]
    step = case.graphflow
else:
    case = builders[workload](1.0)[-1]   # the data and static parameters (not timed)
    from benchmarks.peers import load_peers
    t1 = time.perf_counter()
    peer = next(p for p in load_peers() if p.key == engine)
    imported += time.perf_counter() - t1
    if peer.missing or case.peer_op not in peer.forms:
        print(json.dumps({"status": peer.missing or "not expressible"}))
        sys.exit(0)
    start = time.perf_counter()
    form = peer.forms[case.peer_op]
    fn = form.build(peer.module, **case.peer_params)
    if form.compiled:
        fn = peer._compile(fn)
    step = peer._runner(fn, peer._place(case.peer_inputs))
done, times, slowest, slowest_at = 0, {}, 0.0, 0
for k in ks:
    while done < k:
        t = time.perf_counter()
        step()
        took = time.perf_counter() - t
        done += 1
        if done > 1 and took > slowest:  # the longest call after the first: a stall
            slowest, slowest_at = took, done
    times[k] = time.perf_counter() - start
    if times[k] > budget:
        break
print(json.dumps({"status": "ok", "import_s": imported, "times": times,
                  "slowest_call_ms": 1e3 * slowest, "slowest_call": slowest_at}))
'''


def run_child(workload: str, engine: str, ks, budget: float, env: dict) -> dict:
    """One fresh interpreter's times (seconds since building started, per K)."""
    done = subprocess.run([sys.executable, "-c", _CHILD, workload, engine, json.dumps(ks),
                           str(budget)], capture_output=True, text=True, env=env,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {"status": f"failed: {done.stderr.strip().splitlines()[-1:]}"}
    return json.loads(lines[-1])


def _environment(threads: int, cache: str) -> dict:
    env = dict(os.environ, GRAPHFLOW_CACHE_DIR=cache, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    env["XLA_FLAGS"] = f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={threads}"
    return env


def measure(workloads, ks, budget: float, threads: int, engines=ENGINES) -> dict:
    """{workload: {engine: result}} for every engine (graphflow's warm run needs its cold
    run before it: the cache it fills)."""
    results: dict = {}
    for workload in workloads:
        with tempfile.TemporaryDirectory(prefix="graphflow-tts-") as cache:
            env = _environment(threads, cache)
            row = results[workload] = {}
            for engine in engines:
                key = "graphflow" if engine.startswith("graphflow") else engine
                row[engine] = run_child(workload, key, list(ks), budget, env)
                print(f"{workload} {engine}: {_cells(row[engine], ks)}", file=sys.stderr)
    return results


def _cells(result: dict, ks) -> str:
    if result.get("status") != "ok":
        return result.get("status", "?")
    times = {int(k): v for k, v in result["times"].items()}
    return " | ".join(f"{times[k]:.2f}" if k in times else "-" for k in ks)


def table(results: dict, ks) -> str:
    """The Markdown table: seconds from building to K steps done, import apart."""
    lines = ["| work | engine | import s | " + " | ".join(f"K={k}" for k in ks)
             + " | longest call after the 1st, ms (call) |",
             "|---|---|---|" + "---|" * len(ks) + "---|"]
    for workload, row in results.items():
        for engine, result in row.items():
            ok = result.get("status") == "ok"
            imported = f"{result['import_s']:.2f}" if ok else "-"
            slowest = f"{result['slowest_call_ms']:.1f} ({result['slowest_call']})" \
                if ok and "slowest_call_ms" in result else "-"
            lines.append(f"| {workload} | {engine} | {imported} | {_cells(result, ks)} | "
                         f"{slowest} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(WORKLOADS))
    parser.add_argument("--ks", default=",".join(map(str, KS)))
    parser.add_argument("--budget-s", type=float, default=60.0)
    parser.add_argument("--engines", default="all",
                        help="'graphflow' (cold and warm) or a comma list of: "
                        + ", ".join(ENGINES))
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    ks = [int(k) for k in args.ks.split(",")]
    threads = int(os.environ.get("GRAPHFLOW_BENCH_THREADS", os.cpu_count() or 1))
    engines = ENGINES if args.engines == "all" else ENGINES[:2] if args.engines == "graphflow" \
        else tuple(e for e in ENGINES if e in args.engines.split(","))
    results = measure(args.only.split(","), ks, args.budget_s, threads, engines)
    print(table(results, ks))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
