#!/usr/bin/env bash
# Device check for a machine with an NVIDIA GPU and cupy, in one call of about 5 minutes:
#   1. devices: versions, nvidia-smi, graphflow's device list and a smoke run on /gpu:0;
#   2. at the same time (16 cores, one GPU):
#      - the GPU tests (pytest -m gpu, pytest-xdist -n $JOBS): every "cuda" case of
#        tests/gpu and of the test modules that run on GPU_KINDS (CPU-vs-GPU agreement,
#        the TensorFlow corpus on the GPU, OOB skipped by default and raised under ERROR);
#      - $FUZZ_PROCS x $FUZZ_EXAMPLES random graphs of tests/fuzz/test_gpu_differential.py
#        on the GPU against the plain-loop references (one hypothesis seed per process,
#        failures reported unshrunk);
#      - every CUDA kernel of ops/gpu_index.py compiled by NVRTC for each dtype it serves;
#   3. the GPU benchmark alone on the device (python -m benchmarks.gpu: scatter, gather,
#      stitch, partition and the seed pipeline at 10**8 elements, GB/s against the
#      device's copy bandwidth, against cupy and PyTorch, deterministic vs default).
# Each phase runs even when an earlier one failed, under its own time limit (SIGINT
# first, so pytest still prints its summary); the exit status is the first failure's.
# Works offline with the python3 found there (cupy, numpy, numba, networkx, pytest,
# hypothesis; pytest-xdist and pytest-timeout used when present; torch optional):
# graphflow is imported from this checkout through a folder of links, nothing installed.
# At most 8 files go to $OUT (default /tmp/graphflow-gpu): devices.log, gpu_tests.log,
# gpu_tests.xml, gpu_fuzz.log, bench_gpu.txt, bench_gpu.json, summary.txt.
#     OUT=$OUT bash tests/gpu/run_gpu_checks.sh
set -uo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
PY="${PYTHON:-python3}"
OUT="${OUT:-/tmp/graphflow-gpu}"
JOBS="${JOBS:-8}"
FUZZ_PROCS="${FUZZ_PROCS:-4}"
FUZZ_EXAMPLES="${FUZZ_EXAMPLES:-100}"
TESTS_LIMIT="${TESTS_LIMIT:-170}"
BENCH_LIMIT="${BENCH_LIMIT:-130}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
START=$SECONDS

