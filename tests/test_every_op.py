"""Every registered op, from the registry: a new op is tested by being declared.

For each op graphflow declares (graphflow.ops), on small random valid inputs:
- its shape function agrees with its CPU kernel: the static shape (from placeholders of
  known shape, structural inputs as constants) is compatible with the run's shape, and the
  static dtype is the run's dtype;
- every dtype its OpDef allows (and its CPU kernels declare) runs on the CPU kernel;
- docs/ops.md has an entry for it;
- it declares a gradient or is marked not differentiable.

Element-wise ops (the ``elementwise`` trait) get random arrays of a small shape; every
other op needs an entry in INPUTS saying how to build valid inputs, or its test fails.
"""
from __future__ import annotations

import pathlib
import re
from typing import Callable

import numpy as np
import pytest

import graphflow as gf

from support.registered_ops import package_ops

ALL_DTYPES = [gf.float16, gf.float32, gf.float64, gf.int8, gf.int16, gf.int32, gf.int64,
              gf.uint8, gf.uint16, gf.uint32, gf.uint64, gf.bool, gf.complex64, gf.complex128,
              gf.string]
#: the attr whose dtypes an op's coverage runs over: the first of these it has
COVERED_ATTRS = ("T", "dtype", "Tparams", "SrcT", "Tidx")
#: ops without a gradient rule and not marked not differentiable, with the reason
NO_GRADIENT_YET = {
    "Prod": "TensorFlow's ProdGrad not ported yet (ops/tf_glue_ops.py)",
    "_FusedElementwise": "made by the plan's fusion pass, after gradients are built",
    "_PartitionedSelect": "made by the plan's partition -> stitch rewrite, after gradients",
    "_GatherReduce": "made by the plan's gather -> combine -> segment-reduce rewrite, after "
                     "gradients",
    "_ProductSum": "made by the plan's product-sum rewrite, after gradients",
    "_GatherPartition": "made by the plan's gather -> partition rewrite, after gradients",
    "_StitchSegmentSum": "made by the plan's stitch -> segment-sum rewrite, after gradients",
    "_StitchProductSum": "made by the plan's stitch -> product-sum rewrite, after gradients",
    "_ScaledGatherRows": "made by the plan's stitch-gradient rewrite, after gradients",
    "_WhileGrad": "a while loop's gradient; its own gradient (second derivatives through a "
                  "loop) is not written yet",
}
INTERNAL = ("internal: only the plan's rewrites and gradient rules build it; users have no "
            "builder for it")
DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "ops.md"
SHAPE = (2, 3)


class Inputs:
    """Inputs for one op under test: placeholders of known shape, fed random values."""

    def __init__(self, scope: gf.Scope, dtype: gf.DType, seed: int = 0):
        self.scope, self.dtype = scope, dtype
        self.rng = np.random.default_rng(seed)
        self.feeds: dict = {}
        self.init: list = []  # run before the op: variable initializers

    def values(self, shape=SHAPE, dtype: gf.DType | None = None) -> np.ndarray:
        """Random values of ``dtype`` (the dtype under test by default); numbers in
        [1, 4], so that division and modulo stay defined."""
        dtype = dtype or self.dtype
        if dtype.is_string:
            return np.array([f"s{v}".encode() for v in self.rng.integers(0, 9, shape).flat],
                            dtype=object).reshape(shape)
        if dtype is gf.bool:
            return self.rng.integers(0, 2, shape).astype(bool)
        values = self.rng.integers(1, 5, shape)
        if dtype.is_complex:
            values = values + 1j * self.rng.integers(1, 5, shape)
        return values.astype(dtype.as_numpy_dtype)

    def tensor(self, shape=SHAPE, dtype: gf.DType | None = None) -> gf.Output:
        """A placeholder of static ``shape``, fed random values."""
        dtype = dtype or self.dtype
        p = self.scope.placeholder(dtype, shape=list(shape))
        self.feeds[p] = self.values(shape, dtype)
        return p

    def variable(self, shape=SHAPE) -> gf.Variable:
        v = self.scope.variable(self.values(shape))
        self.init.append(v.initializer)
        return v


