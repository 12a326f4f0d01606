"""The index primitives behind the GPU kernels of the scatter, gather and stitch ops.

The GPU kernels share the CPU kernels' shape checks and differ in three
places, all here: how index tuples become offsets, how updates reach the
output, and how slices are read.

* ``locate`` turns index tuples into int64 linear slice offsets on the device,
  in one pass over the tuples (one thread per tuple), and marks a tuple outside the shape with offset ``-1``: by default (and under
  ``"IGNORE"``) it is then skipped, as on TensorFlow's GPU. ``"ERROR"`` costs
  one device-to-host transfer of a single flag per node and reports the first
  bad tuple.
* ``scatter`` applies ``[n, slice_size]`` updates with one CUDA thread per
  updated element: an atomic add/min/max where the dtype has an atomic, else, and
  always under ``SessionConfig(deterministic=True)``, a stable sort of the offsets and a
  segmented reduce with one thread per (target slice, element) that combines
  the updates in index order, starting from the value already there. That is
  exactly what the CPU computes (sums in index order, last update wins, NaN
  rules of Eigen's min/max), so a deterministic GPU run equals the CPU bit for
  bit, but for NaN payloads (a GPU makes its own NaNs). "update" is never left
  to racing stores, whose winner nobody knows (and a gradient must know it), nor
  sorted: one thread per update takes its slot with an atomic max of its position
  (``last_writers``), then only the winner's threads store, so the last update in
  index order wins, as on the CPU, under ``deterministic=True`` too, at the cost
  of one int64 per slice and no sort.
* ``gather`` reads slices, giving zeros for a skipped tuple.

Each primitive also accepts numpy arrays (a device whose ``xp`` is numpy, as
the simulated GPU of the tests): it then runs the CPU code, so the logic of
the GPU kernels around the primitives is tested without a GPU. The CUDA
kernels come from the device's array module (``xp.ElementwiseKernel``), so a
module that runs CUDA source elsewhere (the tests' C++ emulator) can stand in
for cupy.
"""
from __future__ import annotations

import functools
from typing import Callable, Sequence

import numpy as np

from graphflow.errors import InvalidArgumentError

from . import scatter_loops
from .cpu_index import scatter_into

#: dtypes with a CUDA atomic add (cupy's atomics.cuh adds float16 and int64);
#: complex adds run as two real adds on a float view.
ATOMIC_ADD_TYPES = frozenset(np.dtype(t) for t in
                             ("float16", "float32", "float64", "int32", "uint32", "int64",
                              "uint64"))
#: dtypes with an atomic min/max (floats through a compare-and-swap loop below).
ATOMIC_MINMAX_TYPES = frozenset(np.dtype(t) for t in
                                ("float32", "float64", "int32", "uint32", "int64", "uint64"))

def on_host(xp) -> bool:
    return xp is np


def to_host(array) -> np.ndarray:
    """``array`` as a numpy array (one device-to-host transfer for a cupy array)."""
    get = getattr(array, "get", None)
    return array if isinstance(array, np.ndarray) else get()


def stable_argsort(xp, keys):
    """The order that sorts ``keys``, equal keys in their original order."""
    return xp.argsort(keys, kind="stable") if on_host(xp) else xp.argsort(keys)  # cupy: stable


