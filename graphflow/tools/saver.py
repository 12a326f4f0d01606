"""Checkpoints: ``gf.train.Saver`` writes the values of variables in TensorFlow's
checkpoint format and restores them into a Session, by name (TensorFlow 1.x's
``tf.train.Saver``); TensorFlow reads graphflow's checkpoints and graphflow reads
TensorFlow's.

Which variables, which graph. ``Saver()`` saves and restores every variable of
the Session's graph at the time of each call (``gf.global_variables(sess.graph)``),
as TF 1.x's ``Saver()`` takes the default graph's. ``Saver(var_list)`` takes a
list of Variables (keyed by ``v.name``) or a dict ``{checkpoint name: Variable}``
and is bound to their graph; ``Saver(graph=g)`` binds a Saver without a list to
``g``. A Session of another graph is then a ValueError. Variables are matched by
name only, so a rebuilt graph, or one read back with ``gf.load_graph``, restores
a checkpoint written from another graph object, also in a Session whose
initializers never ran. Optimizer slots are variables named as TF 1.x names them
(``w/Adam``, ``w/Adam_1``, ``beta1_power``), so they round-trip with TF 1.x too.

Names in TensorFlow's checkpoints. A TF 1.x Saver's keys are variable names
(``dense/kernel``). A TF 2 ``tf.train.Checkpoint``'s are object-graph paths
(``model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE``, plus the serialized object
graph under ``_CHECKPOINTABLE_OBJECT_GRAPH``). ``Saver(name_map=...)`` says which
checkpoint key restores which variable: a dict ``{checkpoint key: variable name}``
(a variable the dict names is restored from the key mapped to it; any other from
the key equal to its name, unless the dict maps that key elsewhere), or a callable
``key -> variable name or None`` (None: the key restores nothing; two keys that map
to one restored variable are an InvalidArgumentError). ``Saver.tf2_name`` is the
TF 2 rule: it strips the suffix ``/.ATTRIBUTES/VARIABLE_VALUE`` and leaves other
keys as they are, so ``name_map=gf.train.Saver.tf2_name`` restores
``model/kernel/.ATTRIBUTES/VARIABLE_VALUE`` into the variable ``model/kernel``;
compose it for more (``lambda k: Saver.tf2_name(k).removeprefix("model/")``). The
names ``save`` writes are the var_list's.

Files (TensorFlow's tensor bundle, :mod:`graphflow.tf_bundle`). ``save(sess,
"dir/model.ckpt")`` writes ``dir/model.ckpt.index`` (a sorted table of every
tensor's dtype, shape, place and crc32c) and ``dir/model.ckpt.data-00000-of-00001``
(the tensors' bytes), then the folder's ``checkpoint`` file (TensorFlow's
CheckpointState, :mod:`graphflow.checkpoint_state`), which
``gf.train.latest_checkpoint("dir")`` and ``tf.train.latest_checkpoint`` read.
``global_step`` appends ``-<step>`` to the prefix, as TensorFlow does;
``max_to_keep`` (default 5, as TensorFlow's; None or 0 keeps every file) deletes
the oldest checkpoints this Saver wrote beyond that many. Saving over an existing
prefix writes the data under a shard count its files do not use (1, else 2 with
an empty second shard, ...): the rename of the ``.index`` is then the one moment
the checkpoint changes, and the old data files go after it. ``restore`` reads any
number of shards and TF 1.x's partitioned variables (slices); a path with no
``.index`` that is a file in graphflow's own earlier format
(:mod:`graphflow.legacy_checkpoint`, detected by its magic bytes) still restores.

Guarantees.

- ``save`` writes temporary files next to the target, fsyncs them and renames
  them into place, the ``.index`` last: a crash leaves the previous checkpoint
  whole, and within a process saves and restores of one folder never see each
  other's halves. Files get the mode ``open(path, "w")`` gives (0666 less the
  umask). Each variable's value is copied under its lock, a consistent snapshot of
  it; an uninitialized one is a FailedPreconditionError naming it. A path that is
  empty, a folder, ends with a separator or lies in a missing folder is a
  ValueError; one whose files' names are too long an InvalidArgumentError.
- ``restore`` checks everything before it assigns anything: a missing checkpoint
  is a NotFoundError ("Failed to find any matching files for <prefix>"), a
  truncated or corrupt ``.index`` or data file a DataLossError naming the file
  (every block and tensor carries a crc32c, and the tensors must tile each data
  file exactly), a variable the checkpoint lacks a NotFoundError, and one stored
  with another dtype or shape than the graph's an InvalidArgumentError (both name
  the variable). Any of these leaves every variable as it was. The values are read
  into fresh arrays (never views of a file buffer) and assigned with every
  variable's lock held.
"""
from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import threading
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from .. import tf_bundle
from ..checkpoint_state import latest_checkpoint, write_state
from ..dtypes import dtype_of_array
from ..errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from ..graph import Graph
from ..legacy_checkpoint import LegacyReader
from ..tf_bundle import data_filename, index_filename
from ..variables import Variable, global_variables

