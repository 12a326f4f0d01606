"""ops/tf_glue_ops.py: StridedSlice, StridedSliceGrad, GatherV2, Prod, Transpose, Tile.

References: numpy's own indexing (Python slices, Ellipsis, None, ints) for
StridedSlice, with the index turned into TensorFlow's begin/end/strides and masks the
way tf.Tensor.__getitem__ does; np.take / np.transpose / np.tile / np.prod for the
rest; central finite differences for the gradients.
"""
from __future__ import annotations

import numpy as np
import pytest

import graphflow as gf
from graphflow.errors import InvalidArgumentError

RNG = np.random.default_rng(2024)


def _spec(index: tuple) -> tuple[list, list, list, dict]:
    """TensorFlow's spec for a numpy index (what tf.Tensor.__getitem__ builds)."""
    begin, end, strides = [], [], []
    masks = dict.fromkeys(("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                           "shrink_axis_mask"), 0)
    for i, item in enumerate(index):
        bit = 1 << i
        if isinstance(item, slice):
            begin.append(0 if item.start is None else item.start)
            end.append(0 if item.stop is None else item.stop)
            strides.append(1 if item.step is None else item.step)
            masks["begin_mask"] |= bit if item.start is None else 0
            masks["end_mask"] |= bit if item.stop is None else 0
        elif item is Ellipsis:
            begin.append(0), end.append(0), strides.append(1)
            masks["ellipsis_mask"] |= bit
        elif item is None:
            begin.append(0), end.append(0), strides.append(1)
            masks["new_axis_mask"] |= bit
        else:
            begin.append(item), end.append(item + 1), strides.append(1)
            masks["shrink_axis_mask"] |= bit
    return begin, end, strides, masks


def _random_index(rank: int) -> tuple:
    items: list = []
    used_ellipsis = False
    for _ in range(RNG.integers(0, rank + 3)):
        kind = RNG.choice(["slice", "slice", "int", "none", "ellipsis"])
        if kind == "ellipsis" and not used_ellipsis:
            used_ellipsis = True
            items.append(Ellipsis)
        elif kind == "none":
            items.append(None)
        elif kind == "int":
            items.append(int(RNG.integers(-5, 5)))
        else:
            def bound():
                return None if RNG.random() < 0.3 else int(RNG.integers(-7, 7))
            step = [None, 1, 2, 3, -1, -2][RNG.integers(0, 6)]
            items.append(slice(bound(), bound(), step))
    return tuple(items)


def test_strided_slice_matches_numpy_indexing():
    x_value = np.arange(4 * 5 * 3, dtype=np.float32).reshape(4, 5, 3)
    g = gf.Graph()
    s = gf.Scope(g)
    known = s.constant(x_value)
    unknown = s.placeholder(gf.float32, shape=[None, 5, None])
    cases = []
    for _ in range(150):
        index = _random_index(3)
        try:
            want = np.asarray(x_value[index])
        except IndexError:
            want = None
        begin, end, strides, masks = _spec(index)
        if not begin:
            continue
        if want is None:  # numpy refuses: so must graphflow, at build or run time
            with pytest.raises(InvalidArgumentError):
                out = s.strided_slice(known, begin, end, strides, **masks)
                with gf.Session(g) as sess:
                    sess.run(out)
            continue
        out = s.strided_slice(known, begin, end, strides, **masks)
        assert out.shape.as_list() == list(want.shape), index   # static shape, exact
        partial = s.strided_slice(unknown, begin, end, strides, **masks)
        assert partial.shape.is_compatible_with(want.shape), index
        cases.append((index, want, out, partial))
    assert len(cases) > 80
    with gf.Session(g) as sess:
        got = sess.run([(c[2], c[3]) for c in cases], {unknown: x_value})
    for (index, want, _, _), (a, b) in zip(cases, got):
        for value in (a, b):
            assert value.shape == want.shape and value.tobytes() == want.tobytes(), index


@pytest.mark.parametrize("spec,message", [
    (([0, 0], [1, 1], [1, 1], {"ellipsis_mask": 3}), "Multiple ellipses"),
    (([0], [1], [0], {}), "strides\\[0\\] must be non-zero"),
    (([7], [8], [1], {"shrink_axis_mask": 1}), "slice index 7 of dimension 0 out of bounds"),
    (([-7], [0], [1], {"shrink_axis_mask": 1}), "slice index -3 of dimension 0 out of bounds"),
    (([1], [2], [-1], {"shrink_axis_mask": 1}), "only stride 1 allowed on non-range indexing"),
    (([0, 0, 0], [1, 1, 1], [1, 1, 1], {}), "Index out of range using input dim 2"),
    (([0], [1, 2], [1], {}), "1D equal size"),
])
def test_strided_slice_errors(spec, message):
    s = gf.Scope(gf.Graph())
    begin, end, strides, masks = spec
    with pytest.raises(InvalidArgumentError, match=message):
        s.strided_slice(np.zeros((4, 2), np.float32), begin, end, strides, **masks)
    x = s.placeholder(gf.float32)  # unknown rank: the same check at run time
    b, e, st = (s.placeholder(gf.int32, shape=[None]) for _ in range(3))
    out = s.strided_slice(x, b, e, st, **masks)
    with gf.Session(s.graph) as sess, pytest.raises(InvalidArgumentError, match=message):
        sess.run(out, {x: np.zeros((4, 2), np.float32), b: begin, e: end, st: strides})


def _gather_ref(params, indices, axis, batch_dims):
    if batch_dims == 0:
        return np.take(params, indices, axis=axis)
    return np.stack([_gather_ref(p, i, axis - 1, batch_dims - 1)
                     for p, i in zip(params, indices)])


@pytest.mark.parametrize("params_shape,indices_shape,axis,batch_dims", [
    ((5,), (3,), 0, 0), ((4, 3), (2, 2), 1, 0), ((4, 3), (), 0, 0), ((2, 3, 4), (2, 5), 2, 1),
    ((2, 3, 4), (2, 3, 2), 2, 2), ((2, 3, 4), (2, 0), 1, 1), ((3, 4, 2), (6,), -2, 0),
    ((2, 4, 3), (2, 2), -1, -1),
])
@pytest.mark.parametrize("dtype", [np.float64, np.int8, object])
def test_gather_v2_matches_numpy(params_shape, indices_shape, axis, batch_dims, dtype):
    params = RNG.integers(-50, 50, params_shape)
    params = params.astype(object) if dtype is object else params.astype(dtype)
    if dtype is object:
        params = np.vectorize(lambda v: str(v).encode(), otypes=[object])(params)
    limit = params.shape[axis]
    indices = RNG.integers(0, limit, indices_shape).astype(np.int64)
    s = gf.Scope(gf.Graph())
    out = s.gather(params, indices, axis, batch_dims=batch_dims)
    bd = batch_dims % len(indices_shape) if batch_dims < 0 else batch_dims
    want = _gather_ref(params, indices, axis % params.ndim, bd)
    assert out.shape.as_list() == list(want.shape)
    with gf.Session(s.graph) as sess:
        got = sess.run(out)
    assert got.shape == want.shape and got.tolist() == want.tolist()


def test_gather_v2_bad_index_names_it():
    s = gf.Scope(gf.Graph())
    i = s.placeholder(gf.int32, shape=[None])
    out = s.gather(np.arange(3.0), i, 0)
    with gf.Session(s.graph) as sess, pytest.raises(InvalidArgumentError,
                                                    match=r"indices\[1\] = 7 is not in \[0, 3\)"):
        sess.run(out, {i: [0, 7, -1]})


@pytest.mark.parametrize("shape,perm", [((2, 3, 4), [2, 0, 1]), ((5,), [0]), ((), []),
                                        ((2, 0, 3), [1, 2, 0])])
def test_transpose_tile_prod_match_numpy(shape, perm):
    x = RNG.integers(-3, 4, shape).astype(np.int32)
    multiples = [2, 1, 3][:len(shape)]
    s = gf.Scope(gf.Graph())
    t = s.transpose(x, perm)
    tiled = s.tile(x, multiples)
    axes = list(range(len(shape)))[::2]
    prod = s.prod(x, axes, keep_dims=False)
    prod_keep = s.prod(x, axes, keep_dims=True)
    with gf.Session(s.graph) as sess:
        got = sess.run([t, tiled, prod, prod_keep])
    want = [np.transpose(x, perm), np.tile(x, multiples) if shape else x,
            np.prod(x, axis=tuple(axes), dtype=np.int32),
            np.prod(x, axis=tuple(axes), dtype=np.int32, keepdims=True)]
    for out, g_value, w in zip((t, tiled, prod, prod_keep), got, want):
        assert out.shape.as_list() == list(w.shape)
        assert g_value.dtype == w.dtype and g_value.shape == w.shape and np.array_equal(g_value, w)


@pytest.mark.parametrize("build,message", [
    (lambda s: s.transpose(np.zeros((2, 3)), [0, 0]), "1 is missing from"),
    (lambda s: s.transpose(np.zeros((2, 3)), [0]), "vector of size 2"),
    (lambda s: s.tile(np.zeros((2, 3)), [1, -1]), "multiples\\[1\\] >= 0"),
    (lambda s: s.tile(np.zeros((2, 3)), [1]), "vector of length 2"),
    (lambda s: s.gather(np.zeros((2, 3)), [0], 2), "axis in the range \\[-2, 2\\)"),
    (lambda s: s.gather(np.zeros((2, 3)), [[0]], 0, batch_dims=1), "less than or equal to axis"),
])
def test_build_time_errors(build, message):
    with pytest.raises(InvalidArgumentError, match=message):
        build(gf.Scope(gf.Graph()))


@pytest.mark.parametrize("op", ["strided_slice", "gather", "gather unknown dims", "gather axis 1",
                                "gather axis -1", "transpose", "tile", "strided_slice_grad"])
def test_gradients_match_finite_differences(op):
    s = gf.Scope(gf.Graph())
    value = RNG.normal(size=(4, 3, 2))
    shape = {"strided_slice_grad": [2, 3, 1], "gather unknown dims": [None, 3, None],
             "gather axis -1": [None, None, 2]}
    x = s.placeholder(gf.float64, shape=shape.get(op, [4, 3, 2]))
    if op == "strided_slice":
        y = s.strided_slice(x, [3, 0, 1], [0, 0, 0], [-2, 1, 1], end_mask=2, new_axis_mask=4,
                            shrink_axis_mask=0)
    elif op.startswith("gather axis"):
        y = s.gather(x, [[1, 0], [1, 1]], int(op.split()[-1]))  # duplicates add up
    elif op.startswith("gather"):
        y = s.gather(x, [3, 0, 3], 0)   # a duplicate index: its rows' gradients add up
    elif op == "transpose":
        y = s.transpose(x, [1, 2, 0])
    elif op == "tile":
        y = s.tile(x, [2, 1, 3])
    else:
        value = RNG.normal(size=(2, 3, 1))
        y = s.strided_slice_grad([4, 3, 2], [3, 0, 1], [0, 0, 2], [-2, 1, 1], x, end_mask=2)
    check, = gf.gradient_check(y, [x], [value])
    assert check.theoretical.shape == check.numerical.shape
    assert check.max_error < 1e-7


def test_against_tensorflow():
    tf = pytest.importorskip("tensorflow")
    x = RNG.normal(size=(3, 4, 5)).astype(np.float32)
    s = gf.Scope(gf.Graph())
    index = (slice(None, None, -2), Ellipsis, None, slice(1, -1, 2))
    begin, end, strides, masks = _spec(index)
    outs = [s.strided_slice(x, begin, end, strides, **masks),
            s.gather(x, [[1, 0], [3, 3], [2, 0]], 1, batch_dims=1),
            s.tile(x, [1, 2, 1]), s.prod(x, [0, 2]), s.transpose(x, [1, 0, 2])]
    want = [tf.strided_slice(x, begin, end, strides, **masks),
            tf.gather(x, [[1, 0], [3, 3], [2, 0]], axis=1, batch_dims=1),
            tf.tile(x, [1, 2, 1]), tf.reduce_prod(x, [0, 2]), tf.transpose(x, [1, 0, 2])]
    with gf.Session(s.graph) as sess:
        got = sess.run(outs)
    for g_value, w in zip(got, want):
        np.testing.assert_allclose(g_value, w.numpy(), rtol=1e-6)
        assert g_value.shape == tuple(w.shape)


# -- GPU kernels: the simulated and emulated GPUs everywhere, the real one with cupy -----
def _gpu_kinds():
    from support.gpu_devices import GPU_KINDS

    return GPU_KINDS


@pytest.mark.parametrize("kind", _gpu_kinds())
def test_gpu_kernels_agree_with_cpu(kind):
    from support.gpu_devices import gpu_session_devices

    x = RNG.normal(size=(5, 4, 3)).astype(np.float32)
    dy = RNG.normal(size=(2, 2, 3)).astype(np.float32)
    results = {}
    for device in ("/cpu:0", "/gpu:0"):
        s = gf.Scope(gf.Graph()).with_device(device)
        outs = [s.strided_slice(x, [4, 1, 0, 0], [0, 3, 0, 0], [-2, 1, 1, 1], end_mask=4 | 8,
                                new_axis_mask=4, name="ss"),
                s.strided_slice(x, [-1, 0], [0, 0], [1, 1], shrink_axis_mask=1, end_mask=2,
                                name="ss_shrink"),
                s.strided_slice_grad([5, 4, 3], [4, 1, 0], [0, 3, 0], [-2, 1, 1], dy, end_mask=4,
                                     name="ssg"),
                s.transpose(x, [2, 0, 1], name="tr"), s.tile(x, [2, 1, 3], name="tile")]
        with gf.Session(s.graph, devices=gpu_session_devices(kind)) as sess:
            plan = sess._plan(outs, [])
            where = {op.name: d.name for op, d in plan.placement.items()}
            results[device] = sess.run(outs)
        if device == "/gpu:0":
            for name in ("ss", "ss_shrink", "ssg", "tr", "tile"):
                assert where[name] == "/device:GPU:0", name
    for cpu, gpu in zip(results["/cpu:0"], results["/gpu:0"]):
        assert gpu.dtype == cpu.dtype and gpu.shape == cpu.shape
        assert gpu.tobytes() == cpu.tobytes()
