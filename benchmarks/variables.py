"""In-place variable updates: a sparse update costs the rows it touches, not the table.

    python -m benchmarks.variables [--sizes 2,20,200] [--repeats 30] [--no-tf] [--json PATH]

For float32 tables of 64 columns (2, 20 and 200 MiB), each contender runs in its
own fresh interpreter (so peak resident memory of one never mixes with another's)
and reports the median time of one update and the peak RSS above the resident
memory after the table was initialized and the update warmed up (VmHWM reset
through /proc/self/clear_refs, see ``benchmarks/harness.py``):

- ``scatter``: graphflow, ``sess.run(v.scatter_nd_add(idx, updates, read_value=False))``
  adding 1,000 random rows, indices and updates fed through placeholders (no Const
  is rebuilt); a callable made once, as a training loop would.
- ``dense``: graphflow, the same change as a dense ``v.assign_add(delta)`` of a
  whole-table delta (fed; allocated before the baseline), which touches every row.
- ``tf``: TensorFlow's ``tf.Variable.scatter_nd_add`` in graph mode (a
  ``tf.function`` with an input signature) with the same numpy inputs, when
  TensorFlow is installed; skipped with a note otherwise.

Each contender first checks one update against numpy (``np.add.at`` on the
touched rows; the dense delta added to them) and fails loudly if it differs.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys

import numpy as np

from .harness import median_time, peak_rss_bytes

COLUMNS = 64
ROWS_UPDATED = 1000
METHODS = ("scatter", "dense", "tf")
_POOL = 8  # index batches cycled through, so no two consecutive calls hit the same rows


def _inputs(rows: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(0)
    indices = [rng.integers(0, rows, (ROWS_UPDATED, 1)) for _ in range(_POOL)]
    updates = [rng.standard_normal((ROWS_UPDATED, COLUMNS)).astype(np.float32)
               for _ in range(_POOL)]
    return indices, updates


def _table(rows: int) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((rows, COLUMNS)).astype(np.float32)


def _added(before: np.ndarray, idx: np.ndarray, upd: np.ndarray) -> np.ndarray:
    """The touched rows (``before``, in np.unique order) after numpy's np.add.at."""
    expected = before.copy()
    np.add.at(expected, np.searchsorted(np.unique(idx[:, 0]), idx[:, 0]), upd)
    return expected


def _check(after: np.ndarray, expected: np.ndarray, what: str) -> None:
    if not np.array_equal(after, expected):
        raise SystemExit(f"{what}: one update differs from numpy's")


def _graphflow(rows: int, method: str, repeats: int) -> dict:
    import graphflow as gf

    s = gf.Scope(gf.Graph())
    init = s.placeholder(gf.float32, shape=[rows, COLUMNS])
    v = s.variable(init, name="table")
    idx = s.placeholder(gf.int64, shape=[ROWS_UPDATED, 1])
    upd = s.placeholder(gf.float32, shape=[ROWS_UPDATED, COLUMNS])
    delta = s.placeholder(gf.float32, shape=[rows, COLUMNS])
    ids = s.placeholder(gf.int64, shape=[None])
    indices, updates = _inputs(rows)
    with gf.Session(s.graph) as sess:
        sess.run(v.initializer, {init: _table(rows)})
        read_rows = sess.make_callable(v.sparse_read(ids), [ids])
        if method == "scatter":
            update = sess.make_callable(v.scatter_nd_add(idx, upd, read_value=False), [idx, upd])
            args = [(i, u) for i, u in zip(indices, updates)]
        else:
            update = sess.make_callable(v.assign_add(delta, read_value=False), [delta])
            dense = np.zeros((rows, COLUMNS), np.float32)
            np.add.at(dense, indices[0][:, 0], updates[0])
            args = [(dense,)]
        touched = np.unique(indices[0][:, 0])
        before = read_rows(touched)
        expected = (_added(before, indices[0], updates[0]) if method == "scatter"
                    else before + args[0][0][touched])
        update(*args[0])
        _check(read_rows(touched), expected, f"graphflow {method}")
        return _measure(lambda k: update(*args[k % len(args)]), repeats)


