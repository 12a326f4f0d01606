"""A stage as a graph of its own: what a worker compiles and runs for one stage.

The worker holds the whole graph (its JSON GraphDef); a stage keeps its own nodes,
with a Placeholder in place of every value it receives (from another stage or a
client feed), no control edge to a node outside it (the dask task's dependencies
order those), and each device reduced to its local part (type and index: the task
is this worker). The local Plan then compiles it as any graph.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from graphflow.device_spec import parse_device
from graphflow.graph import Graph, Operation, Output
from graphflow.serialization import import_graph_def


@dataclass(frozen=True)
class StageSpec:
    """What a worker needs to build and run one stage; sent with every run of it (it is
    small: names), compiled once per worker and ``key``."""

    key: str                                   # content hash of the fields below
    graph_key: str                             # the graph's id on the workers
    graph_version: int                         # it needs at least this many ops
    task: str                                  # "/job:worker/replica:0/task:1"
    nodes: tuple[str, ...]                     # the stage's ops, topological order
    inputs: tuple[tuple[str, int, str, tuple | None], ...]  # (node, output, dtype, shape)
    sources: tuple[tuple[int, int], ...]       # per input: (argument, value position | -1)
    outputs: tuple[tuple[str, int], ...]       # values it returns, in order
    targets: tuple[str, ...]                   # ops it runs whose outputs nobody reads
    writes: bool                               # may change a variable: run under a journal
    uses_variables: bool                       # holds variables: check the worker's incarnation
    locks: tuple[str, ...] = ()                # variables whose write locks it takes first


def stage_graph(graph_def: dict, spec: StageSpec) -> tuple[Graph, list[Output], list]:
    """Build ``spec``'s stage from the whole graph: (graph, input placeholders' outputs,
    fetches = the stage's outputs then its targets)."""
    keep = set(spec.nodes)
    nodes = {n["name"]: n for n in graph_def["nodes"] if n["name"] in keep}
    prefix = _unused_prefix("Recv", (n["name"] for n in graph_def["nodes"]))
    recv = {f"{node}:{index}": f"{prefix}/{k}" for k, (node, index, _, _) in enumerate(spec.inputs)}
    placeholders = [{"name": recv[f"{node}:{index}"], "op": "Placeholder", "inputs": [],
                     "control_inputs": [], "device": "",
                     "attrs": {"dtype": {"type": dtype}, "shape": {"shape": _shape(shape)}}}
                    for node, index, dtype, shape in spec.inputs]
    body = []
    for name in spec.nodes:
        n = dict(nodes[name])
        n["inputs"] = [f"{recv[ref]}:0" if ref in recv else ref for ref in n["inputs"]]
        n["control_inputs"] = [c for c in n["control_inputs"] if c in keep]
        n["device"] = str(parse_device(n.get("device", "")).local())
        body.append(n)
    imported = import_graph_def({**graph_def, "nodes": placeholders + body})
    feeds = [imported[p["name"]].outputs[0] for p in placeholders]
    fetches: list = [imported[node].outputs[index] for node, index in spec.outputs]
    fetches += [imported[name] for name in spec.targets]
    graph = next(iter(imported.values())).graph if imported else Graph()
    return graph, feeds, fetches


def _shape(shape: tuple | None):
    return None if shape is None else list(shape)


def _unused_prefix(base: str, names) -> str:
    """``base``, or ``base_1``..., that no node name equals or starts a scope with."""
    taken = set()
    for name in names:
        taken.add(name.split("/", 1)[0])
    prefix, k = base, 0
    while prefix in taken:
        k += 1
        prefix = f"{base}_{k}"
    return prefix


def sink_ops(ops: Sequence[Operation], outputs: Sequence[Output]) -> list[Operation]:
    """The ops of a stage that nothing in it reads (data or control) and whose outputs
    are not among ``outputs``: the stage's targets, which the local plan must run
    for their effects."""
    members = set(ops)
    read: set[Operation] = {o.op for o in outputs}
    for op in ops:
        read.update(i.op for i in op.inputs if i.op in members)
        read.update(c for c in op.control_inputs if c in members)
    return [op for op in ops if op not in read]
