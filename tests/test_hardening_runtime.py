"""Hardening of the entry points and the runtime (issue #15, items 3, 7, 8, 9, 10, 13).

- Feeds follow one rule for every kind of array, TF1's Session's:
  ``np.asarray(value).astype(placeholder dtype)``, with Python ints held exactly.
- Every public entry point checks its arguments: a one-line TypeError (or the
  OpError TensorFlow's counterpart raises) naming what is wrong.
- A RunMetadata holds one run.
- A kernel that runs or closes its own Session gets an error, not a deadlock.
- A user kernel's results are checked: an InternalError names the op and the kernel.
- The memory limit holds for every op's outputs, before they are allocated.
"""
from __future__ import annotations

import threading
import tracemalloc
import warnings
import weakref

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import graphflow as gf
from graphflow.errors import (FailedPreconditionError, InternalError, InvalidDTypeError,
                              NotFoundError, ResourceExhaustedError)
from graphflow.ops import DynamicPartition, ScatterNd
from graphflow.runtime.feeds import feed_array


# -- item 3: feeds ------------------------------------------------------------------------
SEEN: list = []
Seen = gf.register_op("TestHardeningSeen", inputs=["x: T"], outputs=["y: T"],
                      attrs={"T": gf.TypeAttr()}, stateful=True,
                      doc="Records the array its kernel receives; returns its first row.")


@Seen.kernel("cpu")
def _seen(ctx, x):
    SEEN.append(x)
    return np.array(x[:1], copy=True)


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
    y = s.test_hardening_seen(x)
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


# -- item 7: entry points check their arguments ---------------------------------------------
def _graph():
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.float32, shape=[2], name="x")
    y = s.add(x, 1.0, name="y")
    return g, s, x, y


def _closed_session(g):
    sess = gf.Session(g)
    sess.close()
    return sess


