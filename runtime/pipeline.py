"""The compile pipeline: the plan IR's passes, one tuple of functions ``PlanIR -> PlanIR``.

``optimizing_passes`` is the tuple a Session runs (``SessionConfig(optimize=True)``);
``compile_ir`` runs it on a signature's IR (runtime/plan_ir.py), after the
specialization pass for fed shapes when a plan is made for them
(runtime/specialize.py). ``graphflow inspect --after PASS`` shows the IR after any of
them, so it shows exactly what a Session runs; ``GRAPHFLOW_CHECK_PASSES=1`` checks
the IR's invariants after every pass.
"""
from __future__ import annotations

import os
from typing import Sequence

from graphflow.graph import Output

from . import control_flow, folding, fusion, gather_reduce, partition_stitch, simplify
from .plan_ir import (Pass, PlanIR, check_ir, describe, graph_fingerprint,  # noqa: F401
                      initial_ir, substitute)
from .specialize import NotSpecializable, specialize


def run_pipeline(ir: PlanIR, passes: Sequence[Pass]) -> PlanIR:
    """``ir`` after each pass in turn; with ``GRAPHFLOW_CHECK_PASSES=1`` (the tests') the
    IR's invariants are checked after every pass (:func:`check_ir`)."""
    for _, ir in stages(ir, passes):
        pass
    return ir


def stages(ir: PlanIR, passes: Sequence[Pass]):
    """``(pass name, IR after it)`` for each pass: what ``graphflow inspect --after``
    shows."""
    checking = os.environ.get("GRAPHFLOW_CHECK_PASSES") == "1"
    graph_before = graph_fingerprint(ir) if checking else None
    for p in passes:
        ir = p(ir)
        if checking:
            check_ir(ir, p.__name__, graph_before)
        yield p.__name__, ir


def until_stable(*passes: Pass, rounds: int = 4) -> Pass:
    """A pass that runs ``passes`` in turn until none changes the IR (at most ``rounds``)."""
    def run(ir: PlanIR) -> PlanIR:
        for _ in range(rounds):
            before = ir
            ir = run_pipeline(ir, passes)  # each checked, when checking
            if ir.subst == before.subst:
                break
        return ir
    run.__name__ = "until_stable(" + ", ".join(p.__name__ for p in passes) + ")"
    return run


# -- the passes ----------------------------------------------------------------------------
def fold_pass(devices, config) -> Pass:
    """Constant folding (runtime/folding.py), shape-only ops included."""
    def fold_constants(ir: PlanIR) -> PlanIR:
        roots: list[Output] = []
        found = folding.fold_constants(list(ir.ops), ir.fed, dict(ir.subst), devices, config, roots)
        return substitute(ir, found, roots)
    return fold_constants


def simplify_pass(ir: PlanIR) -> PlanIR:
    """Arithmetic and shape simplification (runtime/simplify.py)."""
    return substitute(ir, simplify.simplify(list(ir.ops), ir.fed, dict(ir.subst)))


def share_loops_pass(ir: PlanIR) -> PlanIR:
    """A While and its recorded twin (its gradient's) as one loop (runtime/control_flow.py)."""
    return substitute(ir, control_flow.share_recorded_loops(list(ir.ops), ir.fed, dict(ir.subst)))


def partition_stitch_pass(ir: PlanIR) -> PlanIR:
    """Partition -> element-wise -> stitch as one pass (runtime/partition_stitch.py)."""
    return substitute(ir, partition_stitch.fuse_partition_stitch(list(ir.ops), ir.fed))


def gather_reduce_pass(ir: PlanIR) -> PlanIR:
    """Gather -> scale -> segment-sum as one node (runtime/gather_reduce.py)."""
    return substitute(ir, gather_reduce.fuse_gather_reduce(list(ir.ops), ir.fed, dict(ir.subst),
                                                           ir.targets))


def fuse_pass(ir: PlanIR) -> PlanIR:
    """Element-wise regions as fused nodes (runtime/fusion.py)."""
    return substitute(ir, fusion.fuse_elementwise(list(ir.ops), ir.fed, dict(ir.subst), ir.targets))


def optimizing_passes(devices, config) -> tuple[Pass, ...]:
    """The compile pipeline of ``SessionConfig(optimize=True)``: folding and
    simplification until neither finds more, then the pattern rewrites, then fusion
    (the gather-reduce rewrite and fusion in CPU-only sessions: on a GPU their nodes
    would run their members one by one)."""
    fold = fold_pass(devices, config)
    if any(d.device_type != "cpu" for d in devices):
        return (share_loops_pass, until_stable(fold, simplify_pass), partition_stitch_pass)
    return (share_loops_pass, until_stable(fold, simplify_pass), partition_stitch_pass,
            gather_reduce_pass, fuse_pass)


def specialize_pass(feed_shapes: Sequence[tuple]) -> Pass:
    """The IR re-inferred for the feeds' shapes (runtime/specialize.py); a
    NotSpecializable error where a shape rule refuses them."""
    def specialize_for_shapes(ir: PlanIR) -> PlanIR:
        specialized = specialize(ir, feed_shapes)
        if specialized is None:
            raise NotSpecializable(feed_shapes)
        return specialized
    return specialize_for_shapes


def compile_ir(fetches: Sequence, feeds: Sequence[Output], devices, config,
               feed_shapes: Sequence[tuple] | None = None) -> PlanIR:
    """The IR a Session runs for a signature: the graph as written, specialized for
    ``feed_shapes`` when given, then (with ``config.optimize``) every optimizing pass."""
    passes = optimizing_passes(devices, config) if config.optimize else ()
    if feed_shapes is not None:
        passes = (specialize_pass(feed_shapes), *passes)
    return run_pipeline(initial_ir(fetches, feeds), passes)
