"""Level 1 of placement: which task of the cluster runs each op.

Rules, in order (ops in topological order, data edges only):

1. An op whose device names a task (``/job:worker/task:1``; a task without a job
   is of job ``worker``, a job without a task is its task 0) runs there.
2. An op that reads or writes a variable runs on the variable's task (its
   ``VarHandleOp``'s), as TensorFlow colocates resource ops with their resource;
   an explicit request for another task is an InvalidArgumentError.
3. Otherwise an op runs on the task of its first input whose producer has one.
4. Ops left over have no request and no placed input (constants, a fed value's
   first reader, a variable built without a device): each goes with its first
   consumer that has a task (a constant lives where it is read), else on
   ``/job:worker/task:0``.

A variable has one home per graph, whatever the run: its VarHandleOp's task is
decided once, by these rules applied to the whole graph (``variable_homes``; a
handle added later to a growing graph gets its home when a run first needs it),
and every run then places the handle there (``homes``), as TensorFlow places a
graph once. Placed per run, a variable built without a device followed each
run's first consumer: its initializer ran on task 0 and a read under task 1 found
it uninitialized there.

A fed value has no producer here: the client sends it to every task that reads it.
``/job:localhost`` (the client's process in TensorFlow) asks for no task.
"""
from __future__ import annotations

from typing import Collection, Mapping, NamedTuple, Sequence

from graphflow.device_spec import parse_device
from graphflow.errors import InvalidArgumentError
from graphflow.graph import Operation, Output


class Task(NamedTuple):
    """A task of the cluster: ``/job:worker/replica:0/task:1``."""

    job: str
    index: int

    def __str__(self) -> str:
        return f"/job:{self.job}/replica:0/task:{self.index}"


#: Where ops with no request and nothing to follow run.
DEFAULT_TASK = Task("worker", 0)


def requested_task(op: Operation) -> Task | None:
    """The task ``op``'s device names, or None; only replica 0 exists."""
    spec = parse_device(op.device)
    if not spec.has_task:
        return None
    if spec.replica not in (None, 0):
        raise InvalidArgumentError(
            f"Cannot assign a device for operation {op.name}: it requests {op.device}, but a "
            f"graphflow cluster has one replica (replica:0)", op.name, op.type, site=op.site)
    return Task(spec.job or "worker", spec.task or 0)


def variable_handles(op: Operation) -> list[Operation]:
    """The VarHandleOps whose variables ``op`` reads or writes."""
    return [i.op for i in op.inputs if i.op.type == "VarHandleOp"]


def assign_tasks(ops: Sequence[Operation], fed: Collection[Output] = (),
                 homes: Mapping[Operation, Task] | None = None,
                 strict: bool = True) -> dict[Operation, Task]:
    """A task for every op of ``ops`` (topological order); see the module's rules.
    ``homes``: tasks decided already (variables' handles). ``strict`` False: no error
    for conflicting requests (they are the run's to report), for ``variable_homes``."""
    fed = set(fed)
    members = set(ops)
    task: dict[Operation, Task] = {}
    requested = {op: _requested(op, strict) for op in ops}
    for op in ops:
        if homes and op in homes:
            task[op] = homes[op]

    def producers(op: Operation) -> list[Operation]:
        return [i.op for i in op.inputs if i not in fed and i.op in members]

    for op in ops:  # rules 1-3
        if op in task:
            continue
        chosen = requested[op] or next(
            (task[h] for h in variable_handles(op) if h in task and h not in fed), None)
        if chosen is None:
            chosen = next((task[p] for p in producers(op) if p in task), None)
        if chosen is not None:
            task[op] = chosen
    consumers: dict[Operation, list[Operation]] = {op: [] for op in ops}
    for op in ops:
        for p in producers(op):
            consumers[p].append(op)
    for op in reversed(ops):  # rule 4: consumers come later, so they are decided first
        if op not in task:
            task[op] = next((task[c] for c in consumers[op] if c in task), DEFAULT_TASK)
    if not strict:
        return task
    for op in ops:  # rule 2 wins over the others
        handles = [h for h in variable_handles(op) if h in task]
        homes = {task[h] for h in handles}
        if len(homes) > 1:
            raise InvalidArgumentError(
                f"Cannot assign a device for operation {op.name}: its variables live on "
                f"different tasks ({', '.join(f'{h.name} on {task[h]}' for h in handles)}); "
                f"ops on several variables need them on one task", op.name, op.type,
                site=op.site)
        if homes:
            home = homes.pop()
            if requested[op] is not None and requested[op] != home:
                raise InvalidArgumentError(
                    f"Cannot assign a device for operation {op.name}: it requests {op.device} "
                    f"but its variable {handles[0].name} lives on {home}; ops on a variable run "
                    f"on the variable's task", op.name, op.type, site=op.site)
            task[op] = home
    return task


def _requested(op: Operation, strict: bool) -> Task | None:
    if strict:
        return requested_task(op)
    try:
        return requested_task(op)
    except InvalidArgumentError:
        return None


def variable_homes(ops: Sequence[Operation],
                   known: Mapping[Operation, Task]) -> dict[Operation, Task]:
    """The task of every VarHandleOp of ``ops`` (a whole graph, topological order):
    those of ``known`` keep theirs; another one goes where it is requested, else where
    the first of its ops that requests a task is (TensorFlow's colocation group takes
    a member's device), else where the module's rules over all of ``ops`` put it."""
    placed = assign_tasks(ops, (), known, strict=False)
    requests: dict[Operation, Task] = {}
    for op in ops:
        asked = _requested(op, False)
        if asked is not None:
            for h in variable_handles(op):
                requests.setdefault(h, asked)
    return {op: known.get(op) or _requested(op, False) or requests.get(op) or placed[op]
            for op in ops if op.type == "VarHandleOp"}
