"""What tests of plan rewrites read of a Session and its results: values as bits, and
the step types its plans run."""
from __future__ import annotations

import numpy as np


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
