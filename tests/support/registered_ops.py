"""The ops graphflow itself declares, as the registry lists them, for the tests that
run over every op (test modules register ops of their own, which are left out)."""
from __future__ import annotations

import graphflow as gf


def _declared_in(definition) -> str:
    """The module of the op's shape function or first kernel: where it was declared."""
    fn = definition.shape_function or (definition.kernels[0].fn if definition.kernels else None)
    return getattr(fn, "__module__", "") or ""


def package_ops(include_internal: bool = False) -> list:
    """graphflow's own OpDefs (from graphflow.ops), by name; the internal ones (a name
    starting with '_', which no user builds) only when asked for."""
    return sorted((d for d in gf.registered_ops()
                   if _declared_in(d).startswith("graphflow.ops.")
                   and (include_internal or not d.name.startswith("_"))),
                  key=lambda d: d.name)
