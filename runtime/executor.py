"""A Plan: one (fetches, feeds) signature, compiled once and run many times.

The Session caches one Plan per signature. Building it runs the passes (prune ->
fold constants -> rewrite/fuse -> require_feeds -> place -> locate -> liveness ->
schedule; see ``runtime/passes.py``): everything that does not depend on values is
decided there. What is left for a run is the kernels: a serial run calls one generated
straight-line function (one line per step, slots released after their last
reader, dead buffers kept in the plan's pool for the next ``ctx.empty``); a
parallel run hands the steps to the thread pool as their inputs become ready.

A parallel run's scheduler is ``runtime/parallel.py``.
"""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Sequence

import numpy as np

from graphflow.errors import node_error
from graphflow.graph import Graph, Output

from . import passes
from .device import Device
from .functions import FunctionRunner
from .memory import MIN_POOLED_BYTES, BufferPool, ReturnedBuffers, releaser
from .parallel import ParallelRun
from .pipeline import compile_ir
from .plan_ir import PlanIR
from .blas_threads import bound_blas_threads, run_blas_threads
from .branches import blas_threads as branch_blas_threads, branch_groups, group_runner
from ..ops.background import in_background, pace
from ..ops.codegen import GeneratedCode, load_python, used_code
from ..ops.tiering import standing_in, tiered
from .run_modes import RunModes
from .specialize import MAX_SIGHTINGS, MAX_SPECIALIZED, NotSpecializable, needs_specializing
from .segments import build_segments
from .steps import CopyStep, KernelStep, Step
from .tracing import RunMetadata, traced

#: A node whose output has at least this many elements counts as heavy: only
#: heavy independent nodes are worth a thread hop.
HEAVY_ELEMENTS = 1 << 17

log = logging.getLogger("graphflow.runtime")


class ForwardCounter:
    """Counts input buffers that kernels wrote into instead of copying."""

    def __init__(self):
        self._lock = threading.Lock()
        self.value = 0

    def __next__(self):
        with self._lock:
            self.value += 1
        return self.value


