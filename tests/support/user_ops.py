"""User ops declared from outside the package, as a user would, for the runtime tests:

- ``scope.test_seen(x)`` records the array its kernel receives (in ``SEEN``) and returns
  a copy of its first row: a test sees what a kernel was handed (a feed, a copy, a view);
- ``scope.test_fresh(x)`` returns ``x + 1``, a private result, weakly referenced in
  ``FRESH_RESULTS`` so a test can tell whether it was passed on or copied;
- ``scope.test_view(x)`` returns a view of its input, which the runtime must copy.
"""
from __future__ import annotations

import weakref

import numpy as np

import graphflow as gf

#: the arrays TestSeen's kernel received, in order
SEEN: list = []
#: weak references to TestFresh's results, in order
FRESH_RESULTS: list = []

Seen = gf.register_op("TestSeen", inputs=["x: T"], outputs=["y: T"],
                      attrs={"T": gf.TypeAttr()}, stateful=True,
                      doc="Records the array its kernel receives; returns its first row.")


@Seen.kernel("cpu")
def _seen(ctx, x):
    SEEN.append(x)
    return np.array(x[:1], copy=True)


Fresh = gf.register_op("TestFresh", inputs=["x: T"], outputs=["y: T"],
                       attrs={"T": gf.TypeAttr()}, doc="x + 1, a fresh array (tests only).")


@Fresh.kernel("cpu")
def _fresh(ctx, x):
    out = x + 1
    FRESH_RESULTS.append(weakref.ref(out))  # a weak reference: the result stays private
    return out


View = gf.register_op("TestView", inputs=["x: T"], outputs=["y: T"],
                      attrs={"T": gf.TypeAttr()}, doc="A view of x (tests only).")
View.kernel("cpu")(lambda ctx, x: x[...])
