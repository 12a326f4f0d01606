"""The client's view of a Dask cluster: which worker is which task, which graphs
the workers hold, and which workers left.

Task names: a worker named ``JOB:T`` (``dask worker --name ps:0``) is task T of
job JOB. The other workers are the tasks of job ``worker``, ordered by name
(numbers by value: LocalCluster names its workers 0, 1, ...): task K is the K-th,
unless some worker is named ``worker:T``, in which case job ``worker`` is exactly
those. A name keeps its rank while its worker is away (a nanny restarting it): the
other workers keep their tasks, and its task is an UnavailableError until it is
back. A task that no worker ever was gives an InvalidArgumentError naming the tasks
there are.

One ClusterView per Client, shared by every Session on it. It learns that a worker
left from the scheduler's ``remove-worker`` event on that worker's topic, and that
one joined from the worker count in the client's scheduler info (which dask
refreshes every 2 s; no cost per run), and asks the scheduler for the worker list
again only then, or when a run names a task it does not have.

Graphs go to the workers as JSON GraphDefs in a WorkerPlugin named after the graph
(an id per Graph object of this process): a graph only grows, so when it has grown
the new version replaces the old one under the same name, on every worker and on
every worker that starts later. When the Graph object is garbage, its plugin is
unregistered and the workers forget it.
"""
from __future__ import annotations

import json
import logging
import re
import threading
import uuid
import weakref
from typing import Any, Iterable

from graphflow.errors import InvalidArgumentError, UnavailableError
from graphflow.graph import Graph

from .tasks import Task
from .worker import CLIENT_TOKEN_CHARS

_log = logging.getLogger(__name__)
_NAMED_TASK = re.compile(r"([A-Za-z][A-Za-z0-9_]*):([0-9]{1,10})\Z")
INSTALL_HINT = "pip install 'graphflow[distributed]'"


def require_client(cluster: Any):
    """``cluster`` if it is a ``distributed.Client``; TypeError otherwise, ImportError
    saying what to install when Dask distributed is missing."""
    try:
        import distributed
    except ImportError as e:
        raise ImportError(f"SessionConfig(cluster=...) needs Dask distributed: {INSTALL_HINT}"
                          ) from e
    if not isinstance(cluster, distributed.Client):
        raise TypeError(f"SessionConfig.cluster must be a distributed.Client, got "
                        f"{type(cluster).__name__} {cluster!r}")
    if cluster.asynchronous:
        raise TypeError("SessionConfig.cluster must be a synchronous distributed.Client "
                        "(Session.run blocks): got one made with asynchronous=True")
    return cluster


#: How long the client waits for a worker to say its incarnation (a hung worker is
#: not waited for: its runs find out).
INCARNATION_WAIT_S = 2.0


def task_map(workers: dict[str, dict], known: Iterable = ()) -> dict[Task, str]:
    """Worker addresses by task, from ``client.scheduler_info()["workers"]``. ``known``:
    names of workers that were in the cluster before and may be back (a restart): they
    keep their rank, so that while one is away the others keep their tasks (its task
    is missing, see ``tasks_by_name``)."""
    names = {}
    for address, info in workers.items():
        name = info.get("name", address)
        if name in names:
            task = next(iter(tasks_by_name([name])))
            raise InvalidArgumentError(f"Two workers claim {task}: {names[name]} and "
                                       f"{address} (both named {name})")
        names[name] = address
    return {task: names[name] for task, name in tasks_by_name([*names, *known]).items()
            if name in names}


def tasks_by_name(names: Iterable) -> dict[Task, Any]:
    """The task of each worker name (see the module docstring)."""
    named: dict[Task, Any] = {}
    others: list[tuple[tuple, Any]] = []
    for name in dict.fromkeys(names):
        m = _NAMED_TASK.match(str(name))
        if m:
            task = Task(m.group(1), int(m.group(2)))
            if task in named:
                raise InvalidArgumentError(
                    f"Two workers claim {task}: {named[task]} and {name}")
            named[task] = name
        else:
            others.append((_name_order(name), name))
    if not any(t.job == "worker" for t in named):
        for k, (_, name) in enumerate(sorted(others)):
            named[Task("worker", k)] = name
    return named


