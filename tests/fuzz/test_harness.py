"""The fuzzer's check can fail: graphflow broken on purpose (a wrong duplicate rule, a
kernel that crashes, a buffer written in place) must be caught on a small graph."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest

import graphflow as gf
from graphflow.kernel_context import KernelContext
from graphflow.ops import partition_ops, scatter_ops

from .check import check_graph
from .graphs import _defined
from .spec import GraphSpec, Node, Ref

#: TensorScatterUpdate(ScatterNd(...) + 0, [[1], [1]], [5, 6]) with duplicate indices,
#: fetched with its input: forwarding, duplicates and a pinned buffer in one graph.
SPEC = GraphSpec([
    Node("Const", value=np.array([[0], [2]], np.int32)),
    Node("Const", value=np.array([1.5, -0.0], np.float32)),
    Node("Const", value=np.array([3], np.int32)),
    Node("ScatterNd", (Ref(0), Ref(1), Ref(2)), {"bad_indices_policy": ""}),
    Node("Placeholder", value=np.array([[1], [1]], np.int64), static_shape=[None, 1]),
    Node("Const", value=np.array([5.0, 6.0], np.float32)),
    Node("Identity", (Ref(3),)),
    Node("TensorScatterUpdate", (Ref(3), Ref(4), Ref(5)), {"bad_indices_policy": ""}),
    Node("Const", value=np.array([0, 1, 1], np.int32)),
    Node("DynamicPartition", (Ref(7), Ref(8)), {"num_partitions": 2}, num_outputs=2),
], fetches=[Ref(6), Ref(7), Ref(9, 1)])


def test_the_spec_passes() -> None:
    check_graph(SPEC)


_scatter_into = scatter_ops.scatter_into


def _first_update_wins(out, offsets, updates, op, *args, **kwargs):
    _scatter_into(out, offsets[::-1], updates[::-1], op, *args, **kwargs)


@pytest.mark.parametrize("breakage", [
    mock.patch.object(scatter_ops, "scatter_into", _first_update_wins),
    mock.patch.object(partition_ops, "_check_partition_ids", lambda *a: 1 / 0),
    mock.patch.object(KernelContext, "can_forward", lambda self, index, array: True),
], ids=["wrong duplicate rule", "kernel crash", "forwarding a visible buffer"])
def test_a_broken_graphflow_is_caught(breakage) -> None:
    with breakage, pytest.raises(AssertionError):
        check_graph(SPEC)


def test_a_shuffled_feed_that_makes_a_cast_undefined_is_dropped() -> None:
    """Cast(GatherNd(x, [[0]])) to int32 is defined for the first feed of x, not for its
    second (NaN first): the reference has no value for it, so graph_specs drops it."""
    nodes = [Node("Placeholder", value=np.array([1.0, np.nan], np.float32), static_shape=[2]),
             Node("Const", value=np.array([[0]], np.int32)),
             Node("GatherNd", (Ref(0), Ref(1)), {"batch_dims": 0, "bad_indices_policy": ""}),
             Node("Cast", (Ref(2),), {"DstT": gf.int32})]
    spec = GraphSpec(nodes, [Ref(3)], second_feeds={0: np.array([np.nan, 1.0], np.float32)})
    assert _defined(GraphSpec(nodes, [Ref(3)], second_feeds={0: nodes[0].value}))
    assert not _defined(spec)
