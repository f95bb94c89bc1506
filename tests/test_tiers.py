"""The architecture's tiers, read from every module's imports (``ast``), so they cannot drift.

- computing modules import only numpy/scipy, the standard library and each other;
- input/output modules import no hydra, mlflow or retrievers;
- only ``pipeline.tracking`` imports mlflow;
- ``retrievers`` imports only its own ``base`` and pipeline's input/output modules.

The README's "Architecture" section and docs/architecture.md describe the same tiers.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

COMPUTING = {"metrics", "placement", "attention", "stats", "chunking"}
INPUT_OUTPUT = {"errors", "formats", "data", "cache", "results", "readers"}
THIRD_PARTY_FOR_COMPUTING = {"numpy", "scipy"}


def _modules() -> dict[str, Path]:
    found = {}
    for package in ("pipeline", "retrievers"):
        for path in sorted((ROOT / package).glob("*.py")):
            found[f"{package}.{path.stem}"] = path
    return found


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (lazy imports inside functions count too)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            if node.module in ("pipeline", "retrievers"):  # from pipeline import cache
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            raise AssertionError(f"{path}: relative import (use the package name)")
    return names


def _top(name: str) -> str:
    return name.split(".")[0]


def _project(name: str) -> bool:
    return _top(name) in ("pipeline", "retrievers")


MODULES = _modules()
STDLIB = set(sys.stdlib_module_names) | {"__future__"}


def test_the_tiers_cover_modules_that_exist():
    names = {name.split(".")[1] for name in MODULES if name.startswith("pipeline.")}
    assert {"metrics", "placement", "attention"} <= names & COMPUTING
    assert {"errors", "formats", "data", "cache", "results"} <= names & INPUT_OUTPUT


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.split(".")[1] in COMPUTING and m.startswith("pipeline.")))
def test_computing_modules_import_only_numpy_scipy_and_each_other(module):
    bad = []
    for name in _imports(MODULES[module]):
        if _project(name):
            if name.split(".")[0] != "pipeline" or name.split(".")[1] not in COMPUTING:
                bad.append(name)
        elif _top(name) not in STDLIB and _top(name) not in THIRD_PARTY_FOR_COMPUTING:
            bad.append(name)
    assert not bad, f"{module} imports {sorted(bad)}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.split(".")[1] in INPUT_OUTPUT and m.startswith("pipeline.")))
def test_input_output_modules_import_no_hydra_mlflow_or_retrievers(module):
    bad = [n for n in _imports(MODULES[module])
           if _top(n) in ("hydra", "omegaconf", "mlflow", "retrievers")
           or (_top(n) == "pipeline" and n.count(".") and n.split(".")[1] not in INPUT_OUTPUT | COMPUTING)]
    assert not bad, f"{module} imports {sorted(bad)}"


def test_only_tracking_imports_mlflow():
    importers = sorted(m for m, path in MODULES.items() if any(_top(n) == "mlflow" for n in _imports(path)))
    assert importers == ["pipeline.tracking"]


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("retrievers.")))
def test_retrievers_import_only_base_and_input_output_modules(module):
    bad = []
    for name in _imports(MODULES[module]):
        if _top(name) == "retrievers" and name not in ("retrievers", "retrievers.base"):
            bad.append(name)
        if _top(name) == "pipeline" and (name == "pipeline" or name.split(".")[1] not in INPUT_OUTPUT):
            bad.append(name)
        if _top(name) in ("hydra", "omegaconf", "mlflow"):
            bad.append(name)
    assert not bad, f"{module} imports {sorted(bad)}"


def test_the_checker_sees_lazy_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    import mlflow\n    from pipeline import run\n")
    assert {"mlflow", "pipeline", "pipeline.job"} <= _imports(source)
