"""The CUDA kernels of ops/gpu_index.py, compiled for the CPU (tests/support/cuda_emulator.py),
agree with the CPU kernels: every op and dtype, the atomic path (default) and the
sorted, segmented one (deterministic=True), skipped offsets, NaNs, and threads
run in shuffled orders. The atomic cases use values whose result does not depend
on the order of the updates (small integers; "update" stores the last writer's
value on every path), so they compare bit for bit too, any NaN matching a NaN (a GPU's NaN has its own
sign and payload: TensorScatterSub adds the negated update, as TensorFlow's GPU
kernel does)."""
from __future__ import annotations

import numpy as np
import pytest

from graphflow.ops import gpu_index

from support import cuda_emulator
from fuzz.check import assert_same

pytestmark = pytest.mark.skipif(cuda_emulator.COMPILER is None, reason=cuda_emulator.NEEDS)

XP = cuda_emulator.cupy_on_cpu
OPS = ["update", "add", "sub", "min", "max"]
DTYPES = [np.dtype(t) for t in cuda_emulator.C_TYPES]


def _values(rng, dtype: np.dtype, shape, nans: bool) -> np.ndarray:
    """Small integers (exact sums in any order), with NaNs for float min/max."""
    if dtype == bool:
        return rng.integers(0, 2, shape).astype(bool)
    low = 0 if dtype.kind == "u" else -8
    values = rng.integers(low, 16, shape).astype(dtype)
    if dtype.kind == "c":
        values += 1j * rng.integers(-8, 8, shape)
    if nans and dtype.kind == "f":
        values[rng.random(shape) < 0.1] = np.nan
    return values


def _case(dtype: np.dtype, op: str, unique: bool, seed: int = 0):
    """``(out, offsets, rows)``: 12 slices of 3, offset -1 marks a skipped row."""
    rng = np.random.default_rng(seed)
    num_slices, slice_size = 12, 3
    offsets = (rng.permutation(num_slices)[:8] if unique
               else rng.integers(-1, num_slices, 50)).astype(np.int64)
    nans = op in ("min", "max")
    rows = _values(rng, dtype, (len(offsets), slice_size), nans)
    return _values(rng, dtype, (num_slices, slice_size), nans), offsets, rows


def _both(out, offsets, rows, op, deterministic):
    """The CPU result and the emulated CUDA kernels' result, each on a copy of ``out``."""
    expected, got = out.copy(), XP.asarray(out)
    with np.errstate(invalid="ignore"):  # as the executor runs kernels
        gpu_index.scatter(np, expected, offsets, rows, op, deterministic)
        gpu_index.scatter(XP, got, XP.asarray(offsets), XP.asarray(rows), op, deterministic)
    return expected, got.get()


@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic", "deterministic"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_scatter_kernels_agree_with_cpu(dtype, op, deterministic):
    if op in ("min", "max") and dtype.kind == "c":
        pytest.skip("no order on complex numbers")
    if op in ("add", "sub") and dtype == bool:
        pytest.skip("TensorFlow has no bool sums")
    out, offsets, rows = _case(dtype, op, unique=False)  # "update": the last writer wins
    expected, got = _both(out, offsets, rows, op, deterministic)
    assert_same(got, expected, f"{op} {dtype}")


@pytest.mark.parametrize("op", OPS)
def test_deterministic_updates_apply_in_index_order(op):
    """Duplicates fold in index order whatever the thread order: float sums are not
    associative, so another order would change the bits."""
    rng = np.random.default_rng(1)
    out = rng.standard_normal((4, 2)).astype(np.float32)
    offsets = np.array([2, 0, 2, 2, -1, 0, 2], np.int64)
    rows = (rng.standard_normal((7, 2)) * 1e4).astype(np.float32)
    rows[3, 0], out[2, 1] = np.nan, -0.0
    for _ in range(3):  # a new thread order each launch
        expected, got = _both(out, offsets, rows, op, deterministic=True)
        assert_same(got, expected, op)


