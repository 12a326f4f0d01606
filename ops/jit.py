"""numba, as graphflow's kernels use it: one decorator and one cache folder (generated
kernel sources are loaded into it by ops/codegen.py's :func:`load_numba`).

Every compiled CPU kernel goes through :func:`kernel`:

- ``nogil=True``: the loops release the GIL, so the runtime splits big calls over
  its own intra-op pool (``ops/intra_op.py``) and runs independent nodes on its
  inter-op pool. numba's own ``parallel=True`` is not used: its threading layers
  differ in thread safety (the default ``workqueue`` layer aborts when two
  threads enter a parallel region at once), and a Session may be shared by many
  threads.
- ``error_model="numpy"``: a float division by zero gives inf/NaN, as numpy's does,
  instead of raising ZeroDivisionError.
- no ``fastmath``: results are bit-identical to numpy's (and TensorFlow's).
- ``cache=True``, in a user cache folder (:func:`cache_dir`), not next to the
  sources, so it works when site-packages is read-only. ``GRAPHFLOW_CACHE_DIR``
  overrides the folder; ``GRAPHFLOW_JIT_CACHE=0`` turns the disk cache off.

Compiling one signature costs 0.1-0.3 s the first time; a kernel loaded from the
disk cache costs a few milliseconds. Each compile of a graphflow kernel is logged on
``graphflow.jit``: at INFO when it took :data:`LONG_COMPILE_SECONDS` or more, at
DEBUG otherwise (``graphflow -v`` shows the INFO lines).
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import numba
import numpy as np
from numba.core import caching as _caching
from numba.core import event as _event

log = logging.getLogger("graphflow.jit")

#: dtypes numba compiles loops for. float16 is left to numpy (numba has no float16
#: arithmetic on the CPU), strings and objects too.
JIT_DTYPES = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float32, np.float64, np.complex64, np.complex128))


def jittable(*dtypes) -> bool:
    """Whether numba compiles loops over arrays of every one of ``dtypes``."""
    return all(np.dtype(d) in JIT_DTYPES for d in dtypes)


def cache_dir() -> Path:
    """The folder compiled kernels are cached in: ``$GRAPHFLOW_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/graphflow`` (``~/.cache/graphflow``), one subfolder per numba
    version."""
    root = os.environ.get("GRAPHFLOW_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "graphflow")
    return Path(root) / f"numba-{numba.__version__}"


@functools.cache
def _cache_enabled() -> bool:
    """The disk cache is on unless ``GRAPHFLOW_JIT_CACHE=0``, or the cache folder cannot
    be written (then kernels compile in memory, once per process, and a log line says
    why)."""
    if os.environ.get("GRAPHFLOW_JIT_CACHE", "1") in ("0", "false", "no"):
        return False
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        log.warning("graphflow: kernel cache folder %s is not writable (%s); compiled kernels "
                    "are not cached on disk (set GRAPHFLOW_CACHE_DIR)", folder, e)
        return False
    return True


def cache_enabled() -> bool:
    """Whether compiled kernels (and generated fused kernel sources) go to the disk cache."""
    return _cache_enabled()


_PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # the folder holding ops/ (installed or not)


@functools.cache
def kernels_fingerprint() -> str:
    """A hash of graphflow's kernel modules (every ops/*.py): part of each cached
    kernel's stamp. A cached kernel holds the machine code of the kernels it calls, in
    other modules too (a generated segment calls a dozen), and numba checks only the
    stamp of the kernel's own file: without it an edited or upgraded kernel would still
    run, or fail to link, in the code of every kernel that calls it."""
    digest = hashlib.sha1()
    for path in sorted(Path(__file__).resolve().parent.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


class _GraphflowCacheLocator(_caching._SourceFileBackedLocatorMixin, _caching._CacheLocator):
    """Caches graphflow's kernels (and generated fused kernels, whose sources live in
    :func:`cache_dir`) under :func:`cache_dir`, keyed by the source file's path and
    stamped by the file and :func:`kernels_fingerprint`."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = str(cache_dir() / self.get_suitable_cache_subpath(py_file))

    def get_cache_path(self):
        return self._cache_path

    def get_source_stamp(self):
        return super().get_source_stamp(), kernels_fingerprint()

    @classmethod
    def from_function(cls, py_func, py_file):
        path = Path(py_file).resolve()
        if not (path.is_relative_to(_PACKAGE_ROOT) or path.is_relative_to(cache_dir().resolve())):
            return None
        return super().from_function(py_func, py_file)