def elementwise(d, inputs: Inputs):
    """Random arrays of one shape for every input (bool where the op says so)."""
    args = [inputs.tensor(dtype=spec.dtype) for spec in d.inputs]
    attrs = {name: inputs.dtype for name, a in d.attrs.items()
             if a.kind == "type" and a.required and name in d.user_attrs}
    return inputs.scope.create_op(d, *args, **attrs)


def _same_inputs(d, inputs: Inputs):
    """One random array per declared input (a list input gets two)."""
    args = [[inputs.tensor(), inputs.tensor()] if spec.is_list else inputs.tensor(dtype=spec.dtype)
            for spec in d.inputs]
    return inputs.scope.create_op(d, *args)


def _resource_scatter(d, inputs: Inputs):
    v = inputs.variable((4, 2))
    return inputs.scope.create_op(d, v.handle, np.array([[1], [3], [1]]),
                                  inputs.tensor((3, 2)))


def _resource_assign(d, inputs: Inputs):
    v = inputs.variable()
    return inputs.scope.create_op(d, v.handle, inputs.tensor())


def _adagrad(sparse: bool):
    def build(d, inputs: Inputs):
        var, accum = inputs.variable((4, 2)), inputs.variable((4, 2))
        if sparse:
            return inputs.scope.create_op(d, var.handle, accum.handle, inputs.values(()),
                                          inputs.tensor((2, 2)), np.array([0, 3]))
        return inputs.scope.create_op(d, var.handle, accum.handle, inputs.values(()),
                                      inputs.tensor((4, 2)))
    return build


def _tensor_scatter(d, inputs: Inputs):
    return inputs.scope.create_op(d, inputs.tensor((5, 2)), np.array([[4], [0], [4]]),
                                  inputs.tensor((3, 2)))


def _stitch(d, inputs: Inputs):
    return inputs.scope.create_op(d, [np.array([0, 2]), np.array([[1], [3]])],
                                  [inputs.tensor((2, 3)), inputs.tensor((2, 1, 3))])


def _strided_slice_grad(d, inputs: Inputs):
    return inputs.scope.create_op(d, np.array([4, 3]), np.array([1, 0]), np.array([3, 3]),
                                  np.array([1, 1]), inputs.tensor((2, 3)))


def _range(d, inputs: Inputs):
    start, limit, delta = (inputs.scope.constant(np.array(v).astype(inputs.dtype.as_numpy_dtype))
                           for v in (1, 9, 2))
    return inputs.scope.create_op(d, start, limit, delta)