# graphflow.ops and graphflow.runtime live in ops/ and runtime/ (pyproject's package-dir)
LINKS="$(mktemp -d)"
mkdir "$LINKS/graphflow"
ln -s "$REPO"/graphflow/* "$LINKS/graphflow/"
ln -s "$REPO/ops" "$LINKS/graphflow/ops"
ln -s "$REPO/runtime" "$LINKS/graphflow/runtime"
ln -s "$REPO/benchmarks" "$LINKS/benchmarks"
export PYTHONPATH="$LINKS${PYTHONPATH:+:$PYTHONPATH}"
if [ -z "${CUDA_INCLUDE:-}" ] && [ -f /usr/local/cuda/include/cuda_fp16.h ]; then
    export CUDA_INCLUDE=/usr/local/cuda/include  # for compile_kernels.py
fi
cd "$REPO/tests"  # not the root, whose graphflow/ lacks ops/ and runtime/

# the test modules with "cuda" cases (GPU_KINDS); the fuzzer runs on its own below
GPU_TESTS=(gpu test_gpu_kernels.py test_gradients.py test_gradients_indexing.py
           test_cast_and_reshape.py test_nn.py test_reduction_slicing_ops.py test_tf_glue_ops.py
           test_segment_ops.py test_selection_ops.py test_random_ops.py test_nn_and_reductions.py)
PYTEST=("$PY" -m pytest -p no:cacheprovider -m gpu)
XDIST=()
if "$PY" -c "import xdist" 2>/dev/null; then XDIST=(-n "$JOBS"); fi
if "$PY" -c "import pytest_timeout" 2>/dev/null; then PYTEST+=(--timeout=90); fi

status=0
: >"$OUT/summary.txt"
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
record() {  # record NAME RC: remember the first failure
    note "== $1: exit $2 (at $((SECONDS - START)) s)"
    if [ "$2" -ne 0 ] && [ "$status" -eq 0 ]; then status="$2"; fi
}
limited() {  # limited SECONDS COMMAND...: SIGINT at the limit, SIGKILL 15 s later
    local limit="$1"
    shift
    timeout -s INT -k 15 "$limit" "$@"
}

# -- 1. devices ------------------------------------------------------------------------------
{
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem \
        --format=csv 2>&1
    limited 60 "$PY" -c "
import sys, numpy, graphflow as gf
print('python', sys.version.split()[0], 'numpy', numpy.__version__)
try:
    import cupy
    print('cupy', cupy.__version__, 'CUDA runtime', cupy.cuda.runtime.runtimeGetVersion(),
          cupy.cuda.runtime.getDeviceCount(), 'device(s)')
except Exception as e:
    print('cupy: not usable:', e)
try:
    import torch
    print('torch', torch.__version__, 'cuda', torch.cuda.is_available())
except Exception as e:
    print('torch: not usable:', e)
print(gf.list_devices())
assert any(d.device_type == 'gpu' for d in gf.list_devices()), 'graphflow sees no GPU'
s = gf.Scope(gf.Graph()).with_device('/gpu:0')
out = s.scatter_nd([[4], [3], [1], [7]], [9, 10, 11, 12], [8])
with gf.Session(s.graph) as sess:
    got = sess.run(out).tolist()
print('smoke ScatterNd on /gpu:0:', got)
assert got == [0, 11, 0, 10, 9, 0, 0, 12], got
"
} >"$OUT/devices.log" 2>&1
rc=$?
cat "$OUT/devices.log"
record devices "$rc"

# -- 2. tests, fuzzing and NVRTC at the same time ---------------------------------------------
echo "== GPU tests (${XDIST[*]:-one process}), fuzzing ($FUZZ_PROCS x $FUZZ_EXAMPLES graphs), NVRTC"
limited "$TESTS_LIMIT" "${PYTEST[@]}" "${XDIST[@]}" -q -rfEs --tb=short --durations=15 \
    --junitxml="$OUT/gpu_tests.xml" "${GPU_TESTS[@]}" >"$OUT/gpu_tests.log" 2>&1 &
tests_pid=$!
FUZZ_TMP="$(mktemp -d)"
fuzz_pids=()
for k in $(seq 1 "$FUZZ_PROCS"); do
    GF_GPU_FUZZ_EXAMPLES="$FUZZ_EXAMPLES" GF_GPU_FUZZ_SHRINK=0 \
        limited "$((TESTS_LIMIT - 10))" "${PYTEST[@]}" -q -rfE --tb=short \
        --hypothesis-seed="$k" --hypothesis-show-statistics \
        fuzz/test_gpu_differential.py >"$FUZZ_TMP/fuzz$k.log" 2>&1 &
    fuzz_pids+=($!)
done
limited 120 "$PY" gpu/compile_kernels.py >"$FUZZ_TMP/nvrtc.log" 2>&1 &
nvrtc_pid=$!

wait "$tests_pid"
rc=$?
tail -n 40 "$OUT/gpu_tests.log"
record "GPU tests" "$rc"
for k in $(seq 1 "$FUZZ_PROCS"); do
    wait "${fuzz_pids[$((k - 1))]}"
    rc=$?
    { echo "==== fuzz process $k (seed $k): exit $rc"; cat "$FUZZ_TMP/fuzz$k.log"; } \
        >>"$OUT/gpu_fuzz.log"
    tail -n 5 "$FUZZ_TMP/fuzz$k.log"
    record "GPU fuzzing $k" "$rc"
done
wait "$nvrtc_pid"
rc=$?
{ echo "==== NVRTC (tests/gpu/compile_kernels.py): exit $rc"; cat "$FUZZ_TMP/nvrtc.log"; } \
    >>"$OUT/devices.log"
tail -n 3 "$FUZZ_TMP/nvrtc.log"
record "NVRTC" "$rc"

# -- 3. the benchmark, alone on the device ----------------------------------------------------
echo "== GPU benchmark"
limited "$BENCH_LIMIT" "$PY" -m benchmarks.gpu --json "$OUT/bench_gpu.json" \
    >"$OUT/bench_gpu.txt" 2>&1
rc=$?
cat "$OUT/bench_gpu.txt"
record "GPU benchmark" "$rc"

note "== total $((SECONDS - START)) s, exit $status"
grep -E "passed|failed|error" "$OUT/gpu_tests.log" | tail -n 3 >>"$OUT/summary.txt"
exit "$status"
