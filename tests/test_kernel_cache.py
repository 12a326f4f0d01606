"""The kernel cache on disk (ops/jit.py, runtime/fusion.py): a damaged entry is
discarded and the kernel compiled again (said once), never a failure of every plan
that uses it; an entry another graphflow wrote is compiled again;
``GRAPHFLOW_JIT_CACHE=0`` writes nothing into the cache folder."""
from __future__ import annotations

import os
import pathlib
import pickle
import subprocess
import sys

CHILD = r"""
import numpy as np, graphflow as gf
from graphflow.ops import scatter_loops
s = gf.Scope(gf.Graph())
x = s.placeholder(gf.float32, shape=[4])
y = s.mul(s.add(x, 1.5), x)                       # one fused kernel
z = s.tensor_scatter_add(y, [[1], [1]], [2.0, 3.0])  # a compiled scatter loop
with gf.Session(s.graph) as sess:
    print(sess.run(z, {x: np.arange(4, dtype=np.float32)}).tolist())
"""
WANT = "[0.0, 7.5, 7.0, 13.5]"


def _child(cache: pathlib.Path, **env) -> subprocess.CompletedProcess:
    environment = dict(os.environ, GRAPHFLOW_CACHE_DIR=str(cache), GRAPHFLOW_TIERED="0", **env)
    return subprocess.run([sys.executable, "-c", CHILD], env=environment, capture_output=True,
                          text=True, timeout=240, cwd=cache.parent)


def test_damaged_cache_files_are_discarded_and_rebuilt(tmp_path):
    cache = tmp_path / "cache"
    first = _child(cache)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == WANT
    index = list(cache.rglob("*.nbi"))
    data = list(cache.rglob("*.nbc"))
    fused = list(cache.rglob("graphflow_fused_*.py"))
    assert index and data and fused
    for path in index:
        path.write_bytes(b"")                       # zero-length: a crash mid-write
    for path in data:
        path.write_bytes(path.read_bytes()[:10])    # truncated
    for path in fused:
        path.write_text("def fused(:\n")           # a damaged generated source
    second = _child(cache)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == WANT
    assert "discarding a damaged" in second.stderr
    third = _child(cache)                          # rebuilt: quiet again
    assert third.returncode == 0 and third.stdout.strip() == WANT
    assert "discarding" not in third.stderr


def test_a_cache_switched_off_writes_nothing(tmp_path):
    cache = tmp_path / "cache"
    done = _child(cache, GRAPHFLOW_JIT_CACHE="0")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == WANT
    assert not cache.exists() or not any(p.is_file() for p in cache.rglob("*"))


def _index_stamps(cache: pathlib.Path) -> dict:
    """Each numba index file's stamp (numba's format: its version, then (stamp, overloads))."""
    stamps = {}
    for path in cache.rglob("*.nbi"):
        with open(path, "rb") as f:
            version = pickle.load(f)
            stamps[path] = (version, *pickle.loads(f.read()))
    return stamps


def test_a_kernel_cached_by_another_graphflow_is_compiled_again(tmp_path):
    """A cached kernel holds the code of the kernels it calls, in other modules too: its
    stamp carries the fingerprint of every kernel module (ops/jit.kernels_fingerprint), so
    entries an older graphflow wrote are not loaded (here: their fingerprint rewritten)."""
    from graphflow.ops.jit import kernels_fingerprint
    cache = tmp_path / "cache"
    assert _child(cache).stdout.strip() == WANT
    stamps = _index_stamps(cache)
    assert stamps and all(stamp[1] == kernels_fingerprint() for _, stamp, _ in stamps.values())
    for path, (version, stamp, overloads) in stamps.items():
        with open(path, "wb") as f:
            pickle.dump(version, f)
            f.write(pickle.dumps(((stamp[0], "an older graphflow"), overloads)))
    again = _child(cache)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == WANT
    assert all(stamp[1] == kernels_fingerprint() for _, stamp, _ in _index_stamps(cache).values())
