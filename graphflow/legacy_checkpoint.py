"""graphflow's own checkpoint format (version 1), which ``gf.train.Saver`` wrote before
it wrote TensorFlow's: still read, never written. One file, every integer
little-endian::

    offset 0        magic  b"\\x89GFCKPT\\n"                               8 bytes
    offset 8        the tensors' raw bytes, one after another, no gaps
    header_offset   header: UTF-8 JSON                             header_length bytes
    size - 32       trailer: header_offset u64, header_length u64,
                    header crc32 u32, crc32 of these 20 bytes u32,
                    b"GFCKEND\\n"                                   32 bytes

The header is ``{"format": "graphflow.Checkpoint", "version": 1, "producer": ...,
"tensors": [{"name", "dtype", "shape", "offset", "nbytes", "crc32"}, ...]}``; a
tensor's bytes are its C-order little-endian elements (bool: one byte, 0 or 1;
complex: real then imaginary part; string: every element's length as a u64, then
the elements' bytes). Every byte is covered: the magics are compared, the trailer
and header carry crc32s, and the tensors must tile the bytes between the magic and
the header exactly, each with its crc32; anything else is a DataLossError naming
the file.
"""
from __future__ import annotations

import json
import math
import os
import struct
import zlib
from typing import Any

import numpy as np

from .dtypes import ALL_TYPES, DType
from .errors import DataLossError, NotFoundError, UnimplementedError

FORMAT = "graphflow.Checkpoint"
VERSION = 1
MAGIC = b"\x89GFCKPT\n"
END_MAGIC = b"GFCKEND\n"
_TRAILER = struct.Struct("<QQII8s")  # header offset, header length, header crc, trailer crc, magic
_DTYPES = {t.name: t for t in ALL_TYPES}
_READ_CHUNK = 1 << 26  # 64 MiB: bounded reads into a tensor's buffer


