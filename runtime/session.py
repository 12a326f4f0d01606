"""Session: runs fetches of a graph, with feeds, on the available devices."""
from __future__ import annotations

import os
import threading
import time
from threading import get_ident
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from graphflow.builder import as_operand
from graphflow.errors import FailedPreconditionError, InvalidArgumentError
from graphflow.graph import Graph, Operation, Output

from .blas_threads import bound_blas_threads, default_intra_op_threads
from .device import Device
from .device_discovery import list_devices
from .executor import ForwardCounter, Plan
from .feeds import feed_checker
from .passes import prune
from .placer import require_local_devices
from .resources import ResourceStore
from .tracing import RunMetadata, RunOptions, checked_timeout


@dataclass(frozen=True)
class SessionConfig:
    """How a Session runs graphs.

    inter_op_threads: threads for independent nodes (default: the CPU count;
        1 runs every node on the calling thread).
    intra_op_threads: threads one kernel may use: numpy's BLAS pool for MatMul, which
        is the process's (each run sets it; runtime/blas_threads.py). Default: in a
        parallel run the CPU count divided by inter_op_threads, so the two never
        oversubscribe the cores; in a serial run every core.
    allow_soft_placement: fall back to a device with a kernel when the
        requested one has none (else placement is an error).
    log_device_placement: print each node's device when a plan is compiled.
    deterministic: make GPU scatters bitwise reproducible (and equal to the CPU).
    memory_limit_bytes: an output larger than this fails with ResourceExhaustedError
        before anything is allocated (default: the machine's physical memory).
    optimize: apply plan-time rewrites (runtime/partition_stitch.py); results are the same.
    cluster: a ``distributed.Client``: ops run on the cluster's tasks
        (``/job:worker/task:K`` is its K-th worker by name; runtime/distributed/).
        The Session never closes the client. Without ``memory_limit_bytes`` each task
        is held to its own worker's memory limit.
    operation_timeout_in_ms: every run's deadline (0: none; ``RunOptions.timeout_in_ms``
        overrides it per run): a cluster run past it is rolled back and raises
        DeadlineExceededError.
    """

    inter_op_threads: int | None = None
    intra_op_threads: int | None = None
    allow_soft_placement: bool = True
    log_device_placement: bool = False
    deterministic: bool = False
    memory_limit_bytes: int | None = None
    optimize: bool = True
    cluster: Any = None
    operation_timeout_in_ms: int = 0
    #: whether intra_op_threads was given (else a serial run may use every core)
    intra_op_threads_given: bool = field(default=False, init=False, repr=False, compare=False)
    #: whether memory_limit_bytes was given (else a cluster task takes its worker's limit)
    memory_limit_given: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self):
        for name in _BOOL_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"SessionConfig.{name} must be a bool, got "
                                f"{type(value).__name__} {value!r}")
            object.__setattr__(self, name, bool(value))
        for name in _INT_FIELDS:
            value = getattr(self, name)
            if value is not None:
                if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                    raise TypeError(f"SessionConfig.{name} must be an int or None, got "
                                    f"{type(value).__name__} {value!r}")
                object.__setattr__(self, name, int(value))
        if self.inter_op_threads is None:
            object.__setattr__(self, "inter_op_threads", os.cpu_count() or 1)
        object.__setattr__(self, "memory_limit_given", self.memory_limit_bytes is not None)
        object.__setattr__(self, "operation_timeout_in_ms", checked_timeout(
            self.operation_timeout_in_ms, "SessionConfig.operation_timeout_in_ms"))
        if self.memory_limit_bytes is None:
            object.__setattr__(self, "memory_limit_bytes", _physical_memory())
        if self.inter_op_threads < 1:
            raise InvalidArgumentError(f"inter_op_threads must be >= 1, got {self.inter_op_threads}")
        object.__setattr__(self, "intra_op_threads_given", self.intra_op_threads is not None)
        if self.intra_op_threads is None:
            object.__setattr__(self, "intra_op_threads",
                               default_intra_op_threads(self.inter_op_threads))
        if self.intra_op_threads < 1:
            raise InvalidArgumentError(f"intra_op_threads must be >= 1, got {self.intra_op_threads}")
        if self.memory_limit_bytes is not None and self.memory_limit_bytes < 0:
            raise InvalidArgumentError(
                f"memory_limit_bytes must be >= 0, got {self.memory_limit_bytes}")
        if self.cluster is not None:
            from .distributed.cluster import require_client
            require_client(self.cluster)