def _name_order(name: Any) -> tuple:
    """Numbers (and digit strings) by value, before other names."""
    if isinstance(name, int) or (isinstance(name, str) and name.isdigit()):
        return (0, int(name), "")
    return (1, 0, str(name))


class ClusterView:
    """What the Sessions on one Client know about its cluster."""

    def __init__(self, client):
        self.client = client
        self._lock = threading.Lock()
        self._tasks: dict[Task, str] | None = None
        self._incarnations: dict[str, str] = {}
        self._left: set[str] = set()
        self._watched: set[str] = set()
        self._graphs: dict[str, int] = {}  # graph id -> the version (number of ops) shipped
        self._names: dict[Any, None] = {}  # every worker name seen: a name keeps its rank
        self._count = -1  # workers in the cluster when the map was read
        self.generation = 0  # grows whenever the task map is read again
        #: names this client on the workers: its Sessions' tokens start with it
        self.token = uuid.uuid4().hex[:CLIENT_TOKEN_CHARS]
        self._lease = None  # the future that tells workers this client lives
        self._registering = False  # the orphan-journal plugin was sent

    # -- tasks --------------------------------------------------------------------------
    def tasks(self) -> dict[Task, str]:
        """The current task map. Read again from the scheduler only when it may have
        changed: a worker of it left (its remove-worker event), or the number of
        workers the client last heard of (its scheduler info, refreshed every few
        seconds without us) differs from the map's: a worker joined or came back."""
        with self._lock:
            if self._tasks is not None and not (self._left & set(self._tasks.values())) \
                    and self._same_count():
                return self._tasks
        return self.refresh()

    def _same_count(self) -> bool:
        identity = getattr(self.client, "_scheduler_identity", None) or {}
        count = identity.get("n_workers") if isinstance(identity, dict) else None
        return count is None or count == self._count

    def refresh(self) -> dict[Task, str]:
        """Read the task map and the workers' incarnations from the scheduler now."""
        workers = self.client.scheduler_info().get("workers")
        if workers is None:
            raise UnavailableError(
                f"The cluster's scheduler ({getattr(self.client.scheduler, 'address', None)}) "
                f"is unreachable: no task can run. Run again once the client has reconnected")
        with self._lock:
            known = list(self._names)
        found = task_map(workers, known)
        incarnations = self._read_incarnations(list(found.values()))
        with self._lock:
            self._names.update(dict.fromkeys(i.get("name", a) for a, i in workers.items()))
            self._tasks = found
            self._count = len(workers)
            self._incarnations = incarnations
            self._left -= set(workers)
            self.generation += 1
        self._watch(found.values())
        return found

    def forget(self) -> None:
        """Read the task map and the incarnations again at the next use."""
        with self._lock:
            self._tasks = None

    def missing(self) -> dict[Task, Any]:
        """Tasks whose worker was in the cluster and is not now (by name): a restart
        under way, or a worker gone for good."""
        with self._lock:
            present = set((self._tasks or {}).keys())
            names = list(self._names)
        return {t: n for t, n in tasks_by_name(names).items() if t not in present}

    def address(self, task: Task) -> str:
        """The worker of ``task``; UnavailableError if the cluster has none now (the
        scheduler is asked again first: a worker may have joined since)."""
        tasks = self.tasks()
        if task not in tasks:
            tasks = self.refresh()
        if task not in tasks:
            name = self.missing().get(task)
            was = f" (its worker, named {name}, left the cluster: run again once it is " \
                  f"back)" if name is not None else ""
            raise UnavailableError(f"No worker of the cluster is {task} now{was}; it has "
                                   f"{describe(tasks)}")
        return tasks[task]

    def incarnation(self, address: str, ask: bool = True) -> str | None:
        """The incarnation of the worker at ``address`` (with ``ask``, asked for if it
        was not known: a worker that did not answer in time when the map was read)."""
        with self._lock:
            known = self._incarnations.get(address)
        if known is None and ask:
            known = self._read_incarnations([address]).get(address)
            if known is not None:
                with self._lock:
                    self._incarnations[address] = known
        return known

    def _read_incarnations(self, addresses: list[str]) -> dict[str, str]:
        """Each worker's incarnation, asked of each apart: one that does not answer
        within INCARNATION_WAIT_S (hung) is left out, not waited for."""
        import asyncio

        from .worker import incarnation
        client = self.client

        async def one(address):
            answer = await asyncio.wait_for(
                client._run(incarnation, workers=[address], on_error="return"),
                INCARNATION_WAIT_S)
            return answer.get(address)

        async def every():
            return await asyncio.gather(*(one(a) for a in addresses), return_exceptions=True)

        try:
            answers = client.sync(every)
        except Exception:  # noqa: BLE001 - a worker that cannot answer is checked per run
            return {}
        return {a: i for a, i in zip(addresses, answers) if isinstance(i, str)}

    # -- workers that leave ---------------------------------------------------------------
    def _watch(self, addresses) -> None:
        for address in addresses:
            with self._lock:
                if address in self._watched:
                    continue
                self._watched.add(address)
            self.client.subscribe_topic(address, self._on_worker_event(address))

    def _on_worker_event(self, address: str):
        view = weakref.ref(self)

        def handle(event) -> None:
            _, message = event
            me = view()
            if me is not None and isinstance(message, dict) and \
                    message.get("action") == "remove-worker":
                with me._lock:
                    me._left.add(address)
        return handle

    def gone(self, addresses) -> list[str]:
        """Those of ``addresses`` that left the cluster (as the scheduler told)."""
        with self._lock:
            return [a for a in addresses if a in self._left]

    def check_alive(self, addresses) -> list[str]:
        """Those of ``addresses`` the scheduler does not list now (asks it);
        UnavailableError when the client has lost the scheduler (its info is empty)."""
        workers = self.client.scheduler_info().get("workers")
        if workers is None:
            raise UnavailableError(
                f"The cluster's scheduler ({getattr(self.client.scheduler, 'address', None)}) "
                f"is unreachable: the run cannot finish. Run again once the client has "
                f"reconnected")
        missing = [a for a in addresses if a not in workers]
        with self._lock:
            self._left.update(missing)
        return missing

    # -- the lease ----------------------------------------------------------------------------
    def keep_lease(self) -> bool:
        """Submit this client's lease again if the cluster lost it (``client.restart()``
        cancels every future of the client): without it the workers take the client for
        gone and drop its graphs (GraphPlugin._watch_owners). True when it was lost:
        every graph is then shipped again at its next use."""
        current = self._lease
        if current is None or current.status not in ("cancelled", "lost", "error"):
            return False
        from .worker import lease
        with self._lock:
            if self._lease is current:
                self._lease = self.client.submit(lease, key=f"graphflow-lease-{self.token}",
                                                 pure=False)
                self._graphs.clear()
        return True

    # -- graphs -----------------------------------------------------------------------------
    def ship(self, graph: Graph) -> tuple[str, int]:
        """Give every worker (and every worker that starts later) ``graph`` as it is now,
        unless they have this version already: (the graph's id, its version). Does not
        wait for the workers (a hung one would hold every run; a worker whose stage
        arrives first waits for the graph, WorkerState._graph_def)."""
        key, version = graph_id(graph), len(graph.operations())
        with self._lock:
            if self._graphs.get(key, -1) >= version:
                return key, version
        text = json.dumps(shipped_graph_def(graph), separators=(",", ":"))
        from .worker import GraphPlugin, OrphanJournals, lease, plugin_name
        with self._lock:
            first = not self._graphs and not self._registering
            self._registering = True
            if self._lease is None:  # held as long as this view (and so its Client) lives
                self._lease = self.client.submit(lease, key=f"graphflow-lease-{self.token}",
                                                 pure=False)
        if first:
            self._register(OrphanJournals(), "graphflow-orphan-journals", None, 0)
        owners = owners_of(key) | {self.token}
        self._register(GraphPlugin(key, version, text, tuple(sorted(owners))), plugin_name(key),
                       key, version)
        with self._lock:
            if key not in self._graphs:
                weakref.finalize(graph, _unship, weakref.ref(self), key, plugin_name(key))
            self._graphs[key] = max(version, self._graphs.get(key, -1))
        return key, version

    def _register(self, plugin, name: str, key: str | None, version: int) -> None:
        """Register ``plugin`` on the scheduler (which gives it to every worker) without
        waiting for the workers; if that fails, the graph is shipped again next run."""
        from distributed.protocol import dumps
        dumps(plugin)  # an error here is the caller's, at once
        client, view = self.client, weakref.ref(self)

        async def register() -> None:
            try:
                await client._register_worker_plugin(plugin, name, idempotent=False)
            except Exception as e:  # noqa: BLE001 - logged; the next run ships again
                log = _log.warning if client.status == "running" else _log.debug
                log("Shipping %s to the workers failed: %s: %s", name, type(e).__name__, e)
                me = view()
                if me is not None and key is not None:
                    with me._lock:
                        if me._graphs.get(key) == version:
                            me._graphs.pop(key, None)  # a finalizer may have popped it
        client.loop.add_callback(register)