def test_last_writers_agree_with_cpu():
    """The atomic max of positions finds the last writer of each slot in index order,
    whatever the thread order (three launches, three orders); skipped offsets never win."""
    rng = np.random.default_rng(3)
    for num_slices, n in ((5, 40), (40, 5), (1, 9), (0, 3)):
        offsets = rng.integers(-1, num_slices, n).astype(np.int64) if num_slices \
            else np.full(n, -1, np.int64)
        expected = [i for i in range(n) if offsets[i] >= 0 and offsets[i] not in offsets[i + 1:]]
        assert np.flatnonzero(gpu_index.last_writers(np, offsets, num_slices)).tolist() == expected
        for _ in range(3):
            got = gpu_index.last_writers(XP, XP.asarray(offsets), num_slices).get()
            assert np.flatnonzero(got).tolist() == expected


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gather_kernel_agrees_with_cpu(dtype):
    rng = np.random.default_rng(2)
    source = _values(rng, dtype, (6, 4), nans=False)
    offsets = np.array([5, -1, 0, 5, 2, -1], np.int64)
    expected = np.full((6, 4), 1, dtype)
    got = XP.asarray(expected)
    gpu_index.gather(np, source, offsets, expected)
    gpu_index.gather(XP, XP.asarray(source), XP.asarray(offsets), got)
    assert_same(got.get(), expected, "gather")


# -- the emulator runs the kernel text: a planted bug is caught ----------------------------------
@pytest.fixture
def fresh_kernels():
    caches = (gpu_index._atomic_kernel, gpu_index._segmented_kernel,
              gpu_index._last_writer_kernel, gpu_index._locate_kernel,
              gpu_index._packed_claim_kernel)
    for cache in caches:
        cache.cache_clear()
    yield
    for cache in caches:
        cache.cache_clear()


@pytest.mark.parametrize("table, op, planted", [
    ("_ATOMIC_STATEMENTS", "max", "gf_atomic_min(&out[target], value);"),
    ("_ATOMIC_STATEMENTS", "add", "if (i % slice_size) atomicAdd(&out[target], value);"),
    ("_LAST_WRITER_CLAIM", "update", "if (i % 2) atomicMax(&last[slice], (T)i);"),
    ("_PACKED_KEY", "update", "(long long)(((unsigned long long)(1) << 32) | bits)"),
    ("_FOLDS", "min", "if (!(acc <= u)) acc = u;"),  # a NaN update wins
])
def test_a_planted_kernel_bug_is_caught(monkeypatch, fresh_kernels, table, op, planted):
    if isinstance(getattr(gpu_index, table), dict):
        monkeypatch.setitem(getattr(gpu_index, table), op, planted)
    else:
        monkeypatch.setattr(gpu_index, table, planted)
    # the last-writer table serves values of 8 bytes, the packed claims smaller ones
    dtype = np.float64 if table == "_LAST_WRITER_CLAIM" else np.float32
    out, offsets, rows = _case(np.dtype(dtype), op, unique=False)
    expected, got = _both(out, offsets, rows, op, deterministic=table == "_FOLDS")
    with pytest.raises(AssertionError):
        assert_same(got, expected, "planted")


def test_kernel_arguments_are_checked():
    kernel = gpu_index._gather_kernel(XP)
    offsets, source = XP.zeros(2, np.int64), XP.zeros(4, np.float32)
    with pytest.raises(TypeError, match="out must be a one-dimensional float32 array"):
        kernel(offsets, source, 2, 2, XP.zeros(4, np.float64))
    with pytest.raises(TypeError, match="numpy array where cupy wants a cupy array"):
        kernel(offsets, source, 2, 2, np.zeros(4, np.float32))


def test_device_arrays_are_not_host_arrays():
    """As with cupy: no implicit conversion, no mixing with numpy arrays."""
    device = XP.arange(3)
    assert not isinstance(device, np.ndarray) and isinstance(device, XP.ndarray)
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.asarray(device)
    with pytest.raises(TypeError, match="numpy array where cupy wants"):
        device + np.ones(3, np.int64)
    with pytest.raises(TypeError, match="numpy array where cupy wants"):
        XP.where(np.ones(3, bool), device, 0)
    assert (device + 1).get().tolist() == [1, 2, 3] and int(device.max()) == 2


# -- locate: one kernel pass over the index tuples ---------------------------------------------
@pytest.mark.parametrize("index_type", [np.int16, np.uint16, np.int32, np.int64], ids=str)
@pytest.mark.parametrize("depth", [0, 1, 2, 3])
def test_locate_kernel_agrees_with_the_host_code(index_type, depth):
    """Offsets in row-major order, -1 for a tuple with any index outside [0, dim) (a
    negative one too, also when the dimension is past the index type's range)."""
    rng = np.random.default_rng(depth)
    dims = [5, 2**40, 3][:depth] if np.iinfo(index_type).bits > 16 else [5, 7, 3][:depth]
    low = 0 if np.dtype(index_type).kind == "u" else -2
    columns = [rng.integers(low, min(d + 2, np.iinfo(index_type).max), 40) for d in dims]
    tuples = (np.stack(columns, axis=1) if depth else np.zeros((40, 0))).astype(index_type)
    expected = gpu_index.locate(np, tuples, dims, "IGNORE", str)
    got = gpu_index.locate(XP, XP.asarray(tuples), dims, "IGNORE", str).get()
    assert got.dtype == np.int64 and got.tolist() == expected.tolist()
    if depth:
        assert (got == -1).any() and (got >= 0).any()


