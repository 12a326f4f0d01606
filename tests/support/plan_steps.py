"""What tests of plan rewrites read of a Session and its results: values as bits, and
the step types its plans run."""
from __future__ import annotations

import numpy as np

import graphflow as gf


def bits(values) -> list:
    """Each value as (dtype, shape, bytes): equal only when bit for bit equal."""
    return [(np.asarray(v).dtype.str, np.asarray(v).shape, np.asarray(v).tobytes())
            for v in values]


def step_types(sess, general: bool = False) -> list[str]:
    """The step types of the plans specialized for fed shapes (what the 3rd and later
    calls run), and with ``general`` those of the general plans too."""
    types = []
    for plan in sess._plans.values():
        if general:
            types += [s.op.type for s in plan.steps if s.op is not None]
        for special in plan.specialized.values():
            if special is not None:
                types += [s.op.type for s in special.steps if s.op is not None]
    return types


def run_calls(build, feeds, optimize: bool = True, calls: int = 3) -> tuple[list, list[str]]:
    """(each call's results as :func:`bits`, the step types of the specialized plans)
    for ``build(scope) -> (fetches, placeholders)`` fed ``feeds`` ``calls`` times (the
    3rd and later calls run the shape-specialized plan, its kernels compiled)."""
    s = gf.Scope(gf.Graph())
    fetches, placeholders = build(s)
    with gf.Session(s.graph, gf.SessionConfig(optimize=optimize)) as sess:
        f = sess.make_callable(fetches, placeholders)
        results = [bits(f(*feeds)) for _ in range(calls)]
        return results, step_types(sess)
