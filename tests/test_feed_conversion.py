"""Feeds follow one rule for every kind of array, TF1's Session's:
``np.asarray(value).astype(placeholder dtype)``, with Python ints held exactly; ndarrays,
``__array__`` and ``__dlpack__`` objects, masked arrays and device arrays alike. Expected
values were recorded from TensorFlow 2.21's tf.compat.v1.Session.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import graphflow as gf
from graphflow.errors import InvalidDTypeError
from graphflow.runtime.feeds import feed_array

from support.user_ops import SEEN


class ArrayOnly:
    """Exposes only ``__array__``, as many array libraries do."""

    def __init__(self, array):
        self._array = array

    def __array__(self, dtype=None, copy=None):
        return self._array if dtype is None else self._array.astype(dtype)


class DLPackOnly:
    """Exposes only the DLPack protocol."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


class TorchLike(DLPackOnly):
    """A CPU torch tensor as graphflow sees it (torch is not installed here): DLPack
    first, ``__array__`` as well."""

    def __array__(self, dtype=None, copy=None):
        return self._array if dtype is None else self._array.astype(dtype)


KINDS = {"ndarray": lambda a: a, "__array__": ArrayOnly, "__dlpack__": DLPackOnly,
         "torch-like": TorchLike, "masked": lambda a: np.ma.array(a, mask=np.zeros(a.shape))}
NUMERIC = [gf.bool, gf.int8, gf.int16, gf.int32, gf.int64, gf.uint8, gf.uint16, gf.uint32,
           gf.uint64, gf.float16, gf.float32, gf.float64, gf.complex64, gf.complex128]


