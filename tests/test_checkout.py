"""A checkout imports as a package after ``pip install .``: graphflow/checkout.py lets
the checkout's graphflow/ find ops/ and runtime/ beside it (.ci/run runs the entry
points from a fresh clone)."""
from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_python_started_in_the_checkout_imports_its_layers():
    code = ("import graphflow, graphflow.ops, graphflow.runtime, sys; "
            "print(graphflow.__file__); print(graphflow.ops.__file__); "
            "print(graphflow.runtime.__file__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True).stdout.split()
    assert [pathlib.Path(p) for p in out] == [ROOT / "graphflow" / "__init__.py",
                                              ROOT / "ops" / "__init__.py",
                                              ROOT / "runtime" / "__init__.py"]


def test_the_finder_maps_only_the_two_layers(tmp_path):
    from graphflow import checkout
    for folder in ("graphflow", "ops", "runtime"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    finder = checkout._LayersBeside({name: tmp_path / folder
                                     for name, folder in checkout.LAYER_FOLDERS.items()})
    spec = finder.find_spec("graphflow.ops")
    assert spec.origin == str(tmp_path / "ops" / "__init__.py")
    assert spec.submodule_search_locations == [str(tmp_path / "ops")]
    assert finder.find_spec("graphflow.tests") is None and finder.find_spec("ops") is None
    # an installed package (its layers inside it) adds no finder
    installed = tmp_path / "site" / "graphflow"
    (installed / "ops").mkdir(parents=True)
    before = list(sys.meta_path)
    assert not checkout.find_layers_beside(installed)
    assert sys.meta_path == before
