"""Checkpoints: ``gf.train.Saver`` writes the values of variables to one file and
restores them into a Session, by variable name (TensorFlow 1.x's ``tf.train.Saver``).

Which variables, which graph. ``Saver()`` saves and restores every variable of
the Session's graph at the time of each call (``gf.global_variables(sess.graph)``),
as TF 1.x's ``Saver()`` takes the default graph's. ``Saver(var_list)`` takes a
list of Variables (keyed by ``v.name``) or a dict ``{checkpoint name: Variable}``
and is bound to their graph; ``Saver(graph=g)`` binds a Saver without a list to
``g``. A Session of another graph is then a ValueError. Variables are matched by
name only, so a rebuilt graph, or one read back with ``gf.load_graph``, restores
a checkpoint written from another graph object, also in a Session whose
initializers never ran.

File format (version 1), every integer little-endian::

    offset 0        magic  b"\\x89GFCKPT\\n"                               8 bytes
    offset 8        the tensors' raw bytes, one after another, no gaps
    header_offset   header: UTF-8 JSON                             header_length bytes
    size - 32       trailer: header_offset u64, header_length u64,
                    header crc32 u32, crc32 of these 20 bytes u32,
                    b"GFCKEND\\n"                                   32 bytes

The header is ``{"format": "graphflow.Checkpoint", "version": 1, "producer": ...,
"tensors": [{"name", "dtype", "shape", "offset", "nbytes", "crc32"}, ...]}``; a
tensor's bytes are its C-order little-endian elements (bool: one byte, 0 or 1;
complex: real then imaginary part; string: every element's length as a u64,
then the elements' bytes one after another, so ``nbytes`` = 8 * size + the
lengths' sum). The header comes last so that ``save``
streams: it snapshots, checksums and writes one variable at a time, and learns
every checksum before it writes the header. Every byte is covered: the magics
are compared, the trailer and header carry crc32s, and the tensors must tile the
bytes between the magic and the header exactly, each with its crc32 (a crc32
detects any flipped byte, and any burst of up to 32 bits).

Guarantees.

- ``save`` writes a temporary file next to the target, fsyncs it and renames it
  over the target (``os.replace``): a crash leaves the previous checkpoint whole.
  The file gets the mode ``open(path, "w")`` gives (0666 less the umask). Each
  variable's value is copied under its lock, a consistent snapshot of it; an
  uninitialized one is a FailedPreconditionError naming it.
- ``restore`` checks everything before it assigns anything: a missing file is a
  NotFoundError, a truncated or corrupt one a DataLossError (both name the file),
  a variable the file lacks a NotFoundError, and one stored with another dtype or
  shape than the graph's an InvalidArgumentError (both name the variable). Any of
  these leaves every variable as it was. The values are read into fresh arrays
  (never views of a file buffer) and assigned with every variable's lock held.
"""
from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import secrets
import struct
import zlib
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .dtypes import ALL_TYPES, DType
from .errors import (DataLossError, FailedPreconditionError, InvalidArgumentError,
                     NotFoundError, UnimplementedError)
from .graph import Graph
from .variables import Variable, global_variables

FORMAT = "graphflow.Checkpoint"
VERSION = 1
MAGIC = b"\x89GFCKPT\n"
END_MAGIC = b"GFCKEND\n"
_TRAILER = struct.Struct("<QQII8s")  # header offset, header length, header crc, trailer crc, magic
_DTYPES = {t.name: t for t in ALL_TYPES}
_READ_CHUNK = 1 << 26  # 64 MiB: bounded reads into a tensor's buffer


