"""The state a Session keeps across runs: the values of its variables.

As TensorFlow 1.x's resource manager, each Session has its own: two Sessions of
one graph never share a value. A variable's value is updated in place under its
own lock, so that runs on many threads lose no update and a read sees either the
value before an update or after it, never a half-written one.
"""
from __future__ import annotations

import threading
from typing import Iterator

import numpy as np

from graphflow.errors import FailedPreconditionError


class VariableState:
    """One variable's value (None until initialized) and the lock that guards it."""

    __slots__ = ("name", "value", "lock")

    def __init__(self, name: str):
        self.name = name
        self.value: np.ndarray | None = None
        self.lock = threading.RLock()

    def initialized_value(self) -> np.ndarray:
        """The value; FailedPreconditionError naming the variable if it has none yet.
        Call with ``lock`` held."""
        if self.value is None:
            raise FailedPreconditionError(
                f"Could not read variable '{self.name}': it is uninitialized in this Session. "
                f"Run its initializer (sess.run(v.initializer) or "
                f"gf.global_variables_initializer(graph)) or restore a checkpoint first.")
        return self.value


class ResourceStore:
    """The variables of one Session, by name."""

    def __init__(self):
        self._variables: dict[str, VariableState] = {}
        self._lock = threading.Lock()

    def variable(self, name: str) -> VariableState:
        state = self._variables.get(name)
        if state is None:
            with self._lock:
                state = self._variables.setdefault(name, VariableState(name))
        return state

    def names(self) -> Iterator[str]:
        with self._lock:
            return iter(sorted(n for n, s in self._variables.items() if s.value is not None))

    def clear(self) -> None:
        with self._lock:
            self._variables.clear()