#: op name -> fn(opdef, inputs) that builds the op on valid inputs and returns its result
INPUTS: dict[str, Callable] = {
    "Cast": lambda d, i: i.scope.cast(i.tensor(), gf.float64),
    "Const": lambda d, i: i.scope.constant(i.values()),
    "Placeholder": lambda d, i: i.tensor(),
    "NoOp": lambda d, i: i.scope.no_op(),
    "Identity": _same_inputs, "StopGradient": _same_inputs, "ZerosLike": _same_inputs,
    "OnesLike": _same_inputs, "Conj": _same_inputs, "FloorDiv": _same_inputs,
    "FloorMod": _same_inputs, "Rank": _same_inputs, "AddN": _same_inputs,
    "Shape": _same_inputs, "Size": _same_inputs,
    "Pack": lambda d, i: i.scope.pack([i.tensor(), i.tensor()], axis=1),
    "Unpack": lambda d, i: i.scope.unpack(i.tensor(), num=3, axis=1),
    "ConcatV2": lambda d, i: i.scope.concat([i.tensor((2, 3)), i.tensor((1, 3))], 0),
    "Reshape": lambda d, i: i.scope.reshape(i.tensor(), np.array([3, -1])),
    "ExpandDims": lambda d, i: i.scope.expand_dims(i.tensor(), np.int32(1)),
    "Squeeze": lambda d, i: i.scope.squeeze(i.tensor((2, 1, 3)), squeeze_dims=[1]),
    "Fill": lambda d, i: i.scope.fill(np.array([2, 3]), i.tensor(())),
    "Range": _range,
    "BroadcastTo": lambda d, i: i.scope.broadcast_to(i.tensor((1, 3)), np.array([2, 2, 3])),
    "BroadcastGradientArgs": lambda d, i: i.scope.create_op(
        d, i.scope.constant(np.array([2, 1, 3]).astype(i.dtype.as_numpy_dtype)),
        i.scope.constant(np.array([4, 3]).astype(i.dtype.as_numpy_dtype))),
    "Sum": lambda d, i: i.scope.reduce_sum(i.tensor(), np.array([1])),
    "Prod": lambda d, i: i.scope.create_op(d, i.tensor(), np.array([0])),
    "Slice": lambda d, i: i.scope.slice(i.tensor(), np.array([0, 1]), np.array([2, -1])),
    "Pad": lambda d, i: i.scope.pad(i.tensor(), np.array([[1, 0], [0, 2]])),
    "Tile": lambda d, i: i.scope.tile(i.tensor(), np.array([2, 1])),
    "Transpose": lambda d, i: i.scope.transpose(i.tensor(), np.array([1, 0])),
    "StridedSlice": lambda d, i: i.scope.create_op(d, i.tensor((4, 3)), np.array([1, 0]),
                                                   np.array([4, 3]), np.array([2, 1])),
    "StridedSliceGrad": _strided_slice_grad,
    "GatherV2": lambda d, i: i.scope.create_op(d, i.tensor((4, 3)), np.array([3, 0, 3]),
                                               np.int32(0)),
    "GatherNd": lambda d, i: i.scope.gather_nd(i.tensor((4, 3)), np.array([[3, 1], [0, 2]])),
    "ScatterNd": lambda d, i: i.scope.scatter_nd(np.array([[4], [0], [4]]), i.tensor((3, 2)),
                                                 np.array([5, 2])),
    "TensorScatterUpdate": _tensor_scatter, "TensorScatterAdd": _tensor_scatter,
    "TensorScatterSub": _tensor_scatter, "TensorScatterMin": _tensor_scatter,
    "TensorScatterMax": _tensor_scatter,
    "DynamicPartition": lambda d, i: i.scope.dynamic_partition(
        i.tensor((4, 2)), np.array([1, 0, 2, 1], np.int32), num_partitions=3),
    "DynamicStitch": _stitch, "ParallelDynamicStitch": _stitch,
    "VarHandleOp": lambda d, i: i.variable().handle,
    "VarIsInitializedOp": lambda d, i: i.scope.create_op(d, i.variable().handle),
    "ReadVariableOp": lambda d, i: i.variable().read(),
    "ResourceGather": lambda d, i: i.variable((4, 2)).sparse_read(np.array([3, 0, 3])),
    "AssignVariableOp": _resource_assign, "AssignAddVariableOp": _resource_assign,
    "AssignSubVariableOp": _resource_assign,
    "ResourceScatterNdUpdate": _resource_scatter, "ResourceScatterNdAdd": _resource_scatter,
    "ResourceScatterNdSub": _resource_scatter, "ResourceScatterNdMin": _resource_scatter,
    "ResourceScatterNdMax": _resource_scatter,
    "ResourceApplyAdagrad": _adagrad(sparse=False),
    "ResourceSparseApplyAdagrad": _adagrad(sparse=True),
}

for _module in ("inputs_dense_nn", "inputs_segment_selection", "inputs_random", "inputs_training",
                "inputs_control_flow"):
    INPUTS.update(__import__(f"support.{_module}", fromlist=["INPUTS"]).INPUTS)

OPS = package_ops(include_internal=True)


def _generator(d) -> Callable:
    if d.name in INPUTS:
        return INPUTS[d.name]
    if d.elementwise is not None:
        return elementwise
    pytest.fail(f"add an input generator for {d.name} (tests/test_every_op.py, INPUTS)")


def _covered_dtypes(d) -> list[gf.DType]:
    """The dtypes of its main type attr that the OpDef allows and its CPU kernels declare
    (a CPU kernel may take fewer than the attr, as TensorFlow's do); one dtype if the op
    has no type attr."""
    name = next((n for n in COVERED_ATTRS if n in d.attrs), None)
    if name is None:
        return [gf.bool if all(s.dtype is gf.bool for s in d.inputs) and d.inputs else gf.float32]
    allowed = d.attrs[name].allowed or ALL_DTYPES
    cpu = [k.constraints.get(name) for k in d.kernels if k.device_type == "cpu"]
    if cpu and None not in cpu:
        allowed = [t for t in allowed if any(t in declared for declared in cpu)]
    return list(allowed)


