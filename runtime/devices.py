"""Which devices exist: the CPU always, GPUs when cupy sees a CUDA device."""
from __future__ import annotations

import functools
import logging

from graphflow.device_spec import parse_device
from graphflow.errors import InvalidArgumentError

from .device import CPUDevice, Device

log = logging.getLogger("graphflow.devices")


@functools.lru_cache(maxsize=1)
def _discover() -> tuple[Device, ...]:
    found: list[Device] = [CPUDevice(0)]
    try:
        from .gpu import gpu_devices
    except ImportError:  # pragma: no cover - gpu.py imports cupy lazily
        return tuple(found)
    found.extend(gpu_devices())
    return tuple(found)


def list_devices() -> list[Device]:
    """All devices of this process: ``/device:CPU:0`` first, then any GPUs."""
    return list(_discover())


def find_device(name: str) -> Device:
    """The device a string names; InvalidArgumentError if there is no such device."""
    spec = parse_device(name)
    for d in _discover():
        if (spec.device_type in (None, d.device_type)) and spec.index in (None, d.index):
            return d
    raise InvalidArgumentError(f"No device matches '{name}'; known devices: "
                               f"{', '.join(d.name for d in _discover())}")
