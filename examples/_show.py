"""Printing a graph and its results, shared by the examples."""
from __future__ import annotations

import numpy as np

import graphflow as gf


def show_graph(graph: gf.Graph, session: gf.Session | None = None, fetches=()) -> None:
    """One line per op: name, type, device (as placed for ``fetches``), dtypes and shapes;
    then what the optimizer did to the plan, if anything (see :func:`optimizer_lines`)."""
    placed, substitutions = {}, {}
    if session is not None and fetches:
        plan = session._plan(list(fetches), [])
        placed = {op.name: device.name for op, device in plan.placement.items()}
        substitutions = plan.substitutions
    ops = graph.operations()
    name_width = max((len(op.name) for op in ops), default=0) + 2
    type_width = max((len(op.type) for op in ops), default=0) + 2
    print(f"graph: {len(graph)} ops")
    for op in ops:
        outs = ", ".join(f"{o.dtype.name}{o.shape}" for o in op.outputs) or "-"
        device = placed.get(op.name, "(not needed)")
        print(f"  {op.name:<{name_width}} {op.type:<{type_width}} {device:<15} {outs}")
    for line in optimizer_lines(substitutions):
        print(f"  optimizer: {line}")


#: What each kind of substitute the plan compiler makes stands for (runtime/pipeline.py).
_REWRITES = {"_PartitionedSelect": "partition -> element-wise -> stitch as one select "
                                   "(the partitions it replaces are not needed)",
             "_FusedElementwise": "element-wise ops fused into one kernel",
             "_GatherReduce": "gather -> combine -> segment-reduce as one pass",
             "_ProductSum": "a product summed over its last axis as one pass"}


def optimizer_lines(substitutions: dict) -> list[str]:
    """What the optimizer did, truthfully: the values constant folding computed when the
    plan was built ("folded"), and each rewrite by kind; nothing when it did nothing."""
    folded = list(dict.fromkeys(old.op.name for old, new in substitutions.items()
                                if new.op.type == "Const"))
    lines = []
    if folded:
        lines.append(f"folded {len(folded)} node(s) into constants when the plan was built: "
                     f"{', '.join(folded)}")
    for old, new in substitutions.items():
        if new.op.type != "Const":
            what = _REWRITES.get(new.op.type, f"rewritten as a {new.op.type} node")
            lines.append(f"{old.op.name}: {what}")
    if lines:
        lines.append("SessionConfig(optimize=False) runs the graph as written")
    return lines


def show(label: str, value) -> None:
    """``label = [...]`` on one line: the value as a (nested) Python list, floats rounded."""
    value = np.asarray(value)
    if value.dtype.kind == "f":
        value = np.round(value.astype(np.float64), 6)
    print(f"{label} = {value.tolist()}")
