"""test_every_op.py input builders for the ops of issue #35 (random): op name -> fn(opdef, inputs).

test_every_op covers each op's first type attr among ("T", "dtype", ...): for the random
ops that is ``T``, the dtype of the ``shape`` input (int32, int64), so the builders make
the shape of ``inputs.dtype``; RandomShuffle's ``T`` is its value's dtype (every dtype).
The output dtypes (float16/32/64, the int types) are covered by tests/test_random_ops.py.
"""
from __future__ import annotations

import numpy as np

import graphflow as gf


def _shape(inputs) -> np.ndarray:
    """The output shape [2, 3] as a constant of the index dtype under test."""
    return np.array([2, 3], dtype=inputs.dtype.as_numpy_dtype)


def _stateful(d, inputs):
    return inputs.scope.create_op(d, _shape(inputs), dtype=gf.float32, seed=1, seed2=2)


def _uniform_int(d, inputs):
    return inputs.scope.create_op(d, _shape(inputs), np.int64(-3), np.int64(4), seed=1)


def _stateless(d, inputs):
    return inputs.scope.create_op(d, _shape(inputs), np.array([7, 8], np.int64))


def _stateless_int(d, inputs):
    return inputs.scope.create_op(d, _shape(inputs), np.array([7, 8], np.int32), np.int32(-3),
                                  np.int32(4))


INPUTS: dict = {
    "RandomUniform": _stateful,
    "RandomStandardNormal": _stateful,
    "TruncatedNormal": _stateful,
    "RandomUniformInt": _uniform_int,
    "RandomShuffle": lambda d, i: i.scope.create_op(d, i.tensor((4, 3)), seed=3),
    "StatelessRandomUniform": _stateless,
    "StatelessRandomNormal": _stateless,
    "StatelessTruncatedNormal": _stateless,
    "StatelessRandomUniformInt": _stateless_int,
    "StatelessRandomUniformFullInt": _stateless,
}
