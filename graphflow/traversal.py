"""Two walks over graphs that several readers of a graph share: what can be reached
from some nodes, and a topological order that otherwise keeps the given order (so a
file's nodes are built, and named, in the order they were written)."""
from __future__ import annotations

import heapq
from typing import Callable, Hashable, Iterable, Mapping, Sequence, TypeVar

Node = TypeVar("Node", bound=Hashable)


def reachable(starts: Iterable[Node], successors: Callable[[Node], Iterable[Node]]) -> set[Node]:
    """Every node reached from ``starts`` (included) by following ``successors``."""
    found: set[Node] = set()
    stack = list(starts)
    while stack:
        node = stack.pop()
        if node in found:
            continue
        found.add(node)
        stack.extend(successors(node))
    return found


def stable_topological_order(names: Sequence[str], dependencies: Mapping[str, Iterable[str]]
                             ) -> tuple[list[int], set[str]]:
    """Positions into ``names`` such that each name comes after the names it depends on,
    otherwise in the given order (the smallest ready position first); and the names left
    out, which are on a cycle or downstream of one. Every dependency must be in ``names``."""
    index = {name: i for i, name in enumerate(names)}
    waiting = {}
    consumers: dict[str, list[str]] = {name: [] for name in names}
    for name in names:
        deps = set(dependencies[name])
        waiting[name] = len(deps)
        for src in deps:
            consumers[src].append(name)
    ready = [i for i, name in enumerate(names) if not waiting[name]]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for consumer in consumers[names[i]]:
            waiting[consumer] -= 1
            if not waiting[consumer]:
                heapq.heappush(ready, index[consumer])
    return order, {name for name in names if waiting[name]}
