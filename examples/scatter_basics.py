"""Every scatter example of the seed documents, in both builder styles:
the Pythonic ``scope.scatter_nd(...)`` and TF-Java's ``ScatterNd.create(scope, ...)``."""
import numpy as np

import graphflow as gf
from graphflow.ops import ScatterNd, TensorScatterAdd, TensorScatterUpdate
from _show import show, show_graph

SLICES = np.array([[[5, 5, 5, 5], [6, 6, 6, 6], [7, 7, 7, 7], [8, 8, 8, 8]]] * 2, np.int32)


def main() -> None:
    g = gf.Graph()
    s = gf.Scope(g)
    indices = s.constant(np.array([[4], [3], [1], [7]]), name="indices")
    updates = s.constant(np.array([9, 10, 11, 12], np.int32), name="updates")
    slice_indices = s.constant(np.array([[0], [2]]), name="slice_indices")
    slices = s.constant(SLICES, name="slices")
    ones8 = s.constant(np.ones(8, np.int32), name="ones8")
    ones444 = s.constant(np.ones((4, 4, 4), np.int32), name="ones444")
    results = {
        "scatter_nd 1-D": s.scatter_nd(indices, updates, [8]),
        "ScatterNd.create rank-3": ScatterNd.create(s, slice_indices, slices, [4, 4, 4]).output(),
        "tensor_scatter_nd_update 1-D": s.tensor_scatter_nd_update(ones8, indices, updates),
        "TensorScatterUpdate.create rank-3":
            TensorScatterUpdate.create(s, ones444, slice_indices, slices).output(),
        "tensor_scatter_nd_add 1-D": s.tensor_scatter_nd_add(ones8, indices, updates),
        "TensorScatterAdd.create rank-3":
            TensorScatterAdd.create(s, ones444, slice_indices, slices).output(),
    }
    with gf.Session(g) as sess:
        show_graph(g, sess, list(results.values()))
        values = sess.run(results)
    for label, value in values.items():
        show(label, value)
    assert values["scatter_nd 1-D"].tolist() == [0, 11, 0, 10, 9, 0, 0, 12]
    assert values["tensor_scatter_nd_update 1-D"].tolist() == [1, 11, 1, 10, 9, 1, 1, 12]
    assert values["tensor_scatter_nd_add 1-D"].tolist() == [1, 12, 1, 11, 10, 1, 1, 13]
    expected = np.zeros((4, 4, 4), np.int32)
    expected[[0, 2]] = SLICES
    np.testing.assert_array_equal(values["ScatterNd.create rank-3"], expected)
    np.testing.assert_array_equal(values["TensorScatterUpdate.create rank-3"],
                                  np.where(expected, expected, 1))
    np.testing.assert_array_equal(values["TensorScatterAdd.create rank-3"], expected + 1)


if __name__ == "__main__":
    main()
