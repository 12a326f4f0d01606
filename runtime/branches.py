"""Independent branches of a serial run, side by side.

A serial run calls one kernel at a time, BLAS's pool on every core. An MoE step's
experts are K independent chains of small products ([1024, 64] x [64, 128]), which
gain little from a second BLAS thread (1.3x on 2 cores) and much from running beside
another chain, each on its own core: eight experts' forward and backward products took
5.3-6.1 ms two chains at a time, 7.5-7.7 ms one product at a time on both cores.

A *branch group* starts where a step's outputs fan out: each output of a step with
several (a partition's parts) starts a branch, and a later step joins the branch of
everything it reads inside the group. The group ends before the first step that would
join two branches (the stitch of the experts' outputs), or that is not pure (a
variable's update, a random op, a control input inside the group, a compiled
segment, a copy from or onto a device).
Steps of the group that read no branch run first, on the calling thread; then the
branches run on the calling thread and the intra-op pool, each branch's steps in
order. Only groups with two or more branches holding a MatMul are made, and only
where they hold at least half of the plan's products: a run with groups holds BLAS's
pool to the cores shared out among the branches (:func:`blas_threads`).

The steps are pure, so running them in another order changes nothing but which error
comes first: every branch runs until its first error, and the error of the step that
comes first in the serial order is raised, naming its node, as the serial run would.
Buffers go back to the pool after the whole group, never while a branch may read them.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Sequence

from ..ops import intra_op
from .steps import CopyStep, KernelStep, Step

#: Steps a branch group may hold at most (a plan's code stays readable).
MAX_GROUP_STEPS = 400


@dataclass(frozen=True)
class BranchGroup:
    """A fan-out's independent branches: step indices in serial order."""
    first: int                      # the group's first step (after the fanning step)
    steps: tuple[int, ...]          # every step of the group, in serial order
    common: tuple[int, ...]         # steps reading no branch: run first
    branches: tuple[tuple[int, ...], ...]


def branch_groups(steps: Sequence[Step], excluded: set[int], config) -> list[BranchGroup]:
    """The branch groups of a serial plan's ``steps`` (``excluded``: steps of compiled
    segments); none with one core or where the config fixes a kernel's threads."""
    if intra_op.cores() < 2 or config.intra_op_threads_given:
        return []
    step_of_op = {s.op: k for k, s in enumerate(steps) if isinstance(s, KernelStep)}
    groups: list[BranchGroup] = []
    k = 0
    while k < len(steps):
        group = _group_after(k, steps, excluded, step_of_op)
        if group is None:
            k += 1
            continue
        groups.append(group)
        k = group.steps[-1] + 1
    grouped = sum(_is_product(steps[j]) for g in groups for b in g.branches for j in b)
    if 2 * grouped < sum(_is_product(s) for s in steps):
        return []  # most products run alone: they keep every core's BLAS thread
    return groups


def side_by_side(group: BranchGroup) -> int:
    """The threads a group's branches run on."""
    return min(intra_op.cores(), len(group.branches))


def blas_threads(groups: Sequence[BranchGroup], serial_threads: int) -> int:
    """BLAS's pool for a serial run with branch groups: the cores shared out among the
    branches that run at once (the pool's size is the process's, and setting it costs
    more than a product of an MoE's expert: it is set once per run, not per group)."""
    return max(1, serial_threads // max(side_by_side(g) for g in groups))


def _group_after(fork: int, steps, excluded, step_of_op) -> BranchGroup | None:
    """The branch group that step ``fork``'s outputs start, if it is worth one."""
    outputs = steps[fork].outputs
    if len(outputs) < 2 or fork in excluded:
        return None
    branch_of: dict[int, int] = {o: b for b, o in enumerate(outputs)}  # slot -> branch
    members: list[list[int]] = [[] for _ in outputs]
    common: list[int] = []
    taken: list[int] = []
    for k in range(fork + 1, min(len(steps), fork + 1 + MAX_GROUP_STEPS)):
        s = steps[k]
        if k in excluded or not _pure(s) or isinstance(s, KernelStep) and any(
                step_of_op.get(c, -1) > fork for c in s.op.control_inputs):
            break  # (a control input made before the fork has run)
        reads = {branch_of[i] for i in s.flat_inputs if i in branch_of}
        if len(reads) > 1:
            break
        taken.append(k)
        if reads:
            (b,) = reads
            members[b].append(k)
            branch_of.update((o, b) for o in s.outputs)
        else:
            common.append(k)
    busy = [tuple(m) for m in members if any(_is_product(steps[j]) for j in m)]
    if len(busy) < 2:
        return None
    rest = [tuple(m) for m in members if m and not any(_is_product(steps[j]) for j in m)]
    return BranchGroup(taken[0], tuple(taken), tuple(common), tuple(busy + rest))


def _pure(step: Step) -> bool:
    """A step that reads and writes nothing but its slots: a CPU kernel of a stateless
    op (a GPU's kernels stay on one thread's stream), or a copy onto this process's CPU
    (a feed's, which passes a host array through)."""
    if isinstance(step, CopyStep):
        return step.device.device_type == "cpu" and (
            step.source is None or step.source.device_type == "cpu")
    return isinstance(step, KernelStep) and step.device.device_type == "cpu" \
        and not step.op.op_def.stateful and step.op.type != "NoOp"


def _is_product(step: Step) -> bool:
    return isinstance(step, KernelStep) and step.op.type in ("MatMul", "BatchMatMulV2")


def group_runner(group: BranchGroup, steps: Sequence[Step], node_error: Callable) -> Callable:
    """``run(slots)``: the group's common steps, then its branches side by side (see the
    module docstring); the first error in serial order re-raised naming its node."""
    runs = {k: steps[k].compile((), None) for k in group.steps}
    threads = side_by_side(group)

    def run_steps(order, slots, errors) -> None:
        for k in order:
            try:
                runs[k](slots)
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as e:  # noqa: BLE001 - the first in serial order is raised
                errors.append((k, e))
                return

    def run(slots) -> None:
        errors: list = []
        run_steps(group.common, slots, errors)
        # the branches run even after a common step failed: one of theirs may come
        # before it in serial order (a step reading the failed one's value fails after it)
        _side_by_side(group.branches, slots, errors, run_steps, threads)
        if errors:
            k, e = min(errors, key=lambda ke: ke[0])
            raise node_error(steps[k], e) from e
    return run


def _side_by_side(branches, slots, errors, run_steps, threads: int) -> None:
    """Each branch on the calling thread or one of ``threads - 1`` pool threads, taken
    in turn."""
    if threads < 2 or threading.current_thread().name.startswith(intra_op.POOL_PREFIX):
        for branch in branches:
            run_steps(branch, slots, errors)
        return
    lock = threading.Lock()
    queue = list(reversed(branches))

    def drain() -> None:
        while True:
            with lock:
                if not queue:
                    return
                branch = queue.pop()
            run_steps(branch, slots, errors)
    helpers = [intra_op.shared_pool().submit(drain) for _ in range(threads - 1)]
    drain()
    for h in helpers:
        h.result()


__all__ = ["BranchGroup", "blas_threads", "branch_groups", "group_runner"]
