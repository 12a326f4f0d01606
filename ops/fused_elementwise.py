"""``_FusedElementwise``: a region of element-wise ops computed in one kernel call.

Made by the plan-time fusion of runtime/fusion.py, never by users. The attr
``region`` holds the ops it replaces and their structure (a
``runtime.fusion.Region``); ``replaces`` their names.

A call takes one of three paths:

- **fast**: every input has one shape, or holds one element (a scalar, also of
  shape [1] or [1, 1] when the others have at least as many dims): one compiled
  loop over the elements writes every output into a buffer from ``ctx.empty``
  (an output of one-element inputs only gets one element, computed once);
- **broadcast**: inputs of different shapes that broadcast together, where every
  output has the broadcast shape: one compiled loop nest over that shape reads
  the inputs through ``np.broadcast_to`` views;
- **per node**: anything else (shapes that do not broadcast, an output of a
  smaller shape than the others, outputs past the memory limit) runs the
  original nodes' own kernels one after the other, so results and errors are
  theirs, and an error names the node that raised it.
"""
from __future__ import annotations

import functools
import logging
import math
from typing import Callable, Protocol

import numpy as np
from numba.core.errors import NumbaError

from graphflow import errors
from graphflow.errors import OpError
from graphflow.kernel_context import KernelContext
from graphflow.lowering import Deferred, Lowering, dtype_literal, shape_literal
from graphflow.memory_limit import limit_outputs
from graphflow.registry import IntAttr, TypeAttr, register_op

from .codegen import note_used
from .tiering import COMPILE_AFTER_CALLS, compiled_for, tiered, types_key

FusedElementwise = register_op(
    "_FusedElementwise",
    inputs=["inputs: N * T"],
    outputs=["outputs: M * T"],
    attrs={"T": TypeAttr(), "N": IntAttr(minimum=1), "M": IntAttr(minimum=1)},
    doc="The element-wise ops of the attr 'region' computed in one pass; each input and "
        "output has the dtype of the value it stands for (T is the first output's).")

log = logging.getLogger("graphflow.fusion")


class FusedProgram(Protocol):
    """What the kernels here read of a fused region's computation: the interface the
    plan's fusion pass (runtime/fusion.py's ``Program``) provides in the attr ``region``
    (``region.program``; ``region.members``: the ops it stands for). Operand ``k <
    len(inputs)`` is input k, ``len(inputs) + i`` the value of node i."""

    inputs: tuple[str, ...]                              # input dtypes (numpy names)
    nodes: tuple[tuple[str, str, tuple[int, ...]], ...]  # (op type, dtype, operands)
    outputs: tuple[int, ...]                             # the nodes that escape
    supports: tuple[int, ...]                            # per operand: the inputs it reads

    def kernel(self, scalars: int = 0, rank: int = 0) -> Callable:
        """The compiled kernel (compiling it if needed)."""

    def loaded_kernel(self, scalars: int = 0, rank: int = 0) -> Callable | None:
        """The kernel if already made in this process, else None."""


class FusedRegion(Protocol):
    members: tuple                 # the Operations it stands for, in order
    program: FusedProgram


def region_of(ctx_or_spec) -> FusedRegion:
    """The attr ``region`` of a fused node, as this module reads it."""
    return ctx_or_spec.attrs["region"]


def _UNCOMPILED(*args):
    """Stands for a kernel numba could not compile."""
    raise NumbaError("not compiled")


@FusedElementwise.kernel("cpu")
def _fused_elementwise(ctx, inputs):
    run = ctx.cache.get("run")
    if run is None:
        run = ctx.cache.setdefault("run", _compiled(ctx))
    return run(inputs)


