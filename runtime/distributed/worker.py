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

from graphflow.errors import AbortedError, CancelledError, InternalError, OpError

from ..devices import list_devices
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
        self._lock = threading.Condition()

    # -- graphs and stages ------------------------------------------------------------
    def add_graph(self, key: str, version: int, text: str) -> None:
        with self._lock:
            if self._graph_texts.get(key, (-1, ""))[0] < version:
                self._graph_texts[key] = (version, text)
                self._graphs.pop(key, None)

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
        with self._lock:
            parsed = self._graphs.get(spec.graph_key)
            if parsed is None:
                version, text = self._graph_texts.get(spec.graph_key, (-1, ""))
                if version < spec.graph_version:
                    raise InternalError(
                        f"Worker {self.address} ({spec.task}) has not received the graph "
                        f"{spec.graph_key} (version {spec.graph_version}; it has {version}): "
                        f"its graphflow plugin did not reach it")
                parsed = self._graphs[spec.graph_key] = (version, json.loads(text))
            return parsed[1]

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

    def finish_arrived(self, run_id: str) -> None:
        """A commit or rollback of ``run_id`` reached this worker: refuse its late stages,
        and leave its journal to that request while it is here."""
        with self._lock:
            self._mark_finished(run_id)
            self._finishing.add(run_id)

    def finish_gone(self, run_id: str) -> None:
        """That request ran, or was cancelled before it ran."""
        with self._lock:
            self._finishing.discard(run_id)

    def has_journal(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._journals

    def drop_orphan(self, run_id: str) -> None:
        """Forget the journal of a run whose client left before finishing it (see
        OrphanJournals), unless a stage or a commit or rollback of it is still here: its
        writes stay, as after a commit; late stages are refused."""
        with self._lock:
            if run_id in self._in_flight or run_id in self._finishing:
                return
            self._mark_finished(run_id)
            if self._journals.pop(run_id, None) is None:
                return
        _log.warning("Run %s on worker %s: its client left before committing or rolling it "
                     "back; its writes stay", run_id, self.address)

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
            while run_id in self._in_flight:
                self._lock.wait()
            journal = self._journals.pop(run_id, None)
        if journal is None or commit:
            return 0
        return journal.rollback()


#: How many finished run ids a worker remembers (to refuse a stage that arrives late).
_FINISHED_KEPT = 4096
#: How long after a run's stage results are forgotten here a worker waits for its commit
#: or rollback before it takes the client for gone (a live client's request follows the
#: release within a few scheduler round trips).
ORPHAN_GRACE_S = 60.0

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
    later version of the graph (it only grows) replaces it under the same name."""

    def __init__(self, key: str, version: int, text: str):
        self.key = key
        self.version = version
        self.text = text

    def setup(self, worker) -> None:
        worker_state(worker).add_graph(self.key, self.version, self.text)

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


class OrphanJournals(WorkerPlugin):
    """Frees the journals of runs whose client left mid-run. A live client holds a
    run's stage futures until it has asked for the commit or rollback; the scheduler
    releases a dead client's futures and cancels its commits. So when a stage of a run,
    or its commit or rollback, is forgotten here, the journal is dropped
    ORPHAN_GRACE_S later unless by then a stage, commit or rollback of the run is here
    or the stage's result is still held elsewhere (WorkerState.drop_orphan)."""

    def setup(self, worker) -> None:
        self.worker = worker

    def transition(self, key, start: str, finish: str, **kwargs) -> None:
        parts = key.split("-") if isinstance(key, str) else ()
        if len(parts) != 5 or parts[0] != "graphflow" or parts[1] == "pick":
            return
        run_id = f"{parts[2]}-{parts[3]}"
        state = worker_state(self.worker)
        if parts[1] != "stage" and finish != "forgotten":
            state.finish_arrived(run_id)
        elif finish == "forgotten":
            if parts[1] != "stage":
                state.finish_gone(run_id)
            self.worker.loop.add_callback(self._drop_if_orphan, state, run_id,
                                          key if parts[1] == "stage" else None)

    async def _drop_if_orphan(self, state: WorkerState, run_id: str, stage: str | None) -> None:
        await asyncio.sleep(ORPHAN_GRACE_S)
        if not state.has_journal(run_id):
            return
        if stage is not None and (await self.worker.scheduler.who_has(keys=[stage])).get(stage):
            return  # only this copy went (dask keeps one replica): the client still holds it
        state.drop_orphan(run_id)


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
    metadata = RunMetadata() if trace else None
    try:
        journal = state.begin(run_id, spec.writes)
    except CancelledError:  # a stage of a run taken back already: expected, not a fault
        _quiet_failure()
        raise
    compiled = None
    try:
        compiled = state.stage(spec, config)
        with journaling(journal):
            results = compiled.plan.run(values, None, metadata)
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

