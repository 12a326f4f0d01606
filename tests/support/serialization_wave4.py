"""tests/test_serialization.py's round-trip graphs for the ops of issue #35: op type ->
fn(scope) -> (fetches, feeds). Random ops are seeded, so two Sessions draw alike."""
from __future__ import annotations

import numpy as np

import graphflow as gf

F32, I32 = np.float32, np.int32
X = np.array([[0.5, -1.5, 2.0], [3.0, -0.0, 1.0]], F32)
IDS = np.array([0, 2], I32)


def _unary(name):
    return lambda s: (getattr(s, name)(X if name not in ("log", "sqrt", "rsqrt", "log1p")
                                       else np.abs(X) + F32(0.5)), {})


def _training(op_type: str, slots: int, sparse: bool, before: tuple, after: tuple = ()):
    """A variable and ``slots`` slot variables updated by one ``op_type`` step (TF's input
    order: the handles, the scalars ``before`` the gradient, the gradient, the ids when
    ``sparse``, the scalars ``after``), each read after the step."""
    def build(s):
        table = np.array([[1.0, 2.0], [3.0, 4.0]], F32)
        variables = [s.variable(table + k, name=f"v{k}") for k in range(1 + slots)]
        after_init = s.with_control_dependencies([v.initializer for v in variables])
        grad = np.array([[0.5, -1.0]], F32) if sparse else np.array([[0.5, -1.0], [2.0, 1.0]], F32)
        args = [v.handle for v in variables] + [F32(x) for x in before] + [grad]
        args += [np.array([1], I32)] if sparse else []
        args += [F32(x) for x in after]
        step = after_init.create_op(op_type, *args)
        done = s.with_control_dependencies([step])
        return [done.read_variable_op(v.handle, dtype=gf.float32) for v in variables], {}
    return build


