"""Printing a graph and its results, shared by the examples."""
from __future__ import annotations

import numpy as np

import graphflow as gf


def show_graph(graph: gf.Graph, session: gf.Session | None = None, fetches=()) -> None:
    """One line per op: name, type, device (as placed for ``fetches``), dtypes and shapes."""
    placed, rewritten = {}, {}
    if session is not None and fetches:
        plan = session._plan(list(fetches), [])
        placed = {op.name: device.name for op, device in plan.placement.items()}
        rewritten = {old.op.name: new.op.type for old, new in plan.substitutions.items()}
    ops = graph.operations()
    name_width = max((len(op.name) for op in ops), default=0) + 2
    type_width = max((len(op.type) for op in ops), default=0) + 2
    print(f"graph: {len(graph)} ops")
    for op in ops:
        outs = ", ".join(f"{o.dtype.name}{o.shape}" for o in op.outputs) or "-"
        device = placed.get(op.name, "(not needed)")
        print(f"  {op.name:<{name_width}} {op.type:<{type_width}} {device:<15} {outs}")
    for name, fused in rewritten.items():
        print(f"  optimizer: {name} runs as one {fused} node; the partitions it replaces are "
              f"not needed (SessionConfig(optimize=False) runs the graph as written)")


def show(label: str, value) -> None:
    """``label = [...]`` on one line: the value as a (nested) Python list, floats rounded."""
    value = np.asarray(value)
    if value.dtype.kind == "f":
        value = np.round(value.astype(np.float64), 6)
    print(f"{label} = {value.tolist()}")