if _GraphflowCacheLocator not in _caching.CacheImpl._locator_classes:
    _caching.CacheImpl._locator_classes.insert(0, _GraphflowCacheLocator)


def kernel(fn: Callable | None = None, **options) -> Callable:
    """``numba.njit`` with graphflow's options (see the module docstring)."""
    options = {"nogil": True, "error_model": "numpy", "cache": _cache_enabled(), **options}
    if fn is None:
        return lambda f: numba.njit(**options)(f)
    return numba.njit(**options)(fn)


# -- a damaged cache is discarded, never fatal ----------------------------------------------
_numba_load_index = _caching.IndexDataCacheFile._load_index
_numba_load = _caching.IndexDataCacheFile.load
_damage_logged: set[str] = set()


def _discard(cache_file, err: Exception) -> None:
    """Remove a cache entry numba cannot read (a zero-length or damaged index or data
    file: a crash mid-write, a full disk), saying so once per file; the kernel is then
    compiled again and the entry rewritten."""
    path = cache_file._index_path
    if path not in _damage_logged:
        _damage_logged.add(path)
        log.warning("graphflow: discarding a damaged kernel cache entry %s (%s: %s); "
                    "compiling again", path, type(err).__name__, err)
    try:
        os.remove(path)
    except OSError:
        pass


def _load_index(self):
    try:
        return _numba_load_index(self)
    except Exception as e:  # noqa: BLE001 - EOFError, UnpicklingError, ValueError...
        _discard(self, e)
        return {}


def _load(self, key):
    try:
        return _numba_load(self, key)
    except Exception as e:  # noqa: BLE001 - a damaged data file
        _discard(self, e)
        return None


_caching.IndexDataCacheFile._load_index = _load_index
_caching.IndexDataCacheFile.load = _load



# -- compiles are logged --------------------------------------------------------------------
#: A compile taking this long or longer is logged at INFO (shorter ones at DEBUG).
LONG_COMPILE_SECONDS = 0.5


class _CompileLog(_event.Listener):
    """Times numba's compiles of graphflow's kernels (its own and generated ones; a kernel
    loaded from the disk cache is no compile); nested compiles count in the outermost."""

    def __init__(self):
        self._local = threading.local()

    def on_start(self, event):
        stack = self._local.__dict__.setdefault("stack", [])
        stack.append(time.perf_counter())

    def on_end(self, event):
        stack = self._local.__dict__.get("stack")
        if not stack:  # pragma: no cover - an end without its start
            return
        seconds = time.perf_counter() - stack.pop()
        dispatcher = event.data.get("dispatcher") if isinstance(event.data, dict) else None
        fn = getattr(dispatcher, "py_func", None)
        module = getattr(fn, "__module__", "") or ""
        if stack or not module.startswith("graphflow"):
            return
        args = ", ".join(str(a) for a in event.data.get("args", ()))
        log.log(logging.INFO if seconds >= LONG_COMPILE_SECONDS else logging.DEBUG,
                "compiled %s.%s(%s) in %.2f s", module.rsplit(".", 1)[-1],
                fn.__name__, args, seconds)


_listeners = getattr(_event, "_registered", {}).get("numba:compile", ())
if not any(type(x).__name__ == "_CompileLog" for x in _listeners):  # once, even on reload
    _event.register("numba:compile", _CompileLog())
