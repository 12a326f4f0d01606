"""The client side of a distributed run: one (fetches, feeds) signature, compiled once
into stages (tasks.py, stages.py), run as one pinned dask task per stage.

Per run: resolve each task's worker (ClusterView), check that no worker holding
variables restarted, send big feeds (and big initial values) straight to the workers
that read them (``scatter(direct=True)``), for a run that writes on several tasks
submit its chain of lock tasks (its write locks, task after task), submit the stages
in order, each pinned to its worker (``workers=[address]``,
``allow_other_workers=False``, ``pure=False``, a key unique to the run and stage)
with its upstream stages' futures as arguments (values move worker to worker), wait
while watching the workers, then:

- every stage succeeded: gather the fetches (``gather(direct=True)``) and tell the
  workers that wrote to commit (drop the run's undo journal, free its write locks;
  the run does not wait, the Session holds the futures until done and close() waits
  for them);
- a stage failed or a worker left: cancel what has not started, have the workers
  that wrote roll the run back (restore its journal, the last write first, then free
  its locks; never given up while the client lives), and raise the error as the
  user's OpError class, naming the node, its full device and where it was built; a
  worker that left is an UnavailableError.
"""
from __future__ import annotations

import hashlib
import itertools
import logging
import threading
import time
import uuid
import weakref
from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from graphflow.errors import (AbortedError, DeadlineExceededError, FailedPreconditionError,
                              InternalError, InvalidArgumentError, OpError, UnavailableError,
                              UnimplementedError)
from graphflow.graph import Graph, Operation, Output

from ..passes import prune, require_feeds
from ..tracing import RunMetadata
from .cluster import ClusterView, cluster_view, describe, sent_per_run
from .stage_graph import StageSpec, sink_ops
from .stages import Route, Stage, cut_stages, routes
from .tasks import Task, assign_tasks, variable_homes
from .worker import events_of, finish_run, lock_run, pick, run_stage

#: Feeds of at least this many bytes go to their workers by ``scatter(direct=True)``;
#: smaller ones ride in the task's arguments (through the scheduler, no extra round trip).
SCATTER_BYTES = 1 << 18
#: How often a waiting run asks the scheduler which workers are alive, on top of the
#: remove-worker events it listens to (seconds).
ALIVE_POLL_S = 1.0