# -- locate -------------------------------------------------------------------------------------
def locate(xp, tuples, dims: Sequence[int], policy: str,
           bad_index: Callable[[int], str], for_kernels: bool = False):
    """Int64 linear offsets of the index tuples ``tuples`` ``[n, depth]`` into ``dims``,
    ``-1`` for a tuple outside ``[0, dims)``; under ``policy == "ERROR"`` such a tuple
    raises ``InvalidArgumentError(bad_index(first bad position))`` instead.
    ``for_kernels``: the offsets go to :func:`scatter` or :func:`gather` alone, which
    skip any offset outside the output themselves, so on a device int64 tuples of one
    index are returned as they are (no pass over them)."""
    n, depth = tuples.shape
    if n == 0:
        return xp.zeros(n, np.int64)
    if for_kernels and depth == 1 and tuples.dtype == np.int64 and policy != "ERROR" \
            and not on_host(xp):
        return xp.ascontiguousarray(tuples).reshape(-1)
    if not on_host(xp):  # one pass on the device: read the tuples, write the offsets
        offsets = xp.empty(n, np.int64)
        _locate_kernel(xp)(xp.ascontiguousarray(tuples).reshape(-1),
                           xp.asarray(np.array([int(d) for d in dims[:depth]], np.int64)),
                           depth, offsets, size=n)
        if policy == "ERROR":
            bad = offsets < 0
            if bool(bad.any()):  # the one host round trip
                raise InvalidArgumentError(bad_index(int(bad.argmax())))
        return offsets
    offsets = xp.zeros(n, np.int64)
    bad = xp.zeros(n, bool)
    stride = 1
    for column in range(depth - 1, -1, -1):
        index, dim = tuples[:, column].astype(np.int64), int(dims[column])
        offsets += index * stride
        # Seen as uint64, a negative index is huge: one bound checks both ends, also for
        # a dimension past the index type's range.
        bad |= index.view(np.uint64) >= dim
        stride *= dim
    if policy == "ERROR" and bool(bad.any()):  # the one host round trip
        raise InvalidArgumentError(bad_index(int(bad.argmax())))
    return xp.where(bad, np.int64(-1), offsets)


# -- scatter ------------------------------------------------------------------------------------
def scatter(xp, out, offsets, rows, op: str, deterministic: bool) -> None:
    """Apply ``rows`` ``[n, slice_size]`` to the slices ``offsets`` of the C-contiguous
    ``out`` in place, skipping offset ``-1``. ``op`` is "update", "add", "sub", "min"
    or "max", as in :func:`ops.cpu_index.scatter_into`."""
    n, slice_size = rows.shape
    if n == 0 or out.size == 0:
        return
    if on_host(xp):
        keep = offsets >= 0
        scatter_into(out, offsets[keep], rows[keep], op)
        return
    flat, values = out.reshape(-1), xp.ascontiguousarray(rows).reshape(-1)
    slices = len(flat) // slice_size
    if op == "sub":
        op, values = "add", xp.negative(values)  # exact: a - u == a + (-u), also wrapping
    if flat.dtype.kind == "c" and op == "add" and not deterministic:
        real = np.dtype(f"f{flat.dtype.itemsize // 2}")  # real and imaginary parts: two adds
        flat, values, slice_size = flat.view(real), values.view(real), 2 * slice_size
    if op == "update" and flat.dtype.itemsize <= 4 and n < PACKED_ROWS:
        # (row + 1, value bits) packed in one int64: one atomic max per element keeps the
        # last writer's value, and one coalesced pass moves the winners' bits to out
        table = xp.zeros(len(flat), np.int64)
        _packed_claim_kernel(xp)(offsets, values, slice_size, slices, table, size=len(values))
        _packed_store_kernel(xp)(table, flat)
    elif op == "update":  # the last writer in index order stores: deterministic as it is
        offsets = _checked(xp, offsets, slices)
        last = last_writers_table(xp, offsets, slices)
        _store_winners_kernel(xp)(offsets, last, values, slice_size, flat)
    elif deterministic or not _has_atomic(op, flat.dtype):
        _segmented(xp, flat, _checked(xp, offsets, slices), values, slice_size, op)
    else:
        _atomic_kernel(xp, op)(offsets, values, slice_size, slices, flat)


def _checked(xp, offsets, slices: int):
    """``offsets`` with -1 for any outside [0, slices) (from locate(for_kernels=True))."""
    return xp.where(offsets.view(np.uint64) < np.uint64(slices), offsets, np.int64(-1))


#: "update" packs (row + 1) << 32 | bits into an int64 for fewer rows than this
PACKED_ROWS = 2**31 - 1


def _has_atomic(op: str, dtype: np.dtype) -> bool:
    if op == "update":  # the winner alone stores: any dtype
        return True
    if op == "add":
        return dtype in ATOMIC_ADD_TYPES
    return dtype in ATOMIC_MINMAX_TYPES