class Saver:
    """Saves and restores variables (``save(sess, path)`` / ``restore(sess, path)``)."""

    def __init__(self, var_list: Sequence[Variable] | Mapping[str, Variable] | None = None,
                 graph: Graph | None = None):
        if graph is not None and not isinstance(graph, Graph):
            raise TypeError(f"Saver's graph must be a gf.Graph, got {type(graph).__name__}")
        self._named = None if var_list is None else _named_variables(var_list)
        if self._named is not None:
            graphs = {id(v.graph): v.graph for _, v in self._named}
            if len(graphs) > 1:
                raise ValueError("Saver's var_list holds variables of several graphs")
            (own,) = graphs.values()
            if graph is not None and graph is not own:
                raise ValueError("Saver's var_list is from another graph than graph=")
            graph = own
        self.graph = graph
        self._restore_ops: dict[tuple, tuple] = {}

    # -- public API -------------------------------------------------------------------
    def save(self, sess, save_path: str | os.PathLike, global_step: Any = None) -> str:
        """Write the variables' values to ``save_path`` (``-{global_step}`` appended when
        given, as TensorFlow does) atomically; returns the path written."""
        named = self._variables(sess)
        path = os.fsdecode(os.fspath(save_path))
        if global_step is not None:
            path = f"{path}-{_step(sess, global_step)}"
        target, folder = _save_target(path)
        if _on_cluster(sess):  # the values live on the workers: one run reads them all
            values = sess.run([v.read() for _, v in named])
            states = [(key, _Snapshot(v.name, value)) for (key, v), value in zip(named, values)]
        else:
            states = [(key, sess.resources.variable(v.name)) for key, v in named]
        for _, state in states:  # fail before writing anything (save checks again, locked)
            if state.value is None:
                raise _uninitialized(state.name, path)
        tmp = _temp_name(folder, os.path.basename(target))
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except OSError as e:
            raise _os_error(e, path) from None
        try:
            with os.fdopen(fd, "wb") as f:
                _write(f, states, path)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(e, OSError):
                raise _os_error(e, path) from None
            raise
        _fsync_folder(folder)
        return path

    def restore(self, sess, save_path: str | os.PathLike) -> None:
        """Assign the values stored in ``save_path`` to the variables, all or none."""
        named = self._variables(sess)
        path = os.fsdecode(os.fspath(save_path))
        with _Reader(path) as reader:
            entries = [(v, reader.entry_for(key, v)) for key, v in named]
            values = [(v, reader.read(entry)) for v, entry in entries]
        if _on_cluster(sess):
            # one run assigns them all; a cluster commits a run's writes only when every
            # stage succeeded, so this too is all or none
            assigns, feeds = [], {}
            for v, value in values:
                placeholder, assign = self._restore_op(v)
                assigns.append(assign)
                feeds[placeholder] = value
            sess.run(assigns, feeds)
            return
        states = {v.name: (sess.resources.variable(v.name), value) for v, value in values}
        with contextlib.ExitStack() as locks:
            for name in sorted(states):  # one order for everyone: no deadlock
                locks.enter_context(states[name][0].lock)
            for state, value in states.values():
                state.value = value

    # -- helpers ------------------------------------------------------------------------
    def _restore_op(self, v: Variable):
        """(placeholder, assign) that sets ``v`` from a fed value, built once per variable
        on its device (as TensorFlow's Saver builds its restore ops into the graph)."""
        key = (id(v.graph), v.name)
        made = self._restore_ops.get(key)
        if made is None:
            from .scope import Scope
            scope = Scope(v.graph).beside(v)
            placeholder = scope.placeholder(v.dtype, shape=v.shape, name=f"save/{v.name}/value")
            assign = scope.assign_variable_op(v.handle, placeholder,
                                              name=f"save/{v.name}/restore")
            made = self._restore_ops[key] = (placeholder, assign)
        return made

    def _variables(self, sess) -> list[tuple[str, Variable]]:
        """(checkpoint name, Variable) pairs for a call with ``sess``."""
        from .runtime import Session

        if not isinstance(sess, Session):
            raise TypeError(f"Saver needs a gf.Session, got {type(sess).__name__}")
        if sess.closed:
            raise FailedPreconditionError("Attempted to use a closed Session.")
        if self.graph is not None and sess.graph is not self.graph:
            raise ValueError("The Session's graph is not the graph of the Saver's variables")
        if self._named is not None:
            return self._named
        named: dict[str, Variable] = {}
        for v in global_variables(sess.graph):
            named.setdefault(v.name, v)  # two handles of one shared_name: one variable
        if not named:
            raise ValueError("No variables to save")
        return list(named.items())


