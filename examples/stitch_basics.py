"""DynamicStitch with scalar, vector and matrix indices (the seed example):

    merged[indices[m][i, ..., j], ...] = data[m][i, ..., j, ...]
"""
import numpy as np

import graphflow as gf
from graphflow.ops import DynamicStitch
from _show import show, show_graph

INDICES = [6, [4, 1], [[5, 2], [0, 3]]]
DATA = [[61, 62], [[41, 42], [11, 12]], [[[51, 52], [21, 22]], [[1, 2], [31, 32]]]]
EXPECTED = [[1, 2], [11, 12], [21, 22], [31, 32], [41, 42], [51, 52], [61, 62]]


def main() -> None:
    g = gf.Graph()
    s = gf.Scope(g)
    indices = [s.constant(np.array(i, np.int32), name=f"indices_{m}")
               for m, i in enumerate(INDICES)]
    data = [s.constant(np.array(d, np.int32), name=f"data_{m}") for m, d in enumerate(DATA)]
    merged = s.dynamic_stitch(indices, data)
    also = DynamicStitch.create(s, indices, data).output()
    parallel = s.parallel_dynamic_stitch(indices, data)
    print(f"static shape of merged: {merged.shape}")
    with gf.Session(g) as sess:
        show_graph(g, sess, [merged, also, parallel])
        values = sess.run([merged, also, parallel])
    for label, value in zip(["merged", "DynamicStitch.create", "parallel_dynamic_stitch"], values):
        show(label, value)
        assert value.tolist() == EXPECTED


if __name__ == "__main__":
    main()
