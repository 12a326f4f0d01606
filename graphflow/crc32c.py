"""CRC-32C (Castagnoli), the checksum of TensorFlow's checkpoints and tables, and
TensorFlow's masked form of it (``tsl/lib/hash/crc32c.h``).

The checksum runs as one compiled slice-by-8 loop (eight table lookups per eight
bytes, about 1-2 GB/s), compiled once and kept in graphflow's kernel cache
(``ops/jit.py``). TensorFlow stores a *masked* crc wherever the checksummed data may
itself hold crcs: ``mask(crc) = rotate_right(crc, 15) + 0xa282ead8`` (mod 2**32).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

_POLY = 0x82F63B78  # Castagnoli's polynomial, bit-reversed
_MASK_DELTA = 0xA282EAD8


def crc32c(data: Any, crc: int = 0) -> int:
    """The CRC-32C of ``data`` (bytes, bytearray, memoryview or a C-contiguous numpy
    array, read as its bytes), continuing from ``crc`` (the crc of what came before)."""
    if isinstance(data, np.ndarray):
        if not data.flags.c_contiguous:
            raise ValueError("crc32c needs a C-contiguous array")
        raw = data.reshape(-1).view(np.uint8)
    else:
        raw = np.frombuffer(data, dtype=np.uint8)
    words = raw[:raw.size - raw.size % 8].view("<u8")  # the bulk, eight bytes a step
    return int(_compiled()(np.uint32(crc), raw, words, _tables()))


def mask(crc: int) -> int:
    """TensorFlow's masked crc: what its files store."""
    crc &= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def unmask(masked: int) -> int:
    """The crc that ``mask`` turned into ``masked``."""
    rot = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


@functools.cache
def _tables() -> np.ndarray:
    """The (8, 256) uint32 slice-by-8 tables: row k is the crc of a byte followed by k
    zero bytes."""
    c = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        c = (c >> 1) ^ (np.uint32(_POLY) * (c & 1))
    tables = np.empty((8, 256), dtype=np.uint32)
    tables[0] = c
    for k in range(1, 8):
        tables[k] = (tables[k - 1] >> 8) ^ tables[0][tables[k - 1] & 0xFF]
    return tables


@functools.cache
def _compiled() -> Callable:
    """The compiled loop: ``extend(crc, bytes, the bytes as little-endian u64 words,
    tables)``."""
    from .ops.jit import kernel  # graphflow's kernel cache, imported when first needed

    @kernel
    def extend(crc, data, words, t):
        b = np.uint32(0xFF)
        c = crc ^ np.uint32(0xFFFFFFFF)
        for w in range(words.size):
            lo = np.uint32(words[w] & np.uint64(0xFFFFFFFF)) ^ c
            hi = np.uint32(words[w] >> np.uint64(32))
            c = (t[7, lo & b] ^ t[6, (lo >> np.uint32(8)) & b] ^ t[5, (lo >> np.uint32(16)) & b]
                 ^ t[4, lo >> np.uint32(24)] ^ t[3, hi & b] ^ t[2, (hi >> np.uint32(8)) & b]
                 ^ t[1, (hi >> np.uint32(16)) & b] ^ t[0, hi >> np.uint32(24)])
        for i in range(words.size * 8, data.size):
            c = t[0, (c ^ np.uint32(data[i])) & b] ^ (c >> np.uint32(8))
        return c ^ np.uint32(0xFFFFFFFF)

    return extend


__all__ = ["crc32c", "mask", "unmask"]
