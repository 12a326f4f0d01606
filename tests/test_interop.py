"""Feeds from other array libraries: numpy arrays, Python scalars and lists, and any
object with ``__array__`` or ``__dlpack__`` (torch, cupy, jax arrays) reach the
kernels without an extra copy where the memory allows, and are never modified."""
from __future__ import annotations

import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import InvalidArgumentError

# An op that records the array its kernel receives, to check what a feed became.
SEEN: list = []
Probe = gf.register_op("TestFeedProbe", inputs=["x: T"], outputs=["y: T"],
                       attrs={"T": gf.TypeAttr()}, doc="Identity that records its input.")


@Probe.shape_fn
def _probe_shape(ctx):
    """same as x."""
    return ctx.shape("x")


@Probe.kernel("cpu")
def _probe(ctx, x):
    SEEN.append(x)
    return np.array(x, copy=True)


class ArrayOnly:
    """Exposes only ``__array__``, as many array libraries do."""

    def __init__(self, array):
        self._array = array

    def __array__(self, dtype=None, copy=None):
        if dtype is not None and dtype != self._array.dtype:
            return self._array.astype(dtype)
        return self._array.copy() if copy else self._array


class DLPackOnly:
    """Exposes only the DLPack protocol (``np.from_dlpack`` reads it)."""

    def __init__(self, array, device=None):
        self._array = array
        self._device = device

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._device or self._array.__dlpack_device__()


def probe_run(value, dtype=gf.float32, shape=None, callable_=False):
    """Feed ``value`` to a placeholder read by TestFeedProbe; (result, array the kernel saw)."""
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(dtype, shape=shape)
    y = s.test_feed_probe(x)
    SEEN.clear()
    with gf.Session(g) as sess:
        result = sess.make_callable(y, [x])(value) if callable_ else sess.run(y, {x: value})
    assert len(SEEN) == 1
    return result, SEEN.pop()


@pytest.mark.parametrize("callable_", [False, True], ids=["run", "make_callable"])
@pytest.mark.parametrize("wrap", [lambda a: a, ArrayOnly, DLPackOnly],
                         ids=["ndarray", "__array__", "__dlpack__"])
@pytest.mark.parametrize("dtype", [gf.float32, gf.int64, gf.bool, gf.complex64, gf.uint8])
def test_array_feeds_are_not_copied(wrap, dtype, callable_):
    original = (np.arange(12) % 3).reshape(3, 4).astype(dtype.as_numpy_dtype)
    before = original.copy()
    result, seen = probe_run(wrap(original), dtype, [3, 4], callable_)
    assert np.shares_memory(seen, original)
    assert not seen.flags.writeable            # a kernel cannot write into the caller's array
    assert original.flags.writeable            # ... and the caller's array is left as it was
    np.testing.assert_array_equal(result, before)
    np.testing.assert_array_equal(original, before)


@pytest.mark.parametrize("wrap", [lambda a: a, ArrayOnly, DLPackOnly],
                         ids=["ndarray", "__array__", "__dlpack__"])
def test_read_only_and_non_contiguous_feeds(wrap):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    strided = base[::2, ::3]                   # non-contiguous view
    read_only = base.copy()
    read_only.flags.writeable = False
    for original in (strided, read_only, read_only.T):
        before = original.copy()
        result, seen = probe_run(wrap(original), gf.float32, [None, None])
        assert np.shares_memory(seen, original)
        np.testing.assert_array_equal(result, before)
        assert result.flags.writeable and not np.shares_memory(result, original)
    assert base.flags.writeable and not read_only.flags.writeable


@pytest.mark.parametrize("wrap", [lambda a: a, ArrayOnly, DLPackOnly],
                         ids=["ndarray", "__array__", "__dlpack__"])
def test_a_fed_array_is_never_written_by_an_in_place_op(wrap):
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.int32, shape=[8])
    y = s.tensor_scatter_update(x, np.array([[1], [3]]), np.array([7, 9], np.int32))
    original = np.zeros(8, np.int32)
    with gf.Session(g) as sess:
        out = sess.run(y, {x: wrap(original)})
        again = sess.make_callable(y, [x])(wrap(original))
    np.testing.assert_array_equal(out, [0, 7, 0, 9, 0, 0, 0, 0])
    np.testing.assert_array_equal(again, out)
    np.testing.assert_array_equal(original, np.zeros(8, np.int32))