def _segmented(xp, flat, offsets, values, slice_size: int, op: str) -> None:
    """Sort the offsets (stably: equal offsets keep index order), find the runs of equal
    offsets, and let one thread per (run, element) fold its run in order. The sort keys
    are 32 bits wide where the slices allow (half the radix passes; -1 sorts last, as
    0xffffffff, and its run is skipped as before)."""
    narrow = len(flat) // slice_size < 2**32 - 1
    order = stable_argsort(xp, offsets.astype(np.uint32) if narrow else offsets)
    ordered = offsets[order]
    boundary = xp.empty(len(ordered), bool)
    boundary[0] = True
    xp.not_equal(ordered[1:], ordered[:-1], out=boundary[1:])
    starts = xp.concatenate([xp.flatnonzero(boundary), xp.asarray([len(ordered)])])
    runs = len(starts) - 1
    _segmented_kernel(xp, op)(order, ordered, starts, values, slice_size, flat,
                          size=runs * slice_size)


# -- the last writer of each slot ---------------------------------------------------------------
def last_writers_table(xp, offsets, num_slices: int):
    """For each of ``num_slices`` slots, the largest position i with ``offsets[i]`` equal
    to it (-1 where none): the update that an in-order "update" scatter leaves there.
    One thread per update, an atomic max each."""
    last = xp.full(num_slices, -1, np.int64)
    if len(offsets):
        _last_writer_kernel(xp)(offsets, last, size=len(offsets))
    return last


def last_writers(xp, offsets, num_slices: int):
    """Whether each of the int64 ``offsets`` (``-1``: skipped) is its slot's last writer
    in index order: :func:`ops.scatter_loops.last_writers` on the device."""
    if on_host(xp):
        return scatter_loops.last_writers(offsets, num_slices)
    last = last_writers_table(xp, offsets, num_slices)
    hit = offsets >= 0
    return hit & (last[xp.where(hit, offsets, 0)] == xp.arange(len(offsets), dtype=np.int64)) \
        if num_slices else xp.zeros(len(offsets), bool)


# -- gather -------------------------------------------------------------------------------------
def gather(xp, source, offsets, out) -> None:
    """``out[r] = source[offsets[r]]`` for the ``[n, slice_size]`` views ``source`` and
    ``out``; zeros where ``offsets[r] == -1``."""
    if len(offsets) == 0:
        return
    if on_host(xp):
        keep = offsets >= 0
        out[keep] = source[offsets[keep]]
        out[~keep] = 0
        return
    _gather_kernel(xp)(offsets, source.reshape(-1), out.shape[1], len(source),
                       out.reshape(-1))


# -- partition ----------------------------------------------------------------------------------
def two_way_partition(xp, rows, ones, zeros: int):
    """The rows ``[n, ...]`` whose id (0 or 1) is 0, then those whose id is 1, each in
    order, from ``ones``, the running count of the ones among the ids (int64; ``zeros``:
    how many ids are 0): a row's place is its count among the rows of its id before it."""
    n = len(rows)
    if on_host(xp) or n == 0:
        one = np.diff(ones, prepend=0).astype(bool) if n else np.zeros(0, bool)
        return xp.concatenate([rows[~one], rows[one]])
    out = xp.empty(rows.shape, rows.dtype)
    slice_size = rows.size // n
    if slice_size:
        _two_way_kernel(xp)(ones, xp.ascontiguousarray(rows).reshape(-1), slice_size, zeros,
                            out.reshape(-1), size=rows.size)
    return out


# -- CUDA kernels, compiled on first use ------------------------------------------------------
#: the row and the element within it of thread i: no 64-bit division for slices of one
_ROW = "(slice_size == 1 ? (long long)i : (long long)i / slice_size)"
_ELEMENT = "(slice_size == 1 ? 0LL : (long long)i % slice_size)"


def _source(body: str, **parts: str) -> str:
    """A kernel body with ROW and ELEMENT (thread i's row and its element in the row;
    no 64-bit division for slices of one element) and the named parts filled in."""
    body = body.replace("ROW", _ROW).replace("ELEMENT", _ELEMENT)
    for name, text in parts.items():
        body = body.replace(name, text)
    return body

