"""``python -m benchmarks [--quick] [--peers] [--only W1,W6] [--json PATH] [--plot PATH] [--write-docs]``

Prints one table row per case: graphflow's median time, the hand-written numpy
baseline's, their ratio, effective GB/s, the ratio to this machine's copy and
random-access limits (measured in the same run) and peak memory. Every
contender of a case is timed in the same round-robin (interleaved samples).

``--peers`` adds JAX (``jax.jit``) and TensorFlow (``tf.function``, no XLA)
where they are installed (``pip install '.[peers]'``): their times, graphflow /
best peer, and whether each peer's result equals graphflow's (see
``benchmarks/peers.py`` for how each peer writes each workload). A peer that is
not installed says so in its column.

``--write-docs`` rewrites docs/performance.md from this run's results (its
hand-written preamble kept: ``benchmarks/docs_page.py``).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys

import numpy as np

from .docs_page import DOCS_PAGE, preamble, write_page
from .harness import (MachineLimits, paired_per_call_time, peak_bytes, settle, peak_rss_bytes,
                      round_robin_times)
from .loops import LOOP_WORKLOADS
from .models import MODEL_WORKLOADS
from .workloads import BYTES, WORKLOADS, Case

WORKLOADS = {**WORKLOADS, **MODEL_WORKLOADS, **LOOP_WORKLOADS}

RESULTS = pathlib.Path(__file__).with_name("results")


def measure(case: Case, repeats: int, peers: list | None = None) -> dict:
    """Times graphflow, the numpy baseline and, with ``peers``, each peer that can
    express the case, all in one round-robin; one row of the table."""
    if case.paired:
        t_gf, t_np, ratio = paired_per_call_time(case.graphflow, case.baseline, max(3 * repeats, 15))
        return {"workload": case.workload, "name": case.name, "unit": f"us/{case.per}",
                "graphflow": t_gf / case.units * 1e6, "baseline": t_np / case.units * 1e6,
                "baseline_name": case.baseline_name, "ratio": ratio}
    runs = prepare_peers(case, peers) if peers is not None else {}
    contenders = {"graphflow": case.graphflow}
    if case.baseline_name != "-":  # the model steps have no hand-written numpy
        contenders["baseline"] = case.baseline
    contenders.update({key: run.run for key, run in runs.items() if run.run is not None})
    calls = {"call": 2000, "node": 200}.get(case.per, 1)
    settle(case.graphflow)  # the steady state: its background compiles done
    scale = 1e6 / case.units if case.per else 1e3
    times = {key: t * scale for key, t in round_robin_times(contenders, repeats, calls).items()}
    row = {"workload": case.workload, "name": case.name,
           "unit": f"us/{case.per}" if case.per else "ms",
           "graphflow": times["graphflow"], "baseline": times.get("baseline"),
           "baseline_name": case.baseline_name,
           "ratio": times["graphflow"] / times["baseline"] if "baseline" in times else None}
    if peers is not None:
        row["peers"] = {key: {"status": run.status, "time": times.get(key),
                              "formulation": run.formulation, "note": run.note,
                              "agreement": run.agreement, "check": run.check}
                        for key, run in runs.items()}
        timed = {key: times[key] for key, run in runs.items() if run.comparable}
        if timed:
            best = min(timed, key=timed.get)
            row.update(best_peer=best, best_peer_time=timed[best],
                       ratio_best_peer=times["graphflow"] / timed[best])
    if case.per:
        return row
    t_gf = times["graphflow"] / 1e3
    row.update({"gbps": case.nbytes / t_gf / 1e9 if case.nbytes else None,
                "nbytes": case.nbytes, "random_accesses": case.random_accesses,
                "peak_mb_graphflow": peak_bytes(case.graphflow) / 1e6,
                "peak_mb_baseline": peak_bytes(case.baseline) / 1e6,
                "peak_rss_mb_graphflow": _mb(peak_rss_bytes(case.graphflow)),
                "peak_rss_mb_baseline": _mb(peak_rss_bytes(case.baseline))})
    return row


def prepare_peers(case: Case, peers: list) -> dict:
    """Each peer's compiled formulation of ``case``, checked against graphflow's
    result; a failed check is reported on stderr (the peer is then not timed
    against graphflow as a best peer, but its time is still shown)."""
    if not case.peer_op:
        return {}
    reference = case.graphflow()
    runs = {}
    for peer in peers:
        run = peer.prepare(case, reference)
        if run.status == "failed" or run.agreement == "mismatch":
            what = "failed" if run.status == "failed" else "result differs from graphflow's"
            print(f"warning: {peer.label} on {case.workload} {case.name}: {what}: {run.check}",
                  file=sys.stderr)
        runs[peer.key] = run
    return runs


def _mb(nbytes: int | None) -> float | None:
    return None if nbytes is None else nbytes / 1e6


def limits_ratios(row: dict, limits: MachineLimits) -> None:
    if row["unit"] != "ms":
        return
    t = row["graphflow"] / 1e3
    if row.get("nbytes"):
        row["x_copy_limit"] = t / (row["nbytes"] / (limits.copy_gbps * 1e9))
    if row.get("random_accesses"):
        row["x_random_limit"] = t / (row["random_accesses"] * limits.random_assign_ns * 1e-9)


def table(rows: list[dict], peers: list | None = None) -> str:
    """The results as a markdown table; with ``peers``, a column per peer and
    graphflow / best peer."""
    head = ("| workload | case | graphflow | numpy baseline | ratio | GB/s | x copy limit | "
            "x random limit | peak MB traced (gf / np) | peak RSS MB (gf / np) |")
    ncols = 10
    if peers is not None:
        head += "".join(f" {peer.label} |" for peer in peers) + " graphflow / best peer |"
        ncols += len(peers) + 1
    lines = [head, "|" + "---|" * ncols]
    for r in rows:
        line = (
            f"| {r['workload']} | {r['name']} | {r['graphflow']:.2f} {r['unit']} | "
            + (f"{r['baseline']:.2f} {r['unit']} ({r['baseline_name']}) | {r['ratio']:.2f}x | "
               if r.get("baseline") is not None else "- | - | ")
            + (f"{r['gbps']:.2f}" if r.get("gbps") else "-") + " | "
            + (f"{r['x_copy_limit']:.1f}x" if r.get("x_copy_limit") else "-") + " | "
            + (f"{r['x_random_limit']:.1f}x" if r.get("x_random_limit") else "-") + " | "
            + (f"{r['peak_mb_graphflow']:.0f} / {r['peak_mb_baseline']:.0f}"
               if "peak_mb_graphflow" in r else "-") + " | "
            + (f"{r['peak_rss_mb_graphflow']:.0f} / {r['peak_rss_mb_baseline']:.0f}"
               if r.get("peak_rss_mb_graphflow") is not None else "-") + " |")
        if peers is not None:
            line += "".join(f" {_peer_cell(r, peer.key)} |" for peer in peers)
            line += (f" {r['ratio_best_peer']:.2f}x ({_label(peers, r['best_peer'])}) |"
                     if "ratio_best_peer" in r else " - |")
        lines.append(line)
    return "\n".join(lines)


#: Table marks for a peer result that is not bit-exact with graphflow's.
CHECK_MARKS = {"equal": "=", "close": "~", "mismatch": "MISMATCH"}


def _peer_cell(row: dict, key: str) -> str:
    run = row.get("peers", {}).get(key)
    if run is None:
        return "-"
    if run["time"] is None:
        return run["status"]
    mark = CHECK_MARKS.get(run["agreement"], "")
    return f"{run['time']:.2f} {row['unit']}" + (f" ({mark})" if mark else "")


def _label(peers: list, key: str) -> str:
    return next(peer.label for peer in peers if peer.key == key)


def peer_notes(rows: list[dict], peers: list) -> str:
    """What each peer runs for each op, and every check that was not bit-exact."""
    lines = ["Peers: " + "; ".join(peer.describe() for peer in peers) + "."]
    lines += [peer.how for peer in peers if not peer.missing]
    lines += ["Every timed peer result was checked against graphflow's: bit-exact unless marked "
              "(=) equal values, not bit-identical; (~) close, not bit-exact; (MISMATCH).", ""]
    for peer in peers:
        texts = []
        for r in rows:
            run = r.get("peers", {}).get(peer.key)
            if run and run["formulation"]:
                text = f"- {run['formulation']}" + (f" ({run['note']})" if run["note"] else "")
                if text not in texts:
                    texts.append(text)
        if texts:
            lines += [f"{peer.label} formulations:"] + texts
    for r in rows:
        for key, run in r.get("peers", {}).items():
            if run["check"] and run["agreement"] != "bit-exact":
                lines.append(f"{r['workload']} {r['name']}, {_label(peers, key)}: {run['check']}")
    return "\n".join(lines)


def plot(rows: list[dict], path: pathlib.Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib is not installed: no plot; pip install '.[bench]')", file=sys.stderr)
        return False
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1.5))
    labels = [f"{r['workload']} {r['name']}" for r in rows]
    y = np.arange(len(rows))
    with_peers = any("ratio_best_peer" in r for r in rows)
    height = 0.4 if with_peers else 0.8
    ax.barh(y, [r["ratio"] or 0 for r in rows], height=height, label="graphflow / numpy baseline",
            color="#4c72b0" if with_peers else
            ["#4c72b0" if (r["ratio"] or 0) <= 1.2 else "#dd8452" for r in rows])
    if with_peers:
        ax.barh(y + height, [r.get("ratio_best_peer", 0) for r in rows], height=height,
                label="graphflow / best of JAX jit and TensorFlow tf.function", color="#55a868")
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False)
    ax.set_yticks(y + (height / 2 if with_peers else 0), labels)
    ax.axvline(1.0, color="black", lw=1)
    ax.set_xlabel("graphflow time / other time (lower is better)")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def machine(limits: MachineLimits) -> str:
    """The machine a run measured, in one line: CPU, cores, libraries, its limits."""
    try:
        import numba
        numba_version = f", numba {numba.__version__}"
    except ImportError:
        numba_version = ""
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
            f"numpy {np.__version__}{numba_version}; copy {limits.copy_gbps:.1f} GB/s, random "
            f"1M-element assignment {limits.random_assign_ns:.1f} ns/element")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="sizes / 10, fewer repeats")
    parser.add_argument("--only", default="", help="comma-separated workloads, e.g. W1,W6")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--json", type=pathlib.Path, default=RESULTS / "latest.json")
    parser.add_argument("--plot", type=pathlib.Path, default=RESULTS / "latest.png")
    parser.add_argument("--peers", action="store_true",
                        help="also time JAX (jit) and TensorFlow (tf.function) where installed")
    parser.add_argument("--write-docs", nargs="?", const=DOCS_PAGE, default=None, type=pathlib.Path,
                        metavar="PAGE", help="rewrite docs/performance.md (or PAGE) from this "
                        "run, keeping its hand-written preamble")
    args = parser.parse_args(argv)
    # steady state: a fused kernel is compiled before its first timed call (tiered
    # compilation, which runs it node by node meanwhile, is what jit_cost measures)
    os.environ.setdefault("GRAPHFLOW_TIERED", "0")
    peers = None
    if args.peers:
        from .peers import load_peers
        peers = load_peers()
    scale = 0.1 if args.quick else 1.0
    repeats = args.repeats or (5 if args.quick else 9)
    chosen = [w.strip() for w in args.only.split(",") if w.strip()] or list(WORKLOADS)
    if args.write_docs is not None:
        preamble(args.write_docs.read_text(encoding="utf-8"), args.write_docs)  # fail early
    limits = MachineLimits.measure(repeats)
    print(f"machine: {machine(limits)}; GB/s = {BYTES}")
    if peers is not None:
        print("peers: " + "; ".join(peer.describe() for peer in peers))
    rows = []
    for name in chosen:
        for case in WORKLOADS[name](scale):
            row = measure(case, repeats, peers)
            limits_ratios(row, limits)
            rows.append(row)
            print(table([row], peers).splitlines()[-1], flush=True)
    print()
    print(table(rows, peers))
    results = {"limits": vars(limits), "scale": scale, "repeats": repeats, "rows": rows}
    if peers is not None:
        print()
        print(peer_notes(rows, peers))
        results["peers"] = {peer.key: {"label": peer.label, "version": peer.version or None,
                                       "missing": peer.missing or None} for peer in peers}
    if args.write_docs is not None:
        command = "python -m benchmarks " + " ".join(sys.argv[1:] if argv is None else argv)
        tables = [table(rows, peers)] + ([peer_notes(rows, peers)] if peers is not None else [])
        about = machine(limits) + ("; peers: " + "; ".join(p.describe() for p in peers)
                                   if peers is not None else "")
        print(f"\nwrote {write_page(command.strip(), about, tables, args.write_docs)}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    if plot(rows, args.plot):
        print(f"\nwrote {args.json} and {args.plot}")
    mismatches = [r["name"] for r in rows for run in r.get("peers", {}).values()
                  if run["agreement"] == "mismatch"]
    if mismatches:
        print(f"\n{len(mismatches)} peer result(s) differ from graphflow's: "
              + "; ".join(mismatches), file=sys.stderr)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
