"""The compile pipeline: the plan IR's passes, one tuple of functions ``PlanIR -> PlanIR``.

``plan_passes`` is the tuple a Session runs: the specialization pass for fed shapes when
a plan is made for them (runtime/specialize.py), the optimizing passes
(``SessionConfig(optimize=True)``), the feeds' check and the placement; ``compile_ir``
runs it on a signature's IR (runtime/plan_ir.py). ``graphflow inspect --after PASS``
shows the IR after any of them, so it shows exactly what a Session runs;
``GRAPHFLOW_CHECK_PASSES=1`` checks the IR's invariants after every pass.
"""
from __future__ import annotations

import os
from dataclasses import replace
from typing import Sequence

from graphflow.graph import Output

from ..ops.background import pace
from . import (control_flow, folding, fusion, gather_partition, gather_reduce,
               partition_stitch, product_sum, simplify, stitch_reduce)
from .passes import require_feeds
from .placer import place
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
        pace()  # on the background thread, the caller's share of the GIL
        yield p.__name__, ir


def until_stable(*passes: Pass, rounds: int = 4) -> Pass:
    """A pass that runs ``passes`` in turn until none changes the IR (at most ``rounds``)."""
    def run(ir: PlanIR) -> PlanIR:
        for _ in range(rounds):
            before = ir
            ir = run_pipeline(ir, passes)  # each checked, when checking
            if ir is before:
                break
        return ir
    run.__name__ = "until_stable(" + ", ".join(p.__name__ for p in passes) + ")"
    return run


# -- the passes ----------------------------------------------------------------------------
def fold_pass(devices, config) -> Pass:
    """Constant folding (runtime/folding.py), shape-only ops included."""
    def fold_constants(ir: PlanIR) -> PlanIR:
        roots: list[Output] = []
        found = folding.fold_constants(list(ir.ops), ir.fed, devices, config, roots)
        return substitute(ir, found, roots)
    return fold_constants


def simplify_pass(ir: PlanIR) -> PlanIR:
    """Arithmetic and shape simplification (runtime/simplify.py)."""
    return substitute(ir, simplify.simplify(list(ir.ops), ir.fed))


def share_loops_pass(ir: PlanIR) -> PlanIR:
    """A While and its recorded twin (its gradient's) as one loop (runtime/control_flow.py)."""
    return substitute(ir, control_flow.share_recorded_loops(list(ir.ops), ir.fed))


def partition_stitch_pass(ir: PlanIR) -> PlanIR:
    """Partition -> element-wise -> stitch as one pass (runtime/partition_stitch.py)."""
    return substitute(ir, partition_stitch.fuse_partition_stitch(list(ir.ops), ir.fed))


def gather_reduce_pass(ir: PlanIR) -> PlanIR:
    """Gather -> scale -> segment-sum as one node (runtime/gather_reduce.py)."""
    return substitute(ir, gather_reduce.fuse_gather_reduce(list(ir.ops), ir.fed, ir.targets))


def product_sum_pass(ir: PlanIR) -> PlanIR:
    """A product summed over its last axis as one node (runtime/product_sum.py)."""
    return substitute(ir, product_sum.fuse_product_sums(list(ir.ops), ir.fed, ir.targets))


def routing_pass(ir: PlanIR) -> PlanIR:
    """An MoE's routing without its [n, F] tensors, in one substitution: the gather
    partitioned as one node that writes the rows once (runtime/gather_partition.py),
    the stitch -> scale -> segment-sum and its gradient's row gathers as nodes that
    read the experts' rows where they lie (runtime/stitch_reduce.py)."""
    ops = list(ir.ops)
    found, gone = gather_partition.fuse_gather_partitions(ops, ir.fed, ir.fetches)
    combined, merged_gone = stitch_reduce.fuse_stitch_reduce(ops, ir.fed, ir.fetches)
    return _substitute_covering(ir, {**found, **combined}, gone | merged_gone)


def _substitute_covering(ir: PlanIR, found: dict, gone: set) -> PlanIR:
    """``ir`` with ``found``'s substitutes, where the fused nodes also raise the errors
    of the values ``gone`` (no longer computed): plan roots among them, kept for their
    errors only, are roots no more."""
    if gone.intersection(ir.roots):
        ir = replace(ir, roots=tuple(r for r in ir.roots if r not in gone))
    return substitute(ir, found)


def fuse_pass(ir: PlanIR) -> PlanIR:
    """Element-wise regions as fused nodes (runtime/fusion.py)."""
    return substitute(ir, fusion.fuse_elementwise(list(ir.ops), ir.fed, ir.targets))


def optimizing_passes(devices, config) -> tuple[Pass, ...]:
    """The compile pipeline of ``SessionConfig(optimize=True)``: folding and
    simplification until neither finds more, then the pattern rewrites, then fusion
    (the gather-reduce, product-sum and routing rewrites and fusion in CPU-only
    sessions: on a GPU their nodes would run their members one by one)."""
    fold = fold_pass(devices, config)
    if any(d.device_type != "cpu" for d in devices):
        return (share_loops_pass, until_stable(fold, simplify_pass), partition_stitch_pass)
    return (share_loops_pass, until_stable(fold, simplify_pass), partition_stitch_pass,
            gather_reduce_pass, product_sum_pass, routing_pass, fuse_pass)


def specialize_pass(feed_shapes: Sequence[tuple]) -> Pass:
    """The IR re-inferred for the feeds' shapes (runtime/specialize.py); a
    NotSpecializable error where a shape rule refuses them."""
    def specialize_for_shapes(ir: PlanIR) -> PlanIR:
        specialized = specialize(ir, feed_shapes)
        if specialized is None:
            raise NotSpecializable(feed_shapes)
        return specialized
    return specialize_for_shapes


def require_feeds_pass(ir: PlanIR) -> PlanIR:
    """TensorFlow's error for a Placeholder the plan needs but is not fed (after the
    rewrites: a Placeholder whose static shape was all a Shape needed is not needed)."""
    require_feeds(ir.ops, ir.fed)
    return ir


def place_pass(devices, config) -> Pass:
    """The device of every op (runtime/placer.py): the last pass, the IR's
    ``placement``."""
    def place_ops(ir: PlanIR) -> PlanIR:
        chosen = place(ir.ops, devices, soft_placement=config.allow_soft_placement,
                       log_placement=config.log_device_placement)
        return replace(ir, placement=chosen)
    place_ops.__name__ = "place_pass"
    return place_ops


def plan_passes(devices, config, feed_shapes: Sequence[tuple] | None = None) -> tuple[Pass, ...]:
    """Every pass a Session's plan runs, in order: the specialization for ``feed_shapes``
    when given, the optimizing passes (with ``config.optimize``), the feeds' check, the
    placement."""
    chosen = optimizing_passes(devices, config) if config.optimize else ()
    if feed_shapes is not None:
        chosen = (specialize_pass(feed_shapes), *chosen)
    return (*chosen, require_feeds_pass, place_pass(devices, config))


def compile_ir(fetches: Sequence, feeds: Sequence[Output], devices, config,
               feed_shapes: Sequence[tuple] | None = None) -> PlanIR:
    """The IR a Session runs for a signature: the graph as written, through every pass
    of :func:`plan_passes`."""
    return run_pipeline(initial_ir(fetches, feeds), plan_passes(devices, config, feed_shapes))