#: Eigen's min/max on a float: a compare-and-swap loop on its bits, where a NaN update
#: never wins and a NaN already there stays. NAME, FLOAT, WORD (the integer type of its
#: bits), DECODE / ENCODE (bits to float and back) and WINS (the update replaces OLD).
_FLOAT_ATOMIC = r"""
__device__ void NAME(FLOAT* address, FLOAT value) {
  WORD* bits = reinterpret_cast<WORD*>(address);
  WORD old = *bits, assumed;
  do {
    assumed = old;
    if (!(WINS)) return;
    old = atomicCAS(bits, assumed, ENCODE(value));
  } while (assumed != old);
}
"""


def _float_atomic(name: str, ctype: str, word: str, decode: str, encode: str,
                  wins: str) -> str:
    """One float atomic min or max from :data:`_FLOAT_ATOMIC`."""
    return _source(_FLOAT_ATOMIC, NAME=name, FLOAT=ctype, WORD=word, ENCODE=encode,
                   WINS=wins.replace("OLD", f"{decode}(assumed)"))


_ATOMIC_PREAMBLE = "".join(
    _float_atomic(f"gf_atomic_{op}", ctype, bits, to_float, to_bits, wins)
    for ctype, bits, to_float, to_bits in (
        ("float", "int", "__int_as_float", "__float_as_int"),
        ("double", "unsigned long long", "__longlong_as_double", "__double_as_longlong"))
    for op, wins in (("min", "value < OLD"), ("max", "OLD < value"))) + r"""
template <typename T> __device__ void gf_atomic_min(T* address, T value) {
  atomicMin(address, value);
}
template <typename T> __device__ void gf_atomic_max(T* address, T value) {
  atomicMax(address, value);
}
"""

#: op -> the statement that applies ``value`` to ``out[target]`` (one thread per element)
_ATOMIC_STATEMENTS = {
    "add": "atomicAdd(&out[target], value);",
    "min": "gf_atomic_min(&out[target], value);",
    "max": "gf_atomic_max(&out[target], value);",
}

#: op -> how ``acc`` (the output element) absorbs the next update ``u`` of its run
_FOLDS = {
    "add": "acc = acc + u;",
    "min": "if (u < acc) acc = u;",
    "max": "if (acc < u) acc = u;",
}


@functools.cache
def _locate_kernel(xp):
    """offsets[i] = the linear offset of the tuple i (``depth`` indices of type T, row-major
    into ``dims``), -1 when an index is outside [0, dim): as uint64 a negative one is huge."""
    return xp.ElementwiseKernel(
        "raw T tuples, raw int64 dims, int64 depth", "raw int64 offsets",
        _source("""
        long long offset = 0, stride = 1;
        bool bad = false;
        for (long long c = depth - 1; c >= 0; --c) {
          const long long index = (long long)tuples[i * depth + c];
          const long long dim = dims[c];
          bad = bad || (unsigned long long)index >= (unsigned long long)dim;
          offset += index * stride;
          stride *= dim;
        }
        offsets[i] = bad ? -1LL : offset;
        """),
        "graphflow_locate")


@functools.cache
def _atomic_kernel(xp, op: str):
    return xp.ElementwiseKernel(
        "raw int64 offsets, T value, int64 slice_size, int64 slices", "raw T out",
        _source("""
        const long long slice = offsets[ROW];
        if ((unsigned long long)slice < (unsigned long long)slices) {
          const long long target = slice * slice_size + ELEMENT;
          APPLY
        }
        """, APPLY=_ATOMIC_STATEMENTS[op]),
        f"graphflow_scatter_atomic_{op}", preamble=_ATOMIC_PREAMBLE)


#: how update i claims its slot: the largest position wins (the last in index order)
_LAST_WRITER_CLAIM = "atomicMax(&last[slice], (T)i);"


@functools.cache
def _last_writer_kernel(xp):
    """last[offsets[i]] = max(last[offsets[i]], i): T is int64 (the positions)."""
    return xp.ElementwiseKernel(
        "raw int64 offsets", "raw T last",
        _source("""
        const long long slice = offsets[i];
        if (slice >= 0) CLAIM
        """, CLAIM=_LAST_WRITER_CLAIM),
        "graphflow_last_writer")