_BOOL_FIELDS = ("allow_soft_placement", "log_device_placement", "deterministic", "optimize")
_INT_FIELDS = ("inter_op_threads", "intra_op_threads", "memory_limit_bytes")


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


#: How deep a fetch structure may nest (its walks recurse).
MAX_FETCH_NESTING = 100


class _Fetches:
    """Flattens a nested structure of fetches and rebuilds results in its shape."""

    def __init__(self, graph: Graph, fetches: Any):
        self.flat: list[Output | Operation] = []
        self._structure = structure = self._flatten(graph, fetches)
        self._flat_list = structure[0] == "seq" and structure[1] is list \
            and all(node[0] == "leaf" for node in structure[2])

    def _flatten(self, graph: Graph, f: Any, depth: int = 0):
        if isinstance(f, (dict, list, tuple)) and depth >= MAX_FETCH_NESTING:
            raise InvalidArgumentError(  # not a RecursionError, also for a list holding itself
                f"Fetch argument nests lists, tuples or dicts more than {MAX_FETCH_NESTING} "
                f"levels deep (or holds itself)")
        if isinstance(f, dict):
            return ("dict", type(f),
                    [(k, self._flatten(graph, v, depth + 1)) for k, v in f.items()])
        if isinstance(f, tuple) and hasattr(f, "_fields"):
            return ("namedtuple", type(f), [self._flatten(graph, v, depth + 1) for v in f])
        if isinstance(f, (list, tuple)):
            return ("seq", type(f), [self._flatten(graph, v, depth + 1) for v in f])
        self.flat.append(_as_fetch(graph, f))
        return ("leaf", len(self.flat) - 1)

    def build(self, values: list) -> Any:
        if self._flat_list:
            return values  # a flat list of fetches: the plan's results, in its order
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


def _timeout_of(options: RunOptions | None) -> int:
    return 0 if options is None else options.timeout_in_ms


def _check_run_options(options: Any, run_metadata: Any) -> bool:
    """Whether a run with these ``options`` is traced; TypeError for arguments of the
    wrong kind (as TensorFlow's protos refuse them)."""
    if options is not None and not isinstance(options, RunOptions):
        raise TypeError(f"options must be a gf.RunOptions, got {type(options).__name__} "
                        f"{options!r}")
    if run_metadata is not None and not isinstance(run_metadata, RunMetadata):
        raise TypeError(f"run_metadata must be a gf.RunMetadata, got "
                        f"{type(run_metadata).__name__} {run_metadata!r}")
    if options is None or not options.trace:
        return False
    if run_metadata is None:
        raise InvalidArgumentError("RunOptions(trace=True) needs a run_metadata=RunMetadata()")
    return True


def _checked_devices(devices: Any) -> list[Device]:
    if isinstance(devices, (str, bytes, Device)) or not isinstance(devices, Iterable):
        raise TypeError(f"Session's devices must be a list of Devices (gf.list_devices()), got "
                        f"{type(devices).__name__} {devices!r}")
    devices = list(devices)
    for d in devices:
        if not isinstance(d, Device):
            raise TypeError(f"Session's devices must be Devices (gf.list_devices()), got "
                            f"{type(d).__name__} {d!r}")
    return devices


def _register_pool_thread(idents: set) -> None:
    """Runs first in each thread of a Session's pool: remembers it as the Session's own."""
    idents.add(get_ident())