BAD_CALLS = {
    "Session(graph='abc')": (lambda g, s, x, y, sess: gf.Session("abc"), TypeError,
                             "must be a gf.Graph, got str"),
    "Session(config='x')": (lambda g, s, x, y, sess: gf.Session(g, config="x"), TypeError,
                            "config must be a gf.SessionConfig, got str"),
    "Session(devices='cpu')": (lambda g, s, x, y, sess: gf.Session(g, devices="cpu"),
                               TypeError, "devices must be a list of Devices"),
    "Session(devices=[1])": (lambda g, s, x, y, sess: gf.Session(g, devices=[1]), TypeError,
                             "devices must be Devices"),
    "Scope('abc')": (lambda g, s, x, y, sess: gf.Scope("abc"), TypeError, "gf.Graph, got str"),
    "Op.create(graph)": (lambda g, s, x, y, sess: ScatterNd.create(g, [[1]], [1.0], [4]),
                         TypeError, r"takes a gf.Scope first, got Graph \(wrap it"),
    "run(feed_dict=list)": (lambda g, s, x, y, sess: sess.run(y, [(x, [1.0, 2.0])]), TypeError,
                            "feed_dict must be a dict"),
    "run(options=str)": (lambda g, s, x, y, sess: sess.run(y, {x: [1.0, 2.0]}, options="trace"),
                         TypeError, "options must be a gf.RunOptions, got str"),
    "run(run_metadata={})": (lambda g, s, x, y, sess: sess.run(y, {x: [1.0, 2.0]},
                                                               run_metadata={}),
                             TypeError, "run_metadata must be a gf.RunMetadata, got dict"),
    "callable(options=str)": (
        lambda g, s, x, y, sess: sess.make_callable(y, [x], accept_options=True)(
            [1.0, 2.0], options="trace"), TypeError, "options must be a gf.RunOptions"),
    "RunOptions(trace='yes')": (lambda g, s, x, y, sess: gf.RunOptions(trace="yes"), TypeError,
                                "RunOptions.trace must be a bool, got str"),
    "make_callable(feed_list=x)": (lambda g, s, x, y, sess: sess.make_callable(y, x),
                                   TypeError, "feed_list must be a list of Outputs"),
    "make_callable(accept_options='yes')": (
        lambda g, s, x, y, sess: sess.make_callable(y, [x], accept_options="yes"), TypeError,
        "accept_options must be a bool"),
    "run('y:abc')": (lambda g, s, x, y, sess: sess.run("y:abc"), ValueError,
                     "'y:abc' looks like an output name, but is not a valid one"),
    "run('y:')": (lambda g, s, x, y, sess: sess.run("y:"), ValueError, "not a valid one"),
    "feed_dict key 'x:abc'": (lambda g, s, x, y, sess: sess.run(y, {"x:abc": [1.0, 2.0]}),
                              ValueError, "not a valid one"),
    "make_callable on a closed Session": (
        lambda g, s, x, y, sess: _closed_session(g).make_callable(y, [x]),
        FailedPreconditionError, "closed Session"),
    "import_graph_def(d, 'abc')": (
        lambda g, s, x, y, sess: gf.import_graph_def(g.as_graph_def(), "abc"), TypeError,
        "imports into a gf.Scope or a gf.Graph, got str"),
    "with_name(5)": (lambda g, s, x, y, sess: s.with_name(5), TypeError,
                     "with_name.. needs a string, got int 5"),
    "with_sub_scope(5)": (lambda g, s, x, y, sess: s.with_sub_scope(5), TypeError,
                          "needs a string, got int"),
    "with_device(5)": (lambda g, s, x, y, sess: s.with_device(5), TypeError,
                       "needs a string, got int"),
    "builder name=5": (lambda g, s, x, y, sess: s.add(x, x, name=5), TypeError,
                       "op name must be a string, got int"),
    "with_control_dependencies(output)": (
        lambda g, s, x, y, sess: s.with_control_dependencies(y), TypeError,
        "takes a list of Operations or Outputs, got Output 'y:0': pass it in a list"),
    "with_control_dependencies(op)": (
        lambda g, s, x, y, sess: s.with_control_dependencies(y.op), TypeError,
        "got Operation 'y'"),
    "with_control_dependencies(wrapper)": (
        lambda g, s, x, y, sess: s.with_control_dependencies(ScatterNd.create(s, [[1]], [1.], [4])),
        TypeError, "got ScatterNd"),
    "with_control_dependencies('y')": (
        lambda g, s, x, y, sess: s.with_control_dependencies("y"), TypeError, "got str"),
    "with_control_dependencies([5])": (
        lambda g, s, x, y, sess: s.with_control_dependencies([5]), TypeError,
        "Control dependency 5 must be an Operation or an Output"),
    "op.output(1)": (lambda g, s, x, y, sess: y.op.output(1), NotFoundError,
                     r"Operation 'y' \(Add\) has 1 outputs; there is no output 1"),
    "op.output(-2)": (lambda g, s, x, y, sess: y.op.output(-2), NotFoundError, "no output -2"),
    "op.output(2**70)": (lambda g, s, x, y, sess: y.op.output(2 ** 70), NotFoundError,
                         "no output"),
    "op.output('0')": (lambda g, s, x, y, sess: y.op.output("0"), TypeError,
                       "output index of 'y' must be an int, got str"),
    "op.output(True)": (lambda g, s, x, y, sess: y.op.output(True), TypeError, "got bool"),
    "graph.operation(5)": (lambda g, s, x, y, sess: g.operation(5), TypeError,
                           "operation name must be a string, got int 5"),
    "graph.operation(['y'])": (lambda g, s, x, y, sess: g.operation(["y"]), TypeError,
                               "got list"),
    "graph.unique_name(None)": (lambda g, s, x, y, sess: g.unique_name(None), TypeError,
                                "node name must be a string, got NoneType"),
    "run(fetch nested 5000 deep)": (lambda g, s, x, y, sess: sess.run(_nested(5000, y)),
                                    ValueError, "more than 100 levels deep"),
    "run(fetch holding itself)": (lambda g, s, x, y, sess: sess.run(_holding_itself(y)),
                                  ValueError, r"more than 100 levels deep \(or holds itself\)"),
    "make_callable(dict holding itself)": (
        lambda g, s, x, y, sess: sess.make_callable(_holding_itself({"y": y})), ValueError,
        "or holds itself"),
}


