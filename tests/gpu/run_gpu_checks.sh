#!/usr/bin/env bash
# Device check: run on a machine with an NVIDIA GPU (under 5 minutes).
# GPU tests, CPU-vs-GPU agreement on the TensorFlow conformance corpus, and the
# benchmark suite (quick sizes).
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m venv /tmp/gf-gpu && . /tmp/gf-gpu/bin/activate
pip install -q '.[test,cuda12]'
python -c "import graphflow as gf; print(gf.list_devices())"
pytest -q tests/gpu tests/test_placement.py
pytest -q tests/conformance
python -m benchmarks --quick --json "${OUT:-/tmp}/bench_gpu.json" --plot "${OUT:-/tmp}/bench_gpu.png"
