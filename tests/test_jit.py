"""The compiled kernels' disk cache (ops/jit.py): in the user's cache folder, reused by
a later process, and off (not failing) when that folder cannot be written."""
import os
import subprocess
import sys

_RUN = """
import numpy as np, graphflow as gf
s = gf.Scope(gf.Graph())
x = s.placeholder(gf.float64, shape=[None])
idx = s.placeholder(gf.int64, shape=[None, 1])
y = s.tensor_scatter_max(s.scatter_nd(idx, s.gather_nd(x, idx), [6]), idx, s.gather_nd(x, idx))
got = gf.Session(s.graph).run(y, {x: np.arange(6.0), idx: np.array([[1], [4], [1]])})
assert got.tolist() == [0, 2, 0, 0, 4, 0], got
print("ok")
"""


def _run(cache: str, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, GRAPHFLOW_CACHE_DIR=cache)
    env.pop("GRAPHFLOW_JIT_CACHE", None)
    # run outside the repository: its graphflow/ folder is not the installed package
    return subprocess.run([sys.executable, "-c", _RUN], env=env, capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_kernels_are_cached_in_the_cache_folder_and_reused(tmp_path):
    first = _run(str(tmp_path / "cache"), tmp_path)
    assert first.returncode == 0 and "ok" in first.stdout, first.stderr
    cached = {p.name for p in (tmp_path / "cache").rglob("*.nbi")}
    assert cached  # numba's index files, under our folder, not next to the sources
    second = _run(str(tmp_path / "cache"), tmp_path)
    assert second.returncode == 0, second.stderr
    assert {p.name for p in (tmp_path / "cache").rglob("*.nbi")} == cached  # loaded, nothing new


def test_an_unwritable_cache_folder_turns_the_cache_off(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    done = _run(str(blocked / "cache"), tmp_path)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr
    assert "not writable" in done.stderr
