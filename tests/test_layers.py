"""graphflow's layers hold: no module imports from a layer above its own.

Each layer is a folder (the facade is two files), so a module's layer is where it lives.
From the bottom up:

0. core     graphflow/*.py: dtypes, shapes, Graph, the op registry, Scope and the
            builder, the kernel-facing interface (kernel_context, output_check,
            memory_limit, host_eval), gradients, variables, nn, serialization and the
            checkpoint formats (tf_bundle, sstable, crc32c, checkpoint_state,
            legacy_checkpoint); and graphflow/interop/, the converters (TensorFlow
            GraphDefs, SavedModels, ONNX): core too, as it converts graphs and never
            imports the runtime (SavedModel.session() gets its Session class from the
            facade, saved_model.install_session).
1. ops      graphflow.ops (ops/): the operator set, its kernels and index libraries.
2. runtime  graphflow.runtime (runtime/): devices, placement, plan passes, the
            executor, Session, distributed runs.
3. tools    graphflow.tools and every module under it (the folder graphflow/tools/),
            what acts on a Session: saver, gradient_check, summary, visualize (its
            ``fused=True`` asks the runtime's planner), cli, and train (gf.train holds
            the Saver, as TensorFlow's training/ sits above its client).
4. facade   graphflow/__init__.py (and ``python -m graphflow``, __main__.py): puts the
            layers together, names the tools (gf.train, gf.summary, gf.gradient_check)
            and installs what a lower layer's classes get from a higher one (Output's
            operators, Graph.to_dot).

Every import counts: at module level, inside functions and under TYPE_CHECKING,
``import x`` and ``from x import y``, relative ones resolved. A layer may import
its own and any layer below it.
"""
from __future__ import annotations

import ast
import gc
import pathlib

import graphflow
import graphflow.ops
import graphflow.runtime

CORE, OPS, RUNTIME, TOOLS, FACADE = range(5)
LAYER_NAMES = ("core", "ops", "runtime", "tools", "facade")

FACADE_MODULES = {"graphflow", "graphflow.__main__"}

#: (importer, imported): an edge that climbs, allowed, with the reason.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("graphflow.crc32c", "graphflow.ops.jit"):
        "the checkpoints' checksum loop is kept in the kernel cache (imported when first used)",
}

PACKAGE_DIRS = {
    "graphflow": pathlib.Path(graphflow.__file__).parent,
    "graphflow.ops": pathlib.Path(graphflow.ops.__file__).parent,
    "graphflow.runtime": pathlib.Path(graphflow.runtime.__file__).parent,
}


def layer_of(module: str) -> int:
    if module in FACADE_MODULES:
        return FACADE
    if module == "graphflow.tools" or module.startswith("graphflow.tools."):
        return TOOLS
    if module == "graphflow.runtime" or module.startswith("graphflow.runtime."):
        return RUNTIME
    if module == "graphflow.ops" or module.startswith("graphflow.ops."):
        return OPS
    return CORE


def graphflow_modules() -> dict[str, pathlib.Path]:
    """Every module of the package, by dotted name ("graphflow.ops" is ops/__init__.py)."""
    modules = {}
    for package, directory in PACKAGE_DIRS.items():
        for path in sorted(directory.rglob("*.py")):
            parts = list(path.relative_to(directory).with_suffix("").parts)
            if parts[0] in {"ops", "runtime"} and package == "graphflow":
                continue  # not the mapped folders (never created inside graphflow/)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package] + parts)] = path
    return modules