@functools.cache
def _store_winners_kernel(xp):
    """One thread per updated element; only the slot's last writer stores."""
    return xp.ElementwiseKernel(
        "raw int64 offsets, raw int64 last, T value, int64 slice_size", "raw T out",
        _source("""
        const long long row = ROW;
        const long long slice = offsets[row];
        if (slice >= 0 && last[slice] == row) out[slice * slice_size + ELEMENT] = value;
        """),
        "graphflow_store_winners")


#: the claim of an update: later rows compare larger, whatever their bits
_PACKED_KEY = "(long long)(((unsigned long long)(row + 1) << 32) | bits)"


@functools.cache
def _packed_claim_kernel(xp):
    """table[target] = max(table[target], (row + 1) << 32 | the value's bits): the last row
    in index order wins each element (T of at most 4 bytes; T is the values' type)."""
    return xp.ElementwiseKernel(
        "raw int64 offsets, raw T values, int64 slice_size, int64 slices", "raw int64 table",
        _source("""
        const long long row = ROW;
        const long long slice = offsets[row];
        if ((unsigned long long)slice < (unsigned long long)slices) {
          const T value = values[i];
          const void* at = &value;
          const unsigned int bits =
              sizeof(T) == 4 ? *static_cast<const unsigned int*>(at) :
              sizeof(T) == 2 ? *static_cast<const unsigned short*>(at) :
                               *static_cast<const unsigned char*>(at);
          atomicMax(&table[slice * slice_size + ELEMENT], KEY);
        }
        """, KEY=_PACKED_KEY),
        "graphflow_packed_claim")


@functools.cache
def _packed_store_kernel(xp):
    """out[i] = the winner's value where an update claimed element i (little-endian: the
    low bytes of the packed bits)."""
    return xp.ElementwiseKernel(
        "raw int64 table", "T out",
        _source("""
        const long long key = table[i];
        if (key != 0) {
          const unsigned int bits = (unsigned int)(key & 0xffffffffLL);
          void* at = &out;
          if (sizeof(T) == 4) *static_cast<unsigned int*>(at) = bits;
          else if (sizeof(T) == 2) *static_cast<unsigned short*>(at) = (unsigned short)bits;
          else *static_cast<unsigned char*>(at) = (unsigned char)bits;
        }
        """),
        "graphflow_packed_store")


@functools.cache
def _segmented_kernel(xp, op: str):
    return xp.ElementwiseKernel(
        "raw int64 order, raw int64 ordered, raw int64 starts, raw T values, "
        "int64 slice_size", "raw T out",
        _source("""
        const long long run = ROW, element = ELEMENT;
        const long long begin = starts[run], end = starts[run + 1];
        const long long slice = ordered[begin];
        if (slice >= 0) {
          const long long target = slice * slice_size + element;
          T acc = out[target];
          for (long long k = begin; k < end; ++k) {
            const T u = values[order[k] * slice_size + element];
            FOLD
          }
          out[target] = acc;
        }
        """, FOLD=_FOLDS[op]),
        f"graphflow_scatter_segmented_{op}")


@functools.cache
def _two_way_kernel(xp):
    """out[place of row] = rows[row]: a 1 in ``ones`` (the running count of the ones)
    marks a one; a one goes after the ``zeros`` zeros."""
    return xp.ElementwiseKernel(
        "raw int64 ones, raw T rows, int64 slice_size, int64 zeros", "raw T out",
        _source("""
        const long long row = ROW;
        const long long count = ones[row], before = row ? ones[row - 1] : 0;
        const long long place = count != before ? zeros + count - 1 : row - count;
        out[place * slice_size + ELEMENT] = rows[i];
        """),
        "graphflow_two_way_partition")


@functools.cache
def _gather_kernel(xp):
    return xp.ElementwiseKernel(
        "raw int64 offsets, raw T source, int64 slice_size, int64 slices", "T out",
        _source("""
        const long long slice = offsets[ROW];
        out = (unsigned long long)slice < (unsigned long long)slices
            ? source[slice * slice_size + ELEMENT] : T(0);
        """),
        "graphflow_gather")


__all__ = ["locate", "scatter", "gather", "last_writers", "last_writers_table",
           "two_way_partition", "stable_argsort", "to_host", "on_host"]
