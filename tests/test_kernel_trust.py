"""Which kernels run unchecked: graphflow's own, by a flag set when they register.

The package facade loads the op set under ``registry.own_kernels()``; every other
kernel (a user's op, a user's kernel of a graphflow op, a preparer registered
later) is held to the output check (graphflow/output_check.py).
"""
from __future__ import annotations

import graphflow as gf
from graphflow.registry import registered_ops


def _module(fn) -> str:
    return getattr(fn, "__module__", "") or ""


def test_graphflow_kernels_and_preparers_are_trusted():
    ops = [d for d in registered_ops() if d.kernels and not d.name.startswith("Test")]
    own = [k for d in ops for k in d.kernels if _module(k.fn).startswith("graphflow.")]
    assert own and all(k.trusted for k in own)
    prepared = [d for d in ops if d.preparers]
    assert prepared and all(set(d.preparers) == d.trusted_preparers for d in prepared)


def test_a_user_kernel_is_not_trusted():
    op = gf.register_op("TestTrustUserOp", inputs=["x: float32"], outputs=["y: float32"])
    op.kernel("cpu")(lambda ctx, x: x)
    op.prepare("cpu")(lambda spec: None)
    assert not op.kernels[0].trusted
    assert not op.trusted_preparers


def test_a_user_kernel_of_a_graphflow_op_is_not_trusted():
    identity = gf.op_def("Identity")
    before = list(identity.kernels)
    try:
        identity.kernel("testdevice")(lambda ctx, x: x)
        assert not identity.kernels[-1].trusted
    finally:
        identity.kernels[:] = before