class ClusterSession:
    """What a Session on a cluster keeps across runs: the cluster view, the graph as
    shipped, the workers' incarnations it has seen, a run counter."""

    def __init__(self, graph: Graph, config):
        self.graph = graph
        self.config = config
        self.view: ClusterView = cluster_view(config.cluster)
        self.worker_config = replace(  # intra_op_threads kept as given (None: the default)
            config, cluster=None, inter_op_threads=1,
            intra_op_threads=config.intra_op_threads if config.intra_op_threads_given else None,
            # not given: each task is held to its own worker's limit (worker.worker_limited)
            memory_limit_bytes=config.memory_limit_bytes if config.memory_limit_given else None)
        self.token = self.view.token + uuid.uuid4().hex[:8]  # the view's names its lease
        self._runs = itertools.count()
        self.seen: dict[Task, str | None] = {}  # incarnation of each stateful task's worker
        self._commits: dict = {}  # commit futures not done yet -> their worker
        self._commits_done = threading.Condition()
        self._plans: dict[tuple, DistributedPlan] = {}

    def plan(self, fetches: Sequence, feeds: Sequence[Output]) -> "DistributedPlan":
        """The compiled signature, made once per (fetches, feeds) as a local Session's
        plans are (a graph that grows changes no signature's ops, nor its variables'
        homes; each run resolves the tasks' workers again)."""
        self.check_client()
        key = (tuple(fetches), tuple(feeds))
        plan = self._plans.get(key)
        if plan is None:
            try:
                plan = DistributedPlan(self, fetches, feeds)
            except OpError:
                raise
            except Exception as e:  # noqa: BLE001 - Dask's errors, mapped (cluster_error)
                raise self.cluster_error(e) from e
            with self._commits_done:
                plan = self._plans.setdefault(key, plan)
        return plan

    def cluster_error(self, err: BaseException) -> OpError:
        """What Dask (or asyncio under it) raised during a run, as the OpError a user
        sees: the client closed (ClosedClientError, "IOLoop is closed", a cancelled
        future): FailedPreconditionError; a connection lost (a worker dying, the
        scheduler gone: CommClosedError, OSError, a timeout): UnavailableError; anything
        else an InternalError naming it."""
        name = type(err).__name__
        client = self.view.client
        if client.status not in ("running", "connecting", "newly-created"):
            return FailedPreconditionError(
                f"The Session's cluster client ({client.id}) is {client.status}: the run was "
                f"stopped ({name}: {err}). Make a Session with an open distributed.Client")
        if isinstance(err, (OSError, TimeoutError)) or name in _LOST_CONNECTION:
            return UnavailableError(f"The run lost its connection to the cluster ({name}: "
                                    f"{err}); run again once the cluster is healthy")
        return InternalError(f"The cluster run failed: {name}: {err}")

    def check_client(self) -> None:
        """FailedPreconditionError if the Client this Session runs on was closed (dask's
        ClosedClientError otherwise, from deep inside a submit)."""
        client = self.view.client
        if client.status not in ("running", "connecting", "newly-created"):
            raise FailedPreconditionError(
                f"The Session's cluster client ({client.id}, scheduler "
                f"{getattr(client.scheduler, 'address', None)}) is {client.status}: the "
                f"cluster cannot run anything for it. Make a Session with an open "
                f"distributed.Client")

    def ship(self) -> tuple[str, int]:
        """The graph's id and version on the workers (shipped again once it has grown)."""
        return self.view.ship(self.graph)

    def next_run(self) -> str:
        return f"{self.token}-{next(self._runs)}"

    def hold_commits(self, futures: list, workers: list[str]) -> None:
        """Keep a run's commit (or rollback) futures until their tasks ran. Not
        fire_and_forget: the scheduler handles its request apart from the submit
        (``update_graph`` is asynchronous there) and may find the task unknown yet, or
        already finished and then keep it forever (the 'lost computed tasks' at cluster
        close)."""
        with self._commits_done:
            self._commits.update(zip(futures, workers))
        for f in futures:
            f.add_done_callback(self._commit_done)

    def _commit_done(self, future) -> None:
        with self._commits_done:
            self._commits.pop(future, None)
            if not self._commits:
                self._commits_done.notify_all()

    def close(self, timeout: float = 10.0) -> None:
        """Wait (at most ``timeout`` seconds) for the commits and rollbacks of this
        Session's runs on the workers that are still there (none if its Client was
        closed: they cannot finish)."""
        if self.view.client.status not in ("running", "connecting"):
            return
        deadline = time.monotonic() + timeout
        with self._commits_done:
            while self._commits and time.monotonic() < deadline:
                pending = set(self._commits.values())
                if set(self.view.gone(pending)) == pending:
                    return  # their workers left: nothing to commit there
                self._commits_done.wait(_WATCH_S)

    def check_restarts(self, addresses: dict[Task, str], stateful: set[Task]) -> dict[Task, str]:
        """Expected incarnations of the stateful tasks' workers. Workers that changed since
        this Session last saw them (every task it has used, not only this run's) are
        reported once, all in one AbortedError, never silently re-initialized; the next
        run accepts them."""
        for task in stateful:
            if self.seen.get(task) is None:
                self.seen[task] = self.view.incarnation(addresses[task])
        restarted = self.restarted()
        if restarted:
            raise restarted_error(restarted)
        return {task: self.seen[task] for task in stateful if self.seen.get(task) is not None}

    def restarted(self) -> list[tuple[Task, str]]:
        """The tasks this Session used whose worker is a new process since (accepted
        from now on), with their new worker."""
        tasks = self.view.tasks()
        found = []
        for task, before in sorted(self.seen.items()):
            address = tasks.get(task)
            now = None if address is None else self.view.incarnation(address, ask=False)
            if before is None:
                self.seen[task] = now
            elif now is not None and now != before:
                self.seen[task] = now
                found.append((task, address))
        return found


