"""Placement: which device runs each node.

Rules, in order: an explicit ``with_device`` request is honoured when that
device exists and has a kernel for the node's attrs; otherwise soft placement
(on by default) falls back to a device that has one, else it is an error. A
node without a request runs where its first input lives if that device has a
kernel, else on the first device (GPUs before the CPU) that has one.
"""
from __future__ import annotations

import logging
import sys
from typing import Iterable, Sequence

from graphflow.device_spec import parse_device
from graphflow.errors import InvalidArgumentError
from graphflow.graph import Operation

from .device import Device

log = logging.getLogger("graphflow.placement")


def _preference(devices: Sequence[Device]) -> list[Device]:
    """Default order: GPUs first (as TensorFlow), then the CPU."""
    return sorted(devices, key=lambda d: (d.device_type != "gpu", d.index))


def place(ops: Iterable[Operation], devices: Sequence[Device], *, soft_placement: bool = True,
          log_placement: bool = False) -> dict[Operation, Device]:
    """Assign a device to every op in ``ops`` (given in topological order)."""
    preferred = _preference(devices)
    placement: dict[Operation, Device] = {}
    for op in ops:
        attrs = dict(op.attrs)
        capable = [d for d in preferred if op.op_def.find_kernel(d.device_type, attrs) is not None]
        if not capable:
            raise op.op_def.no_kernel_error(None, attrs, op.name).with_node(
                op.name, op.type, site=op.site)
        chosen = None
        if op.device:
            spec = parse_device(op.device)
            matching = [d for d in devices if d.device_type == spec.device_type
                        and spec.index in (None, d.index)]
            chosen = next((d for d in matching if d in capable), None)
            if chosen is None:
                reason = (f"no supported kernel for {spec.device_type.upper()} devices is "
                          f"available (attrs: {_dtype_attrs(attrs)})" if matching
                          else f"there is no {op.device} device")
                if not soft_placement:
                    raise InvalidArgumentError(
                        f"Cannot assign a device for operation {op.name}: Could not satisfy "
                        f"explicit device specification '{op.device}' because {reason}",
                        op.name, op.type, site=op.site)
                log.info("soft placement: %s (%s) requested %s but %s; placed on %s",
                         op.name, op.type, op.device, reason, capable[0].name)
        if chosen is None and op.inputs:
            first = placement.get(op.inputs[0].op)
            if first in capable:
                chosen = first
        if chosen is None:
            chosen = capable[0]
            if chosen.device_type == "cpu" and preferred[0].device_type != "cpu":
                log.info("%s (%s) stays on %s: no GPU kernel for %s", op.name, op.type,
                         chosen.name, _dtype_attrs(attrs))
        placement[op] = chosen
        if log_placement:
            print(f"{op.name}: ({op.type}): {chosen.name}", file=sys.stderr)
    return placement


def _dtype_attrs(attrs: dict) -> str:
    from graphflow.dtypes import DType
    return ", ".join(f"{k}={v}" for k, v in attrs.items() if isinstance(v, DType)) or "none"
