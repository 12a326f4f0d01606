"""examples/label_propagation.py: its while_loop runs the same iteration as plain numpy
(the same number of iterations, the same label distributions) and puts 33 of the 34
karate club members in their club from two seeds."""
from __future__ import annotations

import importlib.util
import pathlib
import sys

import numpy as np
import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "label_propagation.py"


@pytest.fixture(scope="module")
def example():
    """The example as a module, imported by its path (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location("label_propagation_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def numpy_propagation(data, tol: float, max_iterations: int) -> tuple[int, np.ndarray]:
    """The example's iteration, written directly: neighbours' mean, seeds clamped, until
    no entry changes by more than ``tol``; (iterations run, final distributions)."""
    labels, step, change = data.initial.copy(), 0, np.inf
    while change > tol and step < max_iterations:
        summed = np.zeros_like(labels)
        np.add.at(summed, data.dst, labels[data.src])
        updated = summed * data.inv_degree * (1 - data.seed_mask) \
            + data.seed_mask * data.initial
        change = float(np.max(np.abs(updated - labels)))
        labels, step = updated, step + 1
    return step, labels


def test_main_converges_like_numpy_and_finds_the_clubs(example, capsys):
    result = example.main([])
    out = capsys.readouterr().out
    steps, expected = numpy_propagation(example.karate_data(), 1e-6, 1000)
    assert result.iterations == steps and 1 < steps < 1000
    assert result.change <= 1e-6
    np.testing.assert_allclose(result.labels, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(result.labels.sum(axis=1), 1.0, rtol=1e-4)  # distributions
    assert result.accuracy >= 33 / 34
    assert f"iterations run: {steps} (converged" in out
    assert "accuracy on all 34 members: 0.971" in out


def test_maximum_iterations_bounds_the_loop(example):
    result = example.run(tol=0.0, max_iterations=7)
    steps, expected = numpy_propagation(example.karate_data(), 0.0, 7)
    assert result.iterations == steps == 7
    np.testing.assert_allclose(result.labels, expected, rtol=1e-5, atol=1e-6)
