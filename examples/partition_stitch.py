"""The seed pipeline: apply a function only where a condition holds.

Partition x by (x != -1), add 1 to the partition where it holds, then stitch
the pieces back into place, as in TensorFlow's DynamicStitch documentation:
[0.1, -1, 5.2, 4.3, -1, 7.4] -> [1.1, -1, 6.2, 5.3, -1, 8.4].

The graph runs twice, with the same result: as written (DynamicPartition, Add,
DynamicStitch), and optimized: x is a constant, so constant folding computes the
result when the plan is built (x fed through a placeholder, the partition -> add ->
stitch would run as one select over x instead).
``--save GRAPH.json`` also writes the graph (for ``graphflow show``, ``run``).
"""
import argparse

import numpy as np

import graphflow as gf
from _show import show, show_graph

X = [0.1, -1.0, 5.2, 4.3, -1.0, 7.4]
EXPECTED = [1.1, -1.0, 6.2, 5.3, -1.0, 8.4]


def build(scope: gf.Scope, x: gf.Output) -> tuple[list[gf.Output], gf.Output]:
    """The partitions of x and the stitched result."""
    mask = scope.cast(scope.not_equal(x, np.float32(-1.0)), gf.int32)
    data = scope.dynamic_partition(x, mask, num_partitions=2)
    incremented = [data[0], scope.add(data[1], np.float32(1.0))]
    positions = scope.dynamic_partition(scope.range(0, scope.size(x), 1), mask, num_partitions=2)
    return data, scope.dynamic_stitch(positions, incremented)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--save", metavar="GRAPH.json", help="also write the graph there")
    args = parser.parse_args()
    g = gf.Graph()
    scope = gf.Scope(g)
    x = scope.constant(np.array(X, np.float32), name="x")
    parts, result = build(scope.with_sub_scope("increment_where_set"), x)
    show("x", X)

    print("-- as written")
    with gf.Session(g, gf.SessionConfig(optimize=False)) as sess:
        show_graph(g, sess, [result, *parts])
        as_written, part0, part1 = sess.run([result, *parts])
    show("partition 0 (x == -1)", part0)
    show("partition 1 (x != -1)", part1)
    show("result", as_written)

    print("-- optimized")
    with gf.Session(g) as sess:
        show_graph(g, sess, [result])
        optimized = sess.run(result)
    show("optimized result", optimized)

    np.testing.assert_allclose(as_written, EXPECTED, rtol=1e-6)
    np.testing.assert_array_equal(optimized, as_written)
    if args.save:
        g.save(args.save)
        print(f"wrote {args.save}")


if __name__ == "__main__":
    main()