def _named_variables(var_list: Any) -> list[tuple[str, Variable]]:
    if isinstance(var_list, Mapping):
        pairs = list(var_list.items())
        for key, _ in pairs:
            if not isinstance(key, str) or not key:
                raise TypeError(f"Saver's var_list keys must be non-empty strings, got {key!r}")
    elif isinstance(var_list, (list, tuple)):
        pairs = [(getattr(v, "name", None), v) for v in var_list]
    else:
        raise TypeError(f"Saver's var_list must be a list or dict of gf.Variables, got "
                        f"{type(var_list).__name__}")
    if not pairs:
        raise ValueError("No variables to save")
    keys, variables = set(), set()
    for key, v in pairs:
        if not isinstance(v, Variable):
            raise TypeError(f"Saver's var_list holds {v!r}, which is not a gf.Variable")
        if key in keys:
            raise ValueError(f"At least two variables have the same name: {key}")
        if v.name in variables:
            raise ValueError(f"Variable '{v.name}' is in Saver's var_list twice")
        keys.add(key)
        variables.add(v.name)
    return pairs


def _step(sess, global_step: Any) -> int:
    if isinstance(global_step, (int, np.integer)) and not isinstance(global_step, bool):
        return int(global_step)
    value = np.asarray(sess.run(global_step))
    if value.ndim != 0 or value.dtype.kind not in "iu":
        raise TypeError(f"global_step must be an integer scalar, got {value!r}")
    return int(value)


def _on_cluster(sess) -> bool:
    """Whether the Session's variables live on a cluster's workers, not in this process."""
    return getattr(sess.config, "cluster", None) is not None


class _Snapshot:
    """A value read through a run, shaped as the VariableState that ``_write`` reads."""

    __slots__ = ("name", "value", "lock")

    def __init__(self, name: str, value: np.ndarray):
        self.name = name
        self.value = value
        self.lock = contextlib.nullcontext()


def _uninitialized(name: str, path: str) -> FailedPreconditionError:
    return FailedPreconditionError(
        f"Attempting to save the uninitialized variable '{name}' to {path}: run its "
        f"initializer or restore a checkpoint first")


# -- writing ---------------------------------------------------------------------------
def _write(f, states: Iterable, path: str) -> None:
    """The whole file into ``f``: magic, each variable's snapshot, header, trailer."""
    from .version import __version__

    f.write(MAGIC)
    offset, tensors = len(MAGIC), []
    for key, state in states:
        with state.lock:
            if state.value is None:
                raise _uninitialized(state.name, path)
            value = state.value
            snapshot = np.array(value, dtype=value.dtype.newbyteorder("<"), order="C")
        raw = _encode_strings(snapshot) if snapshot.dtype == object else \
            snapshot.reshape(-1).view(np.uint8)
        f.write(raw)
        tensors.append({"name": key, "dtype": _dtype_name(value.dtype), "shape": list(value.shape),
                        "offset": offset, "nbytes": raw.size, "crc32": zlib.crc32(raw)})
        offset += raw.size
        del snapshot, raw
    header = json.dumps({"format": FORMAT, "version": VERSION,
                         "producer": f"graphflow {__version__}", "tensors": tensors},
                        separators=(",", ":")).encode("utf-8")
    f.write(header)
    f.write(_trailer(offset, len(header), zlib.crc32(header)))


def _encode_strings(value: np.ndarray) -> np.ndarray:
    """A string tensor's bytes: each element's length (u64), then the elements."""
    items = [item if isinstance(item, bytes) else bytes(item) for item in value.reshape(-1)]
    lengths = np.array([len(item) for item in items], dtype="<u8")
    return np.frombuffer(lengths.tobytes() + b"".join(items), dtype=np.uint8)


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


def _dtype_name(dtype: np.dtype) -> str:
    for name, t in _DTYPES.items():
        if t.as_numpy_dtype == dtype:
            return name
    raise InvalidArgumentError(f"Cannot save a value of numpy dtype {dtype}")


def _trailer(header_offset: int, header_length: int, header_crc: int) -> bytes:
    fields = struct.pack("<QQI", header_offset, header_length, header_crc)
    return _TRAILER.pack(header_offset, header_length, header_crc, zlib.crc32(fields), END_MAGIC)


