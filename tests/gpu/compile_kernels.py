"""Compile every CUDA kernel of ops/gpu_index.py for every dtype it serves, with
NVRTC alone: no GPU needed. Catches C++ errors in the kernel bodies on a machine
without a device. Needs cupy, NVRTC (e.g. the nvidia-cuda-nvrtc-cu12 wheel) and
the CUDA runtime headers (cuda_fp16.h; set CUDA_INCLUDE, e.g. to the include dir
of the nvidia-cuda-runtime-cu12 wheel).

    python tests/gpu/compile_kernels.py
"""
from __future__ import annotations

import os
import pathlib
import sys

import cupy
import numpy as np
from cupy.cuda import nvrtc

import graphflow.ops.gpu_index as gpu_index
import graphflow.ops.gpu_math as gpu_math

sys.path.insert(0, str(pathlib.Path(__file__).parents[1]))
from support.cuda_emulator import (C_TYPES, ElementwiseKernel, cupy_on_cpu,  # noqa: E402
                           kernel_function)  # (tests/)

CUPY_INCLUDE = pathlib.Path(cupy.__file__).parent / "_core" / "include"
INCLUDES = [CUPY_INCLUDE, *sorted((CUPY_INCLUDE / "cupy" / "_cccl").glob("*"))]
if os.environ.get("CUDA_INCLUDE"):
    INCLUDES.append(pathlib.Path(os.environ["CUDA_INCLUDE"]))
HEADER = "".join(f"#include <cupy/{h}>\n" for h in
                 ("complex.cuh", "carray.cuh", "float16.cuh", "atomics.cuh"))


def nvrtc_source(kernel: ElementwiseKernel, c_type: str) -> str:
    """The kernel as cupy's ElementwiseKernel would wrap it, for the C type ``c_type``."""
    return (f"{HEADER}typedef {c_type} T;\n{kernel.preamble}\nextern \"C\" "
            f"{kernel_function(kernel.in_params, kernel.out_params, kernel.operation, kernel.name)}")


def compile_log(source: str) -> str | None:
    """None when ``source`` compiles, else NVRTC's log."""
    program = nvrtc.createProgram(source, "kernel.cu", [], [])
    try:
        nvrtc.compileProgram(program, ["-arch=compute_90", "-std=c++17", "--fmad=false",
                                       *(f"-I{p}" for p in INCLUDES)])
        return None
    except nvrtc.NVRTCError:
        return nvrtc.getProgramLog(program)


def main() -> int:
    xp = cupy_on_cpu  # its kernels keep their parts; NVRTC compiles them here
    ordered = [t for t in C_TYPES if not t.startswith("complex") and t != "bool"]
    SMALL = [t for t in C_TYPES if t == "bool" or np.dtype(t).itemsize <= 4]  # noqa: N806
    checks = [("locate", gpu_index._locate_kernel(xp), ["int16", "uint16", "int32", "int64"]),
              ("gather", gpu_index._gather_kernel(xp), list(C_TYPES)),
              ("last writer", gpu_index._last_writer_kernel(xp), ["int64"]),
              ("store winners", gpu_index._store_winners_kernel(xp), list(C_TYPES)),
              ("complex divide", gpu_math._divide_kernel(xp), ["complex64", "complex128"]),
              ("packed claim", gpu_index._packed_claim_kernel(xp), SMALL),
              ("packed store", gpu_index._packed_store_kernel(xp), SMALL)]
    for op, types in (("add", gpu_index.ATOMIC_ADD_TYPES),
                      ("min", gpu_index.ATOMIC_MINMAX_TYPES),
                      ("max", gpu_index.ATOMIC_MINMAX_TYPES)):
        checks.append((f"atomic {op}", gpu_index._atomic_kernel(xp, op), [str(t) for t in types]))
        folds = list(C_TYPES) if op == "add" else ordered
        checks.append((f"segmented {op}", gpu_index._segmented_kernel(xp, op), folds))
    failures = 0
    for label, kernel, types in checks:
        for type_name in types:
            log = compile_log(nvrtc_source(kernel, C_TYPES[type_name]))
            if log:
                failures += 1
                print(f"FAILED {label} {type_name}:\n{log[-3000:]}")
    total = sum(len(c[2]) for c in checks)
    print(f"{total - failures} of {total} kernel instantiations compile")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
