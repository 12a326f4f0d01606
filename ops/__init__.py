"""The operator set. Each family module declares its ops once (signature, shape
function, kernels per device); importing it registers them.

Every registered op is available here as a TF-Java-style class::

    from graphflow.ops import ScatterNd
    out = ScatterNd.create(scope, indices, updates, shape).output()
"""
from __future__ import annotations

from graphflow.op_classes import OP_CLASSES, OpWrapper

from . import array_ops, math_ops, partition_ops, scatter_ops  # noqa: F401  (registration)
from . import variable_ops  # noqa: F401  (registration)
from . import reduction_ops, slicing_ops  # noqa: F401  (registration)
from . import tf_glue_ops  # noqa: F401  (registration)
from . import check_ops  # noqa: F401  (registration)
from . import dense_math_ops, nn_ops, reductions  # noqa: F401  (registration)
from . import segment_ops, selection_ops, random_ops, training_ops  # noqa: F401  (registration)
from . import elementwise_table, fused_elementwise, fused_ops, gather_reduce  # noqa: F401  (registration)
from . import gather_partition, product_sum, stitch_reduce  # noqa: F401  (registration)
from . import control_flow_ops  # noqa: F401  (registration)



def __getattr__(name: str):
    """``graphflow.ops.ScatterNd``: the class of any registered op, including
    ops registered after import by user code."""
    try:
        return OP_CLASSES[name]
    except KeyError:
        raise AttributeError(f"module 'graphflow.ops' has no op class '{name}'") from None


def __dir__():
    return sorted(set(globals()) | set(OP_CLASSES))


__all__ = ["OpWrapper", *sorted(OP_CLASSES)]
