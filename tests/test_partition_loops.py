"""The compiled loops behind DynamicPartition, the stitches and the fused
partition -> element-wise -> stitch pass, against plain references: every dtype
(float16 and complex through the word views, strings through numpy), many
partitions, empty inputs, unaligned data, nothing written on a bad id, and the
generated pass cached on disk across processes."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from graphflow.errors import InvalidArgumentError
from graphflow.kernel_context import KernelContext
from graphflow.ops import codegen, fused_ops, partition_loops, partition_ops

from ref_partition import ref_dynamic_partition, ref_dynamic_stitch

DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.uint32, np.int64,
          np.uint64, np.bool_, np.complex64, np.complex128, object]


def values(dtype, shape) -> np.ndarray:
    n = int(np.prod(shape, dtype=int))
    if dtype is object:
        out = np.empty(n, object)
        out[:] = [f"v{i}".encode() for i in range(n)]
        return out.reshape(shape)
    if dtype is np.bool_:
        return (np.arange(n) % 3 == 1).reshape(shape)
    v = np.arange(n) * 7 % 101 - 50
    if np.dtype(dtype).kind == "c":
        return (v + 1j * v[::-1]).astype(dtype).reshape(shape)
    return v.astype(dtype).reshape(shape)


class RecordingContext(KernelContext):
    """A kernel context that records the output buffers a kernel asks for."""

    def __init__(self, op_type: str, **attrs):
        super().__init__("node", op_type, attrs)
        self.asked: list[tuple] = []

    def empty(self, shape, dtype):
        self.asked.append((tuple(shape), np.dtype(dtype)))
        return super().empty(shape, dtype)


def partition_kernel(data, ids, k):
    ctx = RecordingContext("DynamicPartition", num_partitions=k)
    return partition_ops.DynamicPartition.find_kernel("cpu", {}).fn(ctx, data, ids), ctx


def stitch_kernel(indices, data):
    ctx = RecordingContext("DynamicStitch")
    return partition_ops.DynamicStitch.find_kernel("cpu", {}).fn(ctx, indices, data), ctx


def assert_same(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype
    if got.dtype == object:
        assert got.tolist() == want.tolist()
    else:
        assert got.tobytes() == want.tobytes()


# -- partition -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("k", [1, 2, 17, 300])
@pytest.mark.parametrize("extra", [(), (3,), (2, 0)])
def test_partition_matches_the_reference(dtype, k, extra):
    rng = np.random.default_rng(k)
    ids = rng.integers(0, k, (25, 2)).astype(np.int32)
    data = values(dtype, ids.shape + extra)
    parts, ctx = partition_kernel(data, ids, k)
    assert len(parts) == k
    for got, want in zip(parts, ref_dynamic_partition(data, ids, k)):
        assert_same(got, want)
    assert ctx.asked == [((50,) + extra, data.dtype)]  # one buffer for all partitions


@pytest.mark.parametrize("k", [1, 2, 5])
def test_partition_empty(k):
    parts, _ = partition_kernel(np.zeros((0, 4), np.float32), np.zeros(0, np.int32), k)
    assert [p.shape for p in parts] == [(0, 4)] * k


@pytest.mark.parametrize("bad", [-1, 2, 1 << 30])
@pytest.mark.parametrize("position", [0, 1000, 4095])  # first block, later block, last id
def test_partition_bad_id_asks_for_no_output(bad, position):
    ids = np.zeros(4096, np.int32)
    ids[position] = bad
    ids[-1] = -7 if position != 4095 else bad
    with pytest.raises(InvalidArgumentError, match=rf"partitions\[{position}\] = {bad} is not "
                       r"in \[0, 2\)"):
        partition_kernel(np.ones(4096, np.float32), ids, 2)
    assert partition_loops.first_bad_id(partition_loops.readonly(ids), 0, position, 2) == -1


def test_partition_unaligned_and_strided_data():
    """Data that is not aligned to its element (a view into bytes) or not contiguous is
    moved with narrower words or copied first: the same result."""
    raw = np.zeros(4 * 30 + 1, np.uint8)
    unaligned = np.frombuffer(raw.data, np.float32, count=30, offset=1)
    assert unaligned.ctypes.data % 4
    raw[1:] = np.arange(120, dtype=np.uint8)
    ids = (np.arange(30) % 3).astype(np.int32)
    for data in (unaligned, np.arange(60, dtype=np.float64)[::2]):
        parts, _ = partition_kernel(data, ids, 3)
        for got, want in zip(parts, ref_dynamic_partition(data, ids, 3)):
            assert_same(got, want)


# -- stitch ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("extra", [(), (3,), (2, 0)])
def test_stitch_matches_the_reference(dtype, extra):
    rng = np.random.default_rng(3)
    indices = [rng.integers(0, 40, s).astype(np.int32) for s in (17, (4, 5), 0, 9)]
    data = [values(dtype, i.shape + extra) for i in indices]
    got, ctx = stitch_kernel(indices, data)
    assert_same(got, ref_dynamic_stitch(indices, data))  # gaps are zeros / empty strings
    assert ctx.asked == [(got.shape, got.dtype)]


def test_stitch_all_empty():
    got, _ = stitch_kernel([np.zeros(0, np.int32)], [np.zeros((0, 2), np.int16)])
    assert got.shape == (0, 2) and got.dtype == np.int16


def test_stitch_over_a_dirty_buffer_writes_zeros_in_the_gaps():
    """The output comes from ctx.empty (a reused buffer holds old values): the rows no
    index names are zeroed."""
    class Dirty(RecordingContext):
        def empty(self, shape, dtype):
            return np.full(shape, 99, dtype)
    ctx = Dirty("DynamicStitch")
    got = partition_ops.DynamicStitch.find_kernel("cpu", {}).fn(
        ctx, [np.int32([0, 3])], [np.float32([1, 2])])
    assert got.tolist() == [1, 0, 0, 2]


def test_stitch_negative_index_asks_for_no_output():
    with pytest.raises(InvalidArgumentError, match=r"indices\[2\] is out of range"):
        _, ctx = stitch_kernel([np.int32([0, 1]), np.int32([3, 4, -1])],
                               [np.ones(2, np.float32), np.ones(3, np.float32)])
    ctx = RecordingContext("DynamicStitch")
    with pytest.raises(InvalidArgumentError):
        partition_ops.DynamicStitch.find_kernel("cpu", {}).fn(
            ctx, [np.int32([5, -2])], [np.ones(2, np.float32)])
    assert ctx.asked == []


@pytest.mark.parametrize("width, dtype", [(8, np.float64), (8, np.int8), (4, np.float32),
                                          (2, np.float16), (1, np.uint8)])
def test_rows_are_moved_as_the_widest_word(width, dtype):
    """[n, 8] int8 rows move as one 8-byte word each; odd-sized rows as narrower words."""
    a = np.zeros((4, 8 // np.dtype(dtype).itemsize if width == 8 else 1), dtype)
    row_bytes = a.itemsize * a.shape[1]
    assert partition_loops.word_width(row_bytes, [a]) == width


# -- the fused pass --------------------------------------------------------------------------
def test_generated_source_reads_as_the_loop():
    source = fused_ops.kernel_source(((), (("Add", 0, 0), ("Maximum", 1, 1))),
                                     np.dtype(np.int8), "compare", ("NotEqual", 0, 2))
    assert "b = v != s2" in source
    assert "v = _int8(_uint64(v) + _uint64(s0))" in source  # wraps modulo 2**8, as TF's
    assert "Maximum" not in source.split("\n", 1)[1] and "Identity" not in source


def test_generated_pass_is_cached_on_disk_across_processes(tmp_path):
    """The generated module lives in the cache folder, so numba's cache serves the
    compiled pass to the next process."""
    script = textwrap.dedent("""
        import numpy as np
        from graphflow.ops import fused_ops
        source = fused_ops.kernel_source(((), (("Mul", 0, 0),)), np.dtype(np.float64), "mask")
        fn = fused_ops.compiled_kernel(source)
        out = np.empty(3)
        fn(np.float64([1, 2, 3]), np.array([0, 1, 1], bool), np.int32([0, 1]),
           np.float64([10]), out, 0, 3)
        assert out.tolist() == [1, 20, 30], out
        print(fn.stats.cache_hits and "hit" or "miss")
    """)
    env = dict(os.environ, GRAPHFLOW_CACHE_DIR=str(tmp_path))
    # run outside the repository: its graphflow/ folder is not the installed package
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, check=True, cwd=tmp_path).stdout.split() for _ in range(2)]
    assert runs == [["miss"], ["hit"]]
    assert len(list(tmp_path.glob("*/fused/graphflow_fused_*.py"))) == 1


def test_generated_pass_without_a_writable_cache(monkeypatch):
    """A cache folder that cannot be written: the pass compiles from memory."""
    def refuse(name, source, env=None):
        raise PermissionError("read-only")
    monkeypatch.setattr(codegen, "_import_source", refuse)
    monkeypatch.setattr(fused_ops, "_compiled", {})
    source = fused_ops.kernel_source(((("Neg", 0, -1),), ()), np.dtype(np.int16), "mask")
    fn = fused_ops.compiled_kernel(source)
    out = np.empty(2, np.int16)
    fn(np.int16([-32768, 5]), np.array([False, True]), np.int32([0, 1]), np.int16([0]),
       out, 0, 2)
    assert out.tolist() == [-32768, 5]  # -(-32768) wraps as numpy's does
