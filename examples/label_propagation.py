"""Label propagation (Zhu & Ghahramani, 2002) on Zachary's karate club, as one while_loop.

Two members have known labels: node 0 ('Mr. Hi') and node 33 ('Officer'). Every
member holds a distribution over the two clubs; each iteration a member takes the
mean of its neighbours' distributions (gather the rows along the edges by source,
UnsortedSegmentSum them by target, divide by the degree), and the two seeds are
clamped back to their labels. The loop runs inside the graph (``scope.while_loop``)
until no entry moves by more than ``--tol`` (or ``--max-iterations`` have run); it
prints the iterations run and the accuracy of each member's most likely club
against the graph's 'club' attribute.

    python examples/label_propagation.py [--tol 1e-6] [--max-iterations 1000]
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

import networkx as nx
import numpy as np

import graphflow as gf

CLUBS = ("Mr. Hi", "Officer")
SEEDS = {0: 0, 33: 1}  # node -> club index: Mr. Hi himself and the Officer


@dataclass
class KarateData:
    """The friendship graph as edge lists (both directions) and what the loop starts from."""

    nodes: int
    src: np.ndarray          # int32 [E]: the edge's source node (whose row is gathered)
    dst: np.ndarray          # int32 [E]: the edge's target node (where it is summed)
    inv_degree: np.ndarray   # float32 [n, 1]: 1 / deg(v), the mean over v's neighbours
    seed_mask: np.ndarray    # float32 [n, 1]: 1 for a seed (clamped), 0 for the others
    initial: np.ndarray      # float32 [n, 2]: the seeds one-hot, every other row zero
    clubs: np.ndarray        # int32 [n]: each member's club index, the ground truth


def karate_data() -> KarateData:
    """The karate club's edges and the clamped seed labels, as the loop consumes them."""
    graph = nx.karate_club_graph()
    n = graph.number_of_nodes()
    pairs = np.array(graph.edges(), np.int32)
    src = np.concatenate([pairs[:, 0], pairs[:, 1]])
    dst = np.concatenate([pairs[:, 1], pairs[:, 0]])
    degree = np.bincount(dst, minlength=n).astype(np.float32)
    seed_mask = np.zeros((n, 1), np.float32)
    initial = np.zeros((n, len(CLUBS)), np.float32)
    for node, club in SEEDS.items():
        seed_mask[node] = 1.0
        initial[node, club] = 1.0
    clubs = np.array([CLUBS.index(graph.nodes[v]["club"]) for v in range(n)], np.int32)
    return KarateData(n, src, dst, (1 / degree).reshape(-1, 1), seed_mask, initial, clubs)


def build(s: gf.Scope, data: KarateData, tol: float, max_iterations: int,
          initial: gf.Output | None = None):
    """The loop ``(step, labels, change) -> (step + 1, propagated, max |change|)`` while
    ``change > tol``; returns its (iterations, labels, last change). ``initial``: the
    starting distributions as a tensor (benchmarks/loops.py feeds them), by default
    the constant ``data.initial``."""
    src, dst = s.constant(data.src, name="src"), s.constant(data.dst, name="dst")
    inv_degree = s.constant(data.inv_degree, name="inv_degree")
    free = s.constant(1 - data.seed_mask, name="free")          # 0 on the seeds
    clamped = s.constant(data.seed_mask * data.initial, name="clamped")

    def propagate(step, labels, change):
        """Each member's neighbours' mean distribution; the seeds put back."""
        summed = s.unsorted_segment_sum(s.gather_v2(labels, src, 0), dst, data.nodes)
        updated = s.add(s.mul(s.mul(summed, inv_degree), free), clamped)
        return step + 1, updated, s.reduce_max(s.abs(s.sub(updated, labels)))

    initial = s.constant(data.initial) if initial is None else initial
    start = [s.constant(np.int32(0)), initial, s.constant(np.float32(np.inf))]
    return s.while_loop(lambda step, labels, change: change > tol, propagate, start,
                        maximum_iterations=max_iterations, name="label_propagation")


@dataclass
class Result:
    """What one run found: the iterations run, the final distributions, the accuracy."""

    iterations: int
    labels: np.ndarray
    change: float
    predicted: np.ndarray
    accuracy: float


def run(tol: float = 1e-6, max_iterations: int = 1000) -> Result:
    """Build the loop, run it once, and score each member's most likely club."""
    data = karate_data()
    g = gf.Graph()
    fetches = build(gf.Scope(g), data, tol, max_iterations)
    with gf.Session(g) as sess:
        step, labels, change = sess.run(list(fetches))
    predicted = np.argmax(labels, axis=1).astype(np.int32)
    return Result(int(step), labels, float(change), predicted,
                  float(np.mean(predicted == data.clubs)))


def main(argv: list[str] | None = None) -> Result:
    """Parse the flags, run the loop, print what it found; the result, for tests."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tol", type=float, default=1e-6,
                        help="stop once no entry changes by more than this")
    parser.add_argument("--max-iterations", type=int, default=1000)
    args = parser.parse_args(argv)
    result = run(args.tol, args.max_iterations)
    converged = "converged" if result.change <= args.tol else "stopped at the bound"
    print(f"iterations run: {result.iterations} ({converged}: last max |change| "
          f"{result.change:.2e}, tol {args.tol:g})")
    print("P(Officer) of members 0..9 = "
          + str([round(float(p), 3) for p in result.labels[:10, 1]]))
    wrong = np.flatnonzero(result.predicted != karate_data().clubs).tolist()
    print(f"accuracy on all {len(result.predicted)} members: {result.accuracy:.3f} "
          f"(2 seeds; misassigned: {wrong})")
    return result


if __name__ == "__main__":
    main()
