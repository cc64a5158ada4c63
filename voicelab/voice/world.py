"""Access to the WORLD vocoder (pyworld) without its package ``__init__``.

pyworld 0.3.5's ``__init__`` imports ``pkg_resources`` only to read its own version, and setuptools 81+
no longer ships ``pkg_resources``; the compiled extension itself needs nothing from it. So the extension
module is imported directly when the package import fails for that reason.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_world() -> ModuleType:
    """The module with WORLD's functions (dio, stonemask, cheaptrick, d4c, synthesize)."""
    try:
        return importlib.import_module("pyworld")
    except ModuleNotFoundError as err:
        if err.name != "pkg_resources":
            raise
    return _load_extension()


def _load_extension() -> ModuleType:
    name = "pyworld.pyworld"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.machinery.PathFinder.find_spec("pyworld")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("pyworld is not installed", name="pyworld")
    folder = Path(next(iter(spec.submodule_search_locations)))
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    candidates = sorted(p for p in folder.iterdir() if p.name.startswith("pyworld.") and p.name.endswith(suffixes))
    if not candidates:
        raise ModuleNotFoundError(f"pyworld's compiled extension is missing in {folder}", name=name)
    loader = importlib.machinery.ExtensionFileLoader(name, str(candidates[0]))
    ext_spec = importlib.util.spec_from_file_location(name, candidates[0], loader=loader)
    assert ext_spec is not None
    module = importlib.util.module_from_spec(ext_spec)
    loader.exec_module(module)
    sys.modules[name] = module
    return module
