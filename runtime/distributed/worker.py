"""What runs inside a dask worker: its graphflow state and the functions that the
client submits there.

Each worker process keeps, per dask ``Worker`` (in-process clusters hold several):

- the graphs shipped to it, by content hash (``GraphPlugin``: a dask WorkerPlugin,
  so a worker that (re)starts later gets them too);
- one compiled local Plan per stage (``StageSpec.key``) and Session config, as a
  Session caches plans;
- its variables (a ResourceStore keyed by the variable's name, shared by every
  graph and Session that runs there, as a TensorFlow parameter server's);
- the undo journal of each run that writes and is not finished yet (dropped too when
  the run's client left without finishing it: OrphanJournals);
- the write locks of its variables: a run that writes a variable holds its lock from
  its first write until its commit or rollback (strict two-phase locking), so that a
  rollback restores values no other run has written since (see ``WorkerState.lock``);
- its incarnation: a fresh id per worker start, by which the client tells a worker
  that restarted (its variables are gone) from one that kept running.

The state is held beside the plugin, not in it: registering a plugin again under
its name replaces the instance, which must never drop variables.
"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
import weakref
from dataclasses import replace
from typing import Any

from graphflow.errors import (AbortedError, CancelledError, InternalError, InvalidArgumentError,
                              OpError)

from ..device_discovery import list_devices
from ..executor import ForwardCounter, Plan
from ..resources import Journal, ResourceStore, journaling
from ..tracing import RunMetadata
from .stage_graph import StageSpec, stage_graph

try:  # the plugin base class; without dask nothing here is ever called
    from distributed import WorkerPlugin
except ImportError:  # pragma: no cover - graphflow without the extra
    WorkerPlugin = object


class _Stage:
    """A stage compiled on this worker."""

    def __init__(self, spec: StageSpec, graph_def: dict, config, resources: ResourceStore):
        graph, feeds, fetches = stage_graph(graph_def, spec)
        self.plan = Plan(graph, fetches, feeds, list_devices(), config, ForwardCounter(),
                         resources)
        self.num_outputs = len(spec.outputs)
        self.graph_key = spec.graph_key
        self.resources = resources
        #: (variable, the shape its handle declares, the op) for each handle of the stage
        #: that something other than a whole assignment uses
        self.shapes = [(h.attrs.get("shared_name") or h.name, h.attrs["shape"], h.name)
                       for h in graph.operations() if h.type == "VarHandleOp"
                       and h.attrs.get("shape") is not None and h.attrs["shape"].rank is not None
                       and any(c.type != "AssignVariableOp" for c in _consumers(graph, h))]

    def check_shapes(self) -> None:
        """The variables' values have the shapes this graph declares for them: workers
        share variables by name across graphs, as a parameter server, and another
        graph may have made one under this name with another shape (the dtype is
        checked by the kernels, VariableState.declare)."""
        for name, shape, node in self.shapes:
            value = self.resources.variable(name).value
            if value is not None and not shape.is_compatible_with(value.shape):
                raise InvalidArgumentError(
                    f"Trying to access variable '{name}' as shape {shape}: it holds a value "
                    f"of shape {list(value.shape)} (made under this name by another graph "
                    f"or Session). Assign it a value of this shape first, or give the "
                    f"variable another name", node, "VarHandleOp")


def _consumers(graph, op) -> list:
    return [c for c in graph.operations() if any(i.op is op for i in c.inputs)]


class WorkerState:
    """One dask worker's graphflow state (see the module docstring)."""

    def __init__(self, address: str):
        self.address = address
        self.incarnation = uuid.uuid4().hex
        self.resources = ResourceStore()
        self._graph_texts: dict[str, tuple[int, str]] = {}  # graph id -> (version, JSON)
        self._graphs: dict[str, tuple[int, dict]] = {}       # parsed, at first use
        self._stages: dict[tuple[str, Any], _Stage] = {}  # by (StageSpec.key, config)
        self._journals: dict[str, Journal] = {}
        self._in_flight: dict[str, int] = {}
        self._finishing: set[str] = set()  # runs whose commit or rollback task is here
        self._finished: dict[str, None] = {}  # runs taken back or committed: refuse late stages
        self._rollbacks: set[str] = set()  # runs whose rollback reached this worker
        self._owners: dict[str, str] = {}  # variable name -> the run holding its write lock
        self._held: dict[str, list[str]] = {}  # run -> the variables whose lock it holds
        self._lock = threading.Condition()

    # -- graphs and stages ------------------------------------------------------------
    def add_graph(self, key: str, version: int, text: str) -> None:
        with self._lock:
            if self._graph_texts.get(key, (-1, ""))[0] < version:
                self._graph_texts[key] = (version, text)
                self._graphs.pop(key, None)
                self._lock.notify_all()  # a stage may be waiting for it

    def drop_graph(self, key: str) -> None:
        """Forget a graph whose client let it go, and its compiled stages."""
        with self._lock:
            self._graph_texts.pop(key, None)
            self._graphs.pop(key, None)
            for k in [k for k, s in self._stages.items() if s.graph_key == key]:
                del self._stages[k]

    def stage(self, spec: StageSpec, config) -> _Stage:
        """``spec`` compiled under ``config`` (Sessions of one graph may differ in it: a
        memory limit, soft placement, determinism)."""
        key = (spec.key, config)
        compiled = self._stages.get(key)
        if compiled is None:
            graph_def = self._graph_def(spec)
            compiled = _Stage(spec, graph_def, config, self.resources)
            with self._lock:
                compiled = self._stages.setdefault(key, compiled)
        return compiled

    def _graph_def(self, spec: StageSpec) -> dict:
        """The graph ``spec`` needs, at least at its version: the client does not wait
        for its plugin to reach the workers, so a stage may arrive first and wait
        (outside dask's thread pool) up to GRAPH_WAIT_S."""
        seceded = False
        deadline = time.monotonic() + GRAPH_WAIT_S
        try:
            with self._lock:
                while True:
                    version, text = self._graph_texts.get(spec.graph_key, (-1, ""))
                    if version >= spec.graph_version:
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise InternalError(
                            f"Worker {self.address} ({spec.task}) has not received the graph "
                            f"{spec.graph_key} (version {spec.graph_version}; it has "
                            f"{version}) after {GRAPH_WAIT_S:.0f} s: its graphflow plugin did "
                            f"not reach it")
                    if not seceded:
                        seceded = _secede()
                    self._lock.wait(min(left, 1.0))
                parsed = self._graphs.get(spec.graph_key)
                if parsed is None or parsed[0] != version:
                    parsed = self._graphs[spec.graph_key] = (version, json.loads(text))
                return parsed[1]
        finally:
            if seceded:
                _rejoin()

    # -- runs ---------------------------------------------------------------------------
    def begin(self, run_id: str, writes: bool) -> Journal | None:
        with self._lock:
            if run_id in self._finished:
                raise CancelledError(f"Run {run_id} was already finished on worker {self.address}")
            self._in_flight[run_id] = self._in_flight.get(run_id, 0) + 1
            if not writes:
                return None
            return self._journals.setdefault(run_id, Journal())

    def end(self, run_id: str) -> None:
        with self._lock:
            self._in_flight[run_id] -= 1
            if not self._in_flight[run_id]:
                del self._in_flight[run_id]
                self._lock.notify_all()

    def lock(self, run_id: str, names: tuple[str, ...]) -> None:
        """Take the write locks of the variables ``names`` for ``run_id`` (those it holds
        already are kept), waiting while another run holds one; called between
        ``begin`` and ``end``. The locks are held until the run's commit or rollback
        (``finish``) or until its client is gone (``drop_orphan``).

        Why locks: a run's writes stay in place until it commits (its journal can undo
        them), so without them a failed run's rollback restored values that runs
        committed since had written (their updates lost) and an update made on top of
        the failed run's write outlived its rollback. Holding the lock of every variable
        a run writes until it finishes makes the rollback exact. Deadlock-free: a run
        takes all its locks on one worker at once (waiting for all to be free, never
        holding some while waiting), and a run that writes on several workers takes
        them worker after worker in one global order (the client chains its
        ``lock_run`` tasks by task); a waiting task leaves dask's thread pool
        (``secede``), so the commit or rollback that frees the lock always finds a
        thread. Reads take no lock (TensorFlow's semantics: a read may see a running
        run's write)."""
        seceded = False
        with self._lock:
            while True:
                if run_id in self._finished:
                    raise CancelledError(f"Run {run_id} was already finished on worker "
                                         f"{self.address}")
                if all(self._owners.get(n, run_id) == run_id for n in names):
                    break
                if not seceded:
                    seceded = _secede()
                self._lock.wait()
            held = self._held.setdefault(run_id, [])
            for n in names:
                if n not in self._owners:
                    self._owners[n] = run_id
                    held.append(n)
        if seceded:
            _rejoin()

    def _unlock(self, run_id: str) -> None:
        """Free ``run_id``'s write locks (``_lock`` held)."""
        for n in self._held.pop(run_id, ()):
            if self._owners.get(n) == run_id:
                del self._owners[n]
        self._lock.notify_all()

    def locks_held(self) -> dict[str, str]:
        """Variable -> the run holding its write lock (for tests)."""
        with self._lock:
            return dict(self._owners)

    def finish_arrived(self, run_id: str, rollback: bool = False) -> None:
        """A commit or rollback of ``run_id`` reached this worker: refuse its late stages,
        and leave its journal to that request while it is here."""
        with self._lock:
            self._mark_finished(run_id)
            self._finishing.add(run_id)
            if rollback:
                self._rollbacks.add(run_id)

    def finish_gone(self, run_id: str) -> None:
        """That request ran, or was cancelled before it ran."""
        with self._lock:
            self._finishing.discard(run_id)

    def has_journal(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._journals

    def holds(self, run_id: str) -> bool:
        """Whether ``run_id`` keeps a journal or write locks here."""
        with self._lock:
            return run_id in self._journals or run_id in self._held

    def drop_orphan(self, run_id: str) -> None:
        """Roll back a run whose client is gone without finishing it (see
        OrphanJournals), unless a stage or a commit or rollback of it is still here. A
        run commits only when its client has every stage's result and says so: its
        Session.run had not returned when the client left without a commit, so its
        writes are taken back (a half-finished run never stays half-committed). Its
        write locks are freed; late stages are refused."""
        with self._lock:
            if run_id in self._in_flight or run_id in self._finishing:
                return
            self._mark_finished(run_id)
            journal = self._journals.pop(run_id, None)
            self._rollbacks.discard(run_id)
        try:
            if journal is not None:
                journal.rollback()
        finally:
            with self._lock:
                self._unlock(run_id)
        if journal is not None:
            _log.warning("Run %s on worker %s: its client left before committing it; its "
                         "writes were rolled back", run_id, self.address)

    def _mark_finished(self, run_id: str) -> None:
        self._finished[run_id] = None
        while len(self._finished) > _FINISHED_KEPT:
            self._finished.pop(next(iter(self._finished)))

    def finish(self, run_id: str, commit: bool) -> int:
        """Commit (forget the journal) or roll back ``run_id``'s writes on this worker,
        once no stage of the run is still running here; later stages of it are refused.
        Returns the number of journal entries undone."""
        with self._lock:
            self._mark_finished(run_id)
            self._lock.notify_all()  # a stage of the run waiting for a lock gives up
            while run_id in self._in_flight:
                self._lock.wait()
            journal = self._journals.pop(run_id, None)
            self._rollbacks.discard(run_id)
        try:  # the run still holds its write locks: no other run's write comes between
            return 0 if journal is None or commit else journal.rollback()
        finally:
            with self._lock:
                self._unlock(run_id)


#: How long a stage waits for the graph it needs to reach its worker.
GRAPH_WAIT_S = 30.0
#: How many finished run ids a worker remembers (to refuse a stage that arrives late).
_FINISHED_KEPT = 4096
#: How often a worker asks whether the client of a run that still holds a journal or
#: write locks here is alive (its lease, which a live client always holds: never taken
#: for gone however long its commit takes). The scheduler forgets a dead client's lease
#: as soon as its connection drops, so a dead client's locks go within this.
ORPHAN_GRACE_S = 2.0

_states: "weakref.WeakKeyDictionary[Any, WorkerState]" = weakref.WeakKeyDictionary()
_states_lock = threading.Lock()


def worker_state(worker=None) -> WorkerState:
    """This worker's graphflow state (created on first use)."""
    if worker is None:
        from distributed import get_worker
        worker = get_worker()
    with _states_lock:
        state = _states.get(worker)
        if state is None:
            state = _states[worker] = WorkerState(worker.address)
        return state


class GraphPlugin(WorkerPlugin):
    """Ships one graph (its JSON GraphDef) to every worker, now and when one starts; a
    later version of the graph (it only grows) replaces it under the same name.
    ``owners``: the tokens of the client views that shipped it; once none of their
    leases is left (every such Client closed or died, even if it could not say so),
    a worker drops the graph and unregisters the plugin from the scheduler."""

    def __init__(self, key: str, version: int, text: str, owners: tuple[str, ...] = ()):
        self.key = key
        self.version = version
        self.text = text
        self.owners = owners

    def setup(self, worker) -> None:
        worker_state(worker).add_graph(self.key, self.version, self.text)
        if self.owners:
            worker.loop.add_callback(self._watch_owners, worker)

    async def _watch_owners(self, worker) -> None:
        name = plugin_name(self.key)
        leases = [lease_key(token) for token in self.owners]
        while worker.plugins.get(name) is self:
            await asyncio.sleep(OWNER_CHECK_S)
            if worker.plugins.get(name) is not self:
                return  # replaced (a later version watches) or removed
            try:
                status = await worker.scheduler.get_task_status(keys=leases)
            except Exception:  # noqa: BLE001 - the scheduler is away: look again later
                continue
            if any(status.get(k) is not None for k in leases):
                continue
            _log.info("Graph %s: every client that shipped it is gone; dropping it", self.key)
            try:
                await worker.scheduler.unregister_worker_plugin(name=name)
            except Exception:  # noqa: BLE001 - another worker did it first
                pass
            worker_state(worker).drop_graph(self.key)
            return

    def teardown(self, worker) -> None:
        """Unregistered (the client's Graph is gone), or replaced by a later version
        (registered again at once): the graph goes only if no plugin of it is back."""
        name = plugin_name(self.key)

        def drop_unless_replaced() -> None:
            if name not in worker.plugins:
                worker_state(worker).drop_graph(self.key)
        worker.loop.call_later(_REPLACE_S, drop_unless_replaced)


def plugin_name(graph_key: str) -> str:
    return f"graphflow-{graph_key}"


#: How long a torn-down graph plugin waits for its next version before the graph goes.
_REPLACE_S = 1.0
#: How often a worker asks whether a graph's clients are still there (a client that
#: lets a graph go unregisters its plugin at once; this catches the clients that die).
OWNER_CHECK_S = 5.0


class OrphanJournals(WorkerPlugin):
    """Finishes the runs whose client is gone mid-run (their journals and write locks
    would stay forever). When a stage or lock task of a run, or its commit or rollback,
    is forgotten here, the worker looks again ORPHAN_GRACE_S later, and every
    ORPHAN_GRACE_S after that while the run still holds a journal or locks here: once
    the client's lease (``graphflow-lease-<client token>``, a future each ClusterView
    holds for as long as its Client lives) is unknown to the scheduler, the client is
    gone and the run is finished as ``WorkerState.drop_orphan`` says. A live client is
    never taken for gone, however long its commit or rollback takes."""

    def setup(self, worker) -> None:
        self.worker = worker

    def transition(self, key, start: str, finish: str, **kwargs) -> None:
        parts = key.split("-") if isinstance(key, str) else ()
        if len(parts) != 5 or parts[0] != "graphflow" or parts[1] not in _RUN_KEYS:
            return
        run_id = f"{parts[2]}-{parts[3]}"
        state = worker_state(self.worker)
        finishing = parts[1] in ("commit", "rollback")
        if finishing and finish != "forgotten":
            state.finish_arrived(run_id, rollback=parts[1] == "rollback")
        elif finish == "forgotten":
            if finishing:
                state.finish_gone(run_id)
            self.worker.loop.add_callback(self._drop_if_orphan, state, run_id)

    async def _drop_if_orphan(self, state: WorkerState, run_id: str) -> None:
        while True:
            await asyncio.sleep(ORPHAN_GRACE_S)
            if not state.holds(run_id):
                return
            lease = lease_key(run_id)
            status = await self.worker.scheduler.get_task_status(keys=[lease])
            if status.get(lease) is None:
                break  # no client wants the lease: the run's client is gone
        state.drop_orphan(run_id)


#: The kinds of task key (``graphflow-KIND-<token>-<run>-<k>``) a run leaves on a worker.
_RUN_KEYS = frozenset({"stage", "lock", "commit", "rollback"})
#: Characters of a Session token that name its client's ClusterView (see lease_key).
CLIENT_TOKEN_CHARS = 12


def lease_key(run_id: str) -> str:
    """The key of the lease future of the client that started ``run_id`` (or whose
    view token it is)."""
    return f"graphflow-lease-{run_id[:CLIENT_TOKEN_CHARS]}"


def lease() -> None:
    """The lease task: nothing; its future held by a client says that it lives."""


# -- the functions the client submits --------------------------------------------------------
def run_stage(spec: StageSpec, config, run_id: str, incarnation: str | None, trace: bool,
              *args) -> tuple:
    """Run one stage of one run: ``(values, events)``. ``args`` are upstream results
    (``(values, events)`` tuples) and feed values, read as ``spec.sources`` says."""
    state = worker_state()
    if spec.uses_variables and incarnation is not None and incarnation != state.incarnation:
        _quiet_failure()
        raise AbortedError(
            f"Task {spec.task} (worker {state.address}) restarted since this Session last ran "
            f"there: the variables it held are gone. Run their initializers again "
            f"(gf.global_variables_initializer) or restore a checkpoint", detail="restarted")
    values = [args[a] if j < 0 else args[a][0][j] for a, j in spec.sources]
    config = worker_limited(config)
    metadata = RunMetadata() if trace else None
    try:
        journal = state.begin(run_id, spec.writes)
    except CancelledError:  # a stage of a run taken back already: expected, not a fault
        _quiet_failure()
        raise
    compiled = None
    try:
        if spec.locks:
            state.lock(run_id, spec.locks)
        compiled = state.stage(spec, config)
        if compiled.shapes:
            compiled.check_shapes()
        with journaling(journal):
            results = compiled.plan.run(values, None, metadata)
    except CancelledError:  # taken back while it waited for a lock
        _quiet_failure()
        raise
    except OpError as e:
        _quiet_failure()
        raise _with_device(e, compiled, spec, state) from None
    except Exception as e:  # noqa: BLE001 - a bug: reported with the task
        raise InternalError(f"{type(e).__name__} on {spec.task} (worker {state.address}): {e}")
    finally:
        state.end(run_id)
    events = None
    if metadata is not None:
        events = _placed_events(metadata.events, spec.task, state.address)
    return tuple(results[:compiled.num_outputs]), events


def worker_limited(config):
    """``config`` with this worker's memory limit where the Session gave none (the
    client's default, its machine's RAM, means nothing here): a kernel past it is a
    ResourceExhaustedError naming the node and the task, not a worker the nanny kills."""
    if config.memory_limit_given:
        return config
    limited = _limited_configs.get(config)
    if limited is None:
        limit = _worker_memory_limit()
        limited = config if limit is None or limit >= config.memory_limit_bytes else \
            replace(config, memory_limit_bytes=limit)
        object.__setattr__(limited, "memory_limit_given", False)  # the key stays the same
        _limited_configs[config] = limited
    return limited


_limited_configs: dict = {}


def _worker_memory_limit() -> int | None:
    """This dask worker's memory limit in bytes (None: unlimited), less what the worker
    process holds already."""
    from distributed import get_worker
    worker = get_worker()
    limit = getattr(getattr(worker, "memory_manager", None), "memory_limit", None) or \
        getattr(worker, "memory_limit", None)
    if not limit:
        return None
    try:
        import psutil
        used = psutil.Process().memory_info().rss
    except Exception:  # noqa: BLE001 - psutil comes with distributed; be safe
        used = 0
    return max(int(limit) - int(used), 0)


def lock_run(run_id: str, names: tuple[str, ...], *after) -> None:
    """Take a run's write locks on this worker (``WorkerState.lock``) before its stages
    run here: the client chains these tasks in task order (``after`` is the previous
    one) for a run that writes on several workers."""
    state = worker_state()
    try:
        state.begin(run_id, False)
    except CancelledError:
        _quiet_failure()
        raise
    try:
        state.lock(run_id, names)
    except CancelledError:
        _quiet_failure()
        raise
    finally:
        state.end(run_id)


def pick(result: tuple, picks: tuple[int, ...]) -> tuple:
    """Some of a stage's values, so that only those travel to another worker."""
    values, _ = result
    return tuple(values[k] for k in picks), None


def events_of(result: tuple) -> list:
    """A traced stage's events alone, for the client."""
    return result[1] or []


def finish_run(run_id: str, commit: bool) -> int:
    """Commit or roll back a run's writes on this worker (see WorkerState.finish)."""
    return worker_state().finish(run_id, commit)


def incarnation(dask_worker=None) -> str:
    """This worker's incarnation id (run by ``client.run``, which passes ``dask_worker``:
    in-process workers share a thread, where ``get_worker`` cannot tell them apart)."""
    return worker_state(dask_worker).incarnation


class _QuietUserErrors(logging.Filter):
    """Drops dask's ERROR 'Compute Failed' record of a stage that failed with the
    user's error (an op's OpError, a restarted task): the client raises it, naming the
    node, and a worker log at ERROR for a bad id would read as a fault of the cluster.
    Other failures (graphflow's own bugs) keep their record."""

    def __init__(self):
        super().__init__()
        self.keys: dict[str, None] = {}  # stages whose failure is the user's, oldest first
        self.lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if not (isinstance(record.msg, str) and record.msg.startswith("Compute Failed")
                and record.args):
            return True
        with self.lock:
            if record.args[0] not in self.keys:
                return True
            del self.keys[record.args[0]]
        _log.debug("Stage %s failed with the user's error %s", record.args[0], record.args[3])
        return False

    def expect(self, key: str) -> None:
        with self.lock:
            self.keys[key] = None
            while len(self.keys) > _FINISHED_KEPT:  # failures that were not logged
                self.keys.pop(next(iter(self.keys)))


_log = logging.getLogger(__name__)
_quiet_filter = _QuietUserErrors()
logging.getLogger("distributed.worker").addFilter(_quiet_filter)


def _secede() -> bool:
    """Leave dask's thread pool while this task waits (a worker may have one thread,
    which the commit or rollback being waited for needs); False outside a dask task."""
    try:
        from distributed import get_worker, secede
        get_worker()
    except (ImportError, ValueError):
        return False
    secede()
    return True


def _rejoin() -> None:
    from distributed import rejoin
    rejoin()


def _quiet_failure() -> None:
    """Have dask's worker log the failure of the current stage at DEBUG (our logger)."""
    from distributed import get_worker
    key = get_worker().get_current_task()
    if key is not None:
        _quiet_filter.expect(key)


def _with_device(err: OpError, compiled: _Stage | None, spec: StageSpec, state: WorkerState) -> OpError:
    """``err`` naming the full device of its node (``/job:worker/replica:0/task:1/device:CPU:0``)
    and the worker; the client adds the node's creation site from its own graph."""
    device = "/device:CPU:0"
    if err.node_name is not None and compiled is not None:
        for op, placed in compiled.plan.placement.items():
            if op.name == err.node_name:
                device = placed.name
                break
    detail = f"device: {spec.task}{device}, worker: {state.address}"
    if err.node_name is None:
        return type(err)(f"{err.message} (on {spec.task}, worker {state.address})")
    return type(err)(err.message, err.node_name, err.op_type,
                     detail=f"{err.detail}, {detail}" if err.detail else detail)


def _placed_events(events: list, task: str, address: str) -> list:
    """Events with their full device and worker, times moved to the wall clock (the
    process's perf counter means nothing elsewhere)."""
    shift = time.time_ns() / 1e3 - time.perf_counter_ns() / 1e3
    return [replace(e, device=f"{task}{e.device}", worker=address, start_us=e.start_us + shift,
                    end_us=e.end_us + shift) for e in events]