def imported_modules(module: str, path: pathlib.Path, node: ast.AST,
                     known: dict[str, pathlib.Path]) -> list[str]:
    """The graphflow modules an import statement reaches: ``from p import name`` is
    p.name when that is a module, else p."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
        return [n for n in names if n == "graphflow" or n.startswith("graphflow.")]
    package = module.split(".")
    if path.name != "__init__.py":
        package.pop()
    if node.level:
        package = package[:len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    if base != "graphflow" and not base.startswith("graphflow."):
        return []
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]


def parse(path: pathlib.Path) -> ast.Module:
    """``path``'s syntax tree, parsed with the garbage collector paused. CPython 3.11
    keeps one AST-builder depth counter per interpreter (cpython#106905): a finalizer
    the collector runs inside ``ast.parse`` lets another thread parse meanwhile (the
    session's Dask scheduler formatting a logged traceback, which 3.11 parses for its
    carets), and this parse then fails with "AST constructor recursion depth mismatch"."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    finally:
        if enabled:
            gc.enable()


def import_edges() -> list[tuple[str, int, str]]:
    """(importer, line, imported) for every import of a graphflow module."""
    known = graphflow_modules()
    edges = []
    for module, path in known.items():
        for node in ast.walk(parse(path)):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in imported_modules(module, path, node, known):
                    edges.append((module, node.lineno, target))
    return edges


def climbing(edges) -> list[str]:
    return [f"{module}:{line} imports {target} ({LAYER_NAMES[layer_of(module)]} -> "
            f"{LAYER_NAMES[layer_of(target)]})"
            for module, line, target in edges
            if layer_of(target) > layer_of(module) and (module, target) not in EXCEPTIONS]


def test_no_import_climbs_a_layer():
    bad = climbing(import_edges())
    assert not bad, "imports that climb a layer:\n" + "\n".join(bad)


def test_the_walk_sees_every_kind_of_import():
    """The walk finds imports in functions, relative ones and ``from p import module``."""
    edges = set((m, t) for m, _, t in import_edges())
    assert ("graphflow.runtime.steps", "graphflow.output_check") in edges  # absolute
    assert ("graphflow.runtime", "graphflow.runtime.session") in edges  # relative, package
    assert ("graphflow.tools.cli", "graphflow.serialization") in edges  # inside a function
    assert ("graphflow.tools.train", "graphflow.tools.saver") in edges  # relative, in tools/
    assert ("graphflow.tools.saver", "graphflow.tf_bundle") in edges  # ``from .. import``
    assert ("graphflow", "graphflow.ops") in edges  # from . import module


def test_a_climbing_edge_is_reported_with_its_place():
    edges = [("graphflow.graph", 17, "graphflow.runtime.session"),
             ("graphflow.ops.math_ops", 3, "graphflow.registry")]
    assert climbing(edges) == [
        "graphflow.graph:17 imports graphflow.runtime.session (core -> runtime)"]


def test_the_folders_are_the_layers():
    """A module's layer is its folder: every module of graphflow/ but the facade is core,
    every one of graphflow/tools/ a tool, and interop/ is core."""
    modules = graphflow_modules()
    assert "graphflow.tools.cli" in modules and "graphflow.tools" in modules
    assert "graphflow.cli" not in modules and "graphflow.train" not in modules
    for module, path in modules.items():
        folder = path.parent.name
        if module in FACADE_MODULES:
            assert layer_of(module) == FACADE
        elif folder == "tools" and path.parent.parent.name == "graphflow":
            assert layer_of(module) == TOOLS, module
        elif folder in {"graphflow", "interop"}:
            assert layer_of(module) == CORE, module
    assert layer_of("graphflow.interop.saved_model") == CORE


def test_every_exception_is_still_needed():
    edges = set((m, t) for m, _, t in import_edges())
    assert not set(EXCEPTIONS) - edges, "exceptions no import needs any more"


def _runtime_modules():
    return sorted(PACKAGE_DIRS["graphflow.runtime"].glob("*.py"))


def test_the_plan_compiler_has_no_function_over_60_lines():
    long = [f"{path.name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in _runtime_modules() for node in ast.walk(parse(path))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > 60]
    assert not long, long


def test_the_plan_compiler_imports_no_private_name():
    private = [f"{path.name}: {node.module}.{alias.name}" for path in _runtime_modules()
               for node in ast.walk(parse(path))
               if isinstance(node, ast.ImportFrom)
               for alias in node.names if alias.name.startswith("_")]
    assert not private, private
