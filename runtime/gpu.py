"""The GPU device on cupy. Importing this module never fails: without cupy, or
without a CUDA device, ``gpu_devices()`` is empty."""
from __future__ import annotations

import logging
from typing import Callable

import numpy as np

from .device import Device

log = logging.getLogger("graphflow.devices")

try:  # cupy is an optional extra (graphflow[cuda12] / graphflow[cuda13])
    import cupy as _cupy
except Exception:  # noqa: BLE001 - a broken CUDA install must not break import
    _cupy = None


def cupy_module():
    """The cupy module, or None when it is not installed."""
    return _cupy


class GPUDevice(Device):
    """One CUDA device; arrays are cupy arrays."""

    device_type = "gpu"

    def __init__(self, index: int = 0):
        super().__init__(index)
        self.xp = _cupy

    def from_host(self, array):
        with _cupy.cuda.Device(self.index):
            if isinstance(array, np.ndarray) and array.dtype == object:
                raise TypeError("string tensors cannot live on a GPU")
            return _cupy.asarray(array)

    def to_host(self, array) -> np.ndarray:
        """A host copy of ``array``: a fresh buffer the host side may write into, also
        when a GPU kernel returned a host array (the GPU side may still read it)."""
        if isinstance(array, (np.ndarray, np.generic)):
            return np.array(array, copy=True)
        return _cupy.asnumpy(array)

    def holds(self, array) -> bool:
        return isinstance(array, _cupy.ndarray) and array.device.id == self.index

    def bind(self, kernel: Callable) -> Callable:
        device = _cupy.cuda.Device(self.index)

        def on_this_device(*args):
            with device:
                return kernel(*args)
        return on_this_device

    def synchronize(self) -> None:
        with _cupy.cuda.Device(self.index):
            _cupy.cuda.get_current_stream().synchronize()


def gpu_devices() -> list[GPUDevice]:
    if _cupy is None:
        return []
    try:
        count = _cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - no driver, no device
        log.info("cupy is installed but sees no CUDA device: %s", e)
        return []
    return [GPUDevice(i) for i in range(count)]