#: The suffix TF 2's tf.train.Checkpoint gives a variable's key.
TF2_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
log = logging.getLogger("graphflow.train")
NameMap = Mapping[str, str] | Callable[[str], "str | None"] | None


class Saver:
    """Saves and restores variables (``save(sess, path)`` / ``restore(sess, path)``)."""

    def __init__(self, var_list: Sequence[Variable] | Mapping[str, Variable] | None = None,
                 graph: Graph | None = None, max_to_keep: int | None = 5,
                 name_map: NameMap = None):
        if graph is not None and not isinstance(graph, Graph):
            raise TypeError(f"Saver's graph must be a gf.Graph, got {type(graph).__name__}")
        if max_to_keep is not None and (not isinstance(max_to_keep, int) or max_to_keep < 0):
            raise ValueError(f"max_to_keep must be None or an int >= 0, got {max_to_keep!r}")
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
        self.max_to_keep = max_to_keep
        self._name_map = _checked_name_map(name_map)
        self._last: list[str] = []  # the checkpoints this Saver wrote and keeps, oldest first
        self._lock = threading.Lock()
        self._restore_ops: dict[tuple, tuple] = {}

    @staticmethod
    def tf2_name(key: str) -> str:
        """The variable name of a TF 2 object-graph key: ``key`` without the suffix
        ``/.ATTRIBUTES/VARIABLE_VALUE`` (other keys unchanged); a ``name_map``."""
        return key[:-len(TF2_SUFFIX)] if key.endswith(TF2_SUFFIX) else key

    @property
    def last_checkpoints(self) -> list[str]:
        """The checkpoints this Saver wrote and has not deleted, oldest first."""
        with self._lock:
            return list(self._last)

    # -- public API -------------------------------------------------------------------
    def save(self, sess, save_path: str | os.PathLike, global_step: Any = None,
             latest_filename: str | None = None, write_state: bool = True) -> str:
        """Write the variables' values to the checkpoint ``save_path`` (``-{global_step}``
        appended when given, as TensorFlow does) atomically; returns its prefix. With
        ``write_state``, the folder's ``checkpoint`` file (or ``latest_filename``) then
        names it, and checkpoints past ``max_to_keep`` are deleted."""
        named = self._variables(sess)
        path = os.fsdecode(os.fspath(save_path))
        if global_step is not None:
            path = f"{path}-{_step(sess, global_step)}"
        folder, name = _save_target(path)
        if _on_cluster(sess):  # the values live on the workers: one run reads them all
            values = sess.run([v.read() for _, v in named])
            states = [(key, _Snapshot(v.name, value)) for (key, v), value in zip(named, values)]
        else:
            states = [(key, sess.resources.variable(v.name)) for key, v in named]
        for _, state in states:  # fail before writing anything (save checks again, locked)
            if state.value is None:
                raise _uninitialized(state.name, path)
        _write_checkpoint(folder, name, states, path)
        if write_state:
            self._record(folder, path, latest_filename)
        return path

    def restore(self, sess, save_path: str | os.PathLike) -> None:
        """Assign the values stored in the checkpoint ``save_path`` to the variables,
        all or none."""
        named = self._variables(sess)
        path = os.fsdecode(os.fspath(save_path))
        with _open_checkpoint(path) as reader:
            keys = _KeyFinder(reader, self._name_map)
            entries = [(v, _entry_for(reader, keys, key, v)) for key, v in named]
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
    def _record(self, folder: str, path: str, latest_filename: str | None) -> None:
        """Name ``path`` the latest checkpoint in the state file; delete the oldest ones
        past ``max_to_keep`` (after the state file stops naming them), as TF 1.x does."""
        with self._lock:
            if path in self._last:
                self._last.remove(path)
            self._last.append(path)
            drop = []
            if self.max_to_keep:
                while len(self._last) > self.max_to_keep:
                    drop.append(self._last.pop(0))
                kept = list(self._last)
            else:
                self._last, kept = [], [path]  # every file stays; the state names the latest
        with _folder_lock(folder):
            try:
                write_state(folder, path, kept, latest_filename)
            except OSError as e:
                raise _os_error(e, os.path.join(folder, latest_filename or "checkpoint")) \
                    from None
        for old in drop:
            _delete_checkpoint(old)

    def _restore_op(self, v: Variable):
        """(placeholder, assign) that sets ``v`` from a fed value, built once per variable
        on its device (as TensorFlow's Saver builds its restore ops into the graph)."""
        key = (id(v.graph), v.name)
        made = self._restore_ops.get(key)
        if made is None:
            from ..scope import Scope
            scope = Scope(v.graph).beside(v)
            placeholder = scope.placeholder(v.dtype, shape=v.shape, name=f"save/{v.name}/value")
            assign = scope.assign_variable_op(v.handle, placeholder,
                                              name=f"save/{v.name}/restore")
            made = self._restore_ops[key] = (placeholder, assign)
        return made

    def _variables(self, sess) -> list[tuple[str, Variable]]:
        """(checkpoint name, Variable) pairs for a call with ``sess``."""
        from ..runtime import Session

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


