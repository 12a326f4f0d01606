"""graphflow imported from a source checkout: ``ops/`` and ``runtime/`` beside it.

In the checkout the layers are top-level folders (``graphflow/``, ``ops/``,
``runtime/``); pyproject.toml's ``package-dir`` installs them as ``graphflow.ops`` and
``graphflow.runtime``. Python started in the checkout (or with it on ``PYTHONPATH``)
imports the checkout's ``graphflow/``, shadowing any installed copy, and would not find
those two subpackages there. :func:`find_layers_beside` then adds a finder that
loads them from the folders beside it, as an editable install's finder does, so that
``python -m graphflow``, ``python -m benchmarks`` and the README's tour work in the
checkout after ``pip install .``. An installed graphflow has them inside and adds none.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import pathlib
import sys

#: subpackage -> its folder in the checkout (pyproject.toml's package-dir)
LAYER_FOLDERS = {"graphflow.ops": "ops", "graphflow.runtime": "runtime"}


class _LayersBeside(importlib.abc.MetaPathFinder):
    """Finds ``graphflow.ops`` and ``graphflow.runtime`` in the checkout's folders."""

    def __init__(self, folders: dict[str, pathlib.Path]):
        self.folders = folders

    def find_spec(self, name, path=None, target=None):
        folder = self.folders.get(name)
        if folder is None:
            return None
        return importlib.util.spec_from_file_location(
            name, folder / "__init__.py", submodule_search_locations=[str(folder)])


def find_layers_beside(package_dir: pathlib.Path) -> bool:
    """Add the finder when ``package_dir`` (graphflow/) sits in a checkout: its
    subpackages are not inside it, their folders are beside it. Whether it did."""
    if (package_dir / "ops").is_dir() or any(isinstance(f, _LayersBeside) for f in sys.meta_path):
        return False
    root = package_dir.parent
    folders = {name: root / folder for name, folder in LAYER_FOLDERS.items()}
    if not all((f / "__init__.py").is_file() for f in folders.values()):
        return False
    sys.meta_path.insert(0, _LayersBeside(folders))
    return True
