#!/usr/bin/env bash
# Device check for a machine with an NVIDIA GPU and cupy, in under 5 minutes:
# the GPU tests (tests/gpu, and every "cuda" case of tests/test_gpu_kernels.py:
# CPU-vs-GPU agreement, the TensorFlow corpus on the GPU, OOB and ERROR policy;
# 300 random graphs of tests/fuzz/test_gpu_differential.py against the references),
# the placement tests, then the GPU benchmark (scatter/gather/stitch at 10**8
# elements, GB/s against the device's copy bandwidth, deterministic vs default).
# Works offline: it uses the python3 found there (which must have cupy, numpy,
# networkx, pytest and hypothesis) and installs graphflow itself without deps.
# Results: $OUT (or /tmp/graphflow-gpu) gets gpu_tests.log, bench_gpu.txt/.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
OUT="${OUT:-/tmp/graphflow-gpu}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
"$PY" -c "import cupy; print('cupy', cupy.__version__, cupy.cuda.runtime.getDeviceCount(), 'device(s)')"
"$PY" -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v WARNING || true
"$PY" -c "import graphflow as gf; print(gf.list_devices())"
# from tests/: the repository root must not shadow the installed package
(cd tests && "$PY" -m pytest -q -p no:cacheprovider -rs gpu test_gpu_kernels.py test_placement.py \
    fuzz/test_gpu_differential.py \
    2>&1 | tee "$OUT/gpu_tests.log" | tail -n 25)
"$PY" -m benchmarks.gpu --json "$OUT/bench_gpu.json" 2>&1 | tee "$OUT/bench_gpu.txt"