def _compiled(ctx):
    """The node's kernel for this plan: the fast and broadcast paths of
    :class:`_FusedRun`, falling back to the nodes one by one (:func:`_per_node`)."""
    program = region_of(ctx).program
    node_by_node = _per_node(ctx)

    def per_node(inputs):
        ctx.cache["per_node_runs"] = ctx.cache.get("per_node_runs", 0) + 1  # for tests, stats
        return node_by_node(inputs)
    itemsize = max(np.dtype(dtype).itemsize for _, dtype, _ in program.nodes)
    limit = ctx.allowed_bytes
    if limit < itemsize:
        return per_node  # a limit below one element: the nodes' own checks decide
    # past max_elements an unfused node may raise: let it
    return _FusedRun(ctx, program, limit // itemsize, per_node).run


class _FusedRun:
    """One fused node's compiled paths; everything that does not depend on the values
    is worked out here, once per plan."""

    __slots__ = ("ctx", "program", "max_elements", "per_node", "out_dtypes", "supports",
                 "support_inputs", "partial", "kernels", "ready", "empty", "asked")

    def __init__(self, ctx, program, max_elements: int, per_node):
        n_in = len(program.inputs)
        self.ctx = ctx
        self.program = program
        self.max_elements = max_elements
        self.per_node = per_node
        self.out_dtypes = tuple(np.dtype(program.nodes[i][1]) for i in program.outputs)
        # per output: the inputs it depends on, as bits and as indices
        self.supports = tuple(program.supports[n_in + i] for i in program.outputs)
        self.support_inputs = tuple(tuple(k for k in range(n_in) if s >> k & 1)
                                    for s in self.supports)
        full = (1 << n_in) - 1
        self.partial = tuple(ks for s, ks in zip(self.supports, self.support_inputs)
                             if s != full)
        self.kernels: dict[tuple[int, int], object] = {}
        self.ready: set[tuple] = set()  # (kernel, argument types) compiled
        self.asked: dict[tuple[int, int], int] = {}  # calls before a kernel was loaded
        self.empty = ctx.empty

    def run(self, inputs):
        """The fast path: inputs of one shape, or of one element each."""
        shape = None
        n = 0  # elements of the full shape (none when every input holds one)
        scalars = 0
        scalar_rank = 0
        bit = 1
        for x in inputs:
            if x.size == 1:
                scalars |= bit
                if x.ndim > scalar_rank:
                    scalar_rank = x.ndim
            elif shape is None:
                shape, n = x.shape, x.size
            elif x.shape != shape:
                return self.broadcast(inputs)
            bit <<= 1
        if n > self.max_elements:
            return self.per_node(inputs)
        if shape is not None and scalar_rank > len(shape):
            return self.broadcast(inputs)
        try:
            outs = self._outputs(inputs, shape, scalars)
        except MemoryError:  # the unfused node that fails says so, in its words
            return self.per_node(inputs)
        # 1-D values go as they are (numba reads any strides); others as flat views
        args = (n, *[x if x.ndim == 1 else x.reshape(-1) for x in inputs],
                *[o if o.ndim == 1 else o.reshape(-1) for o in outs])
        return self._call(scalars, 0, args, outs, inputs)

    def _outputs(self, inputs, shape, scalars: int) -> list:
        """The fast path's output buffers: an output of one-element inputs only has one
        element, of their rank."""
        empty = self.empty
        if not scalars:
            return [empty(shape, dtype) for dtype in self.out_dtypes]
        return [empty(shape, dtype) if s & ~scalars else
                empty((1,) * max(inputs[k].ndim for k in ks), dtype)
                for s, ks, dtype in zip(self.supports, self.support_inputs, self.out_dtypes)]

    def broadcast(self, inputs):
        """Inputs of different shapes: one loop over their broadcast shape, when every
        node's operands broadcast (then no node fails) and every output has that shape."""
        shapes = [x.shape for x in inputs]
        try:
            shape = np.broadcast_shapes(*shapes)
        except ValueError:  # the node whose operands do not broadcast says so
            return self.per_node(inputs)
        if not shape or math.prod(shape) > self.max_elements:
            return self.per_node(inputs)
        for ks in self.partial:
            if np.broadcast_shapes(*[shapes[k] for k in ks]) != shape:
                return self.per_node(inputs)  # an output of a smaller shape
        try:
            outs = [self.empty(shape, dtype) for dtype in self.out_dtypes]
        except MemoryError:
            return self.per_node(inputs)
        args = (shape, *[np.broadcast_to(x, shape) for x in inputs], *outs)
        return self._call(0, len(shape), args, outs, inputs)

    def _call(self, scalars: int, rank: int, args: tuple, outs: list, inputs):
        """``outs`` computed by the compiled kernel, or the nodes one by one while it
        compiles or where it cannot."""
        fn = self.kernel(scalars, rank, args)
        if fn is None:
            return self.per_node(inputs)
        try:
            fn(*args)
        except NumbaError as e:  # also when fn is _UNCOMPILED
            return self.uncompiled(scalars, rank, e, inputs)
        return outs

    def kernel(self, scalars: int, rank: int, args: tuple):
        """The compiled kernel, or None while it compiles in the background (tiered
        compilation: the caller then runs the nodes one by one, with the same results)."""
        key = (scalars, rank)
        fn = self.kernels.get(key)
        asked = 0
        if fn is None:
            fn = self.program.loaded_kernel(scalars, rank)
            if fn is None and tiered():  # not loaded before its compile is due
                asked = self.asked[key] = self.asked.get(key, 0) + 1
                if asked < COMPILE_AFTER_CALLS:
                    return None
            if fn is None:
                fn = self.program.kernel(scalars, rank)
            fn = self.kernels.setdefault(key, fn)
            _note(self.ctx, fn)
        if fn is _UNCOMPILED:
            return fn
        typed = (key, types_key(args))  # read-only or strided operands ask again
        if typed in self.ready:
            return fn
        if compiled_for(fn, args, asked_before=max(asked - 1, 0)):
            self.ready.add(typed)
            return fn
        return None

    def uncompiled(self, scalars: int, rank: int, err: Exception, inputs):
        """numba could not compile a kernel (a bug): say so once, run the nodes."""
        if self.kernels.get((scalars, rank)) is not _UNCOMPILED:
            self.kernels[(scalars, rank)] = _UNCOMPILED
            log.warning("fused kernel of %s failed to compile, running its nodes one by one: "
                        "%s", self.ctx.node_name, err)
        return self.per_node(inputs)


def _note(ctx, fn) -> None:
    """The plan lists the kernel its fused node runs (``plan.code``), naming the nodes."""
    note_used(ctx, fn, [op.name for op in region_of(ctx).members])


#: Fused regions of at most this many nodes are lowered into compiled segments; a bigger
#: one is a kernel worth its own call (and would make the segment's compile long).
MAX_LOWERED_NODES = 16


def _static_fast_path(spec):
    """``(shape, scalars, out dtypes)`` when the plan knows the shapes and every input
    has one full shape or one element, every output the full shape, within the memory
    limit: the fast path decided once. None otherwise."""
    program = region_of(spec).program
    n_in = len(program.inputs)
    shapes = [spec.shape(i) for i in range(n_in)]
    if any(s is None for s in shapes):
        return None
    ones = [math.prod(s) == 1 for s in shapes]
    full = [s for s, one in zip(shapes, ones) if not one]
    if not full or any(s != full[0] for s in full):
        return None
    shape = tuple(full[0])
    if max((len(s) for s, one in zip(shapes, ones) if one), default=0) > len(shape):
        return None
    scalars = sum(1 << k for k, one in enumerate(ones) if one)
    if any(not (program.supports[n_in + i] & ~scalars) for i in program.outputs):
        return None  # an output of one-element inputs only: the full kernel's shapes
    out_dtypes = tuple(np.dtype(program.nodes[i][1]) for i in program.outputs)
    if math.prod(shape) * max(d.itemsize for d in out_dtypes) > spec.ctx.allowed_bytes:
        return None
    return shape, scalars, out_dtypes


@FusedElementwise.prepare("cpu")
def _prepare_fused(spec):
    """Static shapes on the fast path: its decisions made once. Until the region's
    kernel is compiled (tiered compilation) the full kernel runs, which loads and
    compiles it; then one compiled call."""
    static = _static_fast_path(spec)
    if static is None:
        return None
    program = region_of(spec).program
    shape, scalars, out_dtypes = static
    n = math.prod(shape)
    flat = len(shape) == 1
    allocators = [spec.allocator(shape, dtype) for dtype in out_dtypes]
    compiled = []  # the kernel, once numba has it

    def lean(ctx, inputs):
        if not compiled:
            fn = program.loaded_kernel(scalars, 0)
            if fn is None or not fn.overloads:  # not compiled yet: the full kernel
                return _fused_elementwise(ctx, inputs)
            compiled.append(fn)
            _note(ctx, fn)
        outs = [new() for new in allocators]
        compiled[0](n, *[x if x.ndim == 1 else x.reshape(-1) for x in inputs],
                    *(outs if flat else [o.reshape(-1) for o in outs]))
        return outs
    return lean


def _lowered_shapes(spec):
    """``(shape, scalars, broadcast)`` of a region a compiled segment may hold: static
    shapes that broadcast to ``shape``, every output of that shape; ``scalars``: the
    one-element inputs (read once), ``broadcast``: the inputs of another shape, which the
    lowering expands first. A region of one-element inputs only is lowered inside a
    compiled loop (its elements then count as full). None otherwise."""
    program = region_of(spec).program
    n_in = len(program.inputs)
    shapes = [spec.shape(i) for i in range(n_in)]
    if any(s is None for s in shapes):
        return None
    try:
        shape = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None  # the full kernel says so, per node
    if any(spec.output_shape(m) != shape for m in range(len(spec.outputs))):
        return None
    ones = [math.prod(s) == 1 for s in shapes]
    if all(ones):
        return (shape, 0, ()) if spec.in_loop else None
    scalars = sum(1 << k for k, one in enumerate(ones) if one)
    if any(not (program.supports[n_in + i] & ~scalars) for i in program.outputs):
        return None  # an output of one-element inputs only: the full kernel's shapes
    broadcast = tuple(k for k, s in enumerate(shapes) if not ones[k] and tuple(s) != shape)
    return shape, scalars, broadcast


@FusedElementwise.lower("cpu")
def _lower_fused(spec):
    """The fast path's one call, for a small region with small outputs; an input that
    broadcasts is expanded first (small: the outputs are)."""
    program = region_of(spec).program
    static = _lowered_shapes(spec)
    if static is None or len(program.nodes) > MAX_LOWERED_NODES:
        return None
    shape, scalars, broadcast = static
    out_dtypes = tuple(np.dtype(program.nodes[i][1]) for i in program.outputs)
    if not all(spec.small_output(shape, d) for d in out_dtypes):
        return None
    outs = range(len(out_dtypes))
    flat_in = "".join(
        f", np.ascontiguousarray(np.broadcast_to({{i{k}}}, {shape_literal(shape)})).reshape(-1)"
        if k in broadcast else f", np.ascontiguousarray({{i{k}}}).reshape(-1)"
        for k in range(len(spec.inputs)))
    flat_out = "".join(f", {{o{m}}}.reshape(-1)" for m in outs)
    return Lowering(
        "".join(f"{{o{m}}} = np.empty({shape_literal(shape)}, {dtype_literal(d)})\n"
                for m, d in zip(outs, out_dtypes))
        + f"{{fused}}({math.prod(shape)}{flat_in}{flat_out})",
        {"fused": Deferred(functools.partial(program.kernel, scalars, 0))},
        weight=len(program.nodes))


def _per_node(ctx):
    """Run the region's original nodes one by one with their own kernels; an error
    names the node that raised it."""
    region = region_of(ctx)
    program = region.program
    steps = [(op, *member_kernel(op, ctx), operands)
             for op, (_, _, operands) in zip(region.members, program.nodes)]
    n_in = len(program.inputs)
    outputs = tuple(n_in + i for i in program.outputs)
    # intermediates dead after each node: their buffers go back to the plan's pool, so
    # a long region run node by node reuses a few buffers instead of touching new memory
    last_reader = {r: k for k, (_, _, operands) in enumerate(program.nodes) for r in operands}
    dead_after = [[] for _ in steps]
    for r, k in last_reader.items():
        if r >= n_in and r not in outputs:
            dead_after[k].append(r)
    release = _releaser(ctx)

    def run(inputs):
        values = list(inputs)
        for (op, fn, member_ctx, operands), dead in zip(steps, dead_after):
            try:
                values.append(fn(member_ctx, *[values[r] for r in operands]))
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as e:  # noqa: BLE001 - re-raised naming the node
                raise node_error(op, e) from e
            for r in dead:
                release(values, r)
        return [values[i] for i in outputs]
    return run


def member_kernel(op, ctx) -> tuple:
    """``(kernel, its context)`` of ``op``, one of the nodes a fused node stands for, run
    as it runs alone: its registered kernel on ``ctx``'s device, with a context of its own,
    held to the memory limit; a missing kernel is the executor's error, naming ``op``."""
    device_type = ctx.device.device_type if ctx.device is not None else "cpu"
    attrs = dict(op.attrs)
    found = op.op_def.find_kernel(device_type, attrs)
    if found is None:
        raise op.op_def.no_kernel_error(device_type, attrs, op.name).with_node(
            op.name, op.type, site=op.site)
    member_ctx = KernelContext(op.name, op.type, op.attrs, device=ctx.device, xp=ctx.xp,
                               config=ctx.config, memory_limit=ctx.memory_limit,
                               buffers=ctx.buffers)
    return limit_outputs(found.fn, op, member_ctx), member_ctx


def members_runner(ctx, members, externals, results):
    """``run(*values) -> [result values]``: the nodes ``members`` (in graph order) a
    fused node stands for, each run with its own kernel (:func:`member_kernel`), from
    the fused node's input values, which are the values of the Outputs ``externals``;
    it returns the values of the Outputs ``results``. An error names the member that
    raised it, as the unfused plan's would."""
    steps = [(op, *member_kernel(op, ctx)) for op in members]

    def run(*values):
        env = dict(zip(externals, values))
        for op, fn, member_ctx in steps:
            args = op.op_def.group_inputs([env[i] for i in op.inputs], op.arg_lengths)
            try:
                got = fn(member_ctx, *args)
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as e:  # noqa: BLE001 - re-raised naming the node
                raise node_error(op, e) from e
            env.update(zip(op.outputs, got if op.op_def.returns_list else (got,)))
        return [env[r] for r in results]
    return run


def run_members(ctx, *values) -> list:
    """The results of the nodes a rewrite's fused node stands for (its attrs 'members',
    'externals' and 'results'; :func:`members_runner`), run one by one on the fused
    node's input ``values``; the runner is made once per plan, at the first call that
    needs it."""
    run = ctx.cache.get("members")
    if run is None:
        run = ctx.cache.setdefault("members", members_runner(
            ctx, ctx.attrs["members"], ctx.attrs["externals"], ctx.attrs["results"]))
    return run(*values)


def _releaser(ctx):
    """``release(values, r)``: clear ``values[r]``, its buffer kept in the plan's pool
    when provably private (the executor's rule: ``BufferPool.releaser``)."""
    if ctx.buffers is None:
        def clear(values, r):
            values[r] = None
        return clear
    return ctx.buffers.releaser()


def node_error(op, err: BaseException) -> OpError:
    """``err`` as the executor reports an error of ``op``: an OpError naming the node."""
    return errors.node_error(err, op.name, op.type, op.site)


__all__ = ["FusedElementwise", "member_kernel", "members_runner", "node_error", "run_members"]
