"""TensorFlow's sorted string tables (LevelDB's SSTable format, TensorFlow's
``tsl/lib/io/table_builder.cc``): the ``.index`` file of a checkpoint.

A table is a run of blocks, then a 48-byte footer::

    data block 0, ..., data block N-1   sorted (key, value) entries
    metaindex block                     empty (TensorFlow writes no filter)
    index block                         one entry per data block: a key >= the
                                        block's last key and < the next block's
                                        first, and the block's handle
    footer                              metaindex handle, index handle (varint64
                                        offset and size each), zero padding to 40
                                        bytes, magic 0xdb4775248b80fb57 (u64 LE)

Each block is followed by a 5-byte trailer: its compression type (0: none) and the
masked crc32c of the block and that byte. A block's entries are prefix-compressed
(varint32 shared key length, varint32 unshared length, varint32 value length, the
unshared key bytes, the value); every 16th entry (every entry, in the index block)
is a restart point holding its whole key, and the block ends with the restart
offsets (u32 each) and their count (u32).

:func:`write_table` writes what TensorFlow's TableBuilder writes, byte for byte
(the same block size, restart interval and shortened index keys).
:func:`read_table` is stricter than TensorFlow's reader: besides every crc it
checks that the blocks tile the file exactly, that the padding is zero, that keys
strictly increase and that the index keys separate the blocks, so that no flipped,
missing or extra byte goes unnoticed. It raises :class:`TableError`; callers name
the file.
"""
from __future__ import annotations

import struct
from typing import Iterable

from .crc32c import crc32c, mask, unmask

MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
BLOCK_SIZE = 262144  # TensorFlow's table::Options defaults
RESTART_INTERVAL = 16
_TRAILER_SIZE = 5
_HANDLES_SIZE = 40  # two BlockHandles at most 10 + 10 bytes each, zero-padded


class TableError(Exception):
    """A malformed table; the message says what is wrong and where."""


# -- writing ---------------------------------------------------------------------------
def write_table(items: Iterable[tuple[bytes, bytes]], block_size: int = BLOCK_SIZE,
                restart_interval: int = RESTART_INTERVAL) -> bytes:
    """The table of ``items``, (key, value) pairs in strictly increasing key order."""
    out = bytearray()
    block, index = _BlockBuilder(restart_interval), _BlockBuilder(1)
    pending, last = None, None
    for key, value in items:
        if last is not None:
            if key <= last:
                raise ValueError(f"table keys must strictly increase: {key!r} after {last!r}")
            if len(key) + len(value) >= 2 * block_size and not block.empty:
                pending = _write_block(out, block)
        if pending is not None:
            index.add(_shortest_separator(last, key), pending)
            pending = None
        block.add(key, value)
        last = key
        if block.size_estimate() >= block_size:
            pending = _write_block(out, block)
    if not block.empty:
        pending = _write_block(out, block)
    metaindex = _write_block(out, _BlockBuilder(restart_interval))
    if pending is not None:
        index.add(_short_successor(last), pending)
    index_handle = _write_block(out, index)
    out += (metaindex + index_handle).ljust(_HANDLES_SIZE, b"\0") + struct.pack("<Q", MAGIC)
    return bytes(out)


class _BlockBuilder:
    """One block's entries, prefix-compressed against the previous key."""

    def __init__(self, restart_interval: int):
        self.interval = restart_interval
        self.buffer, self.restarts = bytearray(), [0]
        self.counter, self.last, self.empty = 0, b"", True

    def add(self, key: bytes, value: bytes) -> None:
        shared = 0
        if self.counter < self.interval:
            limit = min(len(key), len(self.last))
            while shared < limit and key[shared] == self.last[shared]:
                shared += 1
        else:
            self.restarts.append(len(self.buffer))
            self.counter = 0
        self.buffer += (_varint(shared) + _varint(len(key) - shared) + _varint(len(value))
                        + key[shared:] + value)
        self.last, self.empty = key, False
        self.counter += 1

    def size_estimate(self) -> int:
        return len(self.buffer) + 4 * len(self.restarts) + 4

    def finish(self) -> bytes:
        return bytes(self.buffer) + struct.pack(f"<{len(self.restarts) + 1}I", *self.restarts,
                                                len(self.restarts))


def _write_block(out: bytearray, block: _BlockBuilder) -> bytes:
    """Append ``block`` and its trailer to ``out``, reset it; returns its handle."""
    contents = block.finish()
    handle = _varint(len(out)) + _varint(len(contents))
    out += contents + b"\0" + struct.pack("<I", mask(crc32c(b"\0", crc32c(contents))))
    block.__init__(block.interval)
    return handle


def _shortest_separator(start: bytes, limit: bytes) -> bytes:
    """A short key in [start, limit) (LevelDB's bytewise FindShortestSeparator)."""
    n = min(len(start), len(limit))
    i = 0
    while i < n and start[i] == limit[i]:
        i += 1
    if i < n and start[i] < 0xFF and start[i] + 1 < limit[i]:
        return start[:i] + bytes([start[i] + 1])
    return start