def _nested(depth, leaf):
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def _holding_itself(leaf):
    if isinstance(leaf, dict):
        leaf["self"] = leaf
        return leaf
    loop = [leaf]
    loop.append(loop)
    return loop


def test_a_fetch_nested_100_deep_still_runs():
    g, s, x, y = _graph()
    with gf.Session(g) as sess:
        got = sess.run(_nested(100, y), {x: [1.0, 2.0]})
    for _ in range(100):
        (got,) = got
    assert got.tolist() == [2.0, 3.0]


@pytest.mark.parametrize("name", BAD_CALLS)
def test_entry_points_check_their_arguments(name):
    call, error, message = BAD_CALLS[name]
    g, s, x, y = _graph()
    with gf.Session(g) as sess:
        with pytest.raises(error, match=message) as info:
            call(g, s, x, y, sess)
        assert "\n" not in str(info.value)  # one line
        assert sess.run(y, {x: [1.0, 2.0]}).tolist() == [2.0, 3.0]  # nothing broken


CONFIG_FIELDS = {"inter_op_threads": ["2", 2.5, True], "memory_limit_bytes": ["1", 1.5, False],
                 "allow_soft_placement": [1, "yes", None], "log_device_placement": [0, "no"],
                 "deterministic": [1, None], "optimize": [0, "False"]}


@pytest.mark.parametrize("field, value", [(f, v) for f, values in CONFIG_FIELDS.items()
                                          for v in values])
def test_session_config_fields_have_their_types(field, value):
    with pytest.raises(TypeError, match=f"SessionConfig.{field} must be an? (int|bool)"):
        gf.SessionConfig(**{field: value})


def test_session_config_takes_numpy_scalars_as_their_python_values():
    config = gf.SessionConfig(inter_op_threads=np.int64(2), memory_limit_bytes=np.int32(1000),
                              optimize=np.bool_(False))
    assert (config.inter_op_threads, config.memory_limit_bytes, config.optimize) == (2, 1000, False)
    assert type(config.inter_op_threads) is int and type(config.optimize) is bool


def test_control_dependencies_still_take_lists_of_ops_outputs_and_wrappers():
    g, s, x, y = _graph()
    parts = s.dynamic_partition(x, np.array([0, 1], np.int32), num_partitions=2)
    wrapper = ScatterNd.create(s, [[1]], [1.0], [4])
    several = DynamicPartition.create(s, x, np.array([1, 0], np.int32), num_partitions=2)
    scoped = s.with_control_dependencies([y, y.op, wrapper, parts[0], several])
    assert scoped.control_dependencies == (y.op, wrapper.op, parts[0].op, several.op)


# -- item 8: a RunMetadata holds one run ----------------------------------------------------
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("via", ["run", "make_callable"])
def test_run_metadata_holds_the_last_run_only(threads, via):
    g, s, x, y = _graph()
    z = s.mul(y, 2.0, name="z")
    trace = gf.RunOptions(trace=True)
    with gf.Session(g, gf.SessionConfig(inter_op_threads=threads, optimize=False)) as sess:
        f = sess.make_callable(z, [x], accept_options=True)

        def call(options=None, metadata=None):
            if via == "run":
                return sess.run(z, {x: [1.0, 2.0]}, options=options, run_metadata=metadata)
            return f([1.0, 2.0], options=options, run_metadata=metadata)
        md = gf.RunMetadata()
        call(trace, md)
        first = sorted(e.node for e in md.events)
        assert {"y", "z"} <= set(first) and len(first) == len(set(first))  # one run's nodes
        call(trace, md)
        assert sorted(e.node for e in md.events) == first  # replaced, not accumulated
        call(None, md)
        assert md.events == []  # an untraced run holds no events, as in TensorFlow


