"""The kernel cache on disk (ops/jit.py, runtime/fusion.py): a damaged entry is
discarded and the kernel compiled again (said once), never a failure of every plan
that uses it; ``GRAPHFLOW_JIT_CACHE=0`` writes nothing into the cache folder."""
from __future__ import annotations

import os
import pathlib
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