def is_legacy(path: str) -> bool:
    """Whether ``path`` is a file that starts with this format's magic bytes."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


class _Entry:
    """One tensor of a checkpoint, as its header describes it (already checked)."""

    __slots__ = ("name", "dtype", "shape", "offset", "nbytes", "crc32")

    def __init__(self, name: str, dtype: DType, shape: tuple, offset: int, nbytes: int,
                 crc32: int):
        self.name, self.dtype, self.shape = name, dtype, shape
        self.offset, self.nbytes, self.crc32 = offset, nbytes, crc32

    @property
    def dtype_name(self) -> str:
        return self.dtype.name


class LegacyReader:
    """An open version-1 checkpoint whose trailer and header are verified; reads tensors
    on demand. Opening it raises NotFoundError for a missing file or a folder, and
    other OSErrors as they are."""

    def __init__(self, path: str):
        self.path = path
        try:
            self._file = open(path, "rb", buffering=0)
        except (FileNotFoundError, NotADirectoryError):  # NotADirectory: under a regular file
            raise NotFoundError(f"Failed to find any matching files for {path}: no such "
                                f"checkpoint") from None
        except IsADirectoryError:
            raise NotFoundError(f"{path} is a directory, not a checkpoint; "
                                f"gf.train.latest_checkpoint({path!r}) names the latest "
                                f"checkpoint in it") from None
        try:
            self.entries = self._read_header()
        except BaseException:
            self._file.close()
            raise

    def __enter__(self) -> "LegacyReader":
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()

    def _corrupt(self, what: str) -> DataLossError:
        return DataLossError(f"Checkpoint {self.path} is corrupt or truncated: {what}")

    def _read_at(self, offset: int, length: int) -> bytes:
        self._file.seek(offset)
        data = b""
        while len(data) < length:
            chunk = self._file.read(length - len(data))
            if not chunk:
                break
            data += chunk
        return data

    def _read_header(self) -> dict[str, _Entry]:
        size = os.fstat(self._file.fileno()).st_size
        if size < len(MAGIC) + _TRAILER.size:
            raise self._corrupt(f"{size} bytes is too short for a checkpoint")
        if self._read_at(0, len(MAGIC)) != MAGIC:
            raise self._corrupt(f"there is no {self.path}.index (a TensorFlow checkpoint) "
                                f"and the file does not start with a graphflow "
                                f"checkpoint's magic bytes")
        trailer = self._read_at(size - _TRAILER.size, _TRAILER.size)
        offset, length, header_crc, trailer_crc, end = _TRAILER.unpack(trailer)
        if end != END_MAGIC:
            raise self._corrupt("it does not end with a graphflow checkpoint's magic bytes")
        if zlib.crc32(trailer[:20]) != trailer_crc:
            raise self._corrupt("the trailer fails its checksum")
        if offset < len(MAGIC) or offset + length + _TRAILER.size != size:
            raise self._corrupt(f"the header at bytes [{offset}, {offset + length}) does not "
                                f"fit a file of {size} bytes")
        header = self._read_at(offset, length)
        if zlib.crc32(header) != header_crc:
            raise self._corrupt(f"the header fails its checksum (stored {header_crc:08x}, "
                                f"computed {zlib.crc32(header):08x})")
        try:
            parsed = json.loads(header.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise self._corrupt(f"the header is not JSON ({e})") from None
        return self._entries(parsed, data_end=offset)

    def _entries(self, header: Any, data_end: int) -> dict[str, _Entry]:
        """The header's tensors, checked: known dtypes, sizes that match the shapes,
        and byte ranges that tile the data section exactly."""
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise self._corrupt(f"the header's format is not '{FORMAT}'")
        version = header.get("version")
        if not _is_int(version) or version < 1:
            raise self._corrupt(f"the header's version {version!r} is not valid")
        if version > VERSION:
            raise UnimplementedError(f"Checkpoint {self.path} has format version {version}; "
                                     f"this graphflow reads version {VERSION}")
        tensors = header.get("tensors")
        if not isinstance(tensors, list):
            raise self._corrupt("the header has no list of tensors")
        entries: dict[str, _Entry] = {}
        expected_offset = len(MAGIC)
        for i, t in enumerate(tensors):
            entry = self._entry(i, t)
            if entry.name in entries:
                raise self._corrupt(f"tensor '{entry.name}' is stored twice")
            if entry.offset != expected_offset:
                raise self._corrupt(f"tensor '{entry.name}' starts at byte {entry.offset}, "
                                    f"expected {expected_offset}")
            expected_offset += entry.nbytes
            entries[entry.name] = entry
        if expected_offset != data_end:
            raise self._corrupt(f"the tensors end at byte {expected_offset}, the header "
                                f"starts at {data_end}")
        return entries

    def _entry(self, i: int, t: Any) -> _Entry:
        fields = ("name", "dtype", "shape", "offset", "nbytes", "crc32")
        if not isinstance(t, dict) or set(t) != set(fields):
            raise self._corrupt(f"tensor entry {i} is not {{{', '.join(fields)}}}")
        name, dtype, shape = t["name"], _DTYPES.get(t["dtype"]), t["shape"]
        if not isinstance(name, str) or dtype is None:
            raise self._corrupt(f"tensor entry {i} has a bad name or dtype")
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise self._corrupt(f"tensor '{name}' has a bad shape {shape!r}")
        if not all(_is_int(t[k]) and t[k] >= 0 for k in ("offset", "nbytes", "crc32")) \
                or t["crc32"] >= 1 << 32:
            raise self._corrupt(f"tensor '{name}' has a bad offset, size or checksum")
        if (t["nbytes"] < 8 * math.prod(shape)) if dtype.is_string else \
                (t["nbytes"] != math.prod(shape) * dtype.itemsize):
            raise self._corrupt(f"tensor '{name}' of shape {shape} and dtype {dtype.name} "
                                f"cannot take {t['nbytes']} bytes")
        return _Entry(name, dtype, tuple(shape), t["offset"], t["nbytes"], t["crc32"])

    def keys(self) -> list[str]:
        return list(self.entries)

    def lookup(self, name: str) -> _Entry | None:
        return self.entries.get(name)

    def read(self, entry: _Entry) -> np.ndarray:
        """A fresh array of ``entry``'s value, read from the file and checksum-verified."""
        if entry.dtype.is_string:
            value = raw = np.empty(entry.nbytes, dtype=np.uint8)
        else:
            stored = entry.dtype.as_numpy_dtype.newbyteorder("<")
            value = np.empty(entry.shape, dtype=stored)
            raw = value.reshape(-1).view(np.uint8)
        self._file.seek(entry.offset)
        done = 0
        while done < entry.nbytes:
            got = self._file.readinto(raw[done:done + _READ_CHUNK])
            if not got:
                raise self._corrupt(f"tensor '{entry.name}' ends past the end of the file")
            done += got
        crc = zlib.crc32(raw)
        if crc != entry.crc32:
            raise self._corrupt(f"tensor '{entry.name}' fails its checksum (stored "
                                f"{entry.crc32:08x}, computed {crc:08x})")
        if entry.dtype.is_bool and raw.size and raw.max() > 1:
            raise self._corrupt(f"bool tensor '{entry.name}' holds a byte other than 0 or 1")
        if entry.dtype.is_string:
            strings = _decode_strings(raw, entry.shape)
            if strings is None:
                raise self._corrupt(f"string tensor '{entry.name}': its lengths do not add up "
                                    f"to its {entry.nbytes} bytes")
            return strings
        return value.astype(entry.dtype.as_numpy_dtype, copy=False)


def _decode_strings(raw: np.ndarray, shape: tuple) -> np.ndarray | None:
    """The object array of bytes that ``raw`` encodes, or None if its lengths do not
    fill ``raw`` exactly."""
    size = math.prod(shape)
    lengths = raw[:8 * size].view("<u8").astype(np.uint64)
    if int(lengths.sum(dtype=np.uint64)) != raw.size - 8 * size or \
            (size and int(lengths.max()) > raw.size):  # a sum that wrapped around
        return None
    data, ends = raw[8 * size:].tobytes(), np.cumsum(lengths, dtype=np.int64)
    value = np.empty(size, dtype=object)
    start = 0
    for i, end in enumerate(ends.tolist()):
        value[i] = data[start:end]
        start = end
    return value.reshape(shape)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


__all__ = ["LegacyReader", "is_legacy", "FORMAT", "VERSION", "MAGIC"]