class Session:
    """Runs fetches of one graph. Safe to use from several threads at once."""

    def __init__(self, graph: Graph | None = None, config: SessionConfig | None = None, *,
                 devices: Sequence[Device] | None = None):
        """``devices`` defaults to every device of the process (``gf.list_devices()``)."""
        if graph is None:
            raise InvalidArgumentError("Session needs a graph: gf.Session(graph)")
        if not isinstance(graph, Graph):
            raise TypeError(f"Session's graph must be a gf.Graph, got {type(graph).__name__} "
                            f"{graph!r}")
        if config is not None and not isinstance(config, SessionConfig):
            raise TypeError(f"Session's config must be a gf.SessionConfig, got "
                            f"{type(config).__name__} {config!r}")
        self.graph = graph
        self.config = config or SessionConfig()
        self.devices = _checked_devices(devices) if devices is not None else list_devices()
        if not any(d.device_type == "cpu" for d in self.devices):
            raise InvalidArgumentError("A Session needs the CPU device among its devices")
        self.stats = SessionStats()
        bound_blas_threads(self.config.intra_op_threads)
        self._plans: dict[tuple, Plan] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._active_runs = 0
        self._closed = False
        self._pool: ThreadPoolExecutor | None = None
        # threads inside one of this Session's runs, and the threads of its pool: a kernel
        # running there that runs or closes this Session is refused (it would deadlock)
        self._running: set[int] = set()
        self._pool_threads: set[int] = set()
        self.resources = ResourceStore()  # this Session's variables (a cluster's live on its workers)
        self._cluster = None
        if self.config.cluster is not None:
            from .distributed.plan import ClusterSession, WorkerVariables
            self._cluster = ClusterSession(graph, self.config)
            self.resources = WorkerVariables()

    # -- plans ------------------------------------------------------------------
    def _plan(self, fetches: Sequence, feeds: Sequence[Output]) -> Plan:
        key = (tuple(fetches), tuple(feeds))
        plan = self._plans.get(key)
        if plan is None and self._cluster is not None:
            plan = self._cluster.plan(fetches, feeds)
        elif plan is None:
            require_local_devices(prune(fetches, set(feeds)))  # before folding hides an op
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
                                                thread_name_prefix="graphflow-inter-op",
                                                initializer=_register_pool_thread,
                                                initargs=(self._pool_threads,))
            return self._pool

    def _check_open(self) -> None:
        if self._closed:
            raise FailedPreconditionError("Attempted to use a closed Session.")

    def _inside_own_run(self, me: int) -> bool:
        """Whether thread ``me`` is running a kernel of one of this Session's runs."""
        return me in self._running or me in self._pool_threads

    def _execute(self, plan: Plan, values: Sequence, run_metadata: RunMetadata | None = None,
                 trace: bool = False, timeout_ms: int = 0) -> list:
        """Run ``plan``; ``run_metadata`` then holds this run only (its events, when
        traced), as TensorFlow replaces a RunMetadata passed to several runs. Counts the
        run in flight (``close()`` waits for it) and refuses a run from inside a kernel
        of one of this Session's runs (it could wait for itself)."""
        me = get_ident()
        with self._lock:  # every run pays for this block: checks written inline
            if self._closed:
                raise FailedPreconditionError("Attempted to use a closed Session.")
            if me in self._running or me in self._pool_threads:
                raise FailedPreconditionError(
                    "Session.run() called from inside a kernel of one of this Session's own "
                    "runs: a kernel must not run its own Session")
            self._running.add(me)
            self._active_runs += 1
        events = RunMetadata() if trace else None
        try:
            if self._cluster is not None:
                timeout_ms = timeout_ms or self.config.operation_timeout_in_ms
                return plan.run(values, None, events, deadline=time.monotonic() + timeout_ms / 1e3
                                if timeout_ms else None)
            return plan.run(values, self._thread_pool() if plan.parallel else None, events)
        finally:
            with self._lock:
                self._running.discard(me)
                self._active_runs -= 1
                self.stats.runs += 1
                if self._active_runs == 0 and self._closed:  # close() is waiting
                    self._idle.notify_all()
            if run_metadata is not None:
                run_metadata._hold([] if events is None else events.events)

    # -- public API -------------------------------------------------------------
    def run(self, fetches: Any, feed_dict: dict | None = None, options: RunOptions | None = None,
            run_metadata: RunMetadata | None = None):
        """Evaluate ``fetches`` (an Output, an Operation, a name, or nested lists,
        tuples and dicts of them); Outputs give numpy arrays, Operations None.

        With ``options=RunOptions(trace=True)``, ``run_metadata`` receives one
        event per node (device, thread, start/end, output shapes, bytes, forwarding).
        """
        self._check_open()
        trace = _check_run_options(options, run_metadata)
        if feed_dict is not None and not isinstance(feed_dict, Mapping):
            raise TypeError(f"feed_dict must be a dict of Outputs (or names) to values, got "
                            f"{type(feed_dict).__name__}")
        mapper = _Fetches(self.graph, fetches)
        feeds: dict[Output, Any] = {}
        for key, value in (feed_dict or {}).items():
            out = _as_feed_key(self.graph, key)
            feeds[out] = feed_checker(out)(value)
        order = sorted(feeds, key=lambda o: (o.op.position, o.index))
        plan = self._plan(mapper.flat, order)
        return mapper.build(self._execute(plan, [feeds[o] for o in order], run_metadata, trace,
                                          _timeout_of(options)))

    def make_callable(self, fetches: Any, feed_list: Sequence | None = None,
                      accept_options: bool = False) -> Callable:
        """A function ``f(*feed_values)`` that runs ``fetches`` with ``feed_list`` fed,
        compiled once: a call pays only for the feed checks and the kernels. With
        ``accept_options=True`` it also takes ``options=`` and ``run_metadata=``
        keywords, as ``run`` does (TensorFlow's ``accept_options``)."""
        self._check_open()
        if feed_list is not None and (isinstance(feed_list, (str, bytes, Mapping))
                                      or not isinstance(feed_list, Iterable)
                                      or isinstance(feed_list, (Output, Operation))
                                      or callable(getattr(feed_list, "as_output", None))):
            raise TypeError(f"feed_list must be a list of Outputs (or names), got "
                            f"{type(feed_list).__name__} {feed_list!r}")
        if not isinstance(accept_options, (bool, np.bool_)):
            raise TypeError(f"accept_options must be a bool, got {type(accept_options).__name__} "
                            f"{accept_options!r}")
        mapper = _Fetches(self.graph, fetches)
        feed_outputs = [_as_feed_key(self.graph, k) for k in (feed_list or [])]
        if len(set(feed_outputs)) != len(feed_outputs):
            raise InvalidArgumentError("feed_list names the same Output twice")
        checkers = [feed_checker(o) for o in feed_outputs]
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
            trace = _check_run_options(options, run_metadata)
            results = self._execute(plan, [c(v) for c, v in zip(checkers, values)],
                                    run_metadata, trace, _timeout_of(options))
            return results[0] if single else mapper.build(results)
        return call_with_options if accept_options else call

    def close(self) -> None:
        """Close the session; waits for runs in flight. Later runs raise. A kernel of
        one of its own runs cannot close it (the run would wait for itself)."""
        with self._lock:
            if self._inside_own_run(get_ident()):
                raise FailedPreconditionError(
                    "Session.close() called from inside a kernel of one of this Session's own "
                    "runs, which close() would wait for forever")
            self._closed = True
            while self._active_runs:
                self._idle.wait()
            pool, self._pool = self._pool, None
            self._plans.clear()
            self.resources.clear()
        if self._cluster is not None:
            self._cluster.close()
        if pool is not None:
            pool.shutdown(wait=True)
        self._pool_threads.clear()  # those threads are gone: their ids may come back

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