def _tensorflow(rows: int, repeats: int) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError:
        return {"skipped": "TensorFlow is not installed (pip install '.[peers]')"}
    v = tf.Variable(_table(rows))
    spec = [tf.TensorSpec([ROWS_UPDATED, 1], tf.int64),
            tf.TensorSpec([ROWS_UPDATED, COLUMNS], tf.float32)]

    @tf.function(input_signature=spec)
    def update(i, u):
        v.scatter_nd_add(i, u)

    indices, updates = _inputs(rows)
    touched = np.unique(indices[0][:, 0])
    before = tf.gather(v, touched).numpy()
    update(indices[0], updates[0])
    _check(tf.gather(v, touched).numpy(), _added(before, indices[0], updates[0]), "TensorFlow")
    return _measure(lambda k: update(indices[k % _POOL], updates[k % _POOL]), repeats)


def _measure(call, repeats: int) -> dict:
    """Median seconds per call, and the peak RSS (bytes) of ``repeats`` calls above the
    resident memory before them."""
    counter = iter(range(1 << 62))

    def one():
        call(next(counter))
    seconds = median_time(one, repeats, warmup=3)
    peak = peak_rss_bytes(lambda: [one() for _ in range(repeats)])
    return {"seconds": seconds, "peak_rss_bytes": peak}


def _child(mib: int, method: str, repeats: int) -> dict:
    rows = mib * 2 ** 20 // (4 * COLUMNS)
    result = _tensorflow(rows, repeats) if method == "tf" else _graphflow(rows, method, repeats)
    return {"mib": mib, "rows": rows, "method": method, **result}


def _run_child(mib: int, method: str, repeats: int) -> dict:
    root = pathlib.Path(__file__).resolve().parent.parent
    cmd = [sys.executable, "-m", "benchmarks.variables", "--child", str(mib), method,
           "--repeats", str(repeats)]
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    if done.returncode:
        raise SystemExit(f"{method} at {mib} MiB failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _time(row: dict | None) -> str:
    if row is None or "skipped" in row:
        return "—"
    return f"{row['seconds'] * 1e3:.3f} ms"


def _rss(row: dict | None) -> str:
    if row is None or "skipped" in row:
        return "—"
    peak = row["peak_rss_bytes"]
    return "n/a" if peak is None else f"{peak / 2 ** 20:.1f} MiB"


def table(results: list[dict], sizes: list[int]) -> str:
    by = {(r["mib"], r["method"]): r for r in results}
    lines = ["| table (float32, 64 cols) | rows | graphflow scatter_nd_add, 1,000 rows | "
             "peak RSS + | graphflow dense assign_add | peak RSS + | TF scatter_nd_add "
             "(tf.function) | peak RSS + |",
             "|---|---|---|---|---|---|---|---|"]
    for mib in sizes:
        cells = []
        for method in METHODS:
            row = by.get((mib, method))
            cells += [_time(row), _rss(row)]
        rows = next(r["rows"] for r in results if r["mib"] == mib)
        lines.append(f"| {mib} MiB | {rows:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.variables",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,20,200", help="table sizes in MiB")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--no-tf", action="store_true", help="leave TensorFlow out")
    parser.add_argument("--json", type=pathlib.Path, help="also write the results here")
    parser.add_argument("--child", nargs=2, metavar=("MIB", "METHOD"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(int(args.child[0]), args.child[1], args.repeats)))
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    methods = [m for m in METHODS if not (args.no_tf and m == "tf")]
    results = []
    for mib in sizes:
        for method in methods:
            results.append(_run_child(mib, method, args.repeats))
            print(f"{mib} MiB {method}: {_time(results[-1])}, peak RSS + {_rss(results[-1])}",
                  file=sys.stderr, flush=True)
    print(table(results, sizes))
    skipped = {r["skipped"] for r in results if "skipped" in r}
    for note in skipped:
        print(f"\nTensorFlow: {note}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