def _short_successor(key: bytes) -> bytes:
    """A short key >= ``key`` (LevelDB's bytewise FindShortSuccessor)."""
    for i, byte in enumerate(key):
        if byte != 0xFF:
            return key[:i] + bytes([byte + 1])
    return key


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# -- reading ---------------------------------------------------------------------------
def read_table(data: bytes) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of the table ``data``, in order, all of it verified."""
    size = len(data)
    if size < FOOTER_SIZE:
        raise TableError(f"{size} bytes is too short for a table")
    footer = size - FOOTER_SIZE
    if struct.unpack_from("<Q", data, size - 8)[0] != MAGIC:
        raise TableError("not an sstable (bad magic number)")
    metaindex, pos = _handle(data, footer, "metaindex")
    index, pos = _handle(data, pos, "index")
    canonical = b"".join(_varint(n) for n in metaindex + index)  # no crc covers the footer
    if data[footer:pos] != canonical or any(data[pos:size - 8]):
        raise TableError("the footer's handles are not canonical or its padding is not zero")
    index_rows = _block_rows(data, index, "the index block")
    rows, offset, low = [], 0, None
    for k, (separator, value) in enumerate(index_rows):
        handle, end = _handle(value, 0, f"data block {k}")
        if end != len(value) or handle[0] != offset:
            raise TableError(f"the index's handle of data block {k} does not follow the "
                             f"previous block (offset {handle[0]}, expected {offset})")
        block = _block_rows(data, handle, f"data block {k}")
        if not block or block[-1][0] > separator or (low is not None and block[0][0] <= low):
            raise TableError(f"data block {k} is empty or its keys are out of order")
        rows += block
        offset, low = handle[0] + handle[1] + _TRAILER_SIZE, separator
    if metaindex[0] != offset or _block_rows(data, metaindex, "the metaindex block"):
        raise TableError("the metaindex block is not an empty block after the data blocks")
    offset += metaindex[1] + _TRAILER_SIZE
    if index[0] != offset or index[0] + index[1] + _TRAILER_SIZE != footer:
        raise TableError(f"the blocks do not tile the {size} bytes before the footer")
    return rows


def _handle(data: bytes, pos: int, what: str) -> tuple[tuple[int, int], int]:
    """((offset, size), position after) of the block handle at ``pos``."""
    offset, pos = _read_varint(data, pos, 10, f"the {what} handle")
    length, pos = _read_varint(data, pos, 10, f"the {what} handle")
    return (offset, length), pos


def _block_rows(data: bytes, handle: tuple[int, int], what: str) -> list[tuple[bytes, bytes]]:
    """The (key, value) entries of the block at ``handle``, its trailer verified."""
    offset, length = handle
    end = offset + length
    if end + _TRAILER_SIZE > len(data) - FOOTER_SIZE:
        raise TableError(f"{what} at bytes [{offset}, {end}) runs past the blocks")
    contents = data[offset:end + 1]  # the block and its type byte
    stored = struct.unpack_from("<I", data, end + 1)[0]
    if crc32c(contents) != unmask(stored):
        raise TableError(f"{what} fails its checksum (block checksum mismatch)")
    if data[end] != 0:
        raise TableError(f"{what} has compression type {data[end]}; TensorFlow's "
                         f"checkpoints use none (0)")
    return _entries(data[offset:end], what)


def _entries(block: bytes, what: str) -> list[tuple[bytes, bytes]]:
    """A block's entries; its restart points must be entry starts with whole keys."""
    if len(block) < 8:
        raise TableError(f"{what} of {len(block)} bytes is too short")
    (count,) = struct.unpack_from("<I", block, len(block) - 4)
    limit = len(block) - 4 - 4 * count
    if count < 1 or limit < 0:
        raise TableError(f"{what} claims {count} restart points")
    restarts = struct.unpack_from(f"<{count}I", block, limit)
    rows, starts, pos, last = [], set(), 0, b""
    while pos < limit:
        start = pos
        shared, pos = _read_varint(block, pos, 5, what)
        unshared, pos = _read_varint(block, pos, 5, what)
        length, pos = _read_varint(block, pos, 5, what)
        if shared > len(last) or pos + unshared + length > limit:
            raise TableError(f"{what}: the entry at byte {start} is malformed")
        key = last[:shared] + block[pos:pos + unshared]
        if rows and key <= last:
            raise TableError(f"{what}: keys are out of order at byte {start}")
        rows.append((key, block[pos + unshared:pos + unshared + length]))
        if shared == 0:
            starts.add(start)
        pos, last = pos + unshared + length, key
    if restarts[0] != 0 or list(restarts) != sorted(set(restarts)) or \
            not starts.issuperset(restarts) and rows:
        raise TableError(f"{what}: its restart points are not entries with whole keys")
    return rows


def _read_varint(data: bytes, pos: int, max_bytes: int, what: str) -> tuple[int, int]:
    value = 0
    for k in range(max_bytes):
        if pos + k >= len(data):
            break
        byte = data[pos + k]
        value |= (byte & 0x7F) << (7 * k)
        if byte < 0x80:
            return value, pos + k + 1
    raise TableError(f"{what}: a bad varint at byte {pos}")


__all__ = ["write_table", "read_table", "TableError", "MAGIC", "BLOCK_SIZE"]