@pytest.mark.parametrize("value, dtype, expected", [
    (2.5, gf.float32, np.float32(2.5)),
    (3, gf.float64, np.float64(3)),
    (3, gf.int64, np.int64(3)),
    (True, gf.bool, np.bool_(True)),
    (1 + 2j, gf.complex128, np.complex128(1 + 2j)),
    (np.float32(1.5), gf.float32, np.float32(1.5)),
    ("hi", gf.string, b"hi"),
])
def test_python_and_numpy_scalars(value, dtype, expected):
    result, seen = probe_run(value, dtype, [])
    assert result.shape == () and result.dtype == dtype.as_numpy_dtype
    assert result[()] == expected


def test_nested_lists():
    result, _ = probe_run([[1, 2, 3], [4, 5, 6]], gf.int32, [2, None])
    assert result.dtype == np.int32
    np.testing.assert_array_equal(result, [[1, 2, 3], [4, 5, 6]])
    result, _ = probe_run([[0.5], [1.5]], gf.float64, None)
    np.testing.assert_array_equal(result, [[0.5], [1.5]])
    result, _ = probe_run([["a", b"b"]], gf.string, [1, 2])
    assert result.tolist() == [[b"a", b"b"]]
    result, _ = probe_run([], gf.float32, [0])
    assert result.shape == (0,)


def test_bad_scalar_and_list_feeds_are_rejected():
    # a Python int must fit the dtype exactly (TF1's Session checks Python ints)
    with pytest.raises(TypeError, match="Type of feed value 1099511627776 .* int32"):
        probe_run(2 ** 40, gf.int32, [])
    with pytest.raises(TypeError, match=r"Type of feed value \[300\] .* uint8"):
        probe_run([300], gf.uint8, [1])
    with pytest.raises(InvalidArgumentError, match="Cannot feed value for Tensor"):
        probe_run(["a"], gf.float32, [1])
    with pytest.raises(InvalidArgumentError, match="Cannot feed value for Tensor"):
        probe_run([[1, 2], [3]], gf.int32, None)  # ragged
    with pytest.raises(InvalidArgumentError, match=r"shape \(3,\)"):
        probe_run([1, 2, 3], gf.int32, [2])


def test_array_with_another_dtype_is_cast_as_numpy_casts():
    """TF1's Session feeds np.asarray(value, dtype): one rule for every kind of array
    (tests/test_feed_conversion.py checks it against numpy for many pairs)."""
    original = np.array([1, 2, 3], np.int64)
    for wrap in (lambda a: a, ArrayOnly, DLPackOnly):
        result, seen = probe_run(wrap(original), gf.float32, [3])
        assert result.dtype == np.float32 and not np.shares_memory(seen, original)
        np.testing.assert_array_equal(result, [1, 2, 3])
        result, _ = probe_run(wrap(np.array([1.5, -2.5])), gf.int32, [2])
        np.testing.assert_array_equal(result, [1, -2])


def test_dlpack_memory_graphflow_cannot_read_is_an_error():
    with pytest.raises(InvalidArgumentError, match="DLPack device type 7"):
        probe_run(DLPackOnly(np.ones(2, np.float32), device=(7, 0)), gf.float32, [2])


def test_torch_tensor_feed():
    torch = pytest.importorskip("torch")
    tensor = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    result, seen = probe_run(tensor, gf.float32, [2, 3])
    assert np.shares_memory(seen, tensor.numpy())
    np.testing.assert_array_equal(result, tensor.numpy())
    strided = tensor.t()
    result, seen = probe_run(strided, gf.float32, [3, 2])
    assert np.shares_memory(seen, tensor.numpy())
    np.testing.assert_array_equal(result, strided.numpy())
    with pytest.raises(InvalidArgumentError, match="Cannot feed value for Tensor"):
        probe_run(torch.ones(2, requires_grad=True), gf.float32, [2])  # torch: detach() first