# -- names: which checkpoint key restores which variable ---------------------------------
def _checked_name_map(name_map: Any) -> NameMap:
    if name_map is None or callable(name_map):
        return name_map
    if not isinstance(name_map, Mapping):
        raise TypeError(f"Saver's name_map must be a dict or a callable, got "
                        f"{type(name_map).__name__}")
    names: dict[str, str] = {}
    for key, name in name_map.items():
        if not isinstance(key, str) or not isinstance(name, str):
            raise TypeError(f"Saver's name_map maps checkpoint keys (str) to variable names "
                            f"(str), got {key!r}: {name!r}")
        if name in names:
            raise ValueError(f"Saver's name_map maps both {names[name]!r} and {key!r} to "
                             f"variable {name!r}")
        names[name] = key
    return dict(name_map)


class _KeyFinder:
    """The checkpoint key that restores a variable name, under a ``name_map``."""

    def __init__(self, reader, name_map: NameMap):
        self.name_map = name_map
        self.by_name: dict[str, list[str]] = {}
        if isinstance(name_map, Mapping):
            self.by_name = {name: [key] for key, name in name_map.items()}
        elif name_map is not None:
            for key in reader.keys():
                name = name_map(key)
                if name is not None and not isinstance(name, str):
                    raise TypeError(f"name_map({key!r}) returned {name!r}, not a str or None")
                if name is not None:
                    self.by_name.setdefault(name, []).append(key)

    def key(self, name: str) -> str | None:
        """The key for ``name`` (None: no key maps to it)."""
        if self.name_map is None:
            return name
        keys = self.by_name.get(name)
        if isinstance(self.name_map, Mapping):
            return keys[0] if keys else None if name in self.name_map else name
        if keys and len(keys) > 1:
            raise InvalidArgumentError(f"Checkpoint keys {', '.join(map(repr, keys))} all map "
                                       f"to variable '{name}' under name_map")
        return keys[0] if keys else None


