"""What tests of compiled segments read of a Session: its segments, a call's outcome."""
from __future__ import annotations

from graphflow.errors import OpError


def segments_of(sess) -> list:
    """The compiled segments of every plan (and shape-specialized plan) of ``sess``."""
    found = []
    for plan in sess._plans.values():
        for p in [plan, *(q for q in plan.specialized.values() if q is not None)]:
            found += p.segments
    return found


def outcome(fn):
    """``("ok", value)`` or ``("error", (type, first line, node))`` of ``fn()``."""
    try:
        return "ok", fn()
    except OpError as e:
        return "error", (type(e).__name__, str(e).split("\n")[0], e.node_name)
