"""The ops graphflow itself declares, as the registry lists them, for the tests that
run over every op (test modules register ops of their own, which are left out)."""
from __future__ import annotations

import importlib
import pkgutil

import graphflow as gf
import graphflow.ops


def _declared_in(definition) -> str:
    """The module of the op's shape function or first kernel: where it was declared."""
    fn = definition.shape_function or (definition.kernels[0].fn if definition.kernels else None)
    return getattr(fn, "__module__", "") or ""


def package_ops(include_internal: bool = False) -> list:
    """graphflow's own OpDefs (from graphflow.ops), by name; the internal ones (a name
    starting with '_', which no user builds) only when asked for. Every module of
    graphflow.ops is imported first: some declare their ops only when first used."""
    for module in pkgutil.iter_modules(graphflow.ops.__path__):
        importlib.import_module(f"graphflow.ops.{module.name}")
    return sorted((d for d in gf.registered_ops(include_internal)
                   if _declared_in(d).startswith("graphflow.ops.")),
                  key=lambda d: d.name)