def restarted_error(restarted: list[tuple[Task, str]]) -> AbortedError:
    """One AbortedError naming every restarted task."""
    tasks = ", ".join(str(t) for t, _ in restarted)
    workers = ", ".join(a for _, a in restarted)
    if len(restarted) == 1:
        what = f"Task {tasks} restarted (worker {workers} is a new process): the variables it"
    else:
        what = f"Tasks {tasks} restarted (workers {workers} are new processes): the variables they"
    return AbortedError(f"{what} held are gone. Run their initializers again "
                        f"(gf.global_variables_initializer) or restore a checkpoint")


class WorkerVariables:
    """``Session.resources`` of a Session on a cluster: its variables live on the workers,
    so code that reaches for them in this process (``gf.train.Saver`` today) gets a
    clear error instead of an empty store that would take writes silently."""

    def variable(self, name: str):
        raise UnimplementedError(
            f"Variable '{name}' lives on a worker of this Session's cluster, not in this "
            f"process: read it with sess.run(variable.read()) and set it with "
            f"variable.assign(...); gf.train.Saver does so)")

    def names(self):
        return iter(())

    def clear(self) -> None:
        pass


class DistributedPlan:
    """A compiled (fetches, feeds) signature of a Session on a cluster."""

    parallel = False  # the Session gives it no thread pool: dask runs the stages

    def __init__(self, session: ClusterSession, fetches: Sequence, feeds: Sequence[Output]):
        self.session = session
        self.graph = session.graph
        self.feeds = list(feeds)
        fed = set(self.feeds)
        ops = prune(fetches, fed)
        require_feeds(ops, fed)
        # big initial values travel with the runs that use them, to their variables' tasks
        # only, not with the graph to every worker (cluster.shipped_graph_def)
        initial = [op.outputs[0] for op in ops if sent_per_run(op) and op.outputs[0] not in fed]
        self.sent_values = [op.op.attrs["value"] for op in initial]
        if initial:
            self.feeds += initial
            fed.update(initial)
            ops = prune(fetches, fed)
        task_of = assign_tasks(ops, fed, variable_homes_of(self.graph, ops))
        _check_tasks_exist(task_of, session.view)
        self.stages: list[Stage] = cut_stages(ops, task_of, fed, fetches)
        self.routes: list[Route] = routes(self.stages, fetches)
        graph = session.ship() if self.stages else ("", 0)
        self._feed_index = {o: j for j, o in enumerate(self.feeds)}
        self._route_of = {(r.producer, r.consumer): k for k, r in enumerate(self.routes)}
        self._producer_of = {o: s.index for s in self.stages for o in s.outputs}
        self.arguments: list[list[tuple[str, int]]] = []  # per stage: ("route", k) | ("feed", j)
        self.specs: list[StageSpec] = []
        written: dict[Task, set[str]] = {}
        for s in self.stages:
            if s.writes:
                written.setdefault(s.task, set()).update(s.written)
        #: per task the run writes on: the variables whose write locks it takes there
        self.locks = {t: tuple(sorted(names)) for t, names in sorted(written.items())
                      if _ISOLATE}
        for s in self.stages:
            layout, sources = self._arguments_of(s)
            self.arguments.append(layout)
            self.specs.append(_spec(s, graph, sources, self.locks.get(s.task, ())
                                    if s.writes else ()))
        self._plan_locking()
        # per fetch: ("feed", j) | ("route", k, position) | ("op",)
        self.fetch_plan = [self._fetch_step(f) for f in fetches]
        self.client_routes = [k for k, r in enumerate(self.routes) if r.consumer is None]
        self.routes_from = [[k for k, r in enumerate(self.routes) if r.producer == s.index]
                            for s in self.stages]
        self.tasks = sorted({s.task for s in self.stages})
        self.writers = sorted({s.task for s in self.stages if s.writes})
        self.stateful = {s.task for s in self.stages if s.uses_variables}

    def _plan_locking(self) -> None:
        """When a run that writes on several tasks takes its locks. Late (the usual
        case: no stage that writes needs another that writes): the stages the writing
        ones need run first, without locks, and each task's lock task waits for the
        values its first writing stage reads, so a run holds its locks only from its
        first write to its commit and runs that write the same variables overlap in
        their reads. Early otherwise: the lock chain runs first and every stage on a
        locked task waits for it (a lock task that waited for a stage that waits for a
        lock could close a cycle)."""
        writers = [s.index for s in self.stages if s.writes]
        ancestors: set[int] = set()
        stack = [u for i in writers for u in self.stages[i].upstream]
        while stack:
            u = stack.pop()
            if u not in ancestors:
                ancestors.add(u)
                stack.extend(self.stages[u].upstream)
        self.late_locks = len(self.locks) > 1 and not any(self.stages[a].writes
                                                          for a in ancestors)
        self.before_locks = sorted(ancestors) if self.late_locks else []
        self.lock_inputs: dict[Task, list[int]] = {}
        if self.late_locks:
            for i in writers:
                task = self.stages[i].task
                if task not in self.lock_inputs:
                    self.lock_inputs[task] = [k for kind, k in self.arguments[i]
                                              if kind == "route"]
        rest = [s.index for s in self.stages if s.index not in set(self.before_locks)]
        self.order = self.before_locks + rest

    def _reached_by(self, value: Output, consumer: Task | None) -> tuple[int, int]:
        """The route that brings ``value`` to ``consumer`` (None: the client), and the
        value's position in what that route carries."""
        k = self._route_of[(self._producer_of[value], consumer)]
        route = self.routes[k]
        carried = self.stages[route.producer].outputs if route.picks is None else route.needs
        return k, carried.index(value)

    def _arguments_of(self, stage: Stage) -> tuple[list[tuple[str, int]], tuple]:
        """A stage's dask arguments (each feed and route once) and, per input of the
        stage, (argument, position in it, or -1 for a feed)."""
        layout: list[tuple[str, int]] = []

        def argument(kind: str, k: int) -> int:
            if (kind, k) not in layout:
                layout.append((kind, k))
            return layout.index((kind, k))

        sources = []
        for i in stage.inputs:
            if i in self._feed_index:
                sources.append((argument("feed", self._feed_index[i]), -1))
            else:
                k, at = self._reached_by(i, stage.task)
                sources.append((argument("route", k), at))
        for k in stage.upstream:  # control-only dependencies wait for their stage too
            argument("route", self._route_of[(k, stage.task)])
        return layout, tuple(sources)

    def _fetch_step(self, fetch) -> tuple:
        if isinstance(fetch, Operation):
            return ("op",)
        if fetch in self._feed_index:
            return ("feed", self._feed_index[fetch])
        return ("route", *self._reached_by(fetch, None))

    # -- running ------------------------------------------------------------------------------
    def run(self, feed_values: Sequence, pool=None, metadata: RunMetadata | None = None,
            deadline: float | None = None) -> list:
        """Run every stage once; the fetched values, as a local Plan returns them. Every
        error is an OpError: what Dask raises (a closed client, a lost scheduler, a comm
        closed by a dying worker) is mapped by ``ClusterSession.cluster_error``.
        ``deadline`` (time.monotonic()): past it the run is rolled back and raises
        DeadlineExceededError."""
        try:
            return self._run(feed_values, metadata, deadline)
        except OpError:
            raise
        except Exception as e:  # noqa: BLE001 - Dask's and asyncio's errors, mapped
            raise self.session.cluster_error(e) from e

    def _run(self, feed_values: Sequence, metadata: RunMetadata | None,
             deadline: float | None) -> list:
        if self.sent_values:
            feed_values = [*feed_values, *self.sent_values]
        if not self.stages:
            return [self._fetched(step, None, feed_values) for step in self.fetch_plan]
        session = self.session
        session.check_client()
        client = session.view.client
        if session.view.keep_lease():  # the cluster restarted: its workers lost the graph
            session.ship()
        addresses = {task: session.view.address(task) for task in self.tasks}
        expected = session.check_restarts(addresses, self.stateful)
        run_id = session.next_run()
        feeds = self._feeds(client, feed_values, addresses)
        submitted: list = []
        try:
            stage_futures, route_futures, everything = self._submit(
                client, run_id, addresses, expected, metadata is not None, feeds, submitted)
        except BaseException:
            self._abandon(client, run_id, addresses, submitted)
            raise
        fetched = self._settle(client, run_id, addresses, stage_futures,
                               [route_futures[k] for k in self.client_routes], everything,
                               metadata, deadline)
        by_route = dict(zip(self.client_routes, fetched))
        return [self._fetched(step, by_route, feed_values) for step in self.fetch_plan]

    def _abandon(self, client, run_id: str, addresses: dict[Task, str], submitted: list) -> None:
        """A run whose submission failed part way: cancel what was submitted and roll it
        back where it may have written, as far as the cluster still answers (a client
        that is gone leaves it to the workers: OrphanJournals rolls it back)."""
        try:
            _cancel(client, submitted)
            self._finish(run_id, addresses, commit=False)
        except Exception as e:  # noqa: BLE001 - the caller raises the submission's error
            _log.debug("Run %s: abandoning it failed: %s: %s", run_id, type(e).__name__, e)

    def _submit(self, client, run_id: str, addresses: dict[Task, str], expected: dict,
                trace: bool, feeds: dict, submitted: list) -> tuple[list, dict[int, Any], list]:
        """Every stage (and the lock chain, where it falls in ``order``) submitted to its
        worker: the stage futures in stage order, the route futures, and every future
        of the run (each also appended to ``submitted`` as soon as it exists)."""
        session = self.session
        lock_futures: dict[Task, Any] = {}
        route_futures: dict[int, Any] = {}
        by_index: dict[int, Any] = {}
        for position, i in enumerate(self.order):
            if position == len(self.before_locks):  # the stages the writers need are in
                lock_futures = self._lock_chain(client, run_id, addresses, route_futures)
                submitted.extend(lock_futures.values())
            s, spec, layout = self.stages[i], self.specs[i], self.arguments[i]
            address = addresses[s.task]
            args = [route_futures[k] if kind == "route" else feeds[(k, address)]
                    for kind, k in layout]
            if s.task in lock_futures and (s.writes or not self.late_locks):
                args.append(lock_futures[s.task])  # after the run's locks (an argument unread)
            future = client.submit(
                run_stage, spec, session.worker_config, run_id, expected.get(s.task), trace,
                *args, key=f"graphflow-stage-{run_id}-{s.index}", workers=[address],
                allow_other_workers=False, pure=False)
            by_index[i] = future
            submitted.append(future)
            for k in self.routes_from[s.index]:
                picks = self.routes[k].picks
                route_futures[k] = future if picks is None else client.submit(
                    pick, future, picks, key=f"graphflow-pick-{run_id}-{k}",
                    workers=[address], allow_other_workers=False, pure=False)
                submitted.append(route_futures[k])
        stage_futures = [by_index[i] for i in range(len(self.stages))]
        everything = stage_futures + [f for f in route_futures.values()
                                      if all(f is not g for g in stage_futures)]
        everything += lock_futures.values()
        return stage_futures, route_futures, everything

    def _settle(self, client, run_id: str, addresses: dict[Task, str], stage_futures: list,
                client_futures: list, everything: list, metadata: RunMetadata | None,
                deadline: float | None = None) -> list:
        """Wait for the run, then commit it and return what the client fetches; or cancel
        it, take back its writes and raise why it failed."""
        try:
            failed = self._wait(everything, stage_futures, addresses, deadline)
            if failed is None:
                fetched = client.gather(client_futures, direct=True)
                if metadata is not None:
                    self._collect_events(client, stage_futures, addresses, metadata)
        except (KeyboardInterrupt, SystemExit):
            _cancel(client, everything)
            self._finish(run_id, addresses, commit=False)
            raise
        except Exception as e:  # noqa: BLE001 - a value lost with its worker, mostly
            failed = UnavailableError(f"The run lost a value while fetching it: "
                                      f"{type(e).__name__}: {e}")
        if failed is not None:
            _cancel(client, everything)
            self._finish(run_id, addresses, commit=False,
                         wait_s=DEADLINE_ROLLBACK_S if isinstance(failed, DeadlineExceededError)
                         else _ROLLBACK_TIMEOUT_S)
            raise failed
        self._finish(run_id, addresses, commit=True)
        return fetched

    def _lock_chain(self, client, run_id: str, addresses: dict[Task, str],
                    route_futures: dict[int, Any]) -> dict:
        """For a run that writes on several tasks: a task per such task that takes the
        run's write locks there, each after the previous one, in task order (one order
        for every run of every client: no two runs can each wait for the other). A run
        that writes on one task takes its locks in its first stage there (no extra
        task)."""
        if len(self.locks) < 2:
            return {}
        chained: dict[Task, Any] = {}
        previous: tuple = ()
        for k, (task, names) in enumerate(self.locks.items()):
            inputs = [route_futures[r] for r in self.lock_inputs.get(task, ())]
            future = client.submit(lock_run, run_id, names, *previous, *inputs,
                                   key=f"graphflow-lock-{run_id}-{k}",
                                   workers=[addresses[task]], allow_other_workers=False,
                                   pure=False)
            chained[task] = future
            previous = (future,)
        return chained

    def _feeds(self, client, values: Sequence, addresses: dict[Task, str]) -> dict:
        """Each fed value as the argument for each worker that reads it: small ones as
        they are, big ones scattered straight to that worker."""
        wanted: dict[tuple[int, str], Any] = {}
        for s, layout in zip(self.stages, self.arguments):
            for kind, j in layout:
                if kind == "feed":
                    wanted[(j, addresses[s.task])] = values[j]
        big: dict[str, list[int]] = {}
        for (j, address), value in wanted.items():
            if getattr(value, "nbytes", 0) >= SCATTER_BYTES:
                big.setdefault(address, []).append(j)
        for address, js in big.items():
            futures = client.scatter([values[j] for j in js], workers=[address], direct=True,
                                     hash=False)
            for j, future in zip(js, futures):
                wanted[(j, address)] = future
        return wanted

    def _collect_events(self, client, stage_futures: list, addresses: dict[Task, str],
                        metadata: RunMetadata) -> None:
        """The traced stages' events (only they travel, not the values)."""
        futures = [client.submit(events_of, f, workers=[addresses[s.task]],
                                 allow_other_workers=False, pure=False)
                   for s, f in zip(self.stages, stage_futures)]
        for events in client.gather(futures, direct=True):
            for e in events:
                metadata._add(e)

    def _wait(self, futures: list, stages: list, addresses: dict[Task, str],
              deadline: float | None = None) -> BaseException | None:
        """Wait for every future, or for the first error; the run's error, if any. A
        worker of the run that leaves the cluster is an UnavailableError at once; a run
        past its ``deadline`` a DeadlineExceededError (waiting for another run's write
        locks counts: that run may hang on a stalled worker)."""
        view = self.session.view
        watched = {a: t for t, a in addresses.items()}
        settled = _Settled(futures)
        next_poll = time.monotonic() + ALIVE_POLL_S
        while not settled.wait(_WATCH_S):
            if deadline is not None and time.monotonic() > deadline:
                waiting = sorted({str(s.task) for s, f in zip(self.stages, stages)
                                  if not f.done()})
                return DeadlineExceededError(
                    f"The run did not finish within its deadline (RunOptions.timeout_in_ms / "
                    f"SessionConfig.operation_timeout_in_ms); still running on "
                    f"{', '.join(waiting) or 'no task'}. Its writes were rolled back")
            gone = view.gone(watched)
            if not gone and time.monotonic() >= next_poll:
                gone = view.check_alive(watched)
                next_poll = time.monotonic() + ALIVE_POLL_S
            if gone:
                return UnavailableError(
                    f"Worker {gone[0]} ({watched[gone[0]]}) left the cluster during the run: "
                    f"its stages cannot finish. The run's writes were rolled back on the other "
                    f"workers; run again once the cluster is healthy")
        for s, f in zip(self.stages, stages):
            if f.status == "error":
                return self._user_error(f.exception(), s)
            if f.status in ("cancelled", "lost"):
                return UnavailableError(f"The stage of {s.task} on worker "
                                        f"{addresses[s.task]} was {f.status}: the worker left "
                                        f"the cluster during the run")
        for f in futures:  # a pick failed without its stage failing: a lost worker
            if f.status != "finished":
                return UnavailableError(f"A value of the run was {f.status}: a worker left the "
                                        f"cluster during the run")
        return None

    def _finish(self, run_id: str, addresses: dict[Task, str], commit: bool,
                wait_s: float | None = None) -> None:
        """Commit (without waiting) or roll back (and wait) the run on every worker that
        may have written; a worker that is gone has nothing left to undo. A rollback is
        never given up: past _ROLLBACK_TIMEOUT_S (a worker busy or hung) the run's error
        is raised, but the Session holds the rollback's future until it has run (the
        worker keeps the run's journal and write locks until then, and takes its client
        for gone only once its lease is, OrphanJournals)."""
        if not self.writers:
            return
        view = self.session.view
        gone = set(view.gone(addresses.values()))
        workers = [addresses[t] for t in self.writers if addresses[t] not in gone]
        futures = [_submit_retried(
            view.client, finish_run, run_id, commit, workers=[w], allow_other_workers=False,
            pure=False, key=f"graphflow-{'commit' if commit else 'rollback'}-{run_id}-{k}")
            for k, w in enumerate(workers)]
        self.session.hold_commits(futures, workers)  # until done, however long it takes
        if commit:
            return
        settled = _Settled(futures, stop_on_error=False)
        wait_s = _ROLLBACK_TIMEOUT_S if wait_s is None else wait_s
        deadline = time.monotonic() + wait_s
        next_poll = time.monotonic() + ALIVE_POLL_S
        while not settled.wait(_WATCH_S):  # a worker that leaves has nothing left to undo
            pending = {w for f, w in zip(futures, workers) if not f.done()}
            left = set(view.gone(pending))
            if left != pending and time.monotonic() >= next_poll:
                left |= set(view.check_alive(pending))
                next_poll = time.monotonic() + ALIVE_POLL_S
            if left >= pending:
                _cancel(view.client, futures)
                return
            if time.monotonic() > deadline:
                _log.warning("Run %s: its rollback on %s has not run after %.0f s; it stays "
                             "pending (the run's writes there are taken back when it runs)",
                             run_id, ", ".join(sorted(pending - left)), wait_s)
                return

    def _user_error(self, err: BaseException, stage: Stage) -> BaseException:
        """A worker's error as the user sees it: the same OpError class, with the site
        where the node was built (from the client's graph, which knows it)."""
        if isinstance(err, AbortedError):  # the view had not seen the restart yet
            self.session.view.refresh()
            restarted = self.session.restarted()
            if not any(t == stage.task for t, _ in restarted):
                self.session.seen.pop(stage.task, None)
                restarted.append((stage.task, self.session.view.tasks().get(stage.task, "?")))
            return restarted_error(sorted(restarted))
        if isinstance(err, OpError):
            site = None
            if err.node_name is not None and err.node_name in self.graph:
                site = self.graph.operation(err.node_name).site
            return type(err)(err.message, err.node_name, err.op_type, site=site,
                             detail=err.detail)
        name = type(err).__name__
        if name in ("KilledWorker", "NoValidWorkerError"):
            return UnavailableError(f"The stage of {stage.task} could not run: {name}: {err} "
                                    f"(a worker died, or none is left for the task)")
        return InternalError(f"The stage of {stage.task} failed: {name}: {err}")

    @staticmethod
    def _fetched(step: tuple, by_route: dict | None, feed_values: Sequence):
        if step[0] == "op":
            return None
        value = feed_values[step[1]] if step[0] == "feed" else by_route[step[1]][0][step[2]]
        if not isinstance(value, np.ndarray):
            value = np.asarray(value)
        if not value.flags.writeable:
            value = value.copy()  # the caller gets an array of its own
        return value


