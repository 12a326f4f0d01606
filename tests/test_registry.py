"""The op registry: one declaration drives builders, classes, introspection and
kernels, and users can register their own ops from outside the package."""
import re

import numpy as np
import pytest

import graphflow as gf
from graphflow import ops as gf_ops
from graphflow.errors import InvalidArgumentError, NotFoundError

# An op defined entirely outside graphflow, exactly as the README shows.
Clip = gf.register_op(
    "TestClipByValue",
    inputs=["x: T", "lo: T", "hi: T"],
    outputs=["y: T"],
    attrs={"T": gf.TypeAttr([gf.float32, gf.float64, gf.int32])},
    doc="min(max(x, lo), hi), element-wise.")


@Clip.shape_fn
def _clip_shape(ctx):
    """same as x; lo and hi are scalars."""
    for name in ("lo", "hi"):
        if ctx.shape(name).rank not in (None, 0):
            raise ctx.error(f"{name} must be a scalar, got shape {ctx.shape(name)}")
    return ctx.shape("x")


@Clip.kernel("cpu")
def _clip(ctx, x, lo, hi):
    return np.clip(x, lo, hi)


Repeat = gf.register_op(
    "TestRepeatN", inputs=["values: N * T"], outputs=["outputs: K * T"],
    attrs={"N": gf.IntAttr(minimum=1), "K": gf.IntAttr(2, minimum=1), "T": gf.TypeAttr()},
    doc="K copies of the sum of the values.")


@Repeat.shape_fn
def _repeat_shape(ctx):
    """K copies of values[0].shape."""
    return [ctx.shape("values")[0]] * ctx.attr("K")


@Repeat.kernel("cpu")
def _repeat(ctx, values):
    total = sum(values[1:], values[0])
    return [total.copy() for _ in range(ctx.attrs["K"])]


def test_user_op_builds_infers_and_runs(scope, run):
    x = scope.placeholder(gf.float32, shape=[None, 3])
    y = scope.test_clip_by_value(x, 0.0, 1.0)
    assert y.dtype is gf.float32 and y.shape == gf.TensorShape([None, 3])
    feed = np.array([[-1, 0.5, 2]], np.float32)
    np.testing.assert_array_equal(run(y, {x: feed}), [[0, 0.5, 1]])
    with pytest.raises(InvalidArgumentError, match="lo must be a scalar"):
        scope.test_clip_by_value(x, [0.0, 1.0], 1.0)
    with pytest.raises(gf.errors.InvalidDTypeError, match="not in list of allowed values"):
        scope.test_clip_by_value(scope.constant([1], gf.int64), 0, 1)


def test_user_op_class_and_lists(scope, run):
    op = gf_ops.TestRepeatN.create(scope, [scope.constant([1, 2]), scope.constant([10, 20])], K=3)
    assert len(op.outputs()) == 3 and op.op.attrs["N"] == 2
    outs = scope.test_repeat_n([scope.constant([1.0])], 2)
    assert isinstance(outs, list) and len(outs) == 2
    assert [v.tolist() for v in run(op.outputs())] == [[11, 22]] * 3
    with pytest.raises(ValueError):
        op.output()  # three outputs: output() is ambiguous


def test_op_def_introspection():
    d = gf.op_def("TestClipByValue")
    assert d.signature.startswith("TestClipByValue(x: T, lo: T, hi: T) -> (y: T)")
    assert "same as x" in d.shape_rule
    assert d.kernel_devices() == ["cpu"]
    assert gf.op_def("test_clip_by_value") is d
    assert gf.op_def("Add").kernel_devices() == ["cpu", "gpu"]
    assert gf.op_def("Add").kernel_devices({"T": gf.string}) == ["cpu"]  # strings stay on the host
    with pytest.raises(NotFoundError):
        gf.op_def("NoSuchOp")


def test_builder_signature_from_declaration():
    import inspect
    sig = inspect.signature(gf.Scope.cast)
    assert list(sig.parameters) == ["self", "x", "DstT", "Truncate", "name"]
    assert sig.parameters["Truncate"].default is False


def test_wrapper_classes(scope):
    from graphflow.ops import Add, Identity
    a = scope.constant(1)
    op = Add.create(scope, a, a)
    assert op.output() is op.as_output() is op.op.outputs[0]
    assert op.z() is op.output()  # accessor named after the declared output
    # a wrapper is an Operand: it can be passed where an Output is expected
    assert Identity.create(scope, op).output().op.inputs[0] is op.output()


def test_duplicate_and_malformed_registration():
    with pytest.raises(ValueError, match="already registered"):
        gf.register_op("TestClipByValue")
    with pytest.raises(ValueError, match="Malformed"):
        gf.register_op("TestBadSpec", inputs=["x T"])
    with pytest.raises(ValueError, match="neither an attr nor a dtype"):
        gf.register_op("TestBadType", inputs=["x: Q"])


def test_no_kernel_for_dtype_is_build_time_not_found(scope):
    NoString = gf.register_op("TestNumericOnly", inputs=["x: T"], outputs=["y: T"],
                              attrs={"T": gf.TypeAttr()})

    @NoString.kernel("cpu", T=[gf.float32])
    def _k(ctx, x):
        return x + 1
    with pytest.raises(NotFoundError, match="No registered 'TestNumericOnly' OpKernel"):
        scope.test_numeric_only(scope.constant(["a"]))
    assert scope.test_numeric_only(scope.constant([1.0])).dtype is gf.float32


def test_list_input_and_attr_minimum_errors_read_like_tensorflow(scope):
    idx64 = scope.placeholder(gf.int64, shape=[2])
    with pytest.raises(TypeError, match=re.escape(
            "Tensors in list passed to 'indices' of 'DynamicStitch' Op have types [int32, int64] "
            "that do not match expected type int32.")):
        scope.dynamic_stitch([scope.constant([0, 1]), idx64], [[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(ValueError, match=re.escape(
            "Attr 'num_partitions' of 'DynamicPartition' Op passed 0 less than minimum 1.")):
        scope.dynamic_partition([1.0], [0], num_partitions=0)
