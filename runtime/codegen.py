"""Generated Python functions whose source stays readable: in tracebacks and on the plan.

A plan's serial run and each compiled segment's caller are generated Python source
(runtime/executor.py, runtime/segments.py), as torch.fx's ``GraphModule.recompile``
generates ``forward``. :func:`load_python` compiles such source under a filename of its
own and registers the text with :mod:`linecache`, so a traceback through generated
code shows the generated line (``s[7] = f3(c3, s[2])`` under ``k = 3``: step 3),
``pdb`` can step through it, and the text is dropped when the function is. The
numba sources (segments, compiled loops, fused kernels) are files in the kernel cache
folder (``ops/jit.py``'s ``load_generated``), which tracebacks read as they are.
"""
from __future__ import annotations

import itertools
import linecache
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable

_numbers = itertools.count()
_lock = threading.Lock()


@dataclass(frozen=True)
class GeneratedCode:
    """One generated function: what it is, its source, the filename tracebacks show."""

    what: str
    source: str
    filename: str

    def __str__(self) -> str:
        return f"# {self.what} ({self.filename})\n{self.source}"


def numba_code(what: str, source: str | None, fn) -> list[GeneratedCode]:
    """The record of a generated numba function (none before its source is made); its
    filename is the module's file in the kernel cache, once loaded."""
    if source is None:
        return []
    py = getattr(fn, "py_func", None)
    return [GeneratedCode(what, source, py.__code__.co_filename if py else "not loaded yet")]


def load_python(source: str, function: str, env: dict[str, Any], what: str) \
        -> tuple[Callable, GeneratedCode]:
    """``function`` defined by ``source`` with globals ``env``, and its code record.
    ``what`` names it in the filename (``<graphflow plan 12>``)."""
    with _lock:
        number = next(_numbers)
    filename = f"<graphflow {what} {number}>"
    code = compile(source, filename, "exec")
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(code, env)  # noqa: S102 - our own generated source
    fn = env[function]
    weakref.finalize(fn, linecache.cache.pop, filename, None)
    return fn, GeneratedCode(what, source, filename)
