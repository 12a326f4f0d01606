"""The seed pipeline: apply a function only where a condition holds.

Partition x by (x != -1), add 1 to the partition where it holds, then stitch
the pieces back into place, as in TensorFlow's DynamicStitch documentation:
[0.1, -1, 5.2, 4.3, -1, 7.4] -> [1.1, -1, 6.2, 5.3, -1, 8.4].
"""
import numpy as np

import graphflow as gf
from _show import show, show_graph


def build(scope: gf.Scope, x: gf.Output) -> gf.Output:
    mask = scope.cast(scope.not_equal(x, np.float32(-1.0)), gf.int32)
    data = scope.dynamic_partition(x, mask, num_partitions=2)
    data[1] = scope.add(data[1], np.float32(1.0))
    positions = scope.dynamic_partition(scope.range(0, scope.size(x), 1), mask, num_partitions=2)
    return scope.dynamic_stitch(positions, data)


def main() -> None:
    g = gf.Graph()
    scope = gf.Scope(g)
    x = scope.constant(np.array([0.1, -1.0, 5.2, 4.3, -1.0, 7.4], np.float32), name="x")
    result = build(scope.with_sub_scope("increment_where_set"), x)
    with gf.Session(g) as sess:
        show_graph(g, sess, [result])
        value = sess.run(result)
    show("x", [0.1, -1.0, 5.2, 4.3, -1.0, 7.4])
    show("result", value)
    np.testing.assert_allclose(value, [1.1, -1.0, 6.2, 5.3, -1.0, 8.4], rtol=1e-6)


if __name__ == "__main__":
    main()