class Plan:
    """A compiled (fetches, feeds) signature.

    ``feed_shapes`` makes a shape-specialized plan (runtime/specialize.py); a general
    plan whose feeds leave shapes unknown makes those itself, per the shapes it is
    fed (:meth:`run`)."""

    def __init__(self, graph: Graph, fetches: Sequence, feeds: Sequence[Output],
                 devices: Sequence[Device], config, forward_counter: ForwardCounter,
                 resources=None, ir: PlanIR | None = None):
        self.graph = graph
        self.feeds = list(feeds)
        self.config = config
        self.host = next(d for d in devices if d.device_type == "cpu")
        self._build_args = (graph, list(fetches), self.feeds, devices, config, forward_counter,
                            resources)
        if ir is None:
            ir = compile_ir(fetches, feeds, devices, config)
        self.ir = ir
        self.substitutions = dict(ir.replaced)
        live = self._lay_out(ir, devices, config, forward_counter, resources)
        pace()  # built on the background thread: the caller's share of the GIL
        self._prepare_runs(ir, live, config)
        # shape specialization (runtime/specialize.py): signature -> plan, or None for
        # "run the general plan"; how often each unspecialized signature was seen
        self._specializes = config.optimize and needs_specializing(self.feeds)
        self._specialized: dict[tuple, Plan | None] = {}
        self._building: dict[tuple, Future] = {}  # signature -> its plan, built meanwhile
        self._sightings: dict[tuple, int] = {}
        self._specialize_lock = threading.Lock()

    def _lay_out(self, ir: PlanIR, devices, config, forward_counter, resources):
        """Placement, slots, constants and liveness, and one step per node with its kernel
        context (and so its kernel, built once); the liveness, for the runs."""
        ops = list(ir.ops)
        self.placement = dict(ir.placement)
        layout = passes.locate(ops, self.placement, list(ir.feeds), list(ir.fetches), devices)
        self.preloaded: dict = {}
        if config.optimize:  # optimize=False runs (and traces) every node as written
            layout, self.preloaded = passes.preload_constants(layout)
        live = passes.liveness(layout)
        self.buffers = BufferPool()
        self.returned = ReturnedBuffers(self.buffers)  # fetched arrays the caller may drop
        # the branches and bodies its control-flow steps run (runtime/functions.py)
        self.functions = FunctionRunner(devices, config, forward_counter, resources)
        passes.attach_contexts(layout, live, config, forward_counter, self.buffers, resources,
                               self.functions)
        self.steps: list[Step] = layout.steps
        self.num_slots = layout.num_slots
        self.feed_slots = layout.feed_slots
        self.junk_slot = layout.junk_slot
        self.fetch_slots = layout.fetch_slots
        self.fetch_devices = layout.fetch_devices
        self.pinned = live.pinned
        self.use_counts = live.use_counts
        return live

    def _prepare_runs(self, ir: PlanIR, live, config) -> None:
        """How a call runs: serial (one generated function) or parallel (the steps on the
        pool as their inputs are ready, measured against serial), the BLAS threads."""
        known = {slot: f.shape.num_elements() for slot, f in zip(self.feed_slots, ir.feeds)}
        known.update((slot, np.size(v)) for slot, v in self.preloaded.items())
        self.heavy = passes.heavy_steps(self.steps, HEAVY_ELEMENTS, known)
        self.parallel = config.inter_op_threads > 1 and passes.worth_parallel(
            self.steps, self.heavy)
        self._initial = [None] * self.num_slots
        for slot, value in self.preloaded.items():
            self._initial[slot] = value
        # one release for every kind of run: a value's buffer goes to the pool when private
        self._release = release = releaser(self.buffers)
        # a parallel run releases slots itself, when their readers are done
        for s, slots in zip(self.steps, live.releases):
            s.run = s.compile(() if self.parallel else slots, release)
        self.runs = [s.run for s in self.steps]
        self.fetch_guards = _fetch_guards(self)
        # the step table's last pass: runs of lowered steps as compiled segments, by their
        # first step (runtime/segments.py); a serial run calls each as one function
        self.segment_table = build_segments(self.steps, self.preloaded, self.fetch_slots,
                                            self.junk_slot)
        self.segments = [segment for segment, _ in self.segment_table.values()]
        # a serial run's independent branches (an MoE's experts), side by side (branches.py)
        in_segments = {k for _, found in self.segment_table.values() for k in found.members}
        self.branch_groups = branch_groups(self.steps, in_segments, config)
        self.serial_code: GeneratedCode | None = None  # the serial run's source, once made
        self._releases = live.releases
        self._serial = None if self.parallel else _straight_line(self, live.releases)
        self._serial_lock = threading.Lock()
        # a plan that could run in parallel measures which mode is faster (run_modes.py)
        self.modes: RunModes | None = RunModes() if self.parallel else None
        # BLAS threads per run, for a plan with a BLAS kernel: every core while one kernel
        # runs at a time (blas_threads.py); a plan without one leaves the pool alone
        uses_blas = any(s.op is not None and s.op.op_def.uses_blas for s in self.steps)
        self._blas_threads = {mode: run_blas_threads(config, mode == "parallel") if uses_blas
                              else None for mode in ("serial", "parallel")}
        if self.branch_groups and uses_blas:  # branches side by side: each its share
            self._blas_threads["serial"] = branch_blas_threads(self.branch_groups,
                                                               self._blas_threads["serial"])
        if self.parallel:
            sched = passes.schedule(self.steps)
            self.waiting, self.dependents = sched.waiting, sched.dependents

    # -- running --------------------------------------------------------------------
    def run(self, feed_values: Sequence, pool=None, metadata: RunMetadata | None = None) -> list:
        """Run the plan once; ``metadata``, if given, receives one NodeEvent per step."""
        plan = self._for_shapes(feed_values) if self._specializes else None
        plan = self if plan is None else plan
        plan.buffers.start_run()
        plan.returned.take_back()  # what the caller dropped since: the pool's again
        if plan is self and self._building:  # standing in for a plan being built
            with standing_in():
                fetched = self._stand_in(feed_values, metadata)
        else:
            fetched = plan._run(feed_values, pool, metadata)
            if plan._serial is None and plan._specializes and tiered():
                plan._serial_function()  # the stand-ins' (11 ms for the MoE step), not in call 2
        plan.returned.hold(fetched)
        return fetched

    def _stand_in(self, feed_values: Sequence, metadata: RunMetadata | None) -> list:
        """A call while the specialized plan is built: serial, on the calling thread (pool
        threads would share the GIL three ways with the build), releasing each value
        after its last reader as a serial run does."""
        if metadata is not None or not self.parallel:
            return self._run(feed_values, None, metadata)
        self._bound_blas("serial")
        return self._serial_function()(feed_values)

    def _for_shapes(self, feed_values: Sequence) -> "Plan | None":
        """The plan specialized for the feeds' shapes, when there is (or should now be) one."""
        key = tuple(getattr(v, "shape", None) for v in feed_values)
        try:
            return self._specialized[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable shape: not a plain array
            return None
        with self._specialize_lock:
            if key in self._specialized:
                return self._specialized[key]
            building = self._building.get(key)
            if building is not None:
                if not building.done():
                    return None  # the general plan runs until it is built
                del self._building[key]
                plan = self._specialized[key] = building.result()
                return plan
            if len(self._specialized) + len(self._building) >= MAX_SPECIALIZED or None in key:
                return None
            sightings = self._sightings
            seen = sightings.pop(key, 0) + 1
            if seen < 2:
                if len(sightings) >= MAX_SIGHTINGS:  # forget the signature seen longest ago
                    del sightings[next(iter(sightings))]
                sightings[key] = seen
                return None
            if tiered():  # built on the background thread: its passes never stall a call
                self._building[key] = in_background(self._specialize_quietly, key)
                return None
            plan = self._specialized[key] = self._specialize(key)
            return plan

    def _specialize(self, key: tuple) -> "Plan | None":
        """A plan for feed shapes ``key``; None where a shape rule refuses them."""
        graph, fetches, feeds, devices, config, counter, resources = self._build_args
        try:
            ir = compile_ir(fetches, feeds, devices, config, feed_shapes=key)
        except NotSpecializable:
            return None
        plan = Plan(graph, fetches, feeds, devices, config, counter, resources, ir=ir)
        plan._specializes = False
        return plan

    def _specialize_quietly(self, key: tuple) -> "Plan | None":
        """:meth:`_specialize` in the background: what goes wrong there, the general plan
        meets (and reports, in its words) in the calls."""
        try:
            return self._specialize(key)
        except Exception as e:  # noqa: BLE001 - the general plan runs instead
            log.debug("specializing a plan for shapes %s failed: %r", key, e)
            return None

    @property
    def code(self) -> list:
        """The generated code this plan runs so far, each a ``GeneratedCode`` (ops/codegen.py;
        ``str()`` prints it, naming the nodes it came from): the serial run, its compiled
        segments' numba functions and callers, its compiled loops
        (runtime/compiled_loops.py), and the generated kernels its steps loaded (fused
        regions, partitioned selects). One function its nodes share is listed once."""
        found = [] if self.serial_code is None else [self.serial_code]
        for segment in self.segments:
            found += segment.code
        for loop in self.functions.compiled_loops():
            found += loop.code
        for step in self.steps:
            found += used_code(getattr(step, "ctx", None))
        merged: dict[tuple[str, str], GeneratedCode] = {}
        for code in found:
            key = (code.filename, code.source)
            seen = merged.get(key)
            merged[key] = code if seen is None else \
                seen.for_nodes(dict.fromkeys((*seen.nodes, *code.nodes)))
        return list(merged.values())

    @property
    def specialized(self) -> dict:
        """The shape-specialized plans made so far: feed shapes -> Plan (None: general)."""
        return dict(self._specialized)

    def _run(self, feed_values: Sequence, pool=None, metadata: RunMetadata | None = None) -> list:
        if metadata is None:
            if not self.parallel:
                if self._blas_threads["serial"] is not None:
                    bound_blas_threads(self._blas_threads["serial"])
                return self._serial(feed_values)
            if pool is not None:
                return self._run_measured(feed_values, pool)
        self._bound_blas("parallel" if self.parallel and pool is not None else "serial")
        return self._run_steps(feed_values, pool, metadata)

    def _bound_blas(self, mode: str) -> None:
        threads = self._blas_threads[mode]
        if threads is not None:
            bound_blas_threads(threads)

    def _run_measured(self, feed_values: Sequence, pool) -> list:
        """A parallel plan's call in the mode its measurement chose, or is measuring."""
        serial = self._serial
        mode, timed = self.modes.next_call(serial is not None and _segments_ready(self))
        if mode == "serial":
            run = serial or self._serial_function()
        else:
            def run(values):
                return self._run_steps(values, pool)
        self._bound_blas(mode)
        if not timed:
            return run(feed_values)
        start = time.perf_counter()
        result = run(feed_values)
        self.modes.record(mode, time.perf_counter() - start)
        return result

    def _serial_function(self) -> Callable:
        """The straight-line function of a parallel plan, made when first wanted."""
        with self._serial_lock:
            if self._serial is None:
                self._serial = _straight_line(self, self._releases)
            return self._serial

    def _run_steps(self, feed_values: Sequence, pool=None,
                   metadata: RunMetadata | None = None) -> list:
        """The steps one by one, or on the pool for a parallel plan, traced if asked."""
        slots: list[Any] = list(self._initial)
        for slot, value in zip(self.feed_slots, feed_values):
            slots[slot] = value
        runs = self.runs if metadata is None else [traced(s, metadata) for s in self.steps]
        if self.parallel and pool is not None:
            self._run_parallel(slots, pool, runs)
        else:
            k = 0
            try:
                with np.errstate(all="ignore"):  # inf and NaN results come silently, as in TF
                    for k, run in enumerate(runs):
                        run(slots)
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as e:  # noqa: BLE001 - re-raised with node context
                raise _node_error(self.steps[k], e) from e
        fetched = [self._fetch(slots, s, d) for s, d in zip(self.fetch_slots, self.fetch_devices)]
        repeated, pairs = self.fetch_guards
        for j in repeated:
            fetched[j] = fetched[j].copy()
        for i, j in pairs:
            if np.may_share_memory(fetched[i], fetched[j]):
                fetched[j] = fetched[j].copy()
        return fetched

    def _fetch(self, slots, slot, device):
        return None if slot is None else self._fetch_value(slots[slot], device)

    def _fetch_value(self, value, device):
        """A fetched value as the caller gets it: a numpy array of its own."""
        if device.device_type != "cpu":
            value = device.to_host(value)
        elif not isinstance(value, np.ndarray):
            value = self.host.to_host(value)  # a scalar, or a cupy feed fetched back
        if not value.flags.writeable:
            value = value.copy()  # a constant or a feed: the caller gets its own array
        return value

    def _run_parallel(self, slots: list, pool, runs: list[Callable]) -> None:
        """Run the steps as their inputs become ready (runtime/parallel.py)."""
        ParallelRun(self, slots, pool, runs, HEAVY_ELEMENTS, _node_error).run()


def _node_error(step: Step, err: BaseException) -> BaseException:
    """``err`` as an OpError that names the step's node and where it was created."""
    if isinstance(step, CopyStep):
        return node_error(err, step.label, "_Copy")
    return node_error(err, step.op.name, step.op.type, step.op.site)


def _straight_line(plan: Plan, releases: Sequence[Sequence[int]]) -> Callable:
    """One generated function ``run(feed_values) -> fetched values`` for a serial plan:
    a line per kernel call and per released slot, no per-step loop or closure call
    (a chain of tiny kernels then costs the kernels). An error is re-raised naming its
    step. Its source is kept on the plan (``plan.code``) and in linecache (ops/codegen.py),
    each call line naming its node, so a traceback shows both."""
    env: dict[str, Any] = {"errstate": np.errstate, "ndarray": np.ndarray, "steps": plan.steps,
                           "node_error": _node_error, "release": plan._release,
                           "fetch_value": plan._fetch_value, "initial": plan._initial,
                           "host": plan.host}
    body = _step_lines(plan, releases, env) or ["pass"]  # "pass": every fetch is fed
    feeds = "".join(f"    s[{slot}] = feed_values[{j}]\n" for j, slot in enumerate(plan.feed_slots))
    start = "initial.copy()" if plan.preloaded else f"[None] * {plan.num_slots}"
    source = (f"def run(feed_values):\n    s = {start}\n{feeds}"
              "    k = 0\n    try:\n        with errstate(all='ignore'):\n"
              + "".join(f"            {line}\n" for line in body)
              + "    except (KeyboardInterrupt, SystemExit):\n        raise\n"
              "    except Exception as e:  # noqa: BLE001\n"
              "        raise node_error(steps[k], e) from e\n"
              + "".join(f"    {line}\n" for line in _fetch_lines(plan, env)))
    run, plan.serial_code = load_python(source, "run", env, "plan")
    return run


def _step_lines(plan: Plan, releases: Sequence[Sequence[int]], env: dict) -> list[str]:
    """The run's body: per step its call and the slots it releases; a compiled segment
    as one call, its steps one by one when it declines (not compiled yet, or an error:
    theirs, in their words)."""
    steps = plan.steps
    # left in their slots (they die with the run): values too small for the buffer pool,
    # and the feeds and preloaded constants, which the pool never takes
    unreleased = _small_slots(steps) | set(plan.feed_slots) | set(plan.preloaded)
    segments = plan.segment_table
    in_segment: set[int] = set()
    body: list[str] = []
    groups = {g.first: g for g in plan.branch_groups}

    def call_lines(k: int) -> list[str]:
        call = _inline_call(steps[k], k, env)
        if call is None:
            env[f"r{k}"] = steps[k].compile((), None)
            call = f"r{k}(s)"
        return [f"k = {k}", f"{call}  # {_label(steps[k])}"]

    def release_lines(ks) -> list[str]:
        return [f"release(s, {slot})" for k in ks for slot in releases[k]
                if slot not in unreleased]

    for k in range(len(steps)):
        if k in in_segment:
            continue
        if k in groups:
            group = groups[k]
            in_segment.update(group.steps)
            env[f"group{k}"] = group_runner(group, steps, _node_error)
            body += [f"k = {k}", f"group{k}(s)  # {len(group.branches)} branches side by side: "
                     f"{_label(steps[group.steps[0]])} .. {_label(steps[group.steps[-1]])}"]
            body += release_lines(group.steps)
            continue
        if k not in segments:
            body += call_lines(k) + release_lines([k])
            continue
        segment, found = segments[k]  # its hoisted steps, then one call
        in_segment.update(found.members)
        env[f"seg{k}"] = segment.run
        for j in found.before:
            body += call_lines(j)
        names = segment.names
        body += [f"k = {k}", f"if not seg{k}(s):  # compiled segment of {names[0]} .. {names[-1]}"]
        body += [f"    {line}" for j, _ in found.lowered for line in call_lines(j)]
        body += release_lines(found.members)
    return body


def _label(step: Step) -> str:
    """The node a step runs, as a generated line's comment names it."""
    op = getattr(step, "op", None)
    label = f"{op.name} ({op.type})" if op is not None else getattr(step, "label", "")
    return " ".join(str(label).splitlines())


def _fetch_lines(plan: Plan, env: dict) -> list[str]:
    """The lines that return the fetched values: a CPU array the caller may keep is
    passed as it is, else fetched (copied to the host, or copied when read-only); no
    two fetches share memory the caller can write."""
    fetched = []
    for j, (slot, device) in enumerate(zip(plan.fetch_slots, plan.fetch_devices)):
        if slot is None:
            fetched.append("None")
        elif device.device_type == "cpu":
            fetched.append(f"(v{j} if type(v{j} := s[{slot}]) is ndarray and v{j}.flags.writeable "
                           f"else fetch_value(v{j}, host))")
        else:
            env[f"dev{j}"] = device
            fetched.append(f"fetch_value(s[{slot}], dev{j})")
    repeated, pairs = plan.fetch_guards
    if not (repeated or pairs):
        return [f"return [{', '.join(fetched)}]"]
    env["may_share"] = np.may_share_memory
    lines = [f"r = [{', '.join(fetched)}]"]
    lines += [f"r[{j}] = r[{j}].copy()" for j in repeated]
    for i, j in pairs:
        lines += [f"if may_share(r[{i}], r[{j}]):", f"    r[{j}] = r[{j}].copy()"]
    return lines + ["return r"]


def _fetch_guards(plan: Plan) -> tuple[list[int], list[tuple[int, int]]]:
    """What keeps two fetched arrays from sharing memory the caller can write: the
    fetches of a slot fetched before (copied on every call: ``[y, y * 1]`` once
    simplified), and the pairs of fetches of which one may be a view, of the other or of
    what the other views (a Reshape's output), which a call copies when they overlap."""
    maybe_view = {slot for step in plan.steps if not step.fresh for slot in step.outputs}
    maybe_view.update(plan.feed_slots)
    first: dict[int, int] = {}
    repeated, arrays = [], []
    for j, slot in enumerate(plan.fetch_slots):
        if slot is None:
            continue
        if slot in first:
            repeated.append(j)
        else:
            first[slot] = j
            arrays.append((j, slot))
    pairs = [(i, j) for n, (i, a) in enumerate(arrays) for j, b in arrays[n + 1:]
             if a in maybe_view or b in maybe_view]
    return repeated, pairs


def _segments_ready(plan: Plan) -> bool:
    """Whether the serial function's compiled segments are compiled (or given up on): its
    calls are then worth timing."""
    return all(seg.ready or seg.broken for seg in plan.segments)


def _small_slots(steps: Sequence[Step]) -> set[int]:
    """Slots whose values are statically smaller than the buffer pool takes."""
    small = set()
    for step in steps:
        if isinstance(step, KernelStep):
            for slot, o in zip(step.outputs, step.op.outputs):
                n = o.shape.num_elements()
                if n is not None and o.dtype.name != "string" \
                        and n * np.dtype(o.dtype.as_numpy_dtype).itemsize < MIN_POOLED_BYTES:
                    small.add(slot)
    return small


def _inline_call(step: Step, k: int, env: dict) -> str | None:
    """``s[out] = f(ctx, s[a], [s[b], s[c]], ...)`` for a kernel step (``s[o1], s[o2], =``
    for several outputs, a bare call for none); a feed's copy to the host passes a numpy
    array through without a call."""
    if isinstance(step, CopyStep):
        if step.source is not None or step.device.device_type != "cpu":
            return None
        env[f"m{k}"] = step.mover()
        (src,), (dst,) = step.inputs, step.outputs
        return f"s[{dst}] = v if type(v := s[{src}]) is ndarray else m{k}(v)"
    if not isinstance(step, KernelStep):
        return None
    op = step.op
    listed = op.op_def.returns_list
    env[f"f{k}"] = step.kernel()
    env[f"c{k}"] = step.ctx
    args = "".join(
        f", [{', '.join(f's[{j}]' for j in a)}]" if isinstance(a, list) else f", s[{a}]"
        for a in step.inputs)
    if not step.outputs:  # an update, a NoOp: what it returns is not kept
        return f"f{k}(c{k}{args})"
    if listed:  # a sequence of outputs: unpacked (a wrong count is a ValueError, named)
        targets = "".join(f"s[{o}], " for o in step.outputs)
        return f"{targets}= f{k}(c{k}{args})"
    return f"s[{step.outputs[0]}] = f{k}(c{k}{args})"
