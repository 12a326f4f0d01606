"""Per-run tracing: what each node did, and its Chrome trace (Perfetto,
chrome://tracing). Only runs with ``RunOptions(trace=True)`` pay for it."""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunOptions:
    """Options for one ``Session.run``: ``trace=True`` fills the RunMetadata;
    ``timeout_in_ms`` > 0 is the run's deadline (TensorFlow's), overriding
    ``SessionConfig.operation_timeout_in_ms``: a cluster run past it is rolled back and
    raises DeadlineExceededError (a local run's kernels are not interrupted)."""

    trace: bool = False
    timeout_in_ms: int = 0

    def __post_init__(self):
        if not isinstance(self.trace, (bool, np.bool_)):
            raise TypeError(f"RunOptions.trace must be a bool, got {type(self.trace).__name__} "
                            f"{self.trace!r}")
        object.__setattr__(self, "trace", bool(self.trace))
        object.__setattr__(self, "timeout_in_ms", checked_timeout(self.timeout_in_ms,
                                                                  "RunOptions.timeout_in_ms"))


def checked_timeout(value: Any, what: str) -> int:
    """A timeout in ms: an int >= 0 (0: none)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"{what} must be >= 0 (0: no deadline), got {value}")
    return int(value)


@dataclass
class NodeEvent:
    """One node (or device copy) of a traced run."""

    node: str
    op_type: str
    device: str
    thread: str
    start_us: float
    end_us: float
    output_shapes: list
    bytes_allocated: int
    forwarded: bool
    replaces: tuple[str, ...] = ()  # for a fused step: the graph's nodes it computed
    worker: str = ""  # a distributed run: the dask worker that ran it (device is then the
    #                   full name, /job:worker/replica:0/task:1/device:CPU:0)


@dataclass
class RunMetadata:
    """Filled by a traced run: one NodeEvent per step, in completion order. It holds one
    run: passed to several, it is replaced by each (as TensorFlow's), emptied by an
    untraced one."""

    events: list[NodeEvent] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def _add(self, event: NodeEvent) -> None:
        with self._lock:
            self.events.append(event)

    def _hold(self, events: list[NodeEvent]) -> None:
        """Replace what this RunMetadata holds by the events of one run."""
        with self._lock:
            self.events = events

    def chrome_trace(self) -> dict[str, Any]:
        """The run in Chrome's Trace Event Format: one process per device (per worker
        in a distributed run, its task's name first), one track per device and thread,
        one complete ("X") event per node."""
        def process(e: NodeEvent) -> str:
            return f"{e.device.split('/device:')[0]} ({e.worker})" if e.worker else e.device

        def track(e: NodeEvent) -> str:
            return f"{e.device.rsplit('/', 1)[-1]} {e.thread}" if e.worker else e.thread

        processes = sorted({process(e) for e in self.events})
        threads = sorted({(process(e), track(e)) for e in self.events})
        pid = {d: i for i, d in enumerate(processes)}
        tid = {t: i for i, t in enumerate(threads)}
        trace = [{"ph": "M", "name": "process_name", "pid": pid[d], "tid": 0, "args": {"name": d}}
                 for d in processes]
        trace += [{"ph": "M", "name": "thread_name", "pid": pid[d], "tid": tid[(d, t)],
                   "args": {"name": t}} for d, t in threads]
        origin = min((e.start_us for e in self.events), default=0.0)
        for e in self.events:
            p, t = process(e), track(e)
            trace.append({
                "ph": "X", "name": e.node, "cat": e.op_type, "pid": pid[p],
                "tid": tid[(p, t)], "ts": e.start_us - origin,
                "dur": max(e.end_us - e.start_us, 0.001),
                "args": _args(e)})
        return {"traceEvents": trace, "displayTimeUnit": "ms"}

    def save_chrome_trace(self, path: str | os.PathLike, warn_empty: bool = True) -> None:
        """Write the trace; a warning when it holds no event (a run whose every node was
        folded into constants at plan time runs no kernel, or a run not traced)."""
        if not self.events and warn_empty:
            _log.warning("The trace written to %s is empty: the run ran no kernel (every node "
                         "was folded into a constant when the plan was built), or it was not "
                         "traced (RunOptions(trace=True))", os.fspath(path))
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f)


def _args(e: NodeEvent) -> dict[str, Any]:
    args = {k: v for k, v in asdict(e).items()
            if k in ("op_type", "output_shapes", "bytes_allocated", "forwarded")}
    if e.worker:
        args["device"], args["worker"] = e.device, e.worker
    if e.replaces:
        args["replaces"] = list(e.replaces)
    return args


def traced(step, metadata: RunMetadata):
    """``step.run`` wrapped so that it records a NodeEvent into ``metadata``."""
    run = step.run
    op = step.op
    name = op.name if op is not None else step.label
    op_type = op.type if op is not None else "_Copy"
    device = step.device.name
    inputs = step.flat_inputs
    outputs = step.outputs
    allocates = op is None or op.op_def.fresh_outputs
    replaces = tuple(op.attrs.get("replaces", ())) if op is not None else ()  # a fused node

    synchronize = step.device.synchronize  # GPU kernels run asynchronously: time them whole

    def run_traced(slots):
        before = [slots[i] for i in inputs]
        start = time.perf_counter_ns()
        run(slots)
        synchronize()
        end = time.perf_counter_ns()
        values = [slots[o] for o in outputs]
        if op is None and values[0] is before[0]:
            return  # a feed already on this device: passed through, nothing ran
        forwarded = any(v is b for v in values for b in before if hasattr(v, "shape"))
        metadata._add(NodeEvent(
            name, op_type, device, threading.current_thread().name, start / 1e3, end / 1e3,
            [list(getattr(v, "shape", ())) for v in values],
            sum(int(getattr(v, "nbytes", 0)) for v in values
                if allocates and not any(v is b for b in before)), forwarded, replaces))
    return run_traced
