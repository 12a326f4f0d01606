#!/usr/bin/env bash
# Device check for a machine with an NVIDIA GPU and cupy, in under 5 minutes:
#   1. the GPU tests (pytest -m gpu): tests/gpu, and every "cuda" case of
#      tests/test_gpu_kernels.py (CPU-vs-GPU agreement, the TensorFlow corpus on the
#      GPU, OOB skipped by default and raised under ERROR);
#   2. the GPU benchmark (scatter/gather/stitch at 10**8 elements, GB/s against the
#      device's copy bandwidth, deterministic vs default);
#   3. 300 random graphs of tests/fuzz/test_gpu_differential.py on the GPU against
#      the plain-loop references.
# Each phase runs even when an earlier one failed; the exit status is the first
# failure's. Works offline with the python3 found there (it must have cupy, numpy,
# networkx, pytest and hypothesis): graphflow is imported from this checkout through
# a path of links, with nothing installed. Results go to $OUT (or /tmp/graphflow-gpu):
# gpu_tests.log, bench_gpu.txt/.json, gpu_fuzz.log.
set -uo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
PY="${PYTHON:-python3}"
OUT="${OUT:-/tmp/graphflow-gpu}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

# graphflow.ops and graphflow.runtime live in ops/ and runtime/ (pyproject's package-dir)
LINKS="$(mktemp -d)"
mkdir "$LINKS/graphflow"
ln -s "$REPO"/graphflow/*.py "$LINKS/graphflow/"
ln -s "$REPO/ops" "$LINKS/graphflow/ops"
ln -s "$REPO/runtime" "$LINKS/graphflow/runtime"
ln -s "$REPO/benchmarks" "$LINKS/benchmarks"
export PYTHONPATH="$LINKS${PYTHONPATH:+:$PYTHONPATH}"
cd "$REPO/tests"  # not the root, whose graphflow/ lacks ops/ and runtime/

status=0
phase() {  # phase NAME LOG TIMEOUT COMMAND...: run, keep the log, remember a failure
    local name="$1" log="$2" limit="$3"
    shift 3
    echo "== $name"
    timeout "$limit" "$@" 2>&1 | tee "$OUT/$log" | tail -n 30
    local rc="${PIPESTATUS[0]}"
    echo "== $name: exit $rc"
    if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then status="$rc"; fi
}

phase devices devices.log 60 "$PY" -c "
import cupy, numpy, graphflow as gf
print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'CUDA runtime',
      cupy.cuda.runtime.runtimeGetVersion(), cupy.cuda.runtime.getDeviceCount(), 'device(s)')
print(gf.list_devices())"
phase "GPU tests" gpu_tests.log 150 \
    "$PY" -m pytest -q -p no:cacheprovider -rs -m gpu gpu test_gpu_kernels.py
phase "GPU benchmark" bench_gpu.txt 150 "$PY" -m benchmarks.gpu --json "$OUT/bench_gpu.json"
phase "GPU fuzzing" gpu_fuzz.log 120 \
    "$PY" -m pytest -q -p no:cacheprovider -m gpu fuzz/test_gpu_differential.py
exit "$status"
