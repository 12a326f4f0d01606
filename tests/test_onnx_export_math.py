"""gf.export_onnx of the dense math, reduction and nn ops of issue #35
(graphflow/interop/onnx_lowering_math.py): each exported graph runs in ONNX's reference
evaluator (and onnxruntime where installed) with graphflow's results, within a few
ulps (the backends' exp and log are not numpy's bit for bit)."""
from __future__ import annotations

import numpy as np
import pytest

import graphflow as gf

onnx = pytest.importorskip("onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402

try:
    import onnxruntime
except ImportError:  # the reference evaluator still judges
    onnxruntime = None

UNARY = ["exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "square", "reciprocal", "abs", "sign",
         "floor", "ceil", "round", "sigmoid", "tanh", "relu", "relu6", "elu", "selu",
         "softplus", "softsign", "leaky_relu", "softmax", "log_softmax", "l2_loss"]


def _runs(model, path):
    found = [lambda names, feeds: ReferenceEvaluator(model).run(names, feeds)]
    if onnxruntime is not None:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        found.append(session.run)
    return found


def _check(graph, feeds: dict, outputs: list, tmp_path, rtol: float = 1e-5):
    with gf.Session(graph) as sess:
        want = sess.run(outputs, feeds)
    path = tmp_path / "model.onnx"
    model = gf.export_onnx(graph, list(feeds), outputs, path)
    for run in _runs(model, path):
        got = run([o.name for o in outputs], {k.name: v for k, v in feeds.items()})
        for out, w, g in zip(outputs, want, got):
            assert (g.dtype, g.shape) == (w.dtype, w.shape), out.name
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, err_msg=out.name)


@pytest.mark.parametrize("name", UNARY)
def test_elementwise_and_nn_functions(tmp_path, name):
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[3, 4])
    value = np.linspace(0.1 if name in ("log", "sqrt", "rsqrt", "log1p") else -3.5, 3.5,
                        12, dtype=np.float32).reshape(3, 4)
    _check(s.graph, {x: value}, [getattr(s, name)(x)], tmp_path)


def test_products_reductions_and_losses(tmp_path):
    rng = np.random.default_rng(0)
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[3, 4])
    w = rng.normal(size=(4, 5)).astype(np.float32)
    labels = np.array([0, 4, 2], np.int64)
    logits = s.bias_add(s.matmul(x, w), np.arange(5, dtype=np.float32))
    outs = [logits, s.matmul(x, w.T, transpose_b=True), s.matmul(x, x, transpose_a=True),
            s.matmul(s.reshape(x, [1, 3, 4]), w),
            s.reduce_mean(x, 1), s.reduce_max(x, [0], keepdims=True), s.reduce_min(x),
            s.reduce_any(s.greater(x, 1.0), 0), s.reduce_all(s.less(x, 5.0), 1),
            s.pow(s.abs(x), 1.5), s.squared_difference(x, 0.5),
            s.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits),
            s.softmax_cross_entropy_with_logits(labels=s.softmax(logits), logits=logits),
            s.sigmoid_cross_entropy_with_logits(labels=s.sigmoid(logits), logits=logits)]
    _check(s.graph, {x: rng.normal(size=(3, 4)).astype(np.float32)}, outs, tmp_path)


def test_segment_and_selection_ops(tmp_path):
    rng = np.random.default_rng(1)
    s = gf.Scope(gf.Graph())
    x = s.placeholder(gf.float32, shape=[6, 3])
    ids = np.array([2, 0, -1, 2, 4, 0], np.int32)
    sorted_ids = np.array([0, 0, 1, 3, 3, 3], np.int64)
    outs = [s.unsorted_segment_sum(x, ids, 5), s.unsorted_segment_max(x, ids, 5),
            s.unsorted_segment_min(x, ids, 5), s.unsorted_segment_prod(x, ids, 5),
            s.segment_sum(x, sorted_ids), s.segment_mean(x, sorted_ids),
            s.segment_max(x, sorted_ids), s.segment_min(x, sorted_ids),
            s.segment_prod(x, sorted_ids),
            s.argmax(x, 1), s.argmin(x, 0, output_type=gf.int32), *s.top_k(x, 2),
            s.one_hot(np.array([0, 2, -1, 5], np.int32), 3), s.where(s.greater(x, 0.5)),
            *s.split(x, 3, axis=1), *s.split(x, [2, -1], axis=0),
            *s.unique(np.array([3, 1, 3, 2, 1], np.int32))]
    _check(s.graph, {x: rng.normal(size=(6, 3)).astype(np.float32)}, outs, tmp_path, rtol=0)