def _cancel(client, futures: list) -> None:
    """Cancel what a failed run submitted, as far as the client can: its rollback must
    still be sent when a cancel fails (a comm closing)."""
    if not futures:
        return
    try:
        client.cancel(futures)
    except Exception as e:  # noqa: BLE001 - best effort: the rollback follows
        _log.debug("Cancelling a failed run's tasks failed: %s: %s", type(e).__name__, e)


def _submit_retried(client, fn, *args, **kwargs):
    """``client.submit``, tried again when it fails while the client runs (a commit or
    rollback must reach its worker: without it the run's write locks stay held while the
    client lives)."""
    for attempt in range(_FINISH_ATTEMPTS):
        try:
            return client.submit(fn, *args, **kwargs)
        except Exception:  # noqa: BLE001 - a lost connection, mostly: raised if it stays
            if attempt == _FINISH_ATTEMPTS - 1 or client.status != "running":
                raise
            time.sleep(0.05 * 2 ** attempt)


#: How many times a commit or rollback is submitted before its run's error says so.
_FINISH_ATTEMPTS = 5


class _Settled:
    """Set when every future is done, or (``stop_on_error``) as soon as one is not
    successful."""

    def __init__(self, futures: list, stop_on_error: bool = True):
        self._remaining = len(futures)
        self._stop_on_error = stop_on_error
        self._lock = threading.Lock()
        self._event = threading.Event()
        if not futures:
            self._event.set()
        for f in futures:
            f.add_done_callback(self._done)

    def _done(self, future) -> None:
        with self._lock:
            self._remaining -= 1
            if self._remaining <= 0 or (self._stop_on_error and future.status != "finished"):
                self._event.set()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)


