"""Every example runs as a script and prints its results."""
import pathlib
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("name, expected", [
    ("partition_stitch.py", "result = [ 1.1, -1. ,  6.2,  5.3, -1. ,  8.4]"),
    ("scatter_basics.py", "scatter_nd 1-D = [ 0, 11,  0, 10,  9,  0,  0, 12]"),
    ("stitch_basics.py", "static shape of merged: [7,2]"),
])
def test_example_runs(name, expected):
    proc = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True, text=True,
                          timeout=120, cwd=EXAMPLES.parent)
    assert proc.returncode == 0, proc.stderr
    assert expected in proc.stdout
    assert "graph:" in proc.stdout  # each example prints its graph
