"""Every scatter example of the seed documents, each built in both styles: the
Pythonic ``scope.scatter_nd(...)`` and TF-Java's ``ScatterNd.create(scope, ...).output()``."""
import numpy as np

import graphflow as gf
from graphflow.ops import ScatterNd, TensorScatterAdd, TensorScatterUpdate
from _show import show, show_graph

SLICES = np.array([[[5, 5, 5, 5], [6, 6, 6, 6], [7, 7, 7, 7], [8, 8, 8, 8]]] * 2, np.int32)


def expected_results() -> dict[str, np.ndarray]:
    """The values printed in the seed documents."""
    rank3 = np.zeros((4, 4, 4), np.int32)
    rank3[[0, 2]] = SLICES
    return {
        "scatter_nd 1-D": np.array([0, 11, 0, 10, 9, 0, 0, 12]),
        "scatter_nd rank-3": rank3,
        "tensor_scatter_nd_update 1-D": np.array([1, 11, 1, 10, 9, 1, 1, 12]),
        "tensor_scatter_nd_update rank-3": np.where(rank3 != 0, rank3, 1),
        "tensor_scatter_nd_add 1-D": np.array([1, 12, 1, 11, 10, 1, 1, 13]),
        "tensor_scatter_nd_add rank-3": rank3 + 1,
    }


def main() -> None:
    g = gf.Graph()
    s = gf.Scope(g)
    indices = s.constant(np.array([[4], [3], [1], [7]]), name="indices")
    updates = s.constant(np.array([9, 10, 11, 12], np.int32), name="updates")
    slice_indices = s.constant(np.array([[0], [2]]), name="slice_indices")
    slices = s.constant(SLICES, name="slices")
    shape8 = s.constant(np.array([8]), name="shape8")
    shape444 = s.constant(np.array([4, 4, 4]), name="shape444")
    ones8 = s.constant(np.ones(8, np.int32), name="ones8")
    ones444 = s.constant(np.ones((4, 4, 4), np.int32), name="ones444")
    examples = {  # label: (builder method, op class, inputs)
        "scatter_nd 1-D": ("scatter_nd", ScatterNd, (indices, updates, shape8)),
        "scatter_nd rank-3": ("scatter_nd", ScatterNd, (slice_indices, slices, shape444)),
        "tensor_scatter_nd_update 1-D":
            ("tensor_scatter_nd_update", TensorScatterUpdate, (ones8, indices, updates)),
        "tensor_scatter_nd_update rank-3":
            ("tensor_scatter_nd_update", TensorScatterUpdate, (ones444, slice_indices, slices)),
        "tensor_scatter_nd_add 1-D":
            ("tensor_scatter_nd_add", TensorScatterAdd, (ones8, indices, updates)),
        "tensor_scatter_nd_add rank-3":
            ("tensor_scatter_nd_add", TensorScatterAdd, (ones444, slice_indices, slices)),
    }
    outputs, pairs = {}, {}
    for label, (method, op_class, inputs) in examples.items():
        java_label = f"{op_class.__name__}.create {label.split()[-1]}"
        outputs[label] = getattr(s, method)(*inputs)
        outputs[java_label] = op_class.create(s, *inputs).output()
        pairs[label] = java_label
    with gf.Session(g) as sess:
        show_graph(g, sess, list(outputs.values()))
        values = sess.run(outputs)
    for label, value in values.items():
        show(label, value)
    for label, expected in expected_results().items():
        for style in (label, pairs[label]):
            np.testing.assert_array_equal(values[style], expected)
            assert values[style].dtype == np.int32


if __name__ == "__main__":
    main()
