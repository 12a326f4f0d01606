"""The device interface, and the CPU device.

A device is a handful of methods: where arrays live (``xp``), how values move
to and from the host, and whether a value already lives there. Kernels are
found by the device's ``device_type`` in each OpDef.
"""
from __future__ import annotations

from typing import Callable

import numpy as np


class Device:
    """One place where kernels run and arrays live."""

    device_type: str = ""
    xp = np

    def __init__(self, index: int = 0):
        self.index = index

    @property
    def name(self) -> str:
        return f"/device:{self.device_type.upper()}:{self.index}"

    def from_host(self, array):
        """``array`` (numpy, or already native) as an array of this device."""
        raise NotImplementedError

    def to_host(self, array) -> np.ndarray:
        """``array`` of this device as a numpy array."""
        raise NotImplementedError

    def holds(self, array) -> bool:
        """Whether ``array`` already lives on this device."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait until every kernel queued on this device has finished."""

    def bind(self, kernel: Callable) -> Callable:
        """``kernel`` as it must be called to run here: a GPU makes itself the current
        device first (the executor's threads start on device 0); the CPU calls it as is."""
        return kernel

    def memory_bandwidth_hint(self) -> str:
        return ""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class CPUDevice(Device):
    """The host: numpy arrays."""

    device_type = "cpu"
    xp = np

    def from_host(self, array):
        return array

    def to_host(self, array) -> np.ndarray:
        if isinstance(array, np.ndarray):
            return array
        get = getattr(array, "get", None)  # a cupy array fed to a CPU node
        return get() if callable(get) and not isinstance(array, np.generic) else np.asarray(array)

    def holds(self, array) -> bool:
        return isinstance(array, (np.ndarray, np.generic))
