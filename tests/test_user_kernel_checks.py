"""A user kernel's results are checked against its op's declaration: an InternalError names
the node, the op and the kernel; numpy scalars and masked arrays become plain arrays; a
private result is passed on as it is and a view of an input is copied.
"""
from __future__ import annotations

import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import InternalError

from support.user_ops import FRESH_RESULTS, SEEN


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
BAD_OPS = {name: _user_op(f"TestBadKernel{i}", kernel,
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


@_user_op("TestScalarResult", lambda ctx, x: np.float32(x.sum())).shape_fn
def _scalar_shape(ctx):
    """a scalar."""
    return gf.TensorShape([])


def test_a_user_kernel_may_return_a_numpy_scalar():
    s = gf.Scope(gf.Graph())
    y = s.test_scalar_result(s.placeholder(gf.float32, shape=[2], name="x"))
    with gf.Session(s.graph) as sess:
        assert sess.run(y, {"x:0": [1.0, 2.0]}) == 3.0


_user_op("TestMaskedResult",
         lambda ctx, x: np.ma.masked_array(x + 1, mask=np.ones(x.shape, bool)))
class _Tagged(np.ndarray):
    """An ndarray subclass of a user's own."""


_user_op("TestMaskedPair",
         lambda ctx, x: [np.ma.masked_array(x + 1), (x + 2).view(_Tagged)], ("a: T", "b: T"))


@pytest.mark.parametrize("optimize", [True, False], ids=["optimized", "as written"])
def test_a_user_kernel_returning_a_masked_array_passes_on_its_plain_data(optimize):
    """Passed on as a MaskedArray, it reached the next kernel, which failed naming
    itself (numba: 'Unsupported array type'); it is now plain data, as a fed one."""
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[2], name="x")
    y = s.test_masked_result(x)
    a, b = s.create_op(gf.op_def("TestMaskedPair"), x)
    later = [s.tensor_scatter_add(v, [[0]], [10.0]) for v in (y, a)]
    with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
        got = sess.run([y, a, b] + later, {x: [1.0, 2.0]})
    assert all(type(v) is np.ndarray for v in got)
    assert [v.tolist() for v in got] == [[2.0, 3.0], [2.0, 3.0], [3.0, 4.0], [12.0, 3.0],
                                         [12.0, 3.0]]


@pytest.mark.parametrize("threads", [1, 2])
def test_a_private_user_result_is_passed_on_and_a_view_is_copied(threads):
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float64, shape=[None], name="x")  # unknown: heavy, so parallel
    outs = [s.test_seen(s.test_fresh(x)),
            s.test_seen(s.test_view(x))]
    feed = np.zeros(8)
    FRESH_RESULTS.clear()
    SEEN.clear()
    with gf.Session(s.graph, gf.SessionConfig(inter_op_threads=threads)) as sess:
        assert sess._plan(outs, [x]).parallel == (threads > 1)
        sess.run(outs, {x: feed})
    fresh = FRESH_RESULTS[0]()  # alive: SEEN holds what the reader got
    assert sum(v is fresh for v in SEEN) == 1  # the kernel's own result, not a copy
    (view,) = [v for v in SEEN if v is not fresh]
    assert not np.shares_memory(view, feed)  # a view of the feed was copied


