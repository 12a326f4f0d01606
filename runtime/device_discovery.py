"""Which devices exist: the CPU always, then whatever each registered discovery
function finds (GPUs when cupy sees a CUDA device). A new kind of device is one
file: a ``Device`` subclass and a discovery function passed to
``register_device_discovery``; the executor knows devices only through the
``Device`` interface."""
from __future__ import annotations

import functools
import logging
from typing import Callable, Iterable

from graphflow.device_spec import parse_device
from graphflow.errors import InvalidArgumentError

from .device import CPUDevice, Device

log = logging.getLogger("graphflow.devices")


def _gpus() -> Iterable[Device]:
    from .gpu import gpu_devices  # never fails: cupy is imported lazily there
    return gpu_devices()


_DISCOVERIES: list[Callable[[], Iterable[Device]]] = [_gpus]


def register_device_discovery(discover: Callable[[], Iterable[Device]]) -> None:
    """Add a function that lists the devices of a new kind; ``list_devices`` calls it
    (once, cached) after the CPU and the GPUs."""
    _DISCOVERIES.append(discover)
    _discover.cache_clear()


@functools.lru_cache(maxsize=1)
def _discover() -> tuple[Device, ...]:
    found: list[Device] = [CPUDevice(0)]
    for discover in _DISCOVERIES:
        found.extend(discover())
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
