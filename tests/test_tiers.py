"""The architecture's tiers, read from every module's imports (``ast``), so they cannot drift.

docs/architecture.md draws the same picture. Enforced here:

- the library tier (``pipeline.io``, ``tracking``, ``comparison``, ``figures``, ``judging``,
  ``chunkers``, ``errors`` and ``retrievers``) never imports the app tier (``__main__``,
  ``config``, ``job``, ``stages``, ``naming``, ``sweep`` and its modules, ``console``, ``api``)
  or a command module;
  the one exception is the package facade ``pipeline``, which exports ``pipeline.api`` lazily;
- only ``pipeline.tracking`` imports mlflow;
- ``tracking`` imports nothing from ``comparison``, ``figures`` or ``console``;
- ``metrics``, ``stats`` and ``context`` (the computing tier) import only numpy, scipy, the
  standard library and each other;
- retrievers import no app module, and neither hydra, omegaconf nor mlflow;
- no module is over 500 lines, and none imports another module's private (``_name``) names;
- every module belongs to a tier.

Lazy imports inside functions count too.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STDLIB = set(sys.stdlib_module_names) | {"__future__"}
MAX_LINES = 500

APP = {"pipeline.__main__", "pipeline.config", "pipeline.job", "pipeline.stages", "pipeline.naming",
       "pipeline.sweep", "pipeline.sweep.callback", "pipeline.sweep.summary", "pipeline.sweep.table",
       "pipeline.sweep.parent", "pipeline.sweep.pareto", "pipeline.console", "pipeline.api", "pipeline.api.inputs",
       "pipeline.api.evaluation", "pipeline.api.jobs"}
COMMANDS = {f"pipeline.{name}" for name in ("score", "compare", "sync", "pool", "judgments", "fetch", "index")}
#: The package facade exports the Python API lazily (``pipeline.evaluate``): its one import of the app tier.
FACADE_IMPORTS = {"pipeline": {"pipeline.api"}}
COMPUTING = ("pipeline.metrics", "pipeline.stats", "pipeline.context")
LIBRARY = ("pipeline.io", "pipeline.tracking", "pipeline.comparison", "pipeline.figures", "pipeline.judging",
           "pipeline.chunkers", "pipeline.errors", "retrievers")
#: Scripts that build data files; nothing imports them.
TOOLS = {"pipeline.sample_long.build"}


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES: dict[str, Path] = {_name(p): p for package in ("pipeline", "retrievers")
                            for p in sorted((ROOT / package).rglob("*.py"))}


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def tier(name: str) -> str:
    if name in APP:
        return "app"
    if name in COMMANDS:
        return "command"
    if _within(name, COMPUTING):
        return "computing"
    if name == "pipeline" or _within(name, LIBRARY):
        return "library"
    if name in TOOLS:
        return "tool"
    raise AssertionError(f"{name} is in no tier: add it to tests/test_tiers.py and docs/architecture.md")


def _module_of(name: str) -> str | None:
    """The project module a dotted import name refers to (a module, or a name inside one)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names imported from it) for every import of a file, at any depth."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{path}: relative import (use the package name)")
            names = [alias.name for alias in node.names]
            found.append((node.module or "", names))
            # ``from pipeline.io import results``: a module imported by name
            found += [(f"{node.module}.{n}", []) for n in names if f"{node.module}.{n}" in MODULES]
    return found


def project_imports(module: str) -> set[str]:
    return {m for name, _ in imports(MODULES[module]) if (m := _module_of(name)) is not None and m != module}


def third_party(module: str) -> set[str]:
    return {name.split(".")[0] for name, _ in imports(MODULES[module])
            if name.split(".")[0] not in ("pipeline", "retrievers")}


LIBRARY_MODULES = sorted(m for m in MODULES if tier(m) == "library")
COMPUTING_MODULES = sorted(m for m in MODULES if tier(m) == "computing")


def test_every_module_is_in_a_tier_and_the_tiers_exist():
    tiers = {m: tier(m) for m in MODULES}
    assert set(tiers.values()) == {"app", "command", "computing", "library", "tool"}
    assert APP | COMMANDS <= set(MODULES), sorted((APP | COMMANDS) - set(MODULES))
    assert {"pipeline.metrics", "pipeline.stats", "pipeline.context.placement", "pipeline.io.results",
            "pipeline.tracking", "pipeline.figures", "pipeline.comparison.report", "pipeline.io.drilldown",
            "pipeline.sweep.summary", "retrievers.bm25", "retrievers.dense"} <= set(MODULES)


@pytest.mark.parametrize("module", LIBRARY_MODULES)
def test_the_library_tier_never_imports_the_app_tier(module):
    bad = sorted(m for m in project_imports(module) if tier(m) in ("app", "command")
                 and m not in FACADE_IMPORTS.get(module, set()))
    assert not bad, f"{module} imports {bad}"


def test_only_tracking_imports_mlflow():
    importers = sorted(m for m in MODULES if "mlflow" in third_party(m))
    assert importers and all(m == "pipeline.tracking" or m.startswith("pipeline.tracking.") for m in importers), \
        importers


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _within(m, ("pipeline.tracking",))))
def test_tracking_imports_nothing_from_comparison_figures_or_console(module):
    bad = sorted(m for m in project_imports(module) if _within(m, ("pipeline.comparison", "pipeline.figures",
                                                                    "pipeline.console")))
    assert not bad, f"{module} imports {bad}"


@pytest.mark.parametrize("module", COMPUTING_MODULES)
def test_computing_imports_only_numpy_scipy_the_standard_library_and_itself(module):
    bad = sorted(m for m in project_imports(module) if tier(m) != "computing")
    bad += sorted(t for t in third_party(module) if t not in STDLIB and t not in ("numpy", "scipy"))
    assert not bad, f"{module} imports {bad}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _within(m, ("retrievers",))))
def test_retrievers_import_no_app_module_hydra_or_mlflow(module):
    bad = sorted(m for m in project_imports(module) if tier(m) in ("app", "command"))
    bad += sorted(t for t in third_party(module) if t in ("hydra", "omegaconf", "mlflow"))
    assert not bad, f"{module} imports {bad}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_is_over_500_lines(module):
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{module}: {lines} lines; split it by responsibility"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_another_modules_private_names(module):
    private = [f"{name}.{n}" for name, names in imports(MODULES[module]) if _module_of(name) is not None
               for n in names if n.startswith("_") and not n.startswith("__")]
    assert not private, f"{module} imports {private}: make them public (no underscore) or keep them inside"


def test_the_checker_sees_lazy_imports_and_names_imported_from_packages(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    import mlflow\n    from pipeline.io import results\n"
                      "    from pipeline.stats import _private\n")
    found = imports(source)
    assert ("mlflow", []) in found and ("pipeline.io.results", []) in found
    assert ("pipeline.stats", ["_private"]) in found
    assert _module_of("pipeline.io.results.write_json") == "pipeline.io.results"
    assert tier("pipeline.job") == "app" and tier("pipeline.score") == "command"
    assert tier("pipeline.metrics") == "computing" and tier("retrievers.bm25") == "library"