# -- item 9: a kernel that re-enters its own Session ----------------------------------------
REENTER: dict = {}


def _reenter_kernel(ctx, x):
    action = REENTER.get("action")
    if action == "run":
        REENTER["session"].run(REENTER["fetch"])
    elif action == "callable":
        REENTER["callable"]()
    elif action == "close":
        REENTER["session"].close()
    elif action == "other session":
        assert REENTER["other"].run(REENTER["other fetch"]) == 1.0
    return np.array(x, copy=True)


Reenter = gf.register_op("TestHardeningReenter", inputs=["x: T"], outputs=["y: T"],
                         attrs={"T": gf.TypeAttr()}, stateful=True,
                         doc="Copy of x; its kernel uses a Session on the way (tests only).")
Reenter.kernel("cpu")(_reenter_kernel)


def _in_thread(fn):
    """``fn()``'s result or error, from a thread given a minute: a deadlock fails the
    test instead of hanging the suite."""
    out: dict = {}

    def target():
        try:
            out["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e
    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "deadlock: the run never returned"
    return out


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("action", ["run", "callable", "close"])
def test_a_kernel_that_reenters_its_session_gets_an_error(threads, action):
    g = gf.Graph()
    s = gf.Scope(g)
    n = 1 << 17  # heavy: with 2 threads the two kernels run on the pool
    x = s.placeholder(gf.float32, shape=[n], name="x")
    out = s.add(s.test_hardening_reenter(x, name="a"), s.test_hardening_reenter(x, name="b"))
    c = s.constant(1.0)
    sess = gf.Session(g, gf.SessionConfig(inter_op_threads=threads))
    REENTER.clear()
    REENTER.update(session=sess, fetch=c, callable=sess.make_callable(c))
    assert sess._plan([out], [x]).parallel == (threads > 1)
    REENTER["action"] = action
    result = _in_thread(lambda: sess.run(out, {x: np.ones(n, np.float32)}))
    err = result.get("error")
    assert isinstance(err, FailedPreconditionError), result
    verb = "close()" if action == "close" else "run()"
    assert f"Session.{verb} called from inside a kernel" in str(err)
    assert err.node_name in ("a", "b") and err.op_type == "TestHardeningReenter"
    REENTER["action"] = None
    assert (sess.run(out, {x: np.ones(n, np.float32)}) == 2.0).all()  # still usable
    sess.close()
    assert sess.closed


def test_a_kernel_may_run_another_session():
    g = gf.Graph()
    s = gf.Scope(g)
    y = s.test_hardening_reenter(s.constant([1.0, 2.0]))
    other = gf.Graph()
    REENTER.clear()
    REENTER.update(action="other session", other=gf.Session(other),
                   **{"other fetch": gf.Scope(other).constant(1.0)})
    with gf.Session(g) as sess:
        assert _in_thread(lambda: sess.run(y))["result"].tolist() == [1.0, 2.0]
    REENTER["other"].close()


# -- item 10: user kernels are checked --------------------------------------------------
def _user_op(name, kernel, outputs=("y: T",)):
    op = gf.register_op(name, inputs=["x: T"], outputs=list(outputs), attrs={"T": gf.TypeAttr()},
                        doc="A user op whose kernel breaks a rule (tests only).")
    op.kernel("cpu")(kernel)
    return op


def _returns_none(ctx, x):
    return None


def _returns_float64(ctx, x):
    return x.astype(np.float64)


def _returns_python_float(ctx, x):
    return 1.5


def _returns_a_list(ctx, x):
    return [1.0, 2.0]


def _returns_one_of_two(ctx, x):
    return [x.copy()]


def _returns_one_array_for_two(ctx, x):
    return np.stack([x, x])


def _second_output_has_the_wrong_dtype(ctx, x):
    return [x.copy(), x.astype(np.int64)]


BAD_KERNELS = {
    "none": (_returns_none, 1, "returned None for output 0, which must be an array"),
    "dtype": (_returns_float64, 1, "returned an array of dtype float64 for output 0, which is "
                                   "declared float32"),
    "python float": (_returns_python_float, 1, "returned a value of type float for output 0"),
    "list": (_returns_a_list, 1, "returned a value of type list for output 0"),
    "count": (_returns_one_of_two, 2, "returned 1 values for 2 outputs"),
    "array for a list": (_returns_one_array_for_two, 2,
                         "returned a value of type ndarray, where a list of 2 arrays is due"),
    "second dtype": (_second_output_has_the_wrong_dtype, 2,
                     "returned an array of dtype int64 for output 1, which is declared float32"),
}
BAD_OPS = {name: _user_op(f"TestHardeningBad{i}", kernel,
                          ("y: T",) if n == 1 else ("a: T", "b: T"))
           for i, (name, (kernel, n, _)) in enumerate(BAD_KERNELS.items())}


@pytest.mark.parametrize("optimize", [True, False], ids=["optimized", "as written"])
@pytest.mark.parametrize("fed", [True, False], ids=["fed", "constant input"])
@pytest.mark.parametrize("name", BAD_KERNELS)
def test_a_user_kernel_breaking_its_declaration_is_an_internal_error(name, fed, optimize):
    kernel, n_out, message = BAD_KERNELS[name]
    g = gf.Graph()
    s = gf.Scope(g)
    x = s.placeholder(gf.float32, shape=[2]) if fed else s.constant([1.0, 2.0])
    result = s.create_op(BAD_OPS[name], x, name="user")
    fetch = result if n_out == 1 else result[0]
    with gf.Session(g, gf.SessionConfig(optimize=optimize)) as sess:
        with pytest.raises(InternalError) as info:
            sess.run(fetch, {x: [1.0, 2.0]} if fed else None)
    err = info.value
    assert err.node_name == "user" and err.op_type == BAD_OPS[name].name
    assert f"Kernel {__name__}.{kernel.__name__} of op '{BAD_OPS[name].name}' {message}" \
        in str(err)


@_user_op("TestHardeningScalar", lambda ctx, x: np.float32(x.sum())).shape_fn
def _scalar_shape(ctx):
    """a scalar."""
    return gf.TensorShape([])


def test_a_user_kernel_may_return_a_numpy_scalar():
    s = gf.Scope(gf.Graph())
    y = s.test_hardening_scalar(s.placeholder(gf.float32, shape=[2], name="x"))
    with gf.Session(s.graph) as sess:
        assert sess.run(y, {"x:0": [1.0, 2.0]}) == 3.0


_user_op("TestHardeningMasked",
         lambda ctx, x: np.ma.masked_array(x + 1, mask=np.ones(x.shape, bool)))
class _Tagged(np.ndarray):
    """An ndarray subclass of a user's own."""


_user_op("TestHardeningMaskedPair",
         lambda ctx, x: [np.ma.masked_array(x + 1), (x + 2).view(_Tagged)], ("a: T", "b: T"))


@pytest.mark.parametrize("optimize", [True, False], ids=["optimized", "as written"])
def test_a_user_kernel_returning_a_masked_array_passes_on_its_plain_data(optimize):
    """Passed on as a MaskedArray, it reached the next kernel, which failed naming
    itself (numba: 'Unsupported array type'); it is now plain data, as a fed one."""
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[2], name="x")
    y = s.test_hardening_masked(x)
    a, b = s.create_op(gf.op_def("TestHardeningMaskedPair"), x)
    later = [s.tensor_scatter_add(v, [[0]], [10.0]) for v in (y, a)]
    with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
        got = sess.run([y, a, b] + later, {x: [1.0, 2.0]})
    assert all(type(v) is np.ndarray for v in got)
    assert [v.tolist() for v in got] == [[2.0, 3.0], [2.0, 3.0], [3.0, 4.0], [12.0, 3.0],
                                         [12.0, 3.0]]


