"""Compiling generated kernels in a worker process, away from the caller's GIL.

numba's compiler is Python: a kernel compiling on the background thread of tiered
compilation (ops/tiering.py) holds the GIL for most of its 0.2-5 s, and the
thread running the user's steps stalls with it (a chain of 1000 small nodes: one call
of 5 s). A generated kernel (a fused region, a compiled segment or loop, a partitioned
select) is a module file in the kernel cache folder (ops/codegen.py's ``load_numba``),
compiled with ``cache=True``: so one worker process, started on first need, compiles
it there and fills numba's disk cache, while the caller's background thread only waits
on a pipe; then that thread loads the compiled code from the cache (milliseconds), as a
later process would.

The worker is ``python -m graphflow.ops.compile_worker`` with the caller's graphflow
(its folder first on ``PYTHONPATH``) and environment; requests and replies are
pickles on its stdin and stdout: ``(module file or "module:" + a graphflow module's
name, function, signature)`` -> ``(ok, message)``; a kernel of graphflow's own modules
(a lean kernel's, wanted for a new signature: ops/tiering.py) compiles there the same
way. A generated source names the compiled functions it calls in its binding lines
(``# g0 = module:qualname``), which the worker imports (a generated one from its
file). It ends when the caller's pipe closes. Anything that goes wrong there
(no worker, a kernel it cannot compile) falls back to compiling in the caller, as
before. ``GRAPHFLOW_COMPILE_WORKER=0`` turns it off; so does a kernel cache that is off.
"""
from __future__ import annotations

import atexit
import importlib
import logging
import os
import pickle
import re
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import BinaryIO

from . import codegen, jit

log = logging.getLogger("graphflow.jit")

_BINDING = re.compile(r"^# (\w+) = ([\w.]+):([\w.]+)$", re.MULTILINE)
_GENERATED_PREFIX = codegen.MODULE_PREFIX


def enabled() -> bool:
    return os.environ.get("GRAPHFLOW_COMPILE_WORKER", "1") != "0" and jit.cache_enabled()


# -- the caller's side ---------------------------------------------------------------------------
class _Worker:
    """One worker process and its pipe; one request at a time."""

    def __init__(self):
        here = Path(jit.__file__).resolve().parents  # ops/jit.py, or graphflow/ops/jit.py
        root = str(here[1] if (here[1] / "graphflow" / "__init__.py").is_file() else here[2])
        env = dict(os.environ, GRAPHFLOW_COMPILE_WORKER="0",
                   PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "graphflow.ops.compile_worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=root)
        self.lock = threading.Lock()
        self.cache_dir = jit.cache_dir()  # the folder it fills, fixed when it started

    def compile(self, path: str, function: str, signature: tuple) -> tuple[bool, str]:
        with self.lock:
            _send(self.process.stdin, (path, function, signature))
            reply = _receive(self.process.stdout)
        if reply is None:
            raise EOFError("the compile worker ended")
        return reply

    def close(self) -> None:
        try:
            with self.lock:  # after the request in flight, if any
                self.process.stdin.close()
            self.process.wait(timeout=5)
        except Exception:  # noqa: BLE001 - leaving: a worker that hangs is killed
            self.process.kill()


_worker: _Worker | None = None
_broken = False
_worker_lock = threading.Lock()
_in_flight = 0  # requests the worker is compiling now


def busy() -> bool:
    """Whether the worker is compiling now: it holds a core (runtime/blas_threads.py
    leaves that core to it)."""
    return _in_flight > 0


def _the_worker() -> _Worker | None:
    global _worker, _broken
    with _worker_lock:
        if _worker is not None and _worker.cache_dir != jit.cache_dir():
            _worker.close()  # the kernel cache moved (GRAPHFLOW_CACHE_DIR): a worker for it
            _worker = None
        if _worker is None and not _broken:
            try:
                _worker = _Worker()
                atexit.register(_worker.close)
            except OSError as e:
                _broken = True
                log.info("graphflow: no compile worker (%s); kernels compile in-process", e)
        return _worker


def compile_elsewhere(fn, signature: tuple) -> bool:
    """Compile numba dispatcher ``fn`` for ``signature`` in the worker, into the disk
    cache; True when it did (``fn.compile(signature)`` then loads it). ``fn`` is a
    kernel of a generated module (by its file) or of one of graphflow's own modules (by
    its name); False for any other, or a failure there."""
    global _broken
    py = getattr(fn, "py_func", None)
    module = sys.modules.get(py.__module__) if py is not None else None
    path = getattr(module, "__file__", None)
    if py is None or path is None or not enabled() or in_disk_cache(fn, signature):
        return False  # compiled (or loaded) in-process
    if py.__module__.startswith(_GENERATED_PREFIX):
        where = path
    elif py.__module__.startswith("graphflow.") and "<locals>" not in py.__qualname__:
        where = "module:" + py.__module__
    else:
        return False
    worker = _the_worker()
    if worker is None:
        return False
    global _in_flight
    _in_flight += 1
    try:
        ok, message = worker.compile(where, py.__qualname__, signature)
    except (OSError, EOFError, pickle.PickleError) as e:
        with _worker_lock:
            _broken = True
        log.info("graphflow: the compile worker failed (%s); kernels compile in-process", e)
        return False
    finally:
        _in_flight -= 1
    if not ok:
        log.debug("compile worker could not compile %s: %s", py.__qualname__, message)
    return ok


def in_disk_cache(fn, signature: tuple) -> bool:
    """Whether numba's disk cache holds ``fn`` compiled for ``signature`` (loading it is
    milliseconds: no worker needed). Reads numba's cache index through its private API;
    False where that fails."""
    try:
        cache = fn._cache
        key = cache._index_key(signature, fn.targetctx.codegen())
        return bool(cache._enabled) and key in cache._cache_file._load_index()
    except Exception:  # noqa: BLE001 - another numba: ask the worker
        return False


def _send(stream: BinaryIO, message) -> None:
    data = pickle.dumps(message)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream: BinaryIO):
    header = stream.read(8)
    if len(header) < 8:
        return None
    (n,) = struct.unpack("<Q", header)
    return pickle.loads(stream.read(n))


