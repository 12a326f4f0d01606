"""Internal ops made by graph rewrites (runtime/optimizer.py), never by users."""
from __future__ import annotations

import numpy as np

from graphflow.dtypes import ALL_TYPES, bool_, int32
from graphflow.errors import InvalidArgumentError
from graphflow.registry import IntAttr, TypeAttr, register_op
from graphflow.shapes import debug_string

NON_STRING_TYPES = tuple(t for t in ALL_TYPES if not t.is_string)

PartitionedSelect = register_op(
    "_PartitionedSelect",
    inputs=["data: T", "selector: Tsel", "scalars: M * T"],
    outputs=["output: T"],
    attrs={"T": TypeAttr(), "Tsel": TypeAttr([bool_, int32]), "M": IntAttr(minimum=0),
           "num_partitions": IntAttr(minimum=1)},
    doc="DynamicStitch(DynamicPartition(range(n), p), [f_k(DynamicPartition(data, p)[k])]) "
        "computed as select(p, f_k(data)): the element-wise f_k commute with the partition. "
        "The attr 'program' holds each f_k as (op_type, chain position, scalar index) steps.")


def _branch(ctx, program, data, scalars):
    """Apply one partition's element-wise chain to the whole of ``data``."""
    value = data
    for op_type, position, scalar in program:
        fn = ctx.cache.get(op_type)
        if fn is None:
            from graphflow.registry import op_def
            kernel = op_def(op_type).find_kernel(ctx.device.device_type if ctx.device else "cpu",
                                                 {"T": ctx.attrs["T"]})
            fn = ctx.cache.setdefault(op_type, kernel.fn)
        if scalar < 0:
            value = fn(ctx, value)
        elif position == 0:
            value = fn(ctx, value, scalars[scalar])
        else:
            value = fn(ctx, scalars[scalar], value)
    return value


@PartitionedSelect.kernel("cpu")
@PartitionedSelect.kernel("gpu", T=NON_STRING_TYPES)
def _partitioned_select(ctx, data, selector, scalars):
    xp = ctx.xp
    k = ctx.attrs["num_partitions"]
    if selector.shape != data.shape:
        raise InvalidArgumentError(
            f"data.shape must start with partitions.shape, got data.shape = "
            f"{debug_string(data.shape)}, partitions.shape = {debug_string(selector.shape)}")
    programs = ctx.attrs["program"]
    # values of the other partitions are computed, then dropped: the runtime keeps the
    # floating-point warnings they may raise quiet
    if selector.dtype == np.bool_:  # partitions = cast(mask): ids are 0 and 1 only
        return xp.where(selector, _branch(ctx, programs[1], data, scalars),
                        _branch(ctx, programs[0], data, scalars))
    bad = (selector < 0) | (selector >= k)
    if bool(bad.any()):
        i = int(xp.argmax(bad))
        raise InvalidArgumentError(f"partitions[{i}] = {int(selector[i])} is not in [0, {k})")
    out = _branch(ctx, programs[0], data, scalars)
    for p in range(1, k):
        out = xp.where(selector == p, _branch(ctx, programs[p], data, scalars), out)
    # the stitch it replaces gives a fresh array, which later kernels may write into:
    # one partition and no arithmetic would hand out the input buffer itself
    return out.copy() if out is data else out