_RESULTS: list = []


def _fresh_result(ctx, x):
    out = x + 1
    _RESULTS.append(weakref.ref(out))  # a weak reference: the result stays private
    return out


_user_op("TestHardeningFresh", _fresh_result)
_user_op("TestHardeningView", lambda ctx, x: x[...])


@pytest.mark.parametrize("threads", [1, 2])
def test_a_private_user_result_is_passed_on_and_a_view_is_copied(threads):
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float64, shape=[None], name="x")  # unknown: heavy, so parallel
    outs = [s.test_hardening_seen(s.test_hardening_fresh(x)),
            s.test_hardening_seen(s.test_hardening_view(x))]
    feed = np.zeros(8)
    _RESULTS.clear()
    SEEN.clear()
    with gf.Session(s.graph, gf.SessionConfig(inter_op_threads=threads)) as sess:
        assert sess._plan(outs, [x]).parallel == (threads > 1)
        sess.run(outs, {x: feed})
    fresh = _RESULTS[0]()  # alive: SEEN holds what the reader got
    assert sum(v is fresh for v in SEEN) == 1  # the kernel's own result, not a copy
    (view,) = [v for v in SEEN if v is not fresh]
    assert not np.shares_memory(view, feed)  # a view of the feed was copied


# -- item 13: the memory limit holds for every op -------------------------------------------
LIMIT = 256  # bytes: 64 float32 elements
N = 100      # elements of the input: 400 bytes


