"""test_every_op.py input builders for the ops of issue #35 (dense math, reductions, nn):
op name -> fn(opdef, inputs) building the op on valid inputs."""
from __future__ import annotations

import numpy as np

import graphflow as gf


def _one(d, i):
    return i.scope.create_op(d, i.tensor())


def _two(d, i):
    return i.scope.create_op(d, i.tensor(), i.tensor((1, 3)))


def _reduce(d, i):
    return i.scope.create_op(d, i.tensor(), np.array([1]))


def _logits(d, i):
    return i.scope.create_op(d, i.tensor((2, 3)))


UNARY = ["Exp", "Log", "Log1p", "Expm1", "Sqrt", "Rsqrt", "Square", "Reciprocal", "Abs", "Sign",
         "Floor", "Ceil", "Round", "Sigmoid", "Tanh", "Relu", "Relu6", "Elu", "Selu",
         "Softplus", "Softsign", "LeakyRelu", "L2Loss", "Softmax", "LogSoftmax"]

INPUTS: dict = {
    **{name: _one for name in UNARY},
    "Pow": _two, "SquaredDifference": _two,
    "MatMul": lambda d, i: i.scope.create_op(d, i.tensor((2, 3)), i.tensor((3, 4))),
    "BatchMatMulV2": lambda d, i: i.scope.create_op(d, i.tensor((2, 2, 3)), i.tensor((3, 4))),
    "BiasAdd": lambda d, i: i.scope.create_op(d, i.tensor((2, 3)), i.tensor((3,))),
    "Mean": _reduce, "Max": _reduce, "Min": _reduce, "Any": _reduce, "All": _reduce,
    "SoftmaxCrossEntropyWithLogits": lambda d, i: i.scope.create_op(
        d, i.tensor((2, 3)), i.tensor((2, 3))),
    "SparseSoftmaxCrossEntropyWithLogits": lambda d, i: i.scope.create_op(
        d, i.tensor((2, 3)), np.array([2, 0], np.int64)),
}

__all__ = ["INPUTS", "gf"]