#: An initial value of at least this many bytes is not shipped with the graph to every
#: worker: the runs that use it (the initializers) send it to the variable's worker.
INITIAL_VALUE_BYTES = 1 << 16


def sent_per_run(op) -> bool:
    """Whether ``op`` is a big initial value: a Const read only by assignments (a
    variable's initializer), of at least INITIAL_VALUE_BYTES."""
    if op.type != "Const":
        return False
    value = op.attrs.get("value")
    if getattr(value, "nbytes", 0) < INITIAL_VALUE_BYTES:
        return False
    consumers = [c for o in op.outputs for c in o.consumers()]
    return bool(consumers) and all(c.type == "AssignVariableOp" for c in consumers)


def shipped_graph_def(graph: Graph) -> dict:
    """``graph``'s GraphDef without its big initial values: each is a Placeholder of
    its dtype and shape there (a stage that reads one gets it from the client)."""
    graph_def = graph.as_graph_def()
    big = {op.name for op in graph.operations() if sent_per_run(op)}
    if big:
        nodes = []
        for node in graph_def["nodes"]:
            if node["name"] in big:
                tensor = node["attrs"]["value"]["tensor"]
                node = {**node, "op": "Placeholder",
                        "attrs": {"dtype": {"type": tensor["dtype"]},
                                  "shape": {"shape": list(tensor["shape"])}}}
            nodes.append(node)
        graph_def = {**graph_def, "nodes": nodes}
    return graph_def