def _binary(op):
    return lambda s, x: getattr(s, op)(x, x)


LIMITED = {
    "add(x, x)": (_binary("add"), N), "add(x, 1.0)": (lambda s, x: s.add(x, 1.0), N),
    "sub": (_binary("sub"), N), "mul": (_binary("mul"), N),
    "maximum": (_binary("maximum"), N), "real_div": (_binary("real_div"), N),
    "neg": (lambda s, x: s.neg(x), N),
    "cast": (lambda s, x: s.cast(x, gf.float64), N),
    "concat": (lambda s, x: s.concat([x, x], 0), 2 * N),
    "pack": (lambda s, x: s.pack([x, x]), 2 * N),
    "select": (lambda s, x: s.select_v2(s.less(x, 0.5), x, x), N),
    "zeros_like": (lambda s, x: s.zeros_like(x), N),
    "tensor_scatter_add": (lambda s, x: s.tensor_scatter_add(x, [[0]], [1.0]), N),
    "user op": (lambda s, x: s.test_hardening_fresh(x), N),
}


@pytest.mark.parametrize("optimize", [True, False], ids=["optimized", "as written"])
@pytest.mark.parametrize("shape", [[N], [None], None], ids=["static", "dynamic", "no rank"])
@pytest.mark.parametrize("name", LIMITED)
def test_the_memory_limit_holds_for_every_op(name, shape, optimize):
    build, elements = LIMITED[name]
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=shape, name="x")
    y = build(s, x)
    feed = np.linspace(0, 1, N, dtype=np.float32)
    with gf.Session(s.graph, gf.SessionConfig(memory_limit_bytes=LIMIT, optimize=optimize)) as sess:
        with pytest.raises(ResourceExhaustedError, match="OOM when allocating tensor with "
                           f"{elements} elements") as info:
            sess.run(y, {x: feed})
        assert info.value.node_name == y.op.name
        assert sess.run(s.identity(x), {x: feed}).size == N  # the session is still usable
    with gf.Session(s.graph, gf.SessionConfig(memory_limit_bytes=64 * LIMIT)) as sess:
        assert sess.run(y, {x: feed}).size == elements  # the same graph fits a larger limit