def _fsync_folder(folder: str) -> None:
    """Make the rename durable too (best effort: not every system opens folders)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- reading -----------------------------------------------------------------------------
def _save_target(path: str) -> tuple[str, str]:
    """(the file ``save`` writes, its folder): the path must name a file in a folder that
    exists ("" and "dir/" name none: "dir/" wrote a file named "dir", whose path did not
    restore)."""
    if not path:
        raise ValueError("Saver.save: no path specified (save_path is empty); pass a "
                         "file path such as 'model.ckpt'")
    if path.endswith(("/", os.sep)) or os.path.isdir(path):
        what = "is a directory" if os.path.isdir(path) else "ends with a separator"
        raise ValueError(f"Saver.save: {path} {what}: it names a folder, not a checkpoint "
                         f"file; pass a file path such as {os.path.join(path, 'model.ckpt')}")
    target = os.path.realpath(path)  # a symlink keeps pointing at the saved file
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        raise ValueError(f"Parent directory of {path} doesn't exist, can't save.")
    return target, folder


def _temp_name(folder: str, name: str) -> str:
    """A fresh temporary file next to the target: ``.{name}.{12 hex}.tmp`` while that fits
    the file system's name limit (NAME_MAX), else ``.gfckpt.{12 hex}.tmp``."""
    token = secrets.token_hex(6)
    try:
        limit = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        limit = 255
    tmp = f".{name}.{token}.tmp"
    if len(os.fsencode(tmp)) > limit:
        tmp = f".gfckpt.{token}.tmp"
    return os.path.join(folder, tmp)


def _os_error(e: OSError, path: str) -> Exception:
    """An OS error on a checkpoint path as TensorFlow's: a name too long is an
    InvalidArgumentError naming it; others keep their type, with ``path`` as filename."""
    if e.errno == errno.ENAMETOOLONG:
        return InvalidArgumentError(f"{path}: File name too long")
    return type(e)(e.errno, e.strerror, path)


class _Entry:
    """One tensor of a checkpoint, as its header describes it (already checked)."""

    __slots__ = ("name", "dtype", "shape", "offset", "nbytes", "crc32")

    def __init__(self, name: str, dtype: DType, shape: tuple, offset: int, nbytes: int,
                 crc32: int):
        self.name, self.dtype, self.shape = name, dtype, shape
        self.offset, self.nbytes, self.crc32 = offset, nbytes, crc32


class _Reader:
    """An open checkpoint whose trailer and header are verified; reads tensors on demand."""

    def __init__(self, path: str):
        self.path = path
        try:
            self._file = open(path, "rb", buffering=0)
        except (FileNotFoundError, NotADirectoryError):  # NotADirectory: under a regular file
            raise NotFoundError(f"Failed to find any matching files for {path}: no such "
                                f"checkpoint") from None
        except IsADirectoryError:
            raise NotFoundError(f"{path} is a directory, not a checkpoint file") from None
        except OSError as e:
            raise _os_error(e, path) from None
        try:
            self.entries = self._read_header()
        except BaseException:
            self._file.close()
            raise

    def __enter__(self) -> "_Reader":
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
            raise self._corrupt("it does not start with a graphflow checkpoint's magic bytes")
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

    def entry_for(self, key: str, variable: Variable) -> _Entry:
        """The tensor stored for ``variable`` under ``key``, checked against its dtype
        and shape."""
        entry = self.entries.get(key)
        if entry is None:
            raise NotFoundError(f"Key {key} not found in checkpoint {self.path} (variable "
                                f"'{variable.name}')")
        if entry.dtype != variable.dtype:
            raise InvalidArgumentError(
                f"Cannot restore variable '{variable.name}' of dtype {variable.dtype.name} "
                f"from checkpoint {self.path}: tensor '{key}' has dtype {entry.dtype.name}")
        if not variable.shape.is_compatible_with(list(entry.shape)):
            raise InvalidArgumentError(
                f"Cannot restore variable '{variable.name}' of shape {variable.shape} from "
                f"checkpoint {self.path}: tensor '{key}' has shape "
                f"[{','.join(map(str, entry.shape))}]")
        return entry

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


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


__all__ = ["Saver", "FORMAT", "VERSION"]
