"""One parallel run of a Plan: steps start as their inputs become ready, heavy ones on
the thread pool, cheap ones inline on the calling thread (a thread hop costs more
than a small kernel).

Scheduler state (dask-style, named as in ``dask/local.py``): ``waiting[k]`` counts
the unfinished producers of step k; ``ready`` is a heap of steps whose producers
are done, started in plan order; ``unread[i]`` counts the unfinished readers of
slot i, which is released at zero. After a failure, steps past the failed one (in
plan order) no longer start while earlier ones still run, so the error reported is
the first in plan order: the one a serial run reports.
"""
from __future__ import annotations

import heapq
import queue
from typing import Callable, Sequence

import numpy as np

#: What a pool step reports when it was not started because an earlier step failed.
SKIPPED = object()


class ParallelRun:
    """The state of one run; :meth:`run` drives it to the end and raises the first
    error in plan order (named by ``name_error``)."""

    def __init__(self, plan, slots: list, pool, runs: Sequence[Callable], heavy_elements: int,
                 name_error: Callable):
        self.plan, self.slots, self.pool, self.runs = plan, slots, pool, runs
        self.heavy_elements, self.name_error = heavy_elements, name_error
        self.waiting = list(plan.waiting)
        self.unread = list(plan.use_counts)
        self.ready = [k for k, w in enumerate(self.waiting) if w == 0]
        heapq.heapify(self.ready)
        self.done: queue.SimpleQueue = queue.SimpleQueue()  # (step, None | error | SKIPPED)
        self.errors: dict[int, BaseException] = {}
        self.limit = len(runs)  # steps at or past it do not start (read by pool threads)
        self.in_flight = 0

    def run(self) -> None:
        try:
            with np.errstate(all="ignore"):  # inf and NaN results come silently, as in TF
                while self.ready or self.in_flight:
                    self._start_ready()
                    if self.in_flight:
                        self._collect_one()
        except BaseException:
            self._drain()  # KeyboardInterrupt or similar: let what runs finish, then raise
            raise
        self._raise_first_error()

    # -- the coordinator's steps ----------------------------------------------------------
    def _start_ready(self) -> None:
        """Start every ready step: heavy ones on the pool, the others here, in order."""
        while self.ready:
            k = heapq.heappop(self.ready)
            if k >= self.limit:
                continue
            if self._is_heavy(k):
                self.in_flight += 1
                self.pool.submit(self._work, k)
            else:
                self._run_inline(k)

    def _is_heavy(self, k: int) -> bool:
        """The plan's static verdict, or (unknown sizes) this run's input sizes."""
        heavy = self.plan.heavy[k]
        if heavy is None:
            heavy = any(getattr(self.slots[i], "size", 0) >= self.heavy_elements
                        for i in self.plan.steps[k].flat_inputs)
        return heavy

    def _run_inline(self, k: int) -> None:
        try:
            self.runs[k](self.slots)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:  # noqa: BLE001 - reported by _raise_first_error
            self._failed(k, e)
            return
        self._finished(k)

    def _collect_one(self) -> None:
        """Wait for one pool step to report, and account for it."""
        k, err = self.done.get()
        self.in_flight -= 1
        if err is None:
            self._finished(k)
        elif err is not SKIPPED:
            self._failed(k, err)

    def _finished(self, k: int) -> None:
        """Release the slots step k read last, and make ready the steps it unblocks."""
        plan = self.plan
        for i in plan.steps[k].flat_inputs:
            self.unread[i] -= 1
            if self.unread[i] == 0 and i not in plan.pinned:
                plan._release(self.slots, i)
        for j in plan.dependents[k]:
            self.waiting[j] -= 1
            if self.waiting[j] == 0:
                heapq.heappush(self.ready, j)

    def _failed(self, k: int, err: BaseException) -> None:
        self.errors[k] = err
        self.limit = min(self.limit, k)

    def _drain(self) -> None:
        """Start nothing more and wait for the pool steps in flight."""
        self.limit = -1
        while self.in_flight:
            self.done.get()
            self.in_flight -= 1

    def _raise_first_error(self) -> None:
        if not self.errors:
            return
        k = min(self.errors)
        err = self.errors[k]
        self.errors.clear()  # no cycle (this frame -> errors -> traceback -> this frame)
        try:
            if isinstance(err, (KeyboardInterrupt, SystemExit)):
                raise err
            raise self.name_error(self.plan.steps[k], err) from err
        finally:
            del err

    # -- on a pool thread ------------------------------------------------------------------
    def _work(self, k: int) -> None:
        if k >= self.limit:
            self.done.put((k, SKIPPED))
            return
        try:
            with np.errstate(all="ignore"):  # per thread
                self.runs[k](self.slots)
            self.done.put((k, None))
        except BaseException as e:  # noqa: BLE001 - reported by the coordinator
            self.done.put((k, e))
