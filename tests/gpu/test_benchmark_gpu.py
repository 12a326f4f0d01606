"""``python -m benchmarks.gpu`` on any machine: numpy stands in for cupy and the
simulated GPU (tests/support/gpu_devices.py) for the CUDA device, at a small size, so that
every workload builds, runs, is checked against its cupy peer and lands in the table
and the JSON before the one device run that uses it; PyTorch's peers join on its CPU
where torch is importable."""
from __future__ import annotations

import importlib.util
import json
import pathlib
import sys
import types

import numpy as np
import pytest

from support.gpu_devices import gpu_session_devices

# by its path: the repository's root on sys.path would shadow the installed graphflow
_SPEC = importlib.util.spec_from_file_location(
    "graphflow_benchmark_gpu", pathlib.Path(__file__).parents[2] / "benchmarks" / "gpu.py")
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def _numpy_as_cupy() -> types.ModuleType:
    """The part of cupy the benchmark uses, over numpy (events time nothing)."""
    fake = types.ModuleType("cupy")
    fake.__getattr__ = lambda name: getattr(np, name)
    fake.__version__ = "numpy " + np.__version__

    class Event:
        def record(self):
            pass

        def synchronize(self):
            pass

    class Device:
        def synchronize(self):
            pass

    class Pool:
        def free_all_blocks(self):
            pass
    fake.cuda = types.SimpleNamespace(Event=Event, Device=Device,
                                      get_elapsed_time=lambda start, stop: 1.0)
    fake.get_default_memory_pool = Pool
    fake.random = types.SimpleNamespace(default_rng=np.random.default_rng)
    return fake


@pytest.mark.parametrize("with_torch", [False, True], ids=["cupy", "torch"])
def test_every_workload_runs_and_agrees_with_its_peers(monkeypatch, tmp_path, capsys,
                                                       with_torch):
    if with_torch:
        torch = pytest.importorskip("torch")
        monkeypatch.setattr(bench, "_torch_on_gpu", lambda: torch)
        monkeypatch.setattr(bench, "TORCH_DEVICE", "cpu")
    monkeypatch.setitem(sys.modules, "cupy", _numpy_as_cupy())
    monkeypatch.setattr(bench, "DEVICES", gpu_session_devices("simulated"))
    path = tmp_path / "bench.json"
    assert bench.main(["--size", "2000", "--repeats", "1", "--json", str(path)]
                      + ([] if with_torch else ["--no-torch"])) == 0
    report = json.loads(path.read_text())
    names = [row["name"] for row in report["rows"]]
    assert names == ["ScatterNd 1e8 unique",
                     "TensorScatterAdd 1e8 ~10 dups/slot",
                     "TensorScatterAdd 1e8 ~10 dups/slot deterministic",
                     "TensorScatterAdd 1e8 unique", "TensorScatterAdd 1e8 unique deterministic",
                     "GatherNd 1e8", "DynamicStitch 2 x 5e7", "DynamicPartition 1e8 into 2",
                     "seed pipeline 1e8"]
    assert report["failures"] == []
    for row in report["rows"]:
        assert "error" not in row and row["check_cupy"] == "ok", row
        assert (row.get("check_torch") == "ok") is with_torch, row
    out = capsys.readouterr().out
    assert "deterministic=True / default TensorScatterAdd (unique)" in out
    assert "gf/torch" in out


def test_a_wrong_result_is_reported(monkeypatch, tmp_path, capsys):
    """A peer that disagrees fails the run and is named."""
    monkeypatch.setitem(sys.modules, "cupy", _numpy_as_cupy())
    monkeypatch.setattr(bench, "DEVICES", gpu_session_devices("simulated"))
    same = bench._same
    monkeypatch.setattr(bench, "_same", lambda name, got, want, exact: same(
        name, got, [np.asarray(w) + 1 for w in want], exact))
    assert bench.main(["--size", "500", "--repeats", "1", "--no-torch"]) == 1
    assert "FAILED checks" in capsys.readouterr().out