def tf1_feed(value, dtype: gf.DType) -> np.ndarray:
    """The plain reference: what TF 2.21's tf.compat.v1.Session feeds (its numpy-2 path
    is ``np.asarray(values).astype(dtype)``)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(value).astype(dtype.as_numpy_dtype)


_FEED_GRAPH = gf.Graph()
_FEED_SCOPE = gf.Scope(_FEED_GRAPH)
PLACEHOLDERS = {t: _FEED_SCOPE.placeholder(t, name=f"p_{t.name}")
                for t in NUMERIC + [gf.string]}


@pytest.fixture(scope="module")
def feed_session():
    with gf.Session(_FEED_GRAPH) as sess:
        yield sess


def fed(sess, value, dtype):
    """What a placeholder of ``dtype`` holds when ``value`` is fed (fetched back)."""
    x = PLACEHOLDERS[dtype]
    return sess.run(x, {x: value})


# (value, dtype, what TF 2.21's tf.compat.v1.Session gave: an array, or an error class),
# recorded with the scratch script the issue asks for
TF1_RECORDED = [
    (np.array([1.5, 2.25]), gf.float32, np.array([1.5, 2.25], np.float32)),
    (np.array([1.5], np.float32), gf.float64, np.array([1.5])),
    (np.array([1.5, 2.7]), gf.int32, np.array([1, 2], np.int32)),
    (np.array([1, 2], np.int64), gf.int32, np.array([1, 2], np.int32)),
    (np.array([-1], np.int64), gf.uint8, np.array([255], np.uint8)),
    (np.array([1, 2], np.int64), gf.float32, np.array([1, 2], np.float32)),
    (np.array([True, False]), gf.int32, np.array([1, 0], np.int32)),
    (np.array([1, 0, 2]), gf.bool, np.array([True, False, True])),
    (np.array([1.5, 0.0]), gf.bool, np.array([True, False])),
    (np.array(["1", "2"]), gf.int32, np.array([1, 2], np.int32)),
    (np.array([b"1"]), gf.int32, np.array([1], np.int32)),
    (np.array([1 + 2j]), gf.float32, np.array([1.0], np.float32)),
    (np.array([1.5]), gf.complex64, np.array([1.5 + 0j], np.complex64)),
    (np.array([1.5], np.float16), gf.float32, np.array([1.5], np.float32)),
    ([1.5, 2.7], gf.int32, np.array([1, 2], np.int32)),
    (1.5, gf.int32, np.int32(1)),
    (True, gf.float32, np.float32(1.0)),
    (np.array(["a", "b"]), gf.string, np.array([b"a", b"b"], object)),
    (np.array(["a", "b"], object), gf.string, np.array([b"a", b"b"], object)),
    ([np.int8(-1)], gf.uint8, np.array([255], np.uint8)),  # numpy ints in a list: cast
    ([[1, np.int64(2 ** 40)]], gf.int32, np.array([[1, 0]], np.int32)),
    ([], gf.string, np.array([], object)),   # empty: any dtype
    ([[]], gf.string, np.empty((1, 0), object)),
    (np.zeros((2, 0)), gf.string, np.empty((2, 0), object)),
    (2 ** 40, gf.int32, TypeError),           # a Python int must fit exactly
    (-1, gf.uint8, TypeError),
    (["a"], gf.int32, ValueError),            # numpy cannot parse it
    ([[1.0], [2.0, 3.0]], gf.float32, ValueError),  # ragged
]


@pytest.mark.parametrize("value, dtype, want", TF1_RECORDED,
                         ids=[f"{i}-{d.name}" for i, (_, d, _) in enumerate(TF1_RECORDED)])
def test_feeds_convert_as_tf1_session_does(feed_session, value, dtype, want):
    if isinstance(want, type):
        with pytest.raises(want, match="Tensor 'p_"):
            fed(feed_session, value, dtype)
        return
    got = fed(feed_session, value, dtype)
    assert type(got) is np.ndarray and got.dtype == want.dtype
    assert got.tolist() == np.asarray(want).tolist()


@pytest.mark.parametrize("source", [np.float64, np.int64, np.float32, np.complex128, np.bool_],
                         ids=lambda t: t.__name__)
@pytest.mark.parametrize("target", [gf.float32, gf.int32, gf.uint8, gf.float64, gf.bool],
                         ids=lambda t: t.name)
def test_every_kind_of_array_is_fed_by_the_same_rule(feed_session, source, target):
    """One rule for numpy arrays, masked arrays, __array__ and __dlpack__ objects."""
    base = np.array([[0.0, 1.5, -2.5], [3.25, 255.0, -1.0]]).astype(source)
    want = tf1_feed(base, target)
    for kind, wrap in KINDS.items():
        original = base.copy()
        got = fed(feed_session, wrap(original), target)
        assert type(got) is np.ndarray, kind
        assert got.dtype == target.as_numpy_dtype and got.tobytes() == want.tobytes(), kind
        np.testing.assert_array_equal(original, base)  # the caller's array is left as it was


@pytest.mark.parametrize("kind", KINDS)
def test_a_feed_of_the_placeholder_dtype_is_not_copied(kind):
    original = np.arange(6, dtype=np.float32).reshape(2, 3)
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[2, 3])
    y = s.test_seen(x)
    SEEN.clear()
    with gf.Session(s.graph) as sess:
        got = sess.run(y, {x: KINDS[kind](original)})
    np.testing.assert_array_equal(got, original[:1])
    assert np.shares_memory(SEEN[0], original) and not SEEN[0].flags.writeable
    assert type(SEEN[0]) is np.ndarray  # a masked array reaches kernels as its plain data


def test_a_masked_array_comes_back_as_its_plain_data(feed_session):
    masked = np.ma.array([1.0, 2.0, 3.0], mask=[False, True, False], dtype=np.float32)
    got = fed(feed_session, masked, gf.float32)
    assert type(got) is np.ndarray and got.tolist() == [1.0, 2.0, 3.0]
    got = fed(feed_session, masked, gf.float64)  # converted: still plain
    assert type(got) is np.ndarray and got.tolist() == [1.0, 2.0, 3.0]


@given(data=st.data(),
       source=st.sampled_from([t for t in NUMERIC if t != gf.float16]),
       target=st.sampled_from(NUMERIC),
       kind=st.sampled_from(["ndarray", "__array__", "__dlpack__", "torch-like"]))
def test_arrays_of_any_dtype_feed_as_numpy_casts(feed_session, data, source, target, kind):
    value = data.draw(hnp.arrays(source.as_numpy_dtype, hnp.array_shapes(min_dims=0, max_side=4)))
    got = fed(feed_session, KINDS[kind](value), target)
    want = tf1_feed(value, target)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


@given(value=st.integers(-2 ** 70, 2 ** 70) | st.lists(st.integers(-2 ** 40, 2 ** 40),
                                                          min_size=1, max_size=4),
       target=st.sampled_from([t for t in NUMERIC if not t.is_complex and t != gf.bool]))
def test_python_ints_must_be_held_exactly(feed_session, value, target):
    """TF1's Session refuses a Python int its dtype cannot hold (a TypeError); numpy's
    cast decides everything else."""
    ints = value if isinstance(value, list) else [value]
    np_type = target.as_numpy_dtype.type
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exact = all(_holds(np_type, v) for v in ints)
    if exact:
        assert fed(feed_session, value, target).tolist() == value
    else:
        with pytest.raises(TypeError, match="cannot hold the value exactly"):
            fed(feed_session, value, target)


@given(ints=st.lists(st.integers(-2 ** 70, 2 ** 70), min_size=1, max_size=4),
       target=st.sampled_from([t for t in NUMERIC if not t.is_complex and t != gf.bool]))
@example(ints=[0, 2 ** 63 + 1], target=gf.uint64)  # numpy makes float64 of the list
@example(ints=[2 ** 62 + 1, -3], target=gf.int64)
def test_only_python_ints_are_held_exactly_numpy_ints_in_a_list_are_cast(
        feed_session, ints, target):
    """A numpy int in a list is cast as numpy casts it (as TF1 does), next to Python ints
    that must fit: the verdict is the Python ints' alone."""
    np_ints = [np.int64(v) for v in ints if -2 ** 63 <= v < 2 ** 63]
    value = ints + np_ints
    np_type = target.as_numpy_dtype.type
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exact = all(_holds(np_type, v) for v in ints)
    if exact:
        got = fed(feed_session, value, target)
        assert got.dtype == target.as_numpy_dtype and got.shape == (len(value),)
        assert got[:len(ints)].tolist() == ints
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cast = np.array(np_ints, np.int64).astype(target.as_numpy_dtype)
        assert got[len(ints):].tobytes() == cast.tobytes()
    else:
        with pytest.raises(TypeError, match="cannot hold the value exactly"):
            fed(feed_session, value, target)


