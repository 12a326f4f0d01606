"""test_every_op.py input builders for the ops of issue #35 (training): op name -> fn(opdef, inputs).

Each optimizer step gets a [4, 2] variable and slots holding values that keep every
square root defined (ms and v at least 1, mg zero), scalar hyperparameters in (0, 1)
so that 1 - beta_power is not zero, random gradients, and for the sparse ops the
rows [0, 3, 0]: a duplicate, which TF's sparse kernels apply one after another.
"""
from __future__ import annotations

import numpy as np

import graphflow as gf

SHAPE = (4, 2)
SPARSE_ROWS = np.array([0, 3, 0])
#: each op's handle inputs after var: the slot's starting value (None: random in [1, 4])
SLOTS = {"accum": None, "m": 0.0, "v": None, "ms": None, "mom": 0.0, "mg": 0.0}


def _slot(inputs, start) -> gf.Variable:
    if start is None:
        return inputs.variable(SHAPE)
    dtype = inputs.dtype.as_numpy_dtype
    v = inputs.scope.variable(np.full(SHAPE, start, dtype))
    inputs.init.append(v.initializer)
    return v


def _scalar(inputs, value: float) -> gf.Output:
    return inputs.scope.constant(np.asarray(value).astype(inputs.dtype.as_numpy_dtype))


def _step(*names: str, sparse: bool = False):
    """A builder for an op whose inputs are ``names`` in order: ``var``, slots, scalar
    hyperparameters (0.5 each), ``grad`` and ``indices``."""
    def build(d, inputs):
        args = []
        for name in names:
            if name == "var":
                args.append(inputs.variable(SHAPE).handle)
            elif name in SLOTS:
                args.append(_slot(inputs, SLOTS[name]).handle)
            elif name == "grad":
                args.append(inputs.tensor((len(SPARSE_ROWS),) + SHAPE[1:] if sparse else SHAPE))
            elif name == "indices":
                args.append(SPARSE_ROWS)
            else:
                args.append(_scalar(inputs, 0.5))
        return inputs.scope.create_op(d, *args)
    return build


_RMS = ("var", "ms", "mom", "lr", "rho", "momentum", "epsilon", "grad")
_CENTERED = ("var", "mg", "ms", "mom", "lr", "rho", "momentum", "epsilon", "grad")
_ADAM = ("var", "m", "v", "beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon",
         "grad")

INPUTS: dict = {
    "ResourceApplyMomentum": _step("var", "accum", "lr", "grad", "momentum"),
    "ResourceSparseApplyMomentum": _step("var", "accum", "lr", "grad", "indices", "momentum",
                                         sparse=True),
    "ResourceApplyAdam": _step(*_ADAM),
    "_ResourceSparseApplyAdam": _step(*_ADAM, "indices", sparse=True),
    "ResourceApplyRMSProp": _step(*_RMS),
    "ResourceApplyCenteredRMSProp": _step(*_CENTERED),
    "ResourceSparseApplyRMSProp": _step(*_RMS, "indices", sparse=True),
    "ResourceSparseApplyCenteredRMSProp": _step(*_CENTERED, "indices", sparse=True),
}
