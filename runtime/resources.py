"""The state a Session keeps across runs: the values of its variables.

As TensorFlow 1.x's resource manager, each Session has its own: two Sessions of
one graph never share a value. A variable's value is updated in place under its
own lock, so that runs on many threads lose no update and a read sees either the
value before an update or after it, never a half-written one.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

import numpy as np

from graphflow.errors import FailedPreconditionError, InvalidArgumentError


def _type_name(dtype: np.dtype) -> str:
    from graphflow.dtypes import as_dtype
    return as_dtype(dtype).name


# -- undo journals --------------------------------------------------------------------------
class Journal:
    """The undo log of one run's writes in one process: before a kernel overwrites
    part of a variable, that part is copied here, so that a run failing anywhere (on
    any task of a cluster) can be taken back whole while its updates stay in place
    (cost ~ the rows written, not the table). Used by distributed runs
    (runtime/distributed/); a local run keeps no journal."""

    __slots__ = ("_entries", "_lock")

    def __init__(self):
        self._entries: list[tuple] = []
        self._lock = threading.Lock()

    def save_rows(self, state: "VariableState", offsets: np.ndarray, slice_size: int) -> None:
        """Keep the rows ``offsets`` of ``state``'s value seen as ``[-1, slice_size]``.
        Call with ``state.lock`` held, before writing them."""
        target = state.value
        saved = target.reshape(-1, slice_size)[offsets]  # a copy (fancy indexing)
        with self._lock:
            self._entries.append((state, target, saved, offsets, slice_size))

    def save_value(self, state: "VariableState", in_place: bool) -> None:
        """Keep ``state``'s whole value (None if uninitialized): a copy if the write is
        in place, else the array itself, which the write replaces but never changes."""
        target = state.value
        if in_place and target is not None:
            entry = (state, target, target.copy(), None, None)
        else:
            entry = (state, None, target, None, None)
        with self._lock:
            self._entries.append(entry)

    def rollback(self) -> int:
        """Undo every saved write, the last first; returns how many. Values are restored
        into the arrays they were saved from, so that earlier entries (undone later) find
        the array they saved rows of."""
        with self._lock:
            entries, self._entries = self._entries, []
        for state, target, saved, offsets, slice_size in reversed(entries):
            with state.lock:
                if target is None:          # a replacing write: the old array comes back
                    state.value = saved
                elif offsets is None:       # an in-place write of the whole value
                    np.copyto(target, saved)
                    state.value = target
                else:
                    target.reshape(-1, slice_size)[offsets] = saved
        return len(entries)

    def __len__(self) -> int:
        return len(self._entries)


_active = threading.local()
_active_count = 0  # journals in use in this process: 0 makes every hook a single test
_active_lock = threading.Lock()


@contextmanager
def journaling(journal: Journal | None):
    """Save, into ``journal``, what the kernels run by this thread overwrite (nothing
    if ``journal`` is None)."""
    global _active_count
    if journal is None:
        yield
        return
    with _active_lock:
        _active_count += 1
    previous = getattr(_active, "journal", None)
    _active.journal = journal
    try:
        yield
    finally:
        _active.journal = previous
        with _active_lock:
            _active_count -= 1


def active_journal() -> Journal | None:
    """The journal of the run this thread executes, if it keeps one."""
    return getattr(_active, "journal", None) if _active_count else None


class VariableState:
    """One variable's value (None until initialized), its declared dtype (from the
    VarHandleOp that names it) and the lock that guards it."""

    __slots__ = ("name", "value", "lock", "dtype")

    def __init__(self, name: str):
        self.name = name
        self.value: np.ndarray | None = None
        self.lock = threading.RLock()
        self.dtype: np.dtype | None = None

    def declare(self, dtype: np.dtype) -> None:
        """Record the dtype a VarHandleOp gives the variable; another one is an error
        (TensorFlow's: one resource, one dtype)."""
        if self.dtype is None:
            self.dtype = dtype
        elif self.dtype != dtype:
            raise InvalidArgumentError(
                f"Trying to access variable '{self.name}' as {_type_name(dtype)}: it was "
                f"declared {_type_name(self.dtype)}")

    def check_dtype(self, dtype: np.dtype, verb: str) -> None:
        """That a kernel that ``verb``s the variable with values of ``dtype`` matches its
        value's dtype (else the declared one). Call with ``lock`` held."""
        held = self.value.dtype if self.value is not None else self.dtype
        if held is not None and held != dtype:
            expected, got = (dtype, held) if verb == "read" else (held, dtype)
            raise InvalidArgumentError(
                f"Trying to {verb} variable '{self.name}' with wrong dtype. Expected "
                f"{_type_name(expected)} got {_type_name(got)}")

    def initialized_value(self) -> np.ndarray:
        """The value; FailedPreconditionError naming the variable if it has none yet.
        Call with ``lock`` held."""
        if self.value is None:
            raise FailedPreconditionError(
                f"Could not read variable '{self.name}': it is uninitialized in this Session. "
                f"Run its initializer (sess.run(v.initializer) or "
                f"gf.global_variables_initializer(graph)) or restore a checkpoint first.")
        return self.value

    @property
    def journaled(self) -> bool:
        """Whether the run this thread executes keeps an undo journal (a cluster's run):
        a kernel that writes the value then saves what it overwrites first."""
        return active_journal() is not None

    def journal_rows(self, offsets: np.ndarray, slice_size: int) -> None:
        """Before writing rows ``offsets`` of the value seen as ``[-1, slice_size]``: save
        them in the run's undo journal, if it keeps one. Call with ``lock`` held."""
        journal = active_journal()
        if journal is not None and self.value is not None:
            journal.save_rows(self, offsets, slice_size)

    def journal_all(self, in_place: bool = True) -> None:
        """Before writing the whole value (``in_place``) or replacing it: save it in the
        run's undo journal, if it keeps one. Call with ``lock`` held."""
        journal = active_journal()
        if journal is not None:
            journal.save_value(self, in_place)


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