# -- the worker's side ---------------------------------------------------------------------------
def load_module_function(path: str, function: str):
    """The dispatcher ``function`` of the generated module file ``path``, its bindings
    imported (generated ones from their files in the cache folder)."""
    source = Path(path).read_text()
    env = {}
    for name, module, qualname in _BINDING.findall(source):
        if module.startswith(_GENERATED_PREFIX):
            env[name] = load_module_function(str(Path(path).with_name(f"{module}.py")), qualname)
        else:
            target = importlib.import_module(module)
            for part in qualname.split("."):
                target = getattr(target, part)
            env[name] = target
    fn, _ = codegen.load_numba(source, function, env)
    return fn


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """Compile what each request names until the caller's pipe closes."""
    while True:
        request = _receive(requests)
        if request is None:
            return
        where, function, signature = request
        try:
            if where.startswith("module:"):  # a kernel of graphflow's own modules
                fn = importlib.import_module(where[len("module:"):])
                for part in function.split("."):
                    fn = getattr(fn, part)
            else:
                fn = load_module_function(where, function)
            fn.compile(signature)
            _saved_again_if_dropped(fn, signature)
            reply = (True, "")
        except Exception as e:  # noqa: BLE001 - the caller compiles it and reports
            reply = (False, f"{type(e).__name__}: {e}")
        _send(replies, reply)


def _saved_again_if_dropped(fn, signature: tuple) -> None:
    """numba rewrites a kernel's whole cache index when it saves one signature: another
    process saving the same kernel at once can drop this one's entry, and a kernel
    compiled in this worker before is not saved again by ``compile``. Saves it again
    then (numba's private API; nothing where that fails: the caller then compiles)."""
    try:
        if not in_disk_cache(fn, signature):
            fn._cache.save_overload(signature, fn.overloads[tuple(signature)])
    except Exception:  # noqa: BLE001 - another numba
        pass


def main() -> None:
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a print anywhere in the worker must not corrupt the replies
    serve(sys.stdin.buffer, replies)


if __name__ == "__main__":
    main()