@pytest.mark.parametrize("optimize", [True, False], ids=["optimized", "as written"])
def test_an_output_is_refused_before_it_is_allocated(optimize):
    """A broadcast input that owns 8 bytes, an output of 8 MB: refused before numpy
    allocates it (checked from the shapes, not from the result)."""
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float64, shape=[None], name="x")
    outs = [s.add(x, x), s.neg(x), s.cast(x, gf.float32), s.concat([x, x], 0)]
    huge = np.broadcast_to(np.ones(1), (1 << 20,))
    config = gf.SessionConfig(memory_limit_bytes=1 << 20, optimize=optimize)
    with gf.Session(s.graph, config) as sess:
        for out in outs:
            with pytest.raises(ResourceExhaustedError):
                sess.run(out, {x: huge})  # compiles the plan first
            tracemalloc.start()
            try:
                with pytest.raises(ResourceExhaustedError, match=f"node {out.op.name}"):
                    sess.run(out, {x: huge})
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert peak < (1 << 20), f"{out.op.type}: {peak} bytes allocated before failing"


def test_constants_past_the_limit_are_not_folded_away():
    s = gf.Scope(gf.Graph())
    c = s.constant(np.ones(N, np.float32))
    y = s.add(c, c, name="sum")
    with gf.Session(s.graph, gf.SessionConfig(memory_limit_bytes=LIMIT)) as sess:
        with pytest.raises(ResourceExhaustedError, match=r"\[node sum\]"):
            sess.run(y)


Grow = gf.register_op("TestHardeningGrow", inputs=["n: int64"], outputs=["y: float32"],
                      doc="np.zeros(n), no shape function (tests only).")
Grow.kernel("cpu")(lambda ctx, n: np.zeros(int(n), np.float32))
Zeros = gf.register_op("TestHardeningZeros", inputs=["n: int64"], outputs=["y: float32"],
                       doc="np.zeros(n); its shape function reads n (tests only).")
ZEROS_CALLS: list = []


@Zeros.kernel("cpu")
def _zeros(ctx, n):
    ZEROS_CALLS.append(int(n))
    return np.zeros(int(n), np.float32)


@Zeros.shape_fn
def _zeros_shape(ctx):
    """[n] when n is known."""
    n = ctx.value("n")
    return gf.TensorShape([None if n is None else int(n)])


def test_an_output_of_unknown_size_is_checked_after_its_kernel():
    """A user op without a shape function: its result is refused once it exists."""
    s = gf.Scope(gf.Graph())
    n = s.placeholder(gf.int64, shape=[], name="n")
    y = s.test_hardening_grow(n, name="grow")
    with gf.Session(s.graph, gf.SessionConfig(memory_limit_bytes=LIMIT)) as sess:
        assert sess.run(y, {n: 64}).size == 64  # 256 bytes: at the limit
        with pytest.raises(ResourceExhaustedError, match=r"65 elements .* \[node grow\]"):
            sess.run(y, {n: 65})


def test_shape_functions_that_read_values_are_remembered_per_value():
    """The output's size is a value (the kernel does not check it): a call with another
    value is checked again, before the kernel, not answered from an earlier verdict."""
    s = gf.Scope(gf.Graph())
    n = s.placeholder(gf.int64, shape=[], name="n")
    y = s.test_hardening_zeros(n, name="zeros")
    with gf.Session(s.graph, gf.SessionConfig(memory_limit_bytes=LIMIT)) as sess:
        ZEROS_CALLS.clear()
        for _ in range(2):
            assert sess.run(y, {n: 64}).size == 64
            with pytest.raises(ResourceExhaustedError, match=r"65 elements .*\[node zeros\]"):
                sess.run(y, {n: 65})
        assert ZEROS_CALLS == [64, 64]  # refused before the kernel ran
