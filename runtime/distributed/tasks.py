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

A fed value has no producer here: the client sends it to every task that reads it.
``/job:localhost`` (the client's process in TensorFlow) asks for no task.
"""
from __future__ import annotations

from typing import Collection, NamedTuple, Sequence

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


def assign_tasks(ops: Sequence[Operation], fed: Collection[Output] = ()) -> dict[Operation, Task]:
    """A task for every op of ``ops`` (topological order); see the module's rules."""
    fed = set(fed)
    members = set(ops)
    task: dict[Operation, Task] = {}
    requested = {op: requested_task(op) for op in ops}

    def producers(op: Operation) -> list[Operation]:
        return [i.op for i in op.inputs if i not in fed and i.op in members]

    for op in ops:  # rules 1-3
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
