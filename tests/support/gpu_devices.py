"""GPU devices for the tests: a simulated GPU that runs the GPU kernels on numpy (so
their logic and every host<->device crossing are checked on any machine), an
emulated GPU that also runs their CUDA kernels, compiled for the CPU
(tests/support/cuda_emulator.py), and the real CUDA device when cupy sees one."""
from __future__ import annotations

import numpy as np
import pytest

import graphflow as gf
from graphflow.runtime import CPUDevice, Device

from . import cuda_emulator


class SimulatedGPU(Device):
    """A device of type "gpu" whose arrays are numpy arrays; counts the copies."""

    device_type = "gpu"
    xp = np

    def __init__(self, index=0):
        super().__init__(index)
        self.copies_in = 0
        self.copies_out = 0

    def from_host(self, array):
        self.copies_in += 1
        return np.array(array, copy=True)

    def to_host(self, array):
        self.copies_out += 1
        return np.array(array, copy=True)

    def holds(self, array):
        return isinstance(array, np.ndarray)


class EmulatedGPU(SimulatedGPU):
    """A GPU of cupy-like arrays in host memory whose CUDA kernels run compiled for the
    CPU (tests/support/cuda_emulator.py): its arrays are not numpy arrays, so a missing copy or
    a host-only call on a device array fails here as on a real GPU."""

    xp = cuda_emulator.cupy_on_cpu

    def from_host(self, array):
        if isinstance(array, np.ndarray) and array.dtype == object:
            raise TypeError("string tensors cannot live on a GPU")
        self.copies_in += 1
        return self.xp.asarray(array)

    def to_host(self, array):
        self.copies_out += 1
        return np.array(array, copy=True) if isinstance(array, np.ndarray) else array.get()

    def holds(self, array):
        return isinstance(array, cuda_emulator.DeviceArray)


CUDA = next((d for d in gf.list_devices() if d.device_type == "gpu"), None)

#: "simulated" always runs, "emulated" where a C++ compiler is, "cuda" only where cupy
#: sees a CUDA device.
GPU_KINDS = ["simulated",
             pytest.param("emulated", marks=pytest.mark.skipif(
                 cuda_emulator.COMPILER is None, reason=cuda_emulator.NEEDS)),
             pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(CUDA is None, reason="needs cupy and a CUDA device")])]


def gpu_session_devices(kind: str) -> list[Device]:
    """The device list of a Session with a CPU and a GPU of ``kind``."""
    gpu = {"simulated": SimulatedGPU, "emulated": EmulatedGPU}.get(kind)
    return [CPUDevice(0), gpu(0) if gpu else CUDA]
