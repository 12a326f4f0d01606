"""Serial or parallel: how a plan that could run its heavy nodes at once does run,
decided by measuring it, not assumed.

A plan with independent heavy steps (``passes.worth_parallel``) can run them on the
inter-op pool; but a parallel run drives every step through the Python scheduler, and
a serial run is one generated function with compiled segments. Which is faster depends
on the machine and the graph: on 2 cores a top-2 MoE step took 36 ms in parallel and
22 ms serially, while big independent kernels gain from the pool. So a plan measures:
its first :data:`WARMUP_CALLS` calls run in parallel (as before), then calls alternate
between the modes, each timed once the serial function's segments are compiled (an
untimed call compiles them) and no kernel compiles or loads in the background, until
each mode has :data:`SAMPLES` times; the faster median wins. The choice is checked
again, as the machine can change under it (a core taken by a neighbour while the
samples ran made a 2-core MoE step choose parallel: 29 ms a step where serial takes
17): every call of the chosen mode is timed (two clock reads), and one call in
:data:`RECHECK_CALLS` runs the other; when that one is faster, more follow at once, and
the other mode takes over once its median of :data:`SAMPLES` is below the chosen one's
by :data:`SWITCH_MARGIN`. Both modes run the same kernels: the results are the same
bits.

``GRAPHFLOW_RUN_MODE=parallel`` (or ``serial``) fixes the mode instead.
"""
from __future__ import annotations

import os
import statistics
import threading

from ..ops.tiering import compiles_pending

#: Calls that run in parallel before any is measured (first compiles, first touches).
WARMUP_CALLS = 2

#: Timed calls of each mode before the choice.
SAMPLES = 5

#: Calls after which a plan still undecided (its segments never became ready) decides
#: on what it has measured, once each mode has a timed call (timed from then on even
#: beside background compiles).
MAX_MEASURED_CALLS = 64

#: After the choice, one call in this many runs the other mode, timed.
RECHECK_CALLS = 200

#: The other mode takes over when its median time is below this fraction of the chosen's.
SWITCH_MARGIN = 0.9


def _other(mode: str) -> str:
    return "parallel" if mode == "serial" else "serial"


def forced_mode() -> str | None:
    mode = os.environ.get("GRAPHFLOW_RUN_MODE", "")
    return mode if mode in ("serial", "parallel") else None


class RunModes:
    """The measurement of one plan's two modes, and the choice once made. Thread-safe."""

    __slots__ = ("choice", "_forced", "_calls", "_times", "_recent", "_until_check", "_lock")

    def __init__(self):
        self._forced = forced_mode()
        self.choice: str | None = self._forced
        self._calls = 0
        self._times: dict[str, list[float]] = {"serial": [], "parallel": []}
        # after the choice: each mode's latest times, and the calls until the next check
        self._recent: dict[str, list[float]] = {"serial": [], "parallel": []}
        self._until_check = RECHECK_CALLS
        self._lock = threading.Lock()

    def next_call(self, serial_ready: bool) -> tuple[str, bool]:
        """The mode of the next call, and whether to time it."""
        choice = self.choice
        if choice is not None:
            if self._forced is not None:
                return choice, False
            self._until_check -= 1  # a lost decrement between threads only delays a check
            if self._until_check <= 0 and (choice == "parallel" or serial_ready):
                self._until_check = RECHECK_CALLS
                return _other(choice), True
            return choice, True
        with self._lock:
            self._calls += 1
            if self._calls <= WARMUP_CALLS:
                return "parallel", False
            mode = "serial" if self._calls % 2 else "parallel"
            if self._calls > MAX_MEASURED_CALLS:
                if all(self._times.values()):
                    self._decide()
                    return self.choice, False
                # background work that outlasts the calls: timed beside it, rather than a
                # choice made on nothing (it was parallel: the MoE step's slower mode)
                return mode, mode == "parallel" or serial_ready
            # a call beside a background compile (a core and the GIL shared) is not timed
            return mode, (mode == "parallel" or serial_ready) and not compiles_pending()

    def record(self, mode: str, seconds: float) -> None:
        with self._lock:
            if self.choice is not None:
                self._reconsider(mode, seconds)
                return
            times = self._times[mode]
            if len(times) < SAMPLES:
                times.append(seconds)
                if all(len(t) >= SAMPLES for t in self._times.values()):
                    self._decide()

    def _decide(self) -> None:
        measured = {m: statistics.median(t) for m, t in self._times.items() if t}
        self.choice = min(measured, key=measured.get) if len(measured) == 2 else "parallel"
        self._recent = {m: list(t[-SAMPLES:]) for m, t in self._times.items()}

    def _reconsider(self, mode: str, seconds: float) -> None:
        """A timed call after the choice: the other mode takes over once its recent
        median beats the chosen one's by the margin; a fast check asks for another."""
        recent = self._recent[mode]
        recent.append(seconds)
        del recent[:-SAMPLES]
        if mode == self.choice:
            return
        chosen = self._recent[self.choice]
        if not chosen or seconds >= SWITCH_MARGIN * statistics.median(chosen):
            return
        if len(recent) >= SAMPLES and statistics.median(recent) < \
                SWITCH_MARGIN * statistics.median(chosen):
            self.choice, self._until_check = mode, RECHECK_CALLS
        else:
            self._until_check = 1  # promising: check again at the next call

    @property
    def measured(self) -> dict[str, list[float]]:
        """Each mode's timed calls so far (seconds)."""
        with self._lock:
            return {m: list(t) for m, t in self._times.items()}
