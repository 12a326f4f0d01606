"""TensorFlow's checkpoint format, the tensor bundle (``tensorflow/core/util/
tensor_bundle``): writing and reading the tensors of one checkpoint ``<prefix>``.

``<prefix>.index`` is a sorted table (:mod:`graphflow.sstable`) whose key ``""``
holds a BundleHeaderProto (num_shards, endianness, version) and whose every other
key, a tensor's name, holds a BundleEntryProto: dtype, shape, shard, offset and
size in that shard's data file ``<prefix>.data-SSSSS-of-NNNNN``, and the masked
crc32c of the tensor's bytes there. A tensor's bytes are its C-order little-endian
elements (bool one byte, complex real then imaginary part); a string tensor's are
every element's length as a varint64, a masked crc32c of those lengths (each taken
as a u32, or a u64 when it does not fit), then the elements' bytes, and its entry's
crc covers the lengths (as u32/u64), that checksum and the bytes. A partitioned
tensor (TF 1.x's PartitionedVariable) has an entry with ``slices`` and no bytes;
each slice is a tensor of its own under the key ``checkpoint::EncodeTensorNameSlice``
makes (:func:`slice_key`).

:class:`DataWriter` streams tensors into a data file and :func:`index_bytes` makes
the index; the files are byte for byte what TensorFlow's BundleWriter writes.
:class:`BundleReader` reads any number of shards and slices and checks more than
TensorFlow does: besides every crc, the entries must tile each data file exactly,
so any flipped, missing or extra byte is a DataLossError naming the file.
"""
from __future__ import annotations

import math
import os
import struct
from typing import Any, BinaryIO

import numpy as np

from .crc32c import crc32c, mask, unmask
from .dtypes import DType
from .errors import DataLossError, NotFoundError, UnimplementedError
from .interop.tf_proto import TF_ENUM, from_tf_enum, tf_enum_name
from .sstable import TableError, read_table, write_table
from .tf_bundle_proto import BIG, LITTLE, messages

VERSION = 1  # kTensorBundleVersion: what this writes and the newest it reads
#: Bytes per element of the DataTypes graphflow has no dtype for (sizes still checked).
_OTHER_ITEMSIZES = {11: 1, 12: 1, 13: 4, 14: 2, 15: 2, 16: 2}
_STRING = 7


def index_filename(prefix: str) -> str:
    return f"{prefix}.index"


def data_filename(prefix: str, shard: int, num_shards: int) -> str:
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


# -- writing ----------------------------------------------------------------------------
class DataWriter:
    """Appends tensors to one open data file (shard 0), recording their entries."""

    def __init__(self, f: BinaryIO):
        self._file, self.offset = f, 0
        self.entries: dict[str, Any] = {}

    def add(self, key: str, value: np.ndarray, dtype: DType) -> None:
        """Write ``value`` (of graphflow dtype ``dtype``) as tensor ``key``."""
        if key in self.entries or not key:
            raise ValueError(f"Adding a duplicate or empty key: {key!r}")
        if dtype.is_string:
            chunks, crc = _string_chunks(value)
        else:
            raw = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<"))
            chunks = [raw.reshape(-1).view(np.uint8)]
            crc = crc32c(chunks[0])
        size = 0
        for chunk in chunks:
            self._file.write(chunk)
            size += len(chunk)
        entry = messages().BundleEntryProto(dtype=TF_ENUM[dtype], shard_id=0,
                                            offset=self.offset, size=size, crc32c=mask(crc))
        entry.shape.SetInParent()
        for d in value.shape:
            entry.shape.dim.add(size=d)
        self.entries[key] = entry
        self.offset += size


def _string_chunks(value: np.ndarray) -> tuple[list, int]:
    """A string tensor's bytes (varint lengths, their masked crc, the elements) and the
    crc its entry stores."""
    items = [item if isinstance(item, bytes) else bytes(item) for item in value.reshape(-1)]
    lengths = np.array([len(item) for item in items], dtype=np.uint64)
    crc = crc32c(_lengths_for_crc(lengths))
    checksum = struct.pack("<I", mask(crc))
    data = b"".join(items)
    crc = crc32c(data, crc32c(checksum, crc))
    return [_encode_varints(lengths), checksum, data], crc