def _unship(view_ref, key: str, name: str) -> None:
    """``graph`` is gone in this process: its plugin leaves the scheduler and the workers
    (without blocking: this runs wherever the garbage collector does)."""
    view = view_ref()
    if view is None or view.client.status != "running":
        return
    # no lock: the garbage collector may run this inside a region of this thread that holds
    # view._lock (a run's task refresh did: the run hung); a dict's pop is atomic
    view._graphs.pop(key, None)
    try:
        view.client.loop.add_callback(_unregister, view.client, name)
    except RuntimeError:  # pragma: no cover - the client's loop closed meanwhile
        pass


async def _unregister(client, name: str) -> None:
    try:
        await client._unregister_worker_plugin(name, nanny=False)
    except Exception:  # noqa: BLE001 - already gone (another client of the cluster let it go)
        pass


def describe(tasks: dict[Task, str]) -> str:
    return ", ".join(f"{t} ({a})" for t, a in sorted(tasks.items())) or "no workers"


_views: "weakref.WeakKeyDictionary[Any, ClusterView]" = weakref.WeakKeyDictionary()
_views_lock = threading.Lock()


def owners_of(key: str) -> set[str]:
    """The tokens of this process's client views that shipped graph ``key``."""
    with _views_lock:
        views = list(_views.values())
    return {v.token for v in views if key in v._graphs}


def cluster_view(client) -> ClusterView:
    """The one ClusterView of ``client``."""
    with _views_lock:
        view = _views.get(client)
        if view is None:
            view = _views[client] = ClusterView(client)
        return view


_graph_ids: "weakref.WeakKeyDictionary[Graph, str]" = weakref.WeakKeyDictionary()


def graph_id(graph: Graph) -> str:
    """A name for ``graph`` on the workers, the same for every Session of it."""
    with _views_lock:
        key = _graph_ids.get(graph)
        if key is None:
            key = _graph_ids[graph] = f"graph-{uuid.uuid4().hex[:16]}"
        return key
