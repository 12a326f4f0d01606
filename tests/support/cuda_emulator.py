"""graphflow's CUDA kernels, run on the CPU.

``cupy_on_cpu`` stands in for the cupy module. Its arrays (``DeviceArray``) keep
their buffer in host memory but behave as cupy's do: they are not numpy arrays,
``np.asarray`` of one raises, ``.get()`` copies one to the host, and mixing them
with numpy arrays is a TypeError; so a GPU code path that treats a device array
as a host array fails here as it would on a GPU. Its ``ElementwiseKernel``
compiles the CUDA source of a kernel, as cupy would wrap it, with the host C++
compiler against a small shim of the CUDA built-ins (thread indices, atomics,
bit casts, float16, complex). A launch runs one thread at a time, in a shuffled
order.

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


def _working_compiler() -> str | None:
    """The host C++ compiler ($CXX, else g++), if it builds the shim (which needs C++17
    and ``_Float16``: GCC 12 or newer on x86-64); None otherwise."""
    compiler = shutil.which(os.environ.get("CXX", "g++"))
    if compiler is None:
        return None
    with tempfile.TemporaryDirectory() as build:
        source = pathlib.Path(build) / "probe.cpp"
        source.write_text(SHIM + COMPLEX_SHIM + "float16 gf_probe(float16 x) { return x + x; }\n")
        probe = subprocess.run([compiler, "-std=c++17", "-fsyntax-only", str(source)],
                               capture_output=True)
    return compiler if probe.returncode == 0 else None


COMPILER = _working_compiler()
#: why the emulator's tests skip when COMPILER is None
NEEDS = "needs a C++17 compiler with _Float16 (GCC 12 or newer)"


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
        args = _unwrap(args, strict=True)  # device arrays only, as cupy
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


# -- device arrays ------------------------------------------------------------------------------
def _unwrap(value, strict: bool):
    """The numpy arrays inside ``value`` (device arrays, lists and tuples of them);
    ``strict``: a host array there is a TypeError, as cupy raises."""
    if isinstance(value, DeviceArray):
        return value._host_buffer
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v, strict) for v in value)
    if strict and isinstance(value, np.ndarray):
        raise TypeError(f"Unsupported type {type(value)}: a numpy array where cupy wants a "
                        f"cupy array (copy it to the device first)")
    return value


def _wrap(value):
    """Arrays (and numpy scalars, which cupy returns as 0-d arrays) as device arrays."""
    if isinstance(value, np.ndarray):
        return DeviceArray(value)
    if isinstance(value, np.generic):
        return DeviceArray(np.asarray(value))
    if isinstance(value, (list, tuple)):
        return type(value)(_wrap(v) for v in value)
    return value


def _device_call(fn, strict: bool = True):
    """``fn`` over numpy, taking and returning device arrays."""
    def call(*args, **kwargs):
        return _wrap(fn(*_unwrap(args, strict),
                        **{k: _unwrap(v, strict) for k, v in kwargs.items()}))
    return call


class _Flags:
    """cupy's flags: no ``writeable`` (every device buffer can be written)."""

    def __init__(self, array: np.ndarray):
        self.c_contiguous = array.flags.c_contiguous
        self.f_contiguous = array.flags.f_contiguous
        self.owndata = array.flags.owndata


class _Device:
    id = 0


class DeviceArray:
    """A cupy-like array whose buffer is a numpy array in host memory. Like a cupy
    array, it is not a numpy array: ``np.asarray`` of it raises, ``.get()`` copies it to
    the host, and mixing it with numpy arrays is a TypeError."""

    __slots__ = ("_host_buffer",)
    __hash__ = None
    device = _Device()

    def __init__(self, buffer: np.ndarray):
        self._host_buffer = buffer

    def get(self) -> np.ndarray:
        return self._host_buffer.copy()

    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. "
                        "Please use `.get()` to construct a NumPy array explicitly.")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _device_call(getattr(ufunc, method))(*inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return _device_call(func)(*args, **kwargs)

    @property
    def flags(self) -> _Flags:
        return _Flags(self._host_buffer)

    @property
    def base(self):
        return None if self._host_buffer.base is None else DeviceArray(self._host_buffer.base)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "version": 3,
                "data": (self._host_buffer.ctypes.data, False), "strides": self.strides}

    def __getattr__(self, name: str):
        if name.startswith("__"):  # no __array_interface__, buffer or other host protocols
            raise AttributeError(name)
        attribute = getattr(self._host_buffer, name)
        return _device_call(attribute, strict=False) if callable(attribute) else _wrap(attribute)

    def __getitem__(self, key):
        return _wrap(self._host_buffer[_unwrap(key, strict=False)])

    def __setitem__(self, key, value) -> None:
        self._host_buffer[_unwrap(key, strict=False)] = _unwrap(value, strict=False)

    def __len__(self) -> int:
        return len(self._host_buffer)

    def __iter__(self):
        return (_wrap(row) for row in self._host_buffer)

    def __bool__(self) -> bool:
        return bool(self._host_buffer)

    def __int__(self) -> int:
        return int(self._host_buffer)

    def __float__(self) -> float:
        return float(self._host_buffer)

    def __complex__(self) -> complex:
        return complex(self._host_buffer)

    def __repr__(self) -> str:
        return f"device({self._host_buffer!r})"


def _operator(name: str):
    def apply(self, *other):
        result = getattr(self._host_buffer, name)(*_unwrap(other, strict=True))
        return self if result is self._host_buffer else _wrap(result)
    apply.__name__ = name
    return apply


for _name in ("add sub mul truediv floordiv mod pow and or xor lshift rshift".split()):
    for _form in ("__{}__", "__r{}__", "__i{}__"):
        setattr(DeviceArray, _form.format(_name), _operator(_form.format(_name)))
for _name in ("eq ne lt le gt ge neg pos abs invert".split()):
    setattr(DeviceArray, f"__{_name}__", _operator(f"__{_name}__"))


class _CupyOnCPU:
    """The cupy module over device arrays in host memory: numpy's functions, which take
    and return device arrays, cupy's stable argsort, and the emulated ElementwiseKernel."""

    ndarray = DeviceArray
    ElementwiseKernel = ElementwiseKernel

    def __getattr__(self, name: str):
        attribute = getattr(np, name)
        if isinstance(attribute, type) or not callable(attribute):
            return attribute  # dtypes and constants
        return _device_call(attribute)

    @staticmethod
    def asarray(value, dtype=None) -> DeviceArray:
        """A device copy of a host value (cupy copies to the device); a device array as is."""
        if isinstance(value, DeviceArray) and (dtype is None or value.dtype == dtype):
            return value
        host = value.get() if isinstance(value, DeviceArray) else value
        return DeviceArray(np.array(host, dtype=dtype, copy=True))

    @staticmethod
    def array(value, dtype=None, copy=True) -> DeviceArray:
        host = value.get() if isinstance(value, DeviceArray) else value
        return DeviceArray(np.array(host, dtype=dtype, copy=True))

    @staticmethod
    def argsort(a, axis=-1, kind=None) -> DeviceArray:
        return _device_call(np.argsort)(a, axis=axis, kind="stable")  # cupy's sort is stable

    @staticmethod
    def asnumpy(a) -> np.ndarray:
        return a.get() if isinstance(a, DeviceArray) else np.asarray(a)

    def __repr__(self) -> str:
        return "<cupy emulated on the CPU>"


cupy_on_cpu = _CupyOnCPU()