def test_locate_kernel_reports_the_first_bad_tuple_under_error():
    tuples = XP.asarray(np.array([[1, 0], [0, 9], [2, 1], [-1, 0]], np.int32))
    with pytest.raises(gpu_index.InvalidArgumentError, match="^1$"):
        gpu_index.locate(XP, tuples, [3, 2], "ERROR", str)
    assert gpu_index.locate(XP, tuples, [3, 2], "", str).get().tolist() == [2, -1, 5, -1]


# -- DynamicPartition into two: one running count, one pass ------------------------------------
@pytest.mark.parametrize("shape", [(0,), (1,), (57,), (40, 3), (9, 0), (7, 2, 2)], ids=str)
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.int8),
                                   np.dtype(np.complex128)], ids=str)
def test_two_way_partition_kernel_agrees_with_masks(shape, dtype):
    rng = np.random.default_rng(len(shape))
    rows = _values(rng, dtype, shape, nans=False)
    for ids in (rng.integers(0, 2, shape[0]), np.zeros(shape[0]), np.ones(shape[0])):
        ids = ids.astype(np.int32)
        expected = np.concatenate([rows[ids == 0], rows[ids == 1]])
        ones = np.cumsum(ids == 1, dtype=np.int64)
        got = gpu_index.two_way_partition(XP, XP.asarray(rows), XP.asarray(ones),
                                          int((ids == 0).sum())).get()
        assert gpu_index.two_way_partition(np, rows, ones, 0).tobytes() == expected.tobytes()
        assert got.shape == expected.shape and got.tobytes() == expected.tobytes()


# -- unchecked offsets: int64 tuples of one index go to the kernels as they are ----------------
@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic", "deterministic"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float64),
                                   np.dtype(np.int8), np.dtype(np.complex64)], ids=str)
def test_kernels_skip_offsets_outside_the_output(op, dtype, deterministic):
    """locate(for_kernels=True) hands int64 tuples of depth 1 over unchecked: every path of
    scatter, and gather, skips an offset outside [0, slices) as locate's -1."""
    if op in ("min", "max") and dtype.kind == "c":
        pytest.skip("no order on complex numbers")
    out, offsets, rows = _case(dtype, op, unique=False)
    raw = offsets.copy()
    raw[offsets == -1] = np.array([12, 99, -5, -2**62, 2**62])[np.arange((offsets == -1).sum())
                                                                 % 5]
    expected, _ = _both(out, offsets, rows, op, deterministic)
    got = XP.asarray(out)
    with np.errstate(invalid="ignore"):
        gpu_index.scatter(XP, got, XP.asarray(raw), XP.asarray(rows), op, deterministic)
    assert_same(got.get(), expected, f"{op} with unchecked offsets")
    gathered = XP.asarray(np.ones_like(rows))
    gpu_index.gather(XP, XP.asarray(out), XP.asarray(raw), gathered)
    want = np.ones_like(rows)
    gpu_index.gather(np, out, offsets, want)
    assert_same(gathered.get(), want, "gather with unchecked offsets")


def test_locate_for_kernels_skips_the_pass_for_int64_tuples_of_one_index():
    tuples = XP.asarray(np.array([[3], [-1], [7]], np.int64))
    assert gpu_index.locate(XP, tuples, [5], "", str, for_kernels=True).get().tolist() == \
        [3, -1, 7]
    assert gpu_index.locate(XP, tuples, [5], "", str).get().tolist() == [3, -1, -1]
    with pytest.raises(gpu_index.InvalidArgumentError, match="^1$"):
        gpu_index.locate(XP, tuples, [5], "ERROR", str, for_kernels=True)
    int32 = XP.asarray(np.array([[3], [7]], np.int32))
    assert gpu_index.locate(XP, int32, [5], "", str, for_kernels=True).get().tolist() == [3, -1]
