"""graphflow's CUDA kernels, run on the CPU.

``cupy_on_cpu`` stands in for the cupy module: its arrays are numpy arrays, and
its ``ElementwiseKernel`` compiles the CUDA source of a kernel, as cupy would
wrap it, with the host C++ compiler against a small shim of the CUDA built-ins
(thread indices, atomics, bit casts, float16, complex). A launch runs one
thread at a time, in a shuffled order.

It checks the kernel bodies as written: index arithmetic, skipped offsets, the
fold order and NaN rules of the deterministic path, the compare-and-swap loops,
and that any thread order gives the same result where it must. It cannot check
real concurrency or memory ordering, nor whether CUDA's headers have an atomic
for a dtype: tests/gpu/compile_kernels.py compiles the same source with NVRTC
for that.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import pathlib
import shutil
import subprocess
import tempfile

import numpy as np

#: numpy dtype name -> the C type cupy uses for it
C_TYPES = {"float16": "float16", "float32": "float", "float64": "double",
           "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
           "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
           "uint64": "unsigned long long", "bool": "bool", "complex64": "complex<float>",
           "complex128": "complex<double>"}

COMPILER = shutil.which(os.environ.get("CXX", "g++"))


# -- the CUDA source, as cupy's ElementwiseKernel wraps a body -----------------------------------
def parse_params(params: str) -> list[tuple[bool, str, str]]:
    """``"raw int64 offsets, T value"`` -> ``[(True, "int64", "offsets"), (False, "T", "value")]``."""
    parsed = []
    for param in (p.split() for p in params.split(",") if p.strip()):
        raw = param[0] == "raw"
        type_, name = param[1:] if raw else param
        parsed.append((raw, type_, name))
    return parsed


def kernel_function(params: str, outputs: str, body: str, name: str) -> str:
    """The ``__global__`` function cupy makes of an ElementwiseKernel, over the type ``T``:
    raw arguments are CArrays, a non-raw ``int64`` is a scalar, and a non-raw ``T`` is
    bound by reference at the element index ``i`` of a grid-stride loop."""
    args, binds = [], []
    for raw, type_, arg in parse_params(params + "," + outputs):
        c = "long long" if type_ == "int64" else "T"
        if raw:
            args.append(f"CArray<{c}, 1, true, true> {arg}")
        elif type_ == "int64":
            args.append(f"{c} {arg}")
        else:
            args.append(f"CArray<{c}, 1, true, true> _raw_{arg}")
            binds.append(f"{c} &{arg} = _raw_{arg}[i];")
    return (f"__global__ void {name}({', '.join(args)}, long long n) {{\n"
            f"  for (ptrdiff_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;"
            f" i += blockDim.x * gridDim.x) {{\n    {' '.join(binds)}\n{body}\n  }}\n}}\n")


#: The CUDA built-ins the kernels use, for a host compiler. Threads run one at a time,
#: so an atomic is a plain read-modify-write.
SHIM = r"""
#include <cstddef>
#include <cstring>
#define __global__
#define __device__
struct gf_dim3 { ptrdiff_t x; };
static gf_dim3 threadIdx, blockIdx, blockDim, gridDim;
template <typename T, int N, bool C, bool I> struct CArray {
  char* data; ptrdiff_t stride;
  T& operator[](ptrdiff_t i) const { return *reinterpret_cast<T*>(data + i * stride); }
};
typedef _Float16 float16;
template <typename T> T atomicAdd(T* a, T v) { T old = *a; *a = old + v; return old; }
template <typename T> T atomicMin(T* a, T v) { T old = *a; if (v < old) *a = v; return old; }
template <typename T> T atomicMax(T* a, T v) { T old = *a; if (old < v) *a = v; return old; }
template <typename T> T atomicCAS(T* a, T compare, T v) {
  T old = *a; if (old == compare) *a = v; return old;
}
template <typename To, typename From> To gf_bits(From from) {
  static_assert(sizeof(To) == sizeof(From), "bit cast between sizes");
  To to; std::memcpy(&to, &from, sizeof to); return to;
}
inline float __int_as_float(int b) { return gf_bits<float>(b); }
inline int __float_as_int(float f) { return gf_bits<int>(f); }
inline double __longlong_as_double(unsigned long long b) { return gf_bits<double>(b); }
inline unsigned long long __double_as_longlong(double d) {
  return gf_bits<unsigned long long>(d);
}
"""
COMPLEX_SHIM = "#include <complex>\ntemplate <typename T> using complex = std::complex<T>;\n"


def emulated_source(kernel: "ElementwiseKernel", dtype: np.dtype) -> str:
    """The kernel for ``dtype``, and a C entry point that runs the threads of a one-block
    grid in the order given."""
    call = []
    for j, (raw, type_, _) in enumerate(parse_params(kernel.in_params + "," +
                                                     kernel.out_params)):
        c = "long long" if type_ == "int64" else "T"
        call.append(f"scalars[{j}]" if not raw and type_ == "int64" else
                    f"CArray<{c}, 1, true, true>{{data[{j}], strides[{j}]}}")
    return (f"{SHIM}{COMPLEX_SHIM if dtype.kind == 'c' else ''}"
            f"typedef {C_TYPES[dtype.name]} T;\n{kernel.preamble}\n"
            f"{kernel_function(kernel.in_params, kernel.out_params, kernel.operation, kernel.name)}"
            f'extern "C" void gf_launch(char** data, const long long* strides,'
            f" const long long* scalars, long long n, const long long* order) {{\n"
            f"  blockIdx.x = 0; gridDim.x = 1; blockDim.x = n;\n"
            f"  for (long long k = 0; k < n; ++k) {{\n"
            f"    threadIdx.x = order[k];\n"
            f"    {kernel.name}({', '.join(call)}, n);\n  }}\n}}\n")


@functools.cache
def _build_dir() -> pathlib.Path:
    return pathlib.Path(tempfile.mkdtemp(prefix="graphflow-cuda-emulator-"))


@functools.cache
def _compile(source: str) -> ctypes.CDLL:
    """The shared library of ``source``, built once per process."""
    if COMPILER is None:
        raise RuntimeError("the CUDA emulator needs a C++ compiler (g++ or $CXX)")
    stem = _build_dir() / hashlib.sha1(source.encode()).hexdigest()
    stem.with_suffix(".cpp").write_text(source)
    built = subprocess.run([COMPILER, "-std=c++17", "-O1", "-shared", "-fPIC", "-w",
                            "-o", str(stem.with_suffix(".so")), str(stem.with_suffix(".cpp"))],
                           capture_output=True, text=True)
    if built.returncode:
        raise RuntimeError(f"the emulated kernel does not compile:\n{built.stderr[-3000:]}")
    return ctypes.CDLL(str(stem.with_suffix(".so")))


class ElementwiseKernel:
    """cupy's ElementwiseKernel for the subset graphflow uses: typed ``T`` and ``int64``
    parameters, ``raw`` arrays, scalar ``int64`` arguments, outputs passed in."""

    #: shuffles the thread order of each launch; seeded, so a failure replays
    thread_order = np.random.default_rng(0)

    def __init__(self, in_params: str, out_params: str, operation: str, name: str,
                 preamble: str = "", **_options):
        self.in_params, self.out_params, self.operation = in_params, out_params, operation
        self.name, self.preamble = name, preamble

    def __call__(self, *args, size: int | None = None) -> None:
        params = parse_params(self.in_params + "," + self.out_params)
        if len(args) != len(params):
            raise TypeError(f"{self.name}: {len(params)} arguments expected (outputs "
                            f"included), got {len(args)}")
        t = next(a.dtype for a, (_, type_, _) in zip(args, params)
                 if type_ == "T" and isinstance(a, np.ndarray))
        data, strides, scalars, sizes = [], [], [], set()
        for arg, (raw, type_, name) in zip(args, params):
            if not raw and type_ == "int64":
                if isinstance(arg, np.ndarray) and arg.ndim:
                    raise TypeError(f"{self.name}: {name} is a scalar, got an array")
                data.append(None)
                strides.append(0)
                scalars.append(int(arg))
                continue
            expected = np.dtype(np.int64) if type_ == "int64" else t
            if not isinstance(arg, np.ndarray) or arg.dtype != expected or arg.ndim != 1:
                raise TypeError(f"{self.name}: {name} must be a one-dimensional {expected} "
                                f"array, got {arg!r}")
            if not raw:
                sizes.add(arg.size)
            data.append(arg.ctypes.data)
            strides.append(arg.strides[0])
            scalars.append(0)
        if size is not None and sizes:
            raise ValueError(f"{self.name}: size= is for kernels of raw arguments only")
        if size is None and len(sizes) != 1:
            raise ValueError(f"{self.name}: the non-raw arrays must have one size, got {sizes}")
        n = size if size is not None else sizes.pop()
        order = self.thread_order.permutation(n).astype(np.int64)
        _compile(emulated_source(self, t)).gf_launch(
            (ctypes.c_void_p * len(data))(*data), (ctypes.c_longlong * len(strides))(*strides),
            (ctypes.c_longlong * len(scalars))(*scalars), ctypes.c_longlong(n),
            order.ctypes.data_as(ctypes.c_void_p))


class _CupyOnCPU:
    """numpy, with cupy's ElementwiseKernel emulated and cupy's stable argsort."""

    ElementwiseKernel = ElementwiseKernel

    def __getattr__(self, name: str):
        return getattr(np, name)

    @staticmethod
    def argsort(a, axis=-1, kind=None):
        return np.argsort(a, axis=axis, kind="stable")  # cupy's sort is stable

    def __repr__(self) -> str:
        return "<cupy emulated on the CPU>"


cupy_on_cpu = _CupyOnCPU()