EXAMPLES = {
    **{op: _unary(name) for op, name in [
        ("Exp", "exp"), ("Log", "log"), ("Log1p", "log1p"), ("Expm1", "expm1"), ("Sqrt", "sqrt"),
        ("Rsqrt", "rsqrt"), ("Square", "square"), ("Reciprocal", "reciprocal"), ("Abs", "abs"),
        ("Sign", "sign"), ("Floor", "floor"), ("Ceil", "ceil"), ("Round", "round"),
        ("Sigmoid", "sigmoid"), ("Tanh", "tanh"), ("Relu", "relu"), ("Relu6", "relu6"),
        ("Elu", "elu"), ("Selu", "selu"), ("Softplus", "softplus"), ("Softsign", "softsign"),
        ("Softmax", "softmax"), ("LogSoftmax", "log_softmax"), ("L2Loss", "l2_loss")]},
    "LeakyRelu": lambda s: (s.leaky_relu(X, alpha=0.1), {}),
    "Pow": lambda s: (s.pow(np.abs(X), F32(1.5)), {}),
    "SquaredDifference": lambda s: (s.squared_difference(X, F32(1)), {}),
    "MatMul": lambda s: (s.matmul(X, X, transpose_b=True), {}),
    "BatchMatMulV2": lambda s: (s.matmul(X.reshape(1, 2, 3), X.T), {}),
    "BiasAdd": lambda s: (s.bias_add(X, np.array([1, 2, 3], F32)), {}),
    "Mean": lambda s: (s.reduce_mean(X, 1), {}),
    "Max": lambda s: (s.reduce_max(X, 0, keepdims=True), {}),
    "Min": lambda s: (s.reduce_min(X), {}),
    "Any": lambda s: (s.reduce_any(X > 1, 1), {}),
    "All": lambda s: (s.reduce_all(X > -2, 0), {}),
    "SoftmaxCrossEntropyWithLogits": lambda s: (
        s.softmax_cross_entropy_with_logits(labels=np.abs(X) / 4, logits=X), {}),
    "SparseSoftmaxCrossEntropyWithLogits": lambda s: (
        s.sparse_softmax_cross_entropy_with_logits(labels=IDS, logits=X), {}),
    "UnsortedSegmentSum": lambda s: (s.unsorted_segment_sum(X, np.array([1, -1], I32), 3), {}),
    "UnsortedSegmentMax": lambda s: (s.unsorted_segment_max(X, np.array([1, 1], I32), 2), {}),
    "UnsortedSegmentMin": lambda s: (s.unsorted_segment_min(X, np.array([0, 1], I32), 3), {}),
    "UnsortedSegmentProd": lambda s: (s.unsorted_segment_prod(X, np.array([0, 0], I32), 1), {}),
    "SegmentSum": lambda s: (s.segment_sum(X, np.array([0, 2], I32)), {}),
    "SegmentMean": lambda s: (s.segment_mean(X, np.array([0, 0], I32)), {}),
    "SegmentMax": lambda s: (s.segment_max(X, np.array([0, 1], I32)), {}),
    "SegmentMin": lambda s: (s.segment_min(X, np.array([1, 1], I32)), {}),
    "SegmentProd": lambda s: (s.segment_prod(X, np.array([0, 1], I32)), {}),
    "ArgMax": lambda s: (s.argmax(X, 1), {}),
    "ArgMin": lambda s: (s.argmin(X, 0, output_type=gf.int32), {}),
    "TopKV2": lambda s: (list(s.top_k(X, 2)), {}),
    "OneHot": lambda s: (s.one_hot(np.array([0, 3, -1], I32), 3), {}),
    "Where": lambda s: (s.where(X > 0.7), {}),
    "Split": lambda s: (s.split(X, 3, axis=1), {}),
    "SplitV": lambda s: (s.split(X, [1, 2], axis=1), {}),
    "Unique": lambda s: (list(s.unique(np.array([3, 1, 3, 2, 1], I32))), {}),
    "RandomUniform": lambda s: (s.random_uniform([3], seed=1), {}),
    "RandomStandardNormal": lambda s: (s.random_normal([2, 2], seed=2), {}),
    "TruncatedNormal": lambda s: (s.truncated_normal([4], seed=3), {}),
    "RandomUniformInt": lambda s: (s.random_uniform([5], 0, 10, dtype=gf.int32, seed=4), {}),
    "RandomShuffle": lambda s: (s.random_shuffle(np.arange(6, dtype=I32), seed=5), {}),
    "StatelessRandomUniform": lambda s: (s.stateless_random_uniform([3], [1, 2]), {}),
    "StatelessRandomNormal": lambda s: (s.stateless_random_normal([3], [1, 2]), {}),
    "StatelessTruncatedNormal": lambda s: (s.stateless_truncated_normal([3], [1, 2]), {}),
    "StatelessRandomUniformInt": lambda s: (s.stateless_random_uniform(
        [3], [1, 2], 0, 9, dtype=gf.int32), {}),
    "StatelessRandomUniformFullInt": lambda s: (s.stateless_random_uniform(
        [3], [1, 2], None, None, dtype=gf.int64), {}),
    "ResourceApplyMomentum": _training("ResourceApplyMomentum", 1, False, (0.1,), (0.9,)),
    "ResourceSparseApplyMomentum": _training("ResourceSparseApplyMomentum", 1, True, (0.1,),
                                             (0.9,)),
    "ResourceApplyAdam": _training("ResourceApplyAdam", 2, False,
                                   (0.9, 0.999, 0.01, 0.9, 0.999, 1e-7)),
    "ResourceApplyRMSProp": _training("ResourceApplyRMSProp", 2, False, (0.01, 0.9, 0.5, 1e-7)),
    "ResourceApplyCenteredRMSProp": _training("ResourceApplyCenteredRMSProp", 3, False,
                                              (0.01, 0.9, 0.5, 1e-7)),
    "ResourceSparseApplyRMSProp": _training("ResourceSparseApplyRMSProp", 2, True,
                                            (0.01, 0.9, 0.5, 1e-7)),
    "ResourceSparseApplyCenteredRMSProp": _training("ResourceSparseApplyCenteredRMSProp", 3,
                                                    True, (0.01, 0.9, 0.5, 1e-7)),
}