@pytest.mark.parametrize("value, target", [(2 ** 53 + 1, gf.float64), ([2 ** 53 + 1], gf.float64),
                                           (2 ** 24 + 1, gf.float32), ([1, 2049], gf.float16),
                                           (2 ** 63 - 1, gf.float64)])
def test_python_ints_into_floats_are_compared_exactly(feed_session, value, target):
    """numpy compares int64 with float64 as float64, where 2**53 + 1 equals 2**53."""
    with pytest.raises(TypeError, match="cannot hold the value exactly"):
        fed(feed_session, value, target)


def _holds(np_type, v: int) -> bool:
    try:
        return int(np_type(v)) == v if np.issubdtype(np_type, np.integer) else \
            float(np_type(v)) == v
    except OverflowError:
        return False


@pytest.mark.parametrize("value, error, message", [
    (None, InvalidDTypeError, "cannot be None"),
    (np.array([1, 2]), InvalidDTypeError, "dtype int64 for Tensor 'p_string:0'"),
    ([1, 2], InvalidDTypeError, "dtype int64 for Tensor 'p_string:0'"),
    (np.array([1, "a"], object), InvalidDTypeError, "Tensor 'p_string:0'"),
    ([1, "a"], InvalidDTypeError, r"\[1, 'a'\] for Tensor 'p_string:0'.*strings only"),
    ([[b"a"], [2.5]], InvalidDTypeError, "strings only"),  # numpy would make '2.5' of it
])
def test_bad_string_feeds(feed_session, value, error, message):
    with pytest.raises(error, match=message):
        fed(feed_session, value, gf.string)


class DeviceArrayLike:
    """What graphflow sees of a cupy array: ``__cuda_array_interface__``, ``dtype``,
    ``shape``, ``real`` and ``astype`` (computed here on the host)."""

    def __init__(self, array):
        self.array = array
        self.dtype, self.shape = array.dtype, array.shape
        self.__cuda_array_interface__ = {"shape": array.shape, "typestr": array.dtype.str}

    @property
    def real(self):
        return DeviceArrayLike(self.array.real)

    def astype(self, dtype):
        return DeviceArrayLike(self.array.astype(dtype))


@pytest.mark.parametrize("source", [np.float64, np.complex128, np.int64, np.float32],
                         ids=lambda t: t.__name__)
@pytest.mark.parametrize("target", [gf.float32, gf.int32, gf.bool], ids=lambda t: t.name)
def test_a_device_array_is_cast_on_its_device_by_the_same_rule(source, target):
    value = np.array([[0.0, 1.5], [-2.5, 3.0]]).astype(source)
    device_array = DeviceArrayLike(value)
    got = feed_array(device_array, target, "x:0")
    assert isinstance(got, DeviceArrayLike)  # still on its device
    assert (got is device_array) == (value.dtype == target.as_numpy_dtype)
    assert got.array.dtype == target.as_numpy_dtype
    assert got.array.tobytes() == tf1_feed(value, target).tobytes()
    with pytest.raises(TypeError, match="Tensor 'x:0', which has dtype string"):
        feed_array(device_array, gf.string, "x:0")


def test_a_graph_element_is_no_feed_value(feed_session):
    c = _FEED_SCOPE.constant(1.0)
    for value in (c, c.op):
        with pytest.raises(TypeError, match="cannot be a gf.(Output|Operation)"):
            fed(feed_session, value, gf.float32)


