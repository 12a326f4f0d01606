"""Session: runs fetches of a graph, with feeds, on the available devices."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from graphflow.builder import as_operand
from graphflow.dtypes import as_dtype
from graphflow.errors import FailedPreconditionError, InvalidArgumentError
from graphflow.graph import Graph, Operation, Output

from .device import Device
from .devices import list_devices
from .executor import ForwardCounter, Plan
from .resources import ResourceStore
from .tracing import RunMetadata, RunOptions


@dataclass(frozen=True)
class SessionConfig:
    """How a Session runs graphs.

    inter_op_threads: threads for independent nodes (default: the CPU count;
        1 runs every node on the calling thread).
    allow_soft_placement: fall back to a device with a kernel when the
        requested one has none (else placement is an error).
    log_device_placement: print each node's device when a plan is compiled.
    deterministic: make GPU scatters bitwise reproducible (and equal to the CPU).
    memory_limit_bytes: an output larger than this fails with ResourceExhaustedError
        before anything is allocated (default: the machine's physical memory).
    optimize: apply plan-time rewrites (runtime/optimizer.py); results are the same.
    """

    inter_op_threads: int | None = None
    allow_soft_placement: bool = True
    log_device_placement: bool = False
    deterministic: bool = False
    memory_limit_bytes: int | None = None
    optimize: bool = True

    def __post_init__(self):
        if self.inter_op_threads is None:
            object.__setattr__(self, "inter_op_threads", os.cpu_count() or 1)
        if self.memory_limit_bytes is None:
            object.__setattr__(self, "memory_limit_bytes", _physical_memory())
        if self.inter_op_threads < 1:
            raise InvalidArgumentError(f"inter_op_threads must be >= 1, got {self.inter_op_threads}")
        if self.memory_limit_bytes is not None and self.memory_limit_bytes < 0:
            raise InvalidArgumentError(
                f"memory_limit_bytes must be >= 0, got {self.memory_limit_bytes}")


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return None


@dataclass
class SessionStats:
    """Counters a Session keeps across runs."""

    runs: int = 0
    plans_compiled: int = 0
    forwarded_buffers: ForwardCounter = field(default_factory=ForwardCounter)

    @property
    def forwarded(self) -> int:
        return self.forwarded_buffers.value


class _Fetches:
    """Flattens a nested structure of fetches and rebuilds results in its shape."""

    def __init__(self, graph: Graph, fetches: Any):
        self.flat: list[Output | Operation] = []
        self._structure = self._flatten(graph, fetches)

    def _flatten(self, graph: Graph, f: Any):
        if isinstance(f, dict):
            return ("dict", type(f), [(k, self._flatten(graph, v)) for k, v in f.items()])
        if isinstance(f, tuple) and hasattr(f, "_fields"):
            return ("namedtuple", type(f), [self._flatten(graph, v) for v in f])
        if isinstance(f, (list, tuple)):
            return ("seq", type(f), [self._flatten(graph, v) for v in f])
        self.flat.append(_as_fetch(graph, f))
        return ("leaf", len(self.flat) - 1)

    def build(self, values: list) -> Any:
        return self._build(self._structure, values)

    def _build(self, node, values):
        kind = node[0]
        if kind == "leaf":
            return values[node[1]]
        if kind == "dict":
            return node[1]((k, self._build(v, values)) for k, v in node[2])
        if kind == "namedtuple":
            return node[1](*(self._build(v, values) for v in node[2]))
        return node[1](self._build(v, values) for v in node[2])


def _as_fetch(graph: Graph, f: Any) -> Output | Operation:
    if isinstance(f, str):
        f = graph.output(f) if ":" in f else graph.operation(f)
    elif isinstance(f, Operation):
        pass
    else:
        out = as_operand(f)
        if out is None:
            op = getattr(f, "op", None)
            if isinstance(op, Operation):
                f = op
            else:
                raise InvalidArgumentError(
                    f"Fetch argument {f!r} has invalid type {type(f).__name__}: it must be an "
                    f"Output, an Operation, a name, or a nested list/tuple/dict of those")
        else:
            f = out
    if (f.graph if isinstance(f, Operation) else f.op.graph) is not graph:
        raise InvalidArgumentError(f"Fetch {f!r} is not an element of this session's graph")
    return f


def _as_feed_key(graph: Graph, key: Any) -> Output:
    out = graph.output(key) if isinstance(key, str) else as_operand(key)
    if out is None:
        raise InvalidArgumentError(
            f"Cannot interpret feed_dict key {key!r} as an Output: feed keys must be Outputs "
            f"(or names like 'x:0')")
    if out.graph is not graph:
        raise InvalidArgumentError(f"Feed key {out.name} is not an element of this session's graph")
    return out


def _trace_target(options: RunOptions | None, run_metadata: RunMetadata | None):
    """The RunMetadata that a run records into: ``run_metadata`` when tracing is on."""
    if options is None or not options.trace:
        return None
    if run_metadata is None:
        raise InvalidArgumentError("RunOptions(trace=True) needs a run_metadata=RunMetadata()")
    return run_metadata


def _feed_checker(out: Output) -> Callable[[Any], Any]:
    """A function that validates one feed value for ``out`` and returns it read-only."""
    dtype = out.dtype
    np_dtype = dtype.as_numpy_dtype
    static = out.shape.as_tuple()

    def check(value):
        if isinstance(value, np.ndarray):
            if value.dtype != np_dtype and not (dtype.is_string and value.dtype.kind in "OSU"):
                raise InvalidArgumentError(
                    f"Cannot feed value of dtype {value.dtype} for Tensor '{out.name}', which has "
                    f"dtype {dtype.name}")
            if value.dtype.kind in "SU":
                from graphflow.convert import to_array
                value = to_array(value, dtype)
            else:
                value = value.view()
                value.flags.writeable = False
        elif hasattr(value, "__cuda_array_interface__"):
            if as_dtype(value.dtype) != dtype:
                raise InvalidArgumentError(
                    f"Cannot feed value of dtype {value.dtype} for Tensor '{out.name}', which has "
                    f"dtype {dtype.name}")
        else:
            from graphflow.convert import shared_array, to_array
            try:
                shared = shared_array(value)  # __dlpack__ / __array__ objects: no copy
                if (isinstance(shared, np.ndarray) and shared.dtype == np_dtype
                        and shared.dtype.kind != "O"):
                    value = shared.view()
                    value.flags.writeable = False
                elif (hasattr(shared, "__cuda_array_interface__")
                      and as_dtype(shared.dtype) == dtype):
                    value = shared
                else:
                    value = to_array(shared, dtype)
            except (TypeError, ValueError, RuntimeError, BufferError) as e:  # ragged, bf16, ...
                raise InvalidArgumentError(f"Cannot feed value for Tensor '{out.name}': {e}") from None
        if static is not None:
            shape = value.shape
            if len(shape) != len(static) or any(
                    s is not None and s != d for s, d in zip(static, shape)):
                raise InvalidArgumentError(
                    f"Cannot feed value of shape {tuple(shape)} for Tensor '{out.name}', which has "
                    f"shape {out.shape}")
        return value
    return check


class Session:
    """Runs fetches of one graph. Safe to use from several threads at once."""

    def __init__(self, graph: Graph | None = None, config: SessionConfig | None = None, *,
                 devices: Sequence[Device] | None = None):
        """``devices`` defaults to every device of the process (``gf.list_devices()``)."""
        if graph is None:
            raise InvalidArgumentError("Session needs a graph: gf.Session(graph)")
        self.graph = graph
        self.config = config or SessionConfig()
        self.devices = list(devices) if devices is not None else list_devices()
        if not any(d.device_type == "cpu" for d in self.devices):
            raise InvalidArgumentError("A Session needs the CPU device among its devices")
        self.stats = SessionStats()
        self._plans: dict[tuple, Plan] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._active_runs = 0
        self._closed = False
        self._pool: ThreadPoolExecutor | None = None
        self.resources = ResourceStore()  # this Session's variables

    # -- plans ------------------------------------------------------------------
    def _plan(self, fetches: Sequence, feeds: Sequence[Output]) -> Plan:
        key = (tuple(fetches), tuple(feeds))
        plan = self._plans.get(key)
        if plan is None:
            plan = Plan(self.graph, fetches, feeds, self.devices, self.config,
                        self.stats.forwarded_buffers, self.resources)
            with self._lock:
                plan = self._plans.setdefault(key, plan)
                self.stats.plans_compiled = len(self._plans)
        return plan

    def _thread_pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.config.inter_op_threads,
                                                thread_name_prefix="graphflow-inter-op")
            return self._pool

    def _enter_run(self) -> None:
        with self._lock:
            if self._closed:
                raise FailedPreconditionError("Attempted to use a closed Session.")
            self._active_runs += 1

    def _exit_run(self) -> None:
        with self._lock:
            self._active_runs -= 1
            self.stats.runs += 1
            if self._active_runs == 0 and self._closed:  # close() is waiting
                self._idle.notify_all()

    def _execute(self, plan: Plan, values: Sequence, metadata: RunMetadata | None = None) -> list:
        self._enter_run()
        try:
            return plan.run(values, self._thread_pool() if plan.parallel else None, metadata)
        finally:
            self._exit_run()

    # -- public API -------------------------------------------------------------
    def run(self, fetches: Any, feed_dict: dict | None = None, options: RunOptions | None = None,
            run_metadata: RunMetadata | None = None):
        """Evaluate ``fetches`` (an Output, an Operation, a name, or nested lists,
        tuples and dicts of them); Outputs give numpy arrays, Operations None.

        With ``options=RunOptions(trace=True)``, ``run_metadata`` receives one
        event per node (device, thread, start/end, output shapes, bytes, forwarding).
        """
        metadata = _trace_target(options, run_metadata)
        mapper = _Fetches(self.graph, fetches)
        feeds: dict[Output, Any] = {}
        for key, value in (feed_dict or {}).items():
            out = _as_feed_key(self.graph, key)
            feeds[out] = _feed_checker(out)(value)
        order = sorted(feeds, key=lambda o: (o.op._id, o.index))
        plan = self._plan(mapper.flat, order)
        return mapper.build(self._execute(plan, [feeds[o] for o in order], metadata))

    def make_callable(self, fetches: Any, feed_list: Sequence | None = None,
                      accept_options: bool = False) -> Callable:
        """A function ``f(*feed_values)`` that runs ``fetches`` with ``feed_list`` fed,
        compiled once: a call pays only for the feed checks and the kernels. With
        ``accept_options=True`` it also takes ``options=`` and ``run_metadata=``
        keywords, as ``run`` does (TensorFlow's ``accept_options``)."""
        mapper = _Fetches(self.graph, fetches)
        feed_outputs = [_as_feed_key(self.graph, k) for k in (feed_list or [])]
        if len(set(feed_outputs)) != len(feed_outputs):
            raise InvalidArgumentError("feed_list names the same Output twice")
        checkers = [_feed_checker(o) for o in feed_outputs]
        plan = self._plan(mapper.flat, feed_outputs)
        single = mapper._structure[0] == "leaf"

        def call(*values):
            if len(values) != len(checkers):
                raise InvalidArgumentError(
                    f"This callable takes {len(checkers)} feed values, got {len(values)}")
            results = self._execute(plan, [c(v) for c, v in zip(checkers, values)])
            return results[0] if single else mapper.build(results)

        def call_with_options(*values, options: RunOptions | None = None,
                              run_metadata: RunMetadata | None = None):
            if len(values) != len(checkers):
                raise InvalidArgumentError(
                    f"This callable takes {len(checkers)} feed values, got {len(values)}")
            results = self._execute(plan, [c(v) for c, v in zip(checkers, values)],
                                    _trace_target(options, run_metadata))
            return results[0] if single else mapper.build(results)
        return call_with_options if accept_options else call

    def close(self) -> None:
        """Close the session; waits for runs in flight. Later runs raise."""
        with self._lock:
            self._closed = True
            while self._active_runs:
                self._idle.wait()
            pool, self._pool = self._pool, None
            self._plans.clear()
            self.resources.clear()
        if pool is not None:
            pool.shutdown(wait=True)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)