def _lengths_for_crc(lengths: np.ndarray) -> bytes:
    """The lengths as TensorFlow checksums them: u32 each, u64 where one does not fit."""
    if not lengths.size or int(lengths.max()) <= 0xFFFFFFFF:
        return lengths.astype("<u4").tobytes()
    return b"".join(struct.pack("<I" if n <= 0xFFFFFFFF else "<Q", n) for n in lengths.tolist())


def _encode_varints(lengths: np.ndarray) -> np.ndarray:
    """The varint64 encodings of ``lengths``, one after another (vectorized)."""
    nbytes = np.ones(lengths.size, dtype=np.int64)
    for k in range(1, 10):
        nbytes += lengths >= np.uint64(1 << (7 * k))
    starts = np.cumsum(nbytes) - nbytes
    out = np.empty(int(nbytes.sum()), dtype=np.uint8)
    for k in range(10):
        has = nbytes > k
        part = (lengths[has] >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = np.where(nbytes[has] > k + 1, 0x80, 0).astype(np.uint64)
        out[starts[has] + k] = (part | more).astype(np.uint8)
    return out


def index_bytes(entries: dict[str, Any], num_shards: int) -> bytes:
    """The ``.index`` table of ``entries`` (name: BundleEntryProto) and its header."""
    m = messages()
    header = m.BundleHeaderProto(num_shards=num_shards, endianness=LITTLE,
                                 version=m.VersionDef(producer=VERSION))
    rows = sorted((key.encode("utf-8"), entry.SerializeToString())
                  for key, entry in entries.items())
    return write_table([(b"", header.SerializeToString())] + rows)


# -- slice keys (TensorFlow's OrderedCode) ----------------------------------------------
def slice_key(name: bytes, extents: list[tuple[int, int]]) -> bytes:
    """The key of one slice of tensor ``name``: ``EncodeTensorNameSlice`` (ordered code:
    0, the name, the rank, then each dimension's start and length; -1: all of it)."""
    out = b"\x00" + _escape(name) + b"\x00\x01" + _num_increasing(len(extents))
    for start, length in extents:
        out += _signed_increasing(start) + _signed_increasing(length)
    return out


def _escape(name: bytes) -> bytes:
    """OrderedCode's string escapes: 0x00 -> 00 ff, 0xff -> ff 00."""
    if b"\x00" not in name and b"\xff" not in name:
        return name
    return b"".join(b"\x00\xff" if c == 0 else b"\xff\x00" if c == 0xFF else bytes([c])
                    for c in name)


def _num_increasing(value: int) -> bytes:
    body = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return bytes([len(body)]) + body


def _signed_increasing(value: int) -> bytes:
    """OrderedCode::WriteSignedNumIncreasing: n bytes hold [-2**(7n-1), 2**(7n-1))."""
    x = ~value if value < 0 else value
    length = -(-(x.bit_length() + 1) // 7)
    raw = bytearray((value % (1 << 80)).to_bytes(10, "big")[10 - length:])
    header = (0xFF << (8 - min(length, 8))) & 0xFF, {9: 0x80, 10: 0xC0}.get(length, 0)
    raw[0] ^= header[0]
    if length > 1:
        raw[1] ^= header[1]
    return bytes(raw)


# -- reading ----------------------------------------------------------------------------
class BundleEntry:
    """One tensor of a checkpoint as its index describes it (already checked).
    ``dtype`` is None for a DataType graphflow lacks; ``slices``: per slice, per
    dimension, (start, length or -1 for all of it)."""

    __slots__ = ("key", "name", "dtype", "enum", "shape", "shard", "offset", "size", "crc",
                 "slices")

    def __init__(self, key: bytes, proto: Any, shape: tuple, slices: tuple):
        self.key, self.name = key, key.decode("utf-8", "backslashreplace")
        self.enum, self.shape, self.slices = proto.dtype, shape, slices
        self.dtype = _DTYPES.get(proto.dtype)
        self.shard, self.offset, self.size = proto.shard_id, proto.offset, proto.size
        self.crc = unmask(proto.crc32c)

    @property
    def dtype_name(self) -> str:
        return self.dtype.name if self.dtype is not None else tf_enum_name(self.enum)


_DTYPES = {enum: from_tf_enum(enum) for enum in TF_ENUM.values()}


class BundleReader:
    """An open checkpoint ``prefix``: its index verified (table, header, every entry),
    its data files open and tiled exactly by their entries; reads tensors on demand."""

    def __init__(self, prefix: str):
        self.prefix = self.path = prefix
        self._files: list = []
        self.index_path = index_filename(prefix)
        try:
            with open(self.index_path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise NotFoundError(f"Failed to find any matching files for {prefix}") from None
        try:
            rows = read_table(data)
        except TableError as e:
            raise self._corrupt(self.index_path, str(e)) from None
        self.num_shards = self._header(rows)
        self.entries = {key: self._entry(key, value) for key, value in rows[1:]}
        try:
            self._open_shards()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "BundleReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for f in self._files:
            f.close()
        self._files = []

    def keys(self) -> list[str]:
        """The tensors' names (not the header, nor the slices of partitioned tensors)."""
        return [e.name for key, e in self.entries.items() if not key.startswith(b"\x00")]

    def lookup(self, name: str) -> BundleEntry | None:
        return self.entries.get(name.encode("utf-8"))

    def _corrupt(self, path: str, what: str) -> DataLossError:
        return DataLossError(f"Checkpoint file {path} is corrupt or truncated: {what}")

    def _header(self, rows: list) -> int:
        """The header's shard count, its endianness and version checked."""
        from google.protobuf.message import DecodeError

        if not rows or rows[0][0] != b"":
            raise self._corrupt(self.index_path, "it has no header entry")
        try:
            header = messages().BundleHeaderProto.FromString(rows[0][1])
        except DecodeError:
            raise self._corrupt(self.index_path, "unable to parse the header") from None
        if header.num_shards < 1 or header.endianness not in (LITTLE, BIG):
            raise self._corrupt(self.index_path, f"a bad header ({header.num_shards} shards, "
                                                 f"endianness {header.endianness})")
        if header.endianness == BIG:
            raise UnimplementedError(f"Checkpoint {self.prefix} is big-endian; graphflow reads "
                                     f"little-endian checkpoints")
        version = header.version
        if version.min_consumer > VERSION or VERSION in version.bad_consumers:
            raise UnimplementedError(
                f"Checkpoint {self.prefix} needs a newer reader (format version "
                f"{version.producer}, min consumer {version.min_consumer}); graphflow reads "
                f"version {VERSION}")
        return header.num_shards

    def _entry(self, key: bytes, value: bytes) -> BundleEntry:
        """One entry, checked against its shape, dtype and the shard count."""
        from google.protobuf.message import DecodeError

        name = key.decode("utf-8", "backslashreplace")

        def bad(what: str) -> DataLossError:
            return self._corrupt(self.index_path, f"tensor '{name}': {what}")
        try:
            proto = messages().BundleEntryProto.FromString(value)
        except DecodeError:
            raise bad("its entry is not parseable") from None
        dims = [d.size for d in proto.shape.dim]
        if proto.shape.unknown_rank or any(d < 0 for d in dims):
            raise bad("a bad shape")
        if proto.dtype not in _DTYPES and proto.dtype not in _OTHER_ITEMSIZES | {20: 0, 21: 0}:
            raise bad(f"an unknown dtype {proto.dtype}")
        if not 0 <= proto.shard_id < self.num_shards or proto.offset < 0 or proto.size < 0:
            raise bad(f"a bad shard {proto.shard_id}, offset or size")
        slices = tuple(tuple((x.start, x.length if x.HasField("length") else -1)
                             for x in s.extent) for s in proto.slices)
        for s in slices:
            if len(s) != len(dims) or any(
                    start < 0 or length < -1 or (length >= 0 and start + length > d)
                    for (start, length), d in zip(s, dims)):
                raise bad(f"a slice {list(s)} that does not fit its shape {dims}")
        if slices and proto.size:
            raise bad("a partitioned tensor's entry holds bytes")
        if not slices and not _size_fits(proto, math.prod(dims)):
            raise bad(f"{proto.size} bytes cannot hold shape {dims} of "
                      f"{tf_enum_name(proto.dtype)}")
        return BundleEntry(key, proto, tuple(dims), slices)

    def _open_shards(self) -> None:
        """Open every data file; its entries must cover its bytes exactly, no gaps."""
        spans: list[list] = [[] for _ in range(self.num_shards)]
        for e in self.entries.values():
            if not e.slices:
                spans[e.shard].append((e.offset, e.size, e.name))
        for shard in range(self.num_shards):
            path = data_filename(self.prefix, shard, self.num_shards)
            try:
                self._files.append(open(path, "rb", buffering=0))
            except FileNotFoundError:
                raise DataLossError(f"Checkpoint {self.prefix} is incomplete: its data file "
                                    f"{path} is missing") from None
            size, end = os.fstat(self._files[-1].fileno()).st_size, 0
            for offset, length, name in sorted(spans[shard]):
                if offset != end:
                    raise self._corrupt(path, f"tensor '{name}' starts at byte {offset}, "
                                              f"expected {end}")
                end += length
            if end != size:
                raise self._corrupt(path, f"its tensors end at byte {end}; the file has "
                                          f"{size} bytes")

    def read(self, entry: BundleEntry) -> np.ndarray:
        """A fresh array of ``entry``'s value (a partitioned one assembled), verified."""
        if entry.slices:
            return self._assemble(entry)
        if entry.dtype is None:
            raise UnimplementedError(f"Checkpoint {self.prefix}: tensor '{entry.name}' is "
                                     f"{entry.dtype_name}, which graphflow has no dtype for")
        path = data_filename(self.prefix, entry.shard, self.num_shards)
        if entry.dtype.is_string:
            return self._strings(entry, self._read_bytes(entry, np.empty(entry.size, np.uint8)))
        value = np.empty(entry.shape, np.dtype(entry.dtype.as_numpy_dtype).newbyteorder("<"))
        raw = self._read_bytes(entry, value.reshape(-1).view(np.uint8))
        crc = crc32c(raw)
        if crc != entry.crc:
            raise self._corrupt(path, f"tensor '{entry.name}' fails its checksum (stored "
                                      f"{entry.crc:08x}, computed {crc:08x})")
        if entry.dtype.is_bool and raw.size and raw.max() > 1:
            raise self._corrupt(path, f"bool tensor '{entry.name}' holds a byte other than 0 "
                                      f"or 1")
        return value.astype(entry.dtype.as_numpy_dtype, copy=False)

    def _read_bytes(self, entry: BundleEntry, raw: np.ndarray) -> np.ndarray:
        f, done = self._files[entry.shard], 0
        f.seek(entry.offset)
        while done < entry.size:
            got = f.readinto(raw[done:done + (1 << 26)])  # bounded reads, 64 MiB
            if not got:
                path = data_filename(self.prefix, entry.shard, self.num_shards)
                raise self._corrupt(path, f"tensor '{entry.name}' ends past the end of the "
                                          f"file")
            done += got
        return raw

    def _strings(self, entry: BundleEntry, raw: np.ndarray) -> np.ndarray:
        """The object array of bytes a string tensor's bytes encode, every crc checked."""
        path = data_filename(self.prefix, entry.shard, self.num_shards)
        n = math.prod(entry.shape)
        if n == 0 and raw.size == 0 and entry.crc == 0:  # what older TensorFlows wrote
            return np.empty(entry.shape, dtype=object)
        lengths, end = _decode_varints(raw, n)
        if lengths is None or end + 4 > raw.size:
            raise self._corrupt(path, f"string tensor '{entry.name}': malformed lengths")
        crc = crc32c(_lengths_for_crc(lengths))
        checksum = raw[end:end + 4]
        if unmask(int(checksum.view("<u4")[0])) != crc:
            raise self._corrupt(path, f"string tensor '{entry.name}': the length checksum "
                                      f"does not match")
        crc = crc32c(raw[end + 4:], crc32c(checksum, crc))
        if crc != entry.crc:
            raise self._corrupt(path, f"tensor '{entry.name}' fails its checksum (stored "
                                      f"{entry.crc:08x}, computed {crc:08x})")
        data = raw[end + 4:].tobytes()
        if n and int(lengths.max()) > len(data) or int(lengths.sum()) != len(data):
            raise self._corrupt(path, f"string tensor '{entry.name}': its lengths do not add "
                                      f"up to its {len(data)} bytes")
        value, start = np.empty(n, dtype=object), 0
        for i, stop in enumerate(np.cumsum(lengths, dtype=np.int64).tolist()):
            value[i] = data[start:stop]
            start = stop
        return value.reshape(entry.shape)

    def _assemble(self, entry: BundleEntry) -> np.ndarray:
        """A partitioned tensor from its slices, which must tile it exactly."""
        dtype = entry.dtype.as_numpy_dtype if entry.dtype is not None else None
        full = np.empty(entry.shape, dtype=object if dtype is None else dtype)
        boxes = []
        for extents in entry.slices:
            box = tuple((s, d - s if n == -1 else n) for (s, n), d in zip(extents, entry.shape))
            part = self.entries.get(slice_key(entry.key, list(extents)))
            if part is None or part.slices or part.enum != entry.enum or \
                    part.shape != tuple(n for _, n in box):
                raise self._corrupt(self.index_path, f"slice {list(extents)} of tensor "
                                                     f"'{entry.name}' is missing or malformed")
            full[tuple(slice(s, s + n) for s, n in box)] = self.read(part)
            boxes.append(box)
        if sum(math.prod(n for _, n in b) for b in boxes) != full.size or any(
                _overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:]):
            raise self._corrupt(self.index_path, f"the slices of tensor '{entry.name}' do not "
                                                 f"cover it exactly")
        return full


def _size_fits(proto: Any, count: int) -> bool:
    """Whether an entry's byte count can hold ``count`` elements of its dtype."""
    if proto.dtype == _STRING:  # a varint per element, the length checksum, the bytes
        return proto.size >= count + 4 or (count == 0 and proto.size == 0)
    dtype = _DTYPES.get(proto.dtype)
    itemsize = dtype.itemsize if dtype is not None else _OTHER_ITEMSIZES.get(proto.dtype)
    return itemsize is None or proto.size == count * itemsize


def _overlap(a: tuple, b: tuple) -> bool:
    return all(sa < sb + nb and sb < sa + na for (sa, na), (sb, nb) in zip(a, b)) and \
        all(n for _, n in a) and all(n for _, n in b)


def _decode_varints(raw: np.ndarray, n: int) -> tuple[np.ndarray | None, int]:
    """The first ``n`` varint64s of ``raw`` and the position after them (None if they
    are not there or one is longer than 10 bytes), vectorized."""
    if n == 0:
        return np.zeros(0, np.uint64), 0
    head = raw[:10 * n]
    ends = np.flatnonzero(head < 0x80)[:n]
    if ends.size < n:
        return None, 0
    starts = np.concatenate(([0], ends[:-1] + 1))
    widths = ends - starts + 1
    if int(widths.max()) > 10:
        return None, 0
    span = head[:int(ends[-1]) + 1].astype(np.uint64) & np.uint64(0x7F)
    shifts = (np.arange(span.size) - np.repeat(starts, widths)) * 7
    values = np.bitwise_or.reduceat(span << shifts.astype(np.uint64), starts)
    return values, int(ends[-1]) + 1


__all__ = ["DataWriter", "index_bytes", "BundleReader", "BundleEntry", "slice_key",
           "index_filename", "data_filename", "VERSION"]
