"""DynamicStitch with scalar, vector and matrix indices (the seed example)."""
import numpy as np

import graphflow as gf
from _show import show, show_graph


def main() -> None:
    g = gf.Graph()
    s = gf.Scope(g)
    indices = [s.constant(6), s.constant([4, 1]), s.constant([[5, 2], [0, 3]])]
    data = [s.constant([61, 62]), s.constant([[41, 42], [11, 12]]),
            s.constant([[[51, 52], [21, 22]], [[1, 2], [31, 32]]])]
    merged = s.dynamic_stitch(indices, data)
    print(f"static shape of merged: {merged.shape}")
    with gf.Session(g) as sess:
        show_graph(g, sess, [merged])
        value = sess.run(merged)
    show("merged", value)
    assert value.tolist() == [[1, 2], [11, 12], [21, 22], [31, 32], [41, 42], [51, 52], [61, 62]]


if __name__ == "__main__":
    main()