_log = logging.getLogger(__name__)
#: Dask errors (by name: their modules move between versions) that say a connection is lost
_LOST_CONNECTION = frozenset({"CommClosedError", "StreamClosedError", "KilledWorker",
                              "FutureCancelledError", "CancelledError", "TimeoutError"})
#: Whether runs take write locks (WorkerState.lock). Only benchmarks/distributed.py
#: turns it off, for plans it makes then, to measure what isolation costs: without it
#: a failed run's rollback can undo other runs' commits.
_ISOLATE = True
#: How often a waiting run looks at the workers that left (the events it listens to).
_WATCH_S = 0.02
#: How long a failed run waits for its rollbacks (a worker that hangs is left behind).
_ROLLBACK_TIMEOUT_S = 30.0
#: How long a run past its deadline waits for its rollbacks (those of live workers take
#: milliseconds; a stalled worker's stays pending, held by the Session, and runs when
#: the worker does).
DEADLINE_ROLLBACK_S = 1.0


def _spec(stage: Stage, graph: tuple[str, int], sources: tuple,
          locks: tuple[str, ...] = ()) -> StageSpec:
    outputs = tuple((o.op.name, o.index) for o in stage.outputs)
    inputs = tuple((o.op.name, o.index, o.dtype.name,
                    None if o.shape.rank is None else tuple(o.shape.as_list()))
                   for o in stage.inputs)
    fields = (*graph, str(stage.task), tuple(op.name for op in stage.ops), inputs, sources,
              outputs, tuple(op.name for op in sink_ops(stage.ops, stage.outputs)),
              stage.writes, stage.uses_variables, locks)
    # the key leaves the graph's version out: a graph only grows, so the stage is the same
    # one at every later version (a worker compiles it once, not once per version)
    key = hashlib.sha256(repr(fields[:1] + fields[2:]).encode()).hexdigest()
    return StageSpec(key, *fields)


