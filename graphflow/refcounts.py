"""Proving that nothing else holds an array, from its reference count.

Buffer reuse (runtime/memory.py) and the check of a user kernel's outputs
(graphflow/output_check.py) ask ``sys.getrefcount(value) == N`` for a local name
``value``. What N is when that name is the only holder depends on the interpreter
(CPython counts the call's argument up to 3.13; 3.14 may lend the name's own
reference), so it is measured here once, at import, by the same pattern the call
sites use, never written down.
"""
from __future__ import annotations

import sys

import numpy as np


def _count_held_by_one_local() -> int:
    """``getrefcount(value)`` for a fresh array that only the local name ``value``
    holds, called as the call sites call it (a local alias of sys.getrefcount)."""
    getrefcount = sys.getrefcount
    value = np.empty(1)
    return getrefcount(value)


#: ``sys.getrefcount(value)`` when the local name ``value`` alone holds the object;
#: each further holder (a list slot, a global, another name, a view's base) adds one.
HELD_BY_ONE_LOCAL = _count_held_by_one_local()
