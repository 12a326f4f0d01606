"""Build-time shape checks and their messages (issue 25, items 18-19): Fill with a
constant negative dim and ConcatV2 with an axis out of range fail when built, in
TensorFlow's words, and the same values fed at run time fail the same way."""
from __future__ import annotations

import numpy as np
import pytest

import graphflow as gf


@pytest.mark.parametrize("dims", [[-1], [2, -3], [-2, 0]])
def test_fill_with_a_constant_negative_dim_fails_at_build(dims):
    s = gf.Scope(gf.Graph())
    with pytest.raises(gf.errors.InvalidArgumentError,
                       match=rf"Fill dimensions must be >= 0, got \[{', '.join(map(str, dims))}\]"):
        s.fill(np.array(dims, np.int32), np.float32(1))
    fed = s.placeholder(gf.int32, [len(dims)])
    out = s.fill(fed, np.float32(1))  # unknown at build time: refused by the kernel
    with gf.Session(s.graph) as sess:
        with pytest.raises(gf.errors.InvalidArgumentError, match="non-negative"):
            sess.run(out, {fed: dims})


def test_fill_with_non_negative_constant_dims_builds():
    s = gf.Scope(gf.Graph())
    out = s.fill(np.array([0, 2], np.int32), np.float32(1))
    assert out.shape.as_list() == [0, 2]


@pytest.mark.parametrize("rank,axis", [(1, 3), (1, -2), (1, 1), (2, 2), (2, -3)])
def test_concat_axis_out_of_range_is_one_sentence(rank, axis):
    s = gf.Scope(gf.Graph())
    a = np.zeros((2,) * rank, np.float32)
    expected = (rf"^ConcatOp : Expected concatenating dimensions in the range \[{-rank}, "
                rf"{rank}\), but got {axis} \[node")
    with pytest.raises(gf.errors.InvalidArgumentError, match=expected):
        s.concat([a, a], axis)
    x = s.placeholder(gf.float32, None)
    fed_axis = s.placeholder(gf.int32, [])
    out = s.concat([x, x], fed_axis)
    with gf.Session(s.graph) as sess:
        with pytest.raises(gf.errors.InvalidArgumentError, match=expected):
            sess.run(out, {x: a, fed_axis: axis})
        np.testing.assert_array_equal(sess.run(out, {x: a, fed_axis: -1}),
                                      np.concatenate([a, a], -1))
