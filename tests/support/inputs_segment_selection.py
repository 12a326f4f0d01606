"""test_every_op.py input builders for the ops of issue #35 (segment_selection): op name -> fn(opdef, inputs)."""
from __future__ import annotations

import numpy as np


def _unsorted_segment(d, inputs):
    """Rows [4, 3] into 3 segments: one empty, one id dropped (negative)."""
    return inputs.scope.create_op(d, inputs.tensor((4, 3)), np.array([2, 0, -1, 2]), np.int32(3))


def _sorted_segment(d, inputs):
    """Rows [4, 3] into segments 0, 2 (1 is a gap) and 3."""
    return inputs.scope.create_op(d, inputs.tensor((4, 3)), np.array([0, 0, 2, 3]))


def _arg(d, inputs):
    return inputs.scope.create_op(d, inputs.tensor((3, 4)), np.int32(1))


INPUTS: dict = {
    **{name: _unsorted_segment for name in ("UnsortedSegmentSum", "UnsortedSegmentMax",
                                            "UnsortedSegmentMin", "UnsortedSegmentProd")},
    **{name: _sorted_segment for name in ("SegmentSum", "SegmentMean", "SegmentMax",
                                          "SegmentMin", "SegmentProd")},
    "ArgMax": _arg, "ArgMin": _arg,
    "TopKV2": lambda d, i: i.scope.create_op(d, i.tensor((3, 4)), np.int32(2)),
    "OneHot": lambda d, i: i.scope.create_op(d, np.array([[0, 3], [-1, 1]]), np.int32(3),
                                             i.tensor(()), i.tensor(())),
    "Where": lambda d, i: i.scope.create_op(d, i.tensor((2, 3))),
    "Split": lambda d, i: i.scope.create_op(d, np.int32(1), i.tensor((2, 4)), num_split=2),
    "SplitV": lambda d, i: i.scope.create_op(d, i.tensor((2, 5)), np.array([1, -1, 2]),
                                             np.int32(1), num_split=3),
    "Unique": lambda d, i: i.scope.create_op(d, i.tensor((6,))),
}
