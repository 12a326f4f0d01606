"""Placement: which device runs each node.

Rules, in order: a device naming a task of a cluster (``/job:worker/task:1``) is an
error here (a distributed Session places tasks first, runtime/distributed/); an
explicit ``with_device`` request is honoured when that
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
    """Assign a device to every op in ``ops`` (given in topological order).

    Source ops without a request (constants, mostly) are placed last, on the
    device of their first consumer, so that a constant lives where it is read.
    """
    ops = list(ops)
    preferred = _preference(devices)
    placement: dict[Operation, Device] = {}
    capable_of: dict[Operation, list[Device]] = {}
    floating: list[Operation] = []
    for op in ops:
        attrs = dict(op.attrs)
        capable = [d for d in preferred if op.op_def.find_kernel(d.device_type, attrs) is not None]
        if not capable:
            raise op.op_def.no_kernel_error(None, attrs, op.name).with_node(
                op.name, op.type, site=op.site)
        capable_of[op] = capable
        if op.device and _device_requested(op):
            placement[op] = _requested(op, capable, devices, soft_placement)
        elif not op.inputs:
            floating.append(op)
        else:
            placed_inputs = [placement[i.op] for i in op.inputs if i.op in placement]
            first = placed_inputs[0] if placed_inputs else None
            placement[op] = first if first in capable else capable[0]
    first_consumer: dict[Operation, Device] = {}
    for op in ops:
        for i in op.inputs:
            if i.op not in first_consumer and op in placement:
                first_consumer[i.op] = placement[op]
    for op in floating:
        near = first_consumer.get(op)
        placement[op] = near if near in capable_of[op] else capable_of[op][0]
    for op in ops:
        chosen = placement[op]
        if chosen.device_type == "cpu" and preferred[0].device_type != "cpu" \
                and preferred[0] not in capable_of[op]:
            log.info("%s (%s) stays on %s: no GPU kernel for %s", op.name, op.type,
                     chosen.name, _dtype_attrs(dict(op.attrs)))
        if log_placement:
            print(f"{op.name}: ({op.type}): {chosen.name}", file=sys.stderr)
    return {op: placement[op] for op in ops}


def require_local_devices(ops: Iterable[Operation]) -> None:
    """A job/replica/task in an op's device names a task of a cluster, which a Session
    without one cannot give: InvalidArgumentError naming the op and its device, never
    a silent local placement. Task 0 / replica 0 without a job is the local process, as
    in TensorFlow's local Session. (A distributed Session strips the task part before
    its workers place their ops.)"""
    for op in ops:
        if op.device and not parse_device(op.device).is_local_process:
            raise InvalidArgumentError(
                f"Cannot assign a device for operation {op.name}: it requests {op.device} but "
                f"the Session has no cluster: pass gf.SessionConfig(cluster=client) with a "
                f"distributed.Client, or remove the job/task from the device", op.name,
                op.type, site=op.site)


def _device_requested(op: Operation) -> bool:
    """Whether ``op`` asks for a device type (``/job:localhost/replica:0/task:0`` alone
    does not)."""
    require_local_devices((op,))
    return parse_device(op.device).device_type is not None


def _requested(op: Operation, capable: list[Device], devices: Sequence[Device],
               soft_placement: bool) -> Device:
    """The device ``op`` asked for, or the soft-placement fallback."""
    spec = parse_device(op.device)
    matching = [d for d in devices if d.device_type == spec.device_type
                and spec.index in (None, d.index)]
    chosen = next((d for d in matching if d in capable), None)
    if chosen is not None:
        return chosen
    reason = (f"no supported kernel for {spec.device_type.upper()} devices is available "
              f"(attrs: {_dtype_attrs(dict(op.attrs))})" if matching
              else f"there is no {op.device} device")
    if not soft_placement:
        raise InvalidArgumentError(
            f"Cannot assign a device for operation {op.name}: Could not satisfy explicit device "
            f"specification '{op.device}' because {reason}", op.name, op.type, site=op.site)
    log.info("soft placement: %s (%s) requested %s but %s; placed on %s",
             op.name, op.type, op.device, reason, capable[0].name)
    return capable[0]


def _dtype_attrs(attrs: dict) -> str:
    from graphflow.dtypes import DType
    return ", ".join(f"{k}={v}" for k, v in attrs.items() if isinstance(v, DType)) or "none"
