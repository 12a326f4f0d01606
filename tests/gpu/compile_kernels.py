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
from cupy.cuda import nvrtc

import graphflow.ops.gpu_index as gpu_index

CUPY_INCLUDE = pathlib.Path(cupy.__file__).parent / "_core" / "include"
INCLUDES = [CUPY_INCLUDE, *sorted((CUPY_INCLUDE / "cupy" / "_cccl").glob("*"))]
if os.environ.get("CUDA_INCLUDE"):
    INCLUDES.append(pathlib.Path(os.environ["CUDA_INCLUDE"]))
HEADER = "".join(f"#include <cupy/{h}>\n" for h in
                 ("complex.cuh", "carray.cuh", "float16.cuh", "atomics.cuh"))
C_TYPES = {"float16": "float16", "float32": "float", "float64": "double",
           "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
           "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
           "uint64": "unsigned long long", "bool": "bool", "complex64": "complex<float>",
           "complex128": "complex<double>"}


class _Kernel:
    def __init__(self, params, outputs, body, name, preamble=""):
        self.params, self.outputs, self.body, self.name = params, outputs, body, name
        self.preamble = preamble

    def source(self, c_type: str) -> str:
        """The kernel as cupy's ElementwiseKernel would wrap it (raw args as CArrays,
        elementwise args bound by reference at index i)."""
        args, binds = [], []
        for param in (p.split() for p in (self.params + "," + self.outputs).split(",")):
            raw = param[0] == "raw"
            type_, name = param[1:] if raw else param
            c = "long long" if type_ == "int64" else "T"
            if raw:
                args.append(f"CArray<{c}, 1, true, true> {name}")
            elif type_ == "int64":
                args.append(f"{c} {name}")
            else:
                args.append(f"CArray<{c}, 1, true, true> _raw_{name}")
                binds.append(f"{c} &{name} = _raw_{name}[i];")
        return (f"{HEADER}typedef {c_type} T;\n{self.preamble}\n"
                f"extern \"C\" __global__ void {self.name}({', '.join(args)}, long long n) {{\n"
                f"  for (ptrdiff_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;"
                f" i += blockDim.x * gridDim.x) {{\n    {' '.join(binds)}\n{self.body}\n  }}\n}}\n")


class _RecordingCupy:
    ElementwiseKernel = _Kernel


def compile_log(source: str) -> str | None:
    """None when ``source`` compiles, else NVRTC's log."""
    program = nvrtc.createProgram(source, "kernel.cu", [], [])
    try:
        nvrtc.compileProgram(program, ["-arch=compute_90", "-std=c++17",
                                       *(f"-I{p}" for p in INCLUDES)])
        return None
    except nvrtc.NVRTCError:
        return nvrtc.getProgramLog(program)


def main() -> int:
    gpu_index._cupy = lambda: _RecordingCupy
    for cached in (gpu_index._atomic_kernel, gpu_index._segmented_kernel,
                   gpu_index._gather_kernel):
        cached.cache_clear()
    ordered = [t for t in C_TYPES if not t.startswith("complex") and t != "bool"]
    checks = [("gather", gpu_index._gather_kernel(), list(C_TYPES))]
    for op, types in (("update", list(C_TYPES)), ("add", gpu_index.ATOMIC_ADD_TYPES),
                      ("min", gpu_index.ATOMIC_MINMAX_TYPES),
                      ("max", gpu_index.ATOMIC_MINMAX_TYPES)):
        checks.append((f"atomic {op}", gpu_index._atomic_kernel(op), [str(t) for t in types]))
        folds = list(C_TYPES) if op in ("update", "add") else ordered
        checks.append((f"segmented {op}", gpu_index._segmented_kernel(op), folds))
    failures = 0
    for label, kernel, types in checks:
        for type_name in types:
            log = compile_log(kernel.source(C_TYPES[type_name]))
            if log:
                failures += 1
                print(f"FAILED {label} {type_name}:\n{log[-3000:]}")
    total = sum(len(c[2]) for c in checks)
    print(f"{total - failures} of {total} kernel instantiations compile")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