def _outputs(result) -> list[gf.Output]:
    if isinstance(result, gf.Operation):
        return list(result.outputs)
    if isinstance(result, (list, tuple)):
        return list(result)
    return [result.as_output() if hasattr(result, "as_output") else result]


def _check_one_dtype(d, dtype: gf.DType) -> str | None:
    """None when the op builds and runs on the CPU with ``dtype`` and its static shapes
    and dtypes match the run's; else what went wrong."""
    scope = gf.Scope(gf.Graph()).with_device("/cpu:0")
    inputs = Inputs(scope, dtype)
    try:
        result = _generator(d)(d, inputs)
    except Exception as e:  # noqa: BLE001 - reported with the dtype
        return f"{dtype.name}: building failed: {type(e).__name__}: {e}"
    outs = _outputs(result)
    op = outs[0].op if outs else result
    if op.type != d.name:
        return f"{dtype.name}: the generator built {op.type}, not {d.name}"
    with gf.Session(scope.graph, gf.SessionConfig(optimize=False)) as sess:
        if inputs.init:
            sess.run(inputs.init)
        try:
            got = sess.run(outs or op, inputs.feeds)
        except Exception as e:  # noqa: BLE001 - reported with the dtype
            return f"{dtype.name}: the CPU kernel failed: {type(e).__name__}: {e}"
    for k, (out, value) in enumerate(zip(outs, got or [])):
        want = object if out.dtype.is_string else out.dtype.as_numpy_dtype
        if np.asarray(value).dtype != want:
            return f"{dtype.name}: output {k} is {np.asarray(value).dtype}, declared {out.dtype}"
        if not out.shape.is_compatible_with(gf.TensorShape(np.shape(value))):
            return (f"{dtype.name}: output {k} has shape {list(np.shape(value))}, the shape "
                    f"function said {out.shape}")
    return None


@pytest.mark.parametrize("d", OPS, ids=lambda d: d.name)
def test_shape_function_and_dtypes_agree_with_the_cpu_kernel(d):
    if d.internal:
        pytest.skip(INTERNAL)
    failures = [f for f in (_check_one_dtype(d, t) for t in _covered_dtypes(d)) if f]
    assert not failures, f"{d.name}:\n" + "\n".join(failures)


@pytest.mark.parametrize("d", OPS, ids=lambda d: d.name)
def test_op_has_a_docs_entry(d):
    if d.internal:
        pytest.skip(f"{INTERNAL}; docs/ops.md lists the ops users build")
    assert re.search(rf"^### {re.escape(d.name)}$", DOCS.read_text(), re.M), \
        f"docs/ops.md has no entry for {d.name}: regenerate it (graphflow ops --markdown)"


@pytest.mark.parametrize("d", OPS, ids=lambda d: d.name)
def test_op_declares_a_gradient_or_not_differentiable(d):
    if d.name in NO_GRADIENT_YET:
        assert d.differentiable is None, f"{d.name} now declares one: drop it from NO_GRADIENT_YET"
        pytest.skip(NO_GRADIENT_YET[d.name])
    assert d.differentiable is not None, (
        f"{d.name} neither declares a gradient (@{d.name}.gradient) nor is marked "
        f"not differentiable ({d.name}.not_differentiable())")


def test_every_op_is_covered():
    """The tests run over the registry as it is now, internal ops included, and every
    table entry names a registered op (a renamed op leaves no stale entry)."""
    names = {d.name for d in OPS}
    assert {"ScatterNd", "DynamicPartition", "Add", "Const", "_FusedElementwise"} <= names
    assert not [d.name for d in OPS if d.internal and hasattr(gf.Scope(gf.Graph()), d.builder_name)]
    assert set(INPUTS) <= names, sorted(set(INPUTS) - names)
    assert set(NO_GRADIENT_YET) <= names
