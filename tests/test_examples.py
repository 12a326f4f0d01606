"""Every example runs as a script from the repository root, prints its graph
(op names, types, devices, shapes) and prints the values the seeds document."""
from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

RANK3 = np.zeros((4, 4, 4), int)
RANK3[[0, 2]] = [[5] * 4, [6] * 4, [7] * 4, [8] * 4]
STITCHED = [[1, 2], [11, 12], [21, 22], [31, 32], [41, 42], [51, 52], [61, 62]]
SEED_Y = [1.1, -1.0, 6.2, 5.3, -1.0, 8.4]


def run_example(name: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, f"examples/{name}", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def printed_values(stdout: str) -> dict[str, list]:
    """``label = [...]`` lines, as examples/_show.py prints them."""
    values = {}
    for line in stdout.splitlines():
        label, sep, text = line.partition(" = ")
        if sep and text.startswith("["):
            values[label] = ast.literal_eval(text)
    return values


def graph_lines(stdout: str) -> list[list[str]]:
    """The (name, type, device, outputs...) rows of each printed graph."""
    return [line.split() for line in stdout.splitlines() if line.startswith("  ")
            and not line.startswith("  optimizer:")]


def test_partition_stitch():
    out = run_example("partition_stitch.py")
    values = printed_values(out)
    np.testing.assert_allclose(values["result"], SEED_Y, rtol=1e-6)
    np.testing.assert_allclose(values["optimized result"], SEED_Y, rtol=1e-6)
    np.testing.assert_allclose(values["partition 0 (x == -1)"], [-1.0, -1.0])
    np.testing.assert_allclose(values["partition 1 (x != -1)"], [0.1, 5.2, 4.3, 7.4], rtol=1e-6)
    as_written = out.split("-- optimized")[0]
    rows = {r[0]: r for r in graph_lines(as_written)}
    partition = rows["increment_where_set/DynamicPartition"]
    assert partition[1:] == ["DynamicPartition", "/device:CPU:0", "float32[?],", "float32[?]"]
    assert rows["increment_where_set/DynamicStitch"][1:] == \
        ["DynamicStitch", "/device:CPU:0", "float32[6]"]


def test_stitch_basics():
    out = run_example("stitch_basics.py")
    assert "static shape of merged: [7,2]" in out
    values = printed_values(out)
    for label in ("merged", "DynamicStitch.create", "parallel_dynamic_stitch"):
        assert values[label] == STITCHED
    assert ["ParallelDynamicStitch", "ParallelDynamicStitch", "/device:CPU:0", "int32[7,2]"] \
        in graph_lines(out)


@pytest.mark.parametrize("pythonic, java_style, expected", [
    ("scatter_nd 1-D", "ScatterNd.create 1-D", [0, 11, 0, 10, 9, 0, 0, 12]),
    ("scatter_nd rank-3", "ScatterNd.create rank-3", RANK3.tolist()),
    ("tensor_scatter_nd_update 1-D", "TensorScatterUpdate.create 1-D",
     [1, 11, 1, 10, 9, 1, 1, 12]),
    ("tensor_scatter_nd_update rank-3", "TensorScatterUpdate.create rank-3",
     np.where(RANK3 != 0, RANK3, 1).tolist()),
    ("tensor_scatter_nd_add 1-D", "TensorScatterAdd.create 1-D", [1, 12, 1, 11, 10, 1, 1, 13]),
    ("tensor_scatter_nd_add rank-3", "TensorScatterAdd.create rank-3", (RANK3 + 1).tolist()),
])
def test_scatter_basics(scatter_output, pythonic, java_style, expected):
    values = printed_values(scatter_output)
    assert values[pythonic] == expected
    assert values[java_style] == expected


@pytest.fixture(scope="module")
def scatter_output() -> str:
    out = run_example("scatter_basics.py")
    types = {row[1] for row in graph_lines(out)}
    assert {"ScatterNd", "TensorScatterUpdate", "TensorScatterAdd"} <= types
    return out


@pytest.mark.parametrize("name", ["partition_stitch.py", "scatter_basics.py", "stitch_basics.py"])
def test_every_example_prints_its_graph(name):
    out = run_example(name)
    assert "graph:" in out
    assert all(len(row) >= 4 for row in graph_lines(out))  # name, type, device, outputs


def test_train_embedding_converges_and_leaves_cold_rows_alone(tmp_path):
    png = tmp_path / "loss.png"
    out = run_example("train_embedding.py", "--rows", "500", "--steps", "80", "--batch", "32",
                      "--plot", str(png))
    first, last = printed_values(out)["loss per row, first and last step"]
    assert last < first / 10
    progress = [float(line.split("loss per row ")[1].split()[0])
                for line in out.splitlines() if line.startswith("step ")]
    assert len(progress) == 10 and progress[-1] == last and progress[0] > progress[-1]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "matplotlib is not installed" in out
    else:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "rows never looked up unchanged: True" in out
    assert "restored from checkpoint: True" in out


SHARDED_SMALL = ("--rows", "400", "--steps", "40", "--batch", "16")


def _assert_sharded_follows_one_table(out: str) -> None:
    values = printed_values(out)
    assert values["sharded loss per row, every few steps"] == \
        values["one-table loss per row, every few steps"]
    first, last = values["loss per row, first and last step"]
    assert last < first / 3
    assert "loss curves match: True" in out


@pytest.mark.parametrize("strategy, shards", [("mod", "2"), ("div", "3")])
def test_sharded_embeddings_on_one_process_follow_the_one_table_curve(strategy, shards):
    out = run_example("sharded_embeddings.py", "--local", "--strategy", strategy, "--shards",
                      shards, *SHARDED_SMALL)
    assert f"in {shards} shards ({strategy}) on one process" in out
    _assert_sharded_follows_one_table(out)


def test_sharded_embeddings_on_two_dask_workers():
    pytest.importorskip("distributed")
    out = run_example("sharded_embeddings.py", *SHARDED_SMALL)  # the default: 2 workers
    assert "in 2 shards (mod) on 2 Dask workers" in out
    assert "embedding_lookup/Gather_1 reads embedding_1 on /job:worker/task:1" in out
    _assert_sharded_follows_one_table(out)


def test_sharded_embeddings_without_distributed_says_what_to_install(tmp_path):
    # run from outside the repository: there, its graphflow/ folder is not the package
    examples = str(ROOT / "examples")
    hide = (f"import runpy, sys; sys.modules['distributed'] = None; "
            f"sys.path.insert(0, {examples!r}); sys.argv = ['sharded_embeddings.py']; "
            f"runpy.run_path({examples + '/sharded_embeddings.py'!r}, run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert "pip install 'graphflow[distributed]'" in proc.stderr
    assert "Traceback" not in proc.stderr
