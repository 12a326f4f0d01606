"""Typed Scope builders: graphflow/scope.pyi is what `python -m graphflow.stubs` makes
from the op registry (CI catches a stale stub), and `mypy --strict` passes on a small
user script that builds and runs a graph, and catches a misspelt builder or a
missing attr (skipped when mypy is not installed)."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

USER_SCRIPT = '''
"""A user's script: the README's tour, typed."""
import numpy as np

import graphflow as gf
from graphflow.ops import TensorScatterUpdate


def build() -> tuple[gf.Graph, gf.Output, gf.Output, gf.Output]:
    g = gf.Graph()
    scope = gf.Scope(g)
    indices = scope.constant(np.array([[4], [3], [1], [7]]))
    updates = scope.constant(np.array([9, 10, 11, 12], dtype=np.int32))
    out: gf.Output = scope.scatter_nd(indices, updates, [8])
    x = scope.placeholder(gf.int32, shape=[None])
    parts: list[gf.Output] = scope.dynamic_partition(x, [0, 1] * 4, num_partitions=2)
    stitched = scope.with_sub_scope("stitch").dynamic_stitch([[0, 2, 4, 6], [1, 3, 5, 7]],
                                                             parts)
    y = TensorScatterUpdate.create(scope, stitched, indices, updates).output()
    w = scope.variable(np.ones((8, 2), np.float32), name="w")
    h = scope.relu(scope.matmul(scope.cast(scope.expand_dims(x, 0), gf.float32), w))
    return g, out, y, scope.reduce_sum(h)


def main() -> None:
    g, out, y, total = build()
    with gf.Session(g) as sess:
        sess.run(gf.global_variables_initializer(g))
        print(sess.run([out, y, total], feed_dict={"Placeholder:0": np.ones(8, np.int32)}))


if __name__ == "__main__":
    main()
'''

MISTAKES = '''
import graphflow as gf

scope = gf.Scope(gf.Graph())
scope.scatter_nd_typo(1, 2, 3)
count: int = scope.add(1, 2)
scope.dynamic_partition(1, 2)
'''

#: graphflow's runtime, interop, numba and networkx read as Any: the check takes ~3 s
#: instead of ~9 s, and they are not what the stubs type.
MYPY_INI = '''
[mypy]
strict = True
follow_imports = silent

[mypy-graphflow.runtime.*,graphflow.interop.*,graphflow.ops.*,numba.*,networkx.*]
follow_imports = skip
'''


def test_checked_in_stub_is_the_generators_output(tmp_path):
    """A fresh process (ops other tests register would join the stub), started outside
    the checkout (whose graphflow/ would shadow an installed, non-editable package)."""
    done = subprocess.run([sys.executable, "-c",
                           "import sys; from graphflow.stubs import generate; "
                           "sys.stdout.write(generate())"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    checked_in = (ROOT / "graphflow" / "scope.pyi").read_text()
    assert done.stdout == checked_in, "graphflow/scope.pyi is stale: python -m graphflow.stubs"


def test_stub_declares_every_builder_and_no_getattr():
    import graphflow as gf
    from graphflow.stubs import generate

    text = " ".join(generate().split())  # signatures wrap
    for name in ("scatter_nd", "tensor_scatter_nd_update", "dynamic_partition", "constant",
                 "placeholder", "with_sub_scope", "matmul", "gather_nd"):
        assert f" def {name}(" in text, name
    assert "__getattr__" not in text
    assert "def dynamic_partition(self, data: Operand, partitions: Operand, " \
           "num_partitions: int, *, name: str | None = None) -> list[Output]:" in text
    assert all(f" def {d.builder_name}(" in text for d in gf.registry.registered_ops())


def _installed_layout(tmp_path: pathlib.Path) -> pathlib.Path:
    """graphflow as a wheel installs it (ops/ and runtime/ inside graphflow/), as links."""
    site = tmp_path / "site"
    package = site / "graphflow"
    package.mkdir(parents=True)
    for entry in (ROOT / "graphflow").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    (package / "ops").symlink_to(ROOT / "ops")
    (package / "runtime").symlink_to(ROOT / "runtime")
    return site


def _mypy(tmp_path: pathlib.Path, script: str) -> subprocess.CompletedProcess:
    pytest.importorskip("mypy")
    (tmp_path / "mypy.ini").write_text(MYPY_INI)
    (tmp_path / "user.py").write_text(textwrap.dedent(script))
    env = dict(os.environ, MYPYPATH=str(_installed_layout(tmp_path)))
    cache = ROOT / ".pytest_cache" / "mypy"  # warm reruns take well under a second
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", "mypy.ini",
                           "--cache-dir", str(cache), "user.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_mypy_strict_passes_on_a_user_script(tmp_path):
    done = _mypy(tmp_path, USER_SCRIPT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success" in done.stdout


def test_mypy_strict_catches_builder_mistakes(tmp_path):
    done = _mypy(tmp_path, MISTAKES)
    assert done.returncode == 1
    out = done.stdout
    assert '"Scope" has no attribute "scatter_nd_typo"' in out
    assert 'expression has type "Output", variable has type "int"' in out
    assert 'Missing positional argument "num_partitions"' in out


def test_stub_is_shipped_beside_scope_py():
    assert (ROOT / "graphflow" / "scope.pyi").exists()
    assert (ROOT / "graphflow" / "py.typed").exists()