def _entry_for(reader, keys: _KeyFinder, name: str, variable: Variable):
    """The tensor that restores ``variable`` (saved as ``name``), checked against its
    dtype and shape."""
    key = keys.key(name)
    entry = None if key is None else reader.lookup(key)
    if entry is None:
        hint = ""
        if reader.lookup(f"{name}{TF2_SUFFIX}") is not None:
            hint = (f"; the checkpoint has the TF 2 key '{name}{TF2_SUFFIX}': pass "
                    f"name_map=gf.train.Saver.tf2_name")
        what = f"Key {key}" if key is not None else f"No key that name_map maps to '{name}' is"
        raise NotFoundError(f"{what} not found in checkpoint {reader.path} (variable "
                            f"'{variable.name}'){hint}")
    if entry.dtype != variable.dtype:
        raise InvalidArgumentError(
            f"Cannot restore variable '{variable.name}' of dtype {variable.dtype.name} "
            f"from checkpoint {reader.path}: tensor '{key}' has dtype {entry.dtype_name}")
    if not variable.shape.is_compatible_with(list(entry.shape)):
        raise InvalidArgumentError(
            f"Cannot restore variable '{variable.name}' of shape {variable.shape} from "
            f"checkpoint {reader.path}: tensor '{key}' has shape "
            f"[{','.join(map(str, entry.shape))}]")
    return entry


# -- writing ---------------------------------------------------------------------------
_FOLDER_LOCKS: dict[str, threading.RLock] = {}
_FOLDER_LOCKS_LOCK = threading.Lock()
_DATA_SUFFIX = re.compile(r"\.data-\d{5}-of-(\d{5})")


def _folder_lock(folder: str) -> threading.RLock:
    """The lock that orders this process's commits and opens of checkpoints in
    ``folder``."""
    key = os.path.realpath(folder)
    with _FOLDER_LOCKS_LOCK:
        return _FOLDER_LOCKS.setdefault(key, threading.RLock())


def _write_checkpoint(folder: str, name: str, states: Iterable, path: str) -> None:
    """Stream each variable's snapshot into a temporary data file, then commit it
    with its index as checkpoint ``folder/name``; on any failure remove what it made."""
    tmp = _temp_name(folder, f"{name}.data")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as e:
        raise _os_error(e, path) from None
    try:
        with os.fdopen(fd, "wb") as f:
            writer = tf_bundle.DataWriter(f)
            for key, state in states:
                with state.lock:
                    if state.value is None:
                        raise _uninitialized(state.name, path)
                    snapshot = np.array(state.value, copy=True, order="C")
                writer.add(key, snapshot, dtype_of_array(snapshot))
                del snapshot
            f.flush()
            os.fsync(f.fileno())
        with _folder_lock(folder):
            _commit(folder, name, tmp, writer.entries)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise _os_error(e, path) from None
        raise
    _fsync_folder(folder)


def _commit(folder: str, name: str, tmp_data: str, entries: dict) -> None:
    """Rename the data file into place under a shard count no file of ``name`` uses,
    then the index over the old one (the commit); then delete the old data files."""
    count = _free_shard_count(folder, name)
    prefix = os.path.join(folder, name)
    tmp_index = _temp_name(folder, f"{name}.index")
    made = [tmp_index]
    try:
        _write_file(tmp_index, tf_bundle.index_bytes(entries, count))
        os.replace(tmp_data, data_filename(prefix, 0, count))
        made.append(data_filename(prefix, 0, count))
        for shard in range(1, count):  # the other shards hold nothing
            made.append(data_filename(prefix, shard, count))
            _write_file(made[-1], b"")
        os.replace(tmp_index, index_filename(prefix))
    except BaseException:
        for made_path in made:
            with contextlib.suppress(OSError):
                os.unlink(made_path)
        raise
    _remove_data_files(folder, name, keep=count)


