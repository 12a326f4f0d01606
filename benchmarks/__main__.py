"""``python -m benchmarks [--quick] [--only W1,W6] [--json PATH] [--plot PATH]``

Prints one table per workload: graphflow's median time, the hand-written numpy
baseline's, their ratio, effective GB/s, the ratio to this machine's copy and
random-access limits (measured in the same run) and peak traced memory.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys

import numpy as np

from .harness import (MachineLimits, median_time, paired_per_call_time, peak_bytes,
                      peak_rss_bytes, per_call_time)
from .workloads import BYTES, WORKLOADS, Case

RESULTS = pathlib.Path(__file__).with_name("results")


def measure(case: Case, repeats: int) -> dict:
    if case.paired:
        t_gf, t_np, ratio = paired_per_call_time(case.graphflow, case.baseline, max(3 * repeats, 15))
        return {"workload": case.workload, "name": case.name, "unit": f"us/{case.per}",
                "graphflow": t_gf / case.units * 1e6, "baseline": t_np / case.units * 1e6,
                "baseline_name": case.baseline_name, "ratio": ratio}
    if case.per:
        calls = 2000 if case.per == "call" else 200
        t_gf = per_call_time(case.graphflow, calls, repeats) / case.units
        t_np = per_call_time(case.baseline, calls, repeats) / case.units
        return {"workload": case.workload, "name": case.name, "unit": f"us/{case.per}",
                "graphflow": t_gf * 1e6, "baseline": t_np * 1e6, "baseline_name": case.baseline_name,
                "ratio": t_gf / t_np}
    t_gf = median_time(case.graphflow, repeats)
    t_np = median_time(case.baseline, repeats)
    return {"workload": case.workload, "name": case.name, "unit": "ms",
            "graphflow": t_gf * 1e3, "baseline": t_np * 1e3, "baseline_name": case.baseline_name,
            "ratio": t_gf / t_np, "gbps": case.nbytes / t_gf / 1e9 if case.nbytes else None,
            "nbytes": case.nbytes, "random_accesses": case.random_accesses,
            "peak_mb_graphflow": peak_bytes(case.graphflow) / 1e6,
            "peak_mb_baseline": peak_bytes(case.baseline) / 1e6,
            "peak_rss_mb_graphflow": _mb(peak_rss_bytes(case.graphflow)),
            "peak_rss_mb_baseline": _mb(peak_rss_bytes(case.baseline))}


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


def table(rows: list[dict]) -> str:
    head = ("| workload | case | graphflow | numpy baseline | ratio | GB/s | x copy limit | "
            "x random limit | peak MB traced (gf / np) | peak RSS MB (gf / np) |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        fmt = (lambda v: f"{v:.2f}") if r["unit"] == "ms" else (lambda v: f"{v:.2f}")
        lines.append(
            f"| {r['workload']} | {r['name']} | {fmt(r['graphflow'])} {r['unit']} | "
            f"{fmt(r['baseline'])} {r['unit']} ({r['baseline_name']}) | {r['ratio']:.2f}x | "
            + (f"{r['gbps']:.2f}" if r.get("gbps") else "-") + " | "
            + (f"{r['x_copy_limit']:.1f}x" if r.get("x_copy_limit") else "-") + " | "
            + (f"{r['x_random_limit']:.1f}x" if r.get("x_random_limit") else "-") + " | "
            + (f"{r['peak_mb_graphflow']:.0f} / {r['peak_mb_baseline']:.0f}"
               if "peak_mb_graphflow" in r else "-") + " | "
            + (f"{r['peak_rss_mb_graphflow']:.0f} / {r['peak_rss_mb_baseline']:.0f}"
               if r.get("peak_rss_mb_graphflow") is not None else "-") + " |")
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
    ax.barh(labels, [r["ratio"] for r in rows], color=["#4c72b0" if r["ratio"] <= 1.2 else "#dd8452"
                                                        for r in rows])
    ax.axvline(1.0, color="black", lw=1)
    ax.set_xlabel("graphflow time / hand-written numpy time (lower is better)")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="sizes / 10, fewer repeats")
    parser.add_argument("--only", default="", help="comma-separated workloads, e.g. W1,W6")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--json", type=pathlib.Path, default=RESULTS / "latest.json")
    parser.add_argument("--plot", type=pathlib.Path, default=RESULTS / "latest.png")
    args = parser.parse_args(argv)
    scale = 0.1 if args.quick else 1.0
    repeats = args.repeats or (5 if args.quick else 9)
    chosen = [w.strip() for w in args.only.split(",") if w.strip()] or list(WORKLOADS)
    limits = MachineLimits.measure(repeats)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"numpy {np.__version__}; copy {limits.copy_gbps:.1f} GB/s, random 1M-element "
          f"assignment {limits.random_assign_ns:.1f} ns/element; GB/s = {BYTES}")
    rows = []
    for name in chosen:
        for case in WORKLOADS[name](scale):
            row = measure(case, repeats)
            limits_ratios(row, limits)
            rows.append(row)
            print(table([row]).splitlines()[-1], flush=True)
    print()
    print(table(rows))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"limits": vars(limits), "scale": scale, "repeats": repeats,
                                     "rows": rows}, indent=2))
    if plot(rows, args.plot):
        print(f"\nwrote {args.json} and {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
