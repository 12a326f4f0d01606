"""Cutting a placed graph into stages: what each dask task of a run computes.

TensorFlow cuts a graph at every edge between tasks and inserts a Send/Recv pair.
Here an op's stage is ``(task, hop)``, where ``hop`` is the number of cross-task
edges on the longest path (data or control) into it. Along an edge ``p -> q`` the
hop never decreases and grows when the task changes, so every edge stays inside
a stage or goes to a stage of a larger hop, or of the same hop and task: the stage
graph is acyclic, and a stage needs nothing from a stage that needs it. Each
stage is then one dask task that starts with all its inputs at hand and never
waits (a blocking Recv would deadlock a worker with one thread).

A pure function of the graph, placement and signature; no dask here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Mapping, Sequence

import numpy as np

from graphflow.graph import Operation, Output

from .tasks import Task

#: Values a consumer does not need travel with the ones it does unless they are known
#: (static shapes) to be bigger than this: a pick is one more dask task on the path,
#: a scheduler round trip of ~5-10 ms (its batched sends wait 2 + 5 ms), the time
#: the loopback moves ~10 MB worker to worker (measured: 100 MB in 0.05-0.08 s).
#: A value whose size is known only at run time (a batch) is taken as small.
PICK_BYTES = 8 << 20


@dataclass(frozen=True)
class Stage:
    """The ops of one task between two hops, run as one dask task."""

    index: int                    # position in the run order (upstream stages come first)
    task: Task
    hop: int
    ops: tuple[Operation, ...]    # topological order
    inputs: tuple[Output, ...]    # values it reads from other stages or from feeds
    outputs: tuple[Output, ...]   # values other stages or the client read from it
    upstream: tuple[int, ...]     # stages it waits for (data or control), by index

    @property
    def writes(self) -> bool:
        """Whether it may change a variable (any op on a variable but the reads)."""
        return any(not op.op_def.reads_variable and any(i.op.type == "VarHandleOp" for i in op.inputs)
                   for op in self.ops)

    @property
    def written(self) -> tuple[str, ...]:
        """The names of the variables it may change, sorted (their write locks)."""
        return tuple(sorted({variable_name(i.op) for op in self.ops if not op.op_def.reads_variable
                             for i in op.inputs if i.op.type == "VarHandleOp"}))

    @property
    def uses_variables(self) -> bool:
        return any(op.type == "VarHandleOp" for op in self.ops)




def variable_name(handle: Operation) -> str:
    """The name a VarHandleOp's variable has in a worker's store."""
    return handle.attrs.get("shared_name") or handle.name


def hop_levels(ops: Sequence[Operation], task_of: Mapping[Operation, Task],
               fed: Collection[Output] = ()) -> dict[Operation, int]:
    """The number of cross-task edges on the longest path into each op; an op that
    depends on nothing (a constant, a reader of feeds only) takes the latest level its
    readers allow, so that it joins a reader's stage instead of making one."""
    fed = set(fed)
    hop: dict[Operation, int] = {}
    readers: dict[Operation, list[Operation]] = {}
    for op in ops:
        level = 0
        for p in _dependencies(op, fed, hop):
            level = max(level, hop[p] + (task_of[p] != task_of[op]))
            readers.setdefault(p, []).append(op)
        hop[op] = level
    for op in reversed(ops):
        if op in readers and not _dependencies(op, fed, hop):
            hop[op] = min(hop[r] - (task_of[r] != task_of[op]) for r in readers[op])
    return hop


def _dependencies(op: Operation, fed: set, known: Mapping) -> list[Operation]:
    """Producers of ``op``'s non-fed inputs and its control inputs, among ``known``."""
    deps = [i.op for i in op.inputs if i not in fed and i.op in known]
    deps += [c for c in op.control_inputs if c in known]
    return deps


def cut_stages(ops: Sequence[Operation], task_of: Mapping[Operation, Task],
               fed: Collection[Output] = (), fetches: Sequence = ()) -> list[Stage]:
    """The stages of ``ops`` (topological order) in an order where each comes after
    every stage it depends on: by hop, then task."""
    fed = set(fed)
    hop = hop_levels(ops, task_of, fed)
    keys = sorted({(hop[op], task_of[op]) for op in ops})
    index = {key: k for k, key in enumerate(keys)}
    stage_of = {op: index[(hop[op], task_of[op])] for op in ops}
    members: list[list[Operation]] = [[] for _ in keys]
    for op in ops:
        members[stage_of[op]].append(op)

    inputs: list[dict[Output, None]] = [{} for _ in keys]
    outputs: list[dict[Output, None]] = [{} for _ in keys]
    upstream: list[set[int]] = [set() for _ in keys]
    for op in ops:
        k = stage_of[op]
        for i in op.inputs:
            if i in fed:
                inputs[k][i] = None
            elif stage_of[i.op] != k:
                inputs[k][i] = None
                outputs[stage_of[i.op]][i] = None
                upstream[k].add(stage_of[i.op])
        upstream[k].update(stage_of[c] for c in op.control_inputs
                           if c in stage_of and stage_of[c] != k)
    for f in fetches:
        if isinstance(f, Output) and f not in fed and f.op in stage_of:
            outputs[stage_of[f.op]][f] = None
    return [Stage(k, key[1], key[0], tuple(members[k]), tuple(inputs[k]), tuple(outputs[k]),
                  tuple(sorted(upstream[k]))) for k, key in enumerate(keys)]


@dataclass(frozen=True)
class Route:
    """How the values a consumer reads from one stage reach it: the stage's whole
    result (``picks`` None), or a pick of some of its outputs, made by a small task
    on the producer's worker so that only those values travel."""

    producer: int
    consumer: Task | None          # None: the client (fetches)
    needs: tuple[Output, ...]      # in the producer's output order
    picks: tuple[int, ...] | None  # positions in the producer's outputs; None: all of them


def routes(stages: Sequence[Stage], fetches: Sequence) -> list[Route]:
    """One route per (producer stage, consumer task or client). A consumer takes the
    producer's whole result (no extra task) when it is on the producer's task (nothing
    moves), needs all of it, or the rest is not known to exceed PICK_BYTES."""
    wanted: dict[tuple[int, Task | None], dict[Output, None]] = {}
    producer_of = {o: s.index for s in stages for o in s.outputs}
    for s in stages:
        for i in s.inputs:
            if i in producer_of:
                wanted.setdefault((producer_of[i], s.task), {})[i] = None
        for k in s.upstream:  # a control dependency: an empty pick when it crosses tasks
            wanted.setdefault((k, s.task), {})
    for f in fetches:
        if isinstance(f, Output) and f in producer_of:
            wanted.setdefault((producer_of[f], None), {})[f] = None
    found = []
    for (k, consumer), needs in sorted(wanted.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        producer = stages[k]
        ordered = tuple(o for o in producer.outputs if o in needs)
        extra = [o for o in producer.outputs if o not in needs]
        whole = consumer == producer.task or not extra or sum(
            _static_bytes(o) for o in extra) <= PICK_BYTES
        picks = None if whole else tuple(producer.outputs.index(o) for o in ordered)
        found.append(Route(k, consumer, ordered, picks))
    return found


def _static_bytes(output: Output) -> int:
    """The size of a value when its shape is known at build time, else 0 (see
    PICK_BYTES)."""
    n = output.shape.num_elements() if output.shape.rank is not None else None
    if n is None:
        return 0
    return n * (8 if output.dtype.is_string else np.dtype(output.dtype.as_numpy_dtype).itemsize)