def _write_file(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _data_files(folder: str, name: str) -> dict[str, int]:
    """{file name: shard count} of the data files of checkpoint ``name`` in ``folder``."""
    found = {}
    for entry in os.listdir(folder):
        if entry.startswith(name):
            match = _DATA_SUFFIX.fullmatch(entry, len(name))
            if match:
                found[entry] = int(match.group(1))
    return found


def _free_shard_count(folder: str, name: str) -> int:
    used = set(_data_files(folder, name).values())
    count = 1
    while count in used:
        count += 1
    return count


def _remove_data_files(folder: str, name: str, keep: int | None) -> None:
    """Delete the data files of ``name`` (best effort) but those of ``keep`` shards."""
    for entry, count in _data_files(folder, name).items():
        if count != keep:
            try:
                os.unlink(os.path.join(folder, entry))
            except OSError as e:
                log.warning("graphflow: could not delete %s: %s", entry, e)


def _delete_checkpoint(prefix: str) -> None:
    """Delete checkpoint ``prefix``'s files, the index first (best effort)."""
    folder, name = os.path.split(prefix)
    folder = folder or "."
    with _folder_lock(folder):
        try:
            os.unlink(index_filename(prefix))
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("graphflow: could not delete %s: %s", index_filename(prefix), e)
        with contextlib.suppress(OSError):
            _remove_data_files(folder, name, keep=None)


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


def _save_target(path: str) -> tuple[str, str]:
    """(folder, name) of the checkpoint prefix ``path``: it must name files in a folder
    that exists ("" and "dir/" name none; a folder is refused rather than written
    beside), and its longest file name must fit the file system (NAME_MAX)."""
    if not path:
        raise ValueError("Saver.save: no path specified (save_path is empty); pass a "
                         "file path such as 'model.ckpt'")
    if path.endswith(("/", os.sep)) or os.path.isdir(path):
        what = "is a directory" if os.path.isdir(path) else "ends with a separator"
        raise ValueError(f"Saver.save: {path} {what}: it names a folder, not a checkpoint "
                         f"file; pass a file path such as {os.path.join(path, 'model.ckpt')}")
    folder, name = os.path.split(path)
    folder = folder or "."
    if not os.path.isdir(folder):
        raise ValueError(f"Parent directory of {path} doesn't exist, can't save.")
    if len(os.fsencode(data_filename(name, 0, 1))) > _name_max(folder):
        raise InvalidArgumentError(f"{path}: File name too long")
    return folder, name


def _name_max(folder: str) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return 255


def _temp_name(folder: str, name: str) -> str:
    """A fresh temporary file next to the target: ``.{name}.{12 hex}.tmp`` while that fits
    the file system's name limit (NAME_MAX), else ``.gfckpt.{12 hex}.tmp``."""
    token = secrets.token_hex(6)
    tmp = f".{name}.{token}.tmp"
    if len(os.fsencode(tmp)) > _name_max(folder):
        tmp = f".gfckpt.{token}.tmp"
    return os.path.join(folder, tmp)


def _os_error(e: OSError, path: str) -> Exception:
    """An OS error on a checkpoint path as TensorFlow's: a name too long is an
    InvalidArgumentError naming it; others keep their type, with ``path`` as filename."""
    if e.errno == errno.ENAMETOOLONG:
        return InvalidArgumentError(f"{path}: File name too long")
    return type(e)(e.errno, e.strerror, path)


# -- reading -----------------------------------------------------------------------------
def _open_checkpoint(path: str):
    """A reader of checkpoint ``path``: TensorFlow's format when ``path.index`` is a
    file, else graphflow's version-1 file ``path`` (a NotFoundError when neither is)."""
    try:
        if os.path.isfile(index_filename(path)):
            with _folder_lock(os.path.dirname(path) or "."):  # no commit half-seen
                return tf_bundle.BundleReader(path)
        return LegacyReader(path)
    except OSError as e:
        raise _os_error(e, path) from None


def list_variables(ckpt_dir_or_file: str | os.PathLike) -> list[tuple[str, list[int]]]:
    """(key, shape) of every tensor of a checkpoint, sorted by key; a folder stands for
    its latest checkpoint (``tf.train.list_variables``)."""
    path = os.fsdecode(os.fspath(ckpt_dir_or_file))
    if os.path.isdir(path):
        latest = latest_checkpoint(path)
        if latest is None:
            raise ValueError(f"Couldn't find 'checkpoint' file or checkpoints in given "
                             f"directory {path}")
        path = latest
    with _open_checkpoint(path) as reader:
        return sorted((key, list(reader.lookup(key).shape)) for key in reader.keys())


__all__ = ["Saver", "latest_checkpoint", "list_variables", "TF2_SUFFIX"]