#: per graph: the home of each variable handle, by op name (names, not the ops: a value
#: that held the graph's ops would keep the graph alive in this weak dictionary)
_homes: "weakref.WeakKeyDictionary[Graph, dict[str, Task]]" = weakref.WeakKeyDictionary()
_homes_lock = threading.Lock()


def variable_homes_of(graph: Graph, ops: Sequence[Operation]) -> dict[Operation, Task]:
    """The home of every variable handle among ``ops``: decided once per graph, for
    every run and Session of it (tasks.py)."""
    with _homes_lock:
        known = _homes.setdefault(graph, {})
        if any(op.type == "VarHandleOp" and op.name not in known for op in ops):
            fixed = {graph.operation(name): task for name, task in known.items()}
            known.update((op.name, task) for op, task in
                         variable_homes(graph.operations(), fixed).items())
        return {op: known[op.name] for op in ops if op.name in known}


def _check_tasks_exist(task_of: dict[Operation, Task], view: ClusterView) -> None:
    """InvalidArgumentError for a task the cluster never had; UnavailableError for one
    whose worker is away now (ClusterView.address)."""
    tasks = view.tasks()
    if any(task not in tasks for task in task_of.values()):
        tasks = view.refresh()
    missing = view.missing()
    for op, task in task_of.items():
        if task in missing:
            view.address(task)
        if task not in tasks:
            asked = f"requests {op.device}" if op.device else f"runs on {task}"
            raise InvalidArgumentError(
                f"Cannot assign a device for operation {op.name}: it {asked}, but the cluster "
                f"has no such task (it has {describe(tasks)})", op.name, op.type, site=op.site)
