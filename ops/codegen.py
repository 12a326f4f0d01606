"""Generated functions, one loader for all of them: their source stays readable.

Everything graphflow generates goes through here, as torch.fx's
``GraphModule.recompile`` generates ``forward``:

- :func:`load_python`: Python source (a plan's serial run, runtime/executor.py; each
  compiled segment's caller, runtime/segments.py), compiled under a filename of its own
  (``<graphflow plan 12>``) whose text is registered with :mod:`linecache`, so a
  traceback through it shows the generated line (``s[7] = f3(c3, s[2])  # pick``: the
  call and the node it runs), ``pdb`` steps through it, and the text is dropped when the
  function is.
- :func:`load_numba`: numba source (fused kernels, runtime/fusion.py; compiled segments
  and loops, runtime/segments.py and runtime/compiled_loops.py; the partitioned select,
  ops/fused_ops.py), a module that decorates its kernels with ``@kernel`` from
  ops/jit.py. It is written once into the kernel cache folder, named by the hash of its
  source, so that numba's disk cache (ops/jit.py) finds it in the next process and the
  compile worker (ops/compile_worker.py) compiles the same file; with the cache off it
  is built in memory, its text registered with linecache.

Each returns the function and its :class:`GeneratedCode` (what it is, its source, the
filename tracebacks show); :func:`code_of` gives a loaded function's record back, and a
plan lists the records of every function it runs (``plan.code``). A kernel's source is
the same for every graph of its structure (one compile, one disk-cache entry), so the
nodes a plan's kernel came from are on the plan's record (:meth:`GeneratedCode.for_nodes`),
not in the source.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import itertools
import linecache
import logging
import os
import sys
import tempfile
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from . import jit

log = logging.getLogger("graphflow.jit")

#: The prefix of a generated numba module's name (and file): the compile worker and the
#: compile log know generated kernels by it.
MODULE_PREFIX = "graphflow_fused_"

_numbers = itertools.count()
_lock = threading.Lock()


@dataclass(frozen=True)
class GeneratedCode:
    """One generated function: what it is, its source, the filename tracebacks show,
    and the plan's nodes it came from (where a plan lists it)."""

    what: str
    source: str
    filename: str
    nodes: tuple[str, ...] = ()

    def for_nodes(self, nodes: Iterable[str]) -> "GeneratedCode":
        """This record, naming the nodes it computes for one plan."""
        return dataclasses.replace(self, nodes=tuple(nodes))

    def __str__(self) -> str:
        of = f" of {', '.join(self.nodes)}" if self.nodes else ""
        return f"# {self.what}{of} ({self.filename})\n{self.source}"


def code_of(fn) -> GeneratedCode | None:
    """The record of a function :func:`load_python` or :func:`load_numba` made; None
    for any other."""
    return getattr(fn, "_graphflow_code", None)


def numba_code(what: str, source: str | None, fn, nodes: Iterable[str] = ()) \
        -> list[GeneratedCode]:
    """The record of a generated numba function made when its compile is due (a compiled
    segment or loop): none before its source is made, "not loaded yet" for its filename
    until :func:`load_numba` loaded ``fn``."""
    if source is None:
        return []
    code = code_of(fn) or GeneratedCode(what, source, "not loaded yet")
    return [code.for_nodes(nodes)]


def called_code(env: dict[str, Any], users: dict[str, list[str]]) -> list[GeneratedCode]:
    """The records of the generated functions a generated source calls (its globals
    ``env``; ``users``: global name -> the nodes whose lines call it)."""
    found = []
    for name, fn in env.items():
        code = code_of(fn)
        if code is not None:
            found.append(code.for_nodes(users.get(name, ())))
    return found


def _register(filename: str, source: str) -> None:
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)


def load_python(source: str, function: str, env: dict[str, Any], what: str) \
        -> tuple[Callable, GeneratedCode]:
    """``function`` defined by ``source`` with globals ``env``, and its code record.
    ``what`` names it in the filename (``<graphflow plan 12>``)."""
    with _lock:
        number = next(_numbers)
    filename = f"<graphflow {what} {number}>"
    code = compile(source, filename, "exec")
    _register(filename, source)
    exec(code, env)  # noqa: S102 - our own generated source
    fn = env[function]
    weakref.finalize(fn, linecache.cache.pop, filename, None)
    record = GeneratedCode(what, source, filename)
    fn._graphflow_code = record
    return fn, record


def load_numba(source: str, function: str, env: dict | None = None,
               what: str = "generated kernel (numba)") -> tuple[Callable, GeneratedCode]:
    """The compiled ``function`` of a generated module ``source`` (numba code that
    decorates its kernels with ``@kernel`` imported from ops/jit.py), and its code
    record, whose filename is the module's file. ``env`` holds globals the module uses
    without importing them (compiled functions it calls): the source must name them
    (its binding lines, ``# g0 = module:qualname``, which the compile worker imports),
    so that its hash, which names the module and its disk cache, tells them apart.

    The module is written once under the kernel cache folder (named by its hash,
    atomically: another process may write the same file), so that numba's disk cache
    finds it again in the next process; a damaged copy there is replaced, saying so.
    With the cache off (``GRAPHFLOW_JIT_CACHE=0``) or a folder that cannot be written,
    the module is built in memory and compiled without the disk cache. Each call loads
    the module again (a new dispatcher): callers keep what they load."""
    name = MODULE_PREFIX + hashlib.sha1(source.encode()).hexdigest()[:20]
    try:
        if not jit.cache_enabled():  # nothing is written there
            raise OSError("the kernel cache is off")
        module = _import_source(name, source, env or {})
        filename = module.__file__
    except (OSError, RuntimeError) as e:  # numba's "cannot cache function" is a RuntimeError
        log.info("generated kernels are not cached on disk (%s): %s", jit.cache_dir(), e)
        module = type(sys)(name)
        module.__dict__.update(env or {})
        uncached = source.replace("@kernel\n", "@kernel(cache=False)\n")
        filename = f"<graphflow generated {name}>"
        _register(filename, uncached)
        exec(compile(uncached, filename, "exec"), module.__dict__)  # noqa: S102
    fn = getattr(module, function)
    record = GeneratedCode(what, source, filename)
    try:
        fn._graphflow_code = record
    except AttributeError:  # pragma: no cover - a dispatcher without attributes
        pass
    return fn, record


def _import_source(name: str, source: str, env: dict):
    """Import ``source`` as module ``name`` from its file in the cache folder."""
    folder = jit.cache_dir() / "fused"
    path = folder / f"{name}.py"
    if path.exists() and path.read_text() != source:  # damaged (truncated, edited)
        log.warning("graphflow: discarding a damaged generated kernel source %s", path)
        path.unlink()
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update(env)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# -- which generated kernels a plan's steps use ------------------------------------------------
_USED = "generated_code"  # the key in a step's KernelContext.cache


def note_used(ctx, fn, nodes: Iterable[str]) -> None:
    """Record on kernel context ``ctx`` (one plan's step) that it runs generated ``fn``
    for ``nodes``: the plan lists it (``plan.code``)."""
    code = code_of(fn)
    cache = getattr(ctx, "cache", None)
    if code is not None and cache is not None:
        cache.setdefault(_USED, {}).setdefault(code.filename, code.for_nodes(nodes))


def used_code(ctx) -> list[GeneratedCode]:
    """The generated kernels :func:`note_used` recorded on ``ctx``."""
    cache = getattr(ctx, "cache", None)
    return list(cache.get(_USED, {}).values()) if cache else []
