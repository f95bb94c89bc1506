"""The architecture's tiers, read from every module's imports (``ast``), so they cannot drift.

docs/architecture.md draws the same picture. One test per rule; each collects every violation
in every module and fails with the whole list. Enforced here:

- every module belongs to a tier (app, command, library, computing, plugin, tool);
- the library tier (``pipeline.io``, ``tracking``, ``comparison``, ``figures``, ``judging``,
  ``chunkers``, ``errors``, ``lazy`` and ``retrievers``) never imports the app tier (``__main__``,
  ``config``, ``job``, ``stages``, ``naming``, ``sweep`` and its modules, ``console``, ``api``)
  or a command module; the one exception is the package facade ``pipeline``, which exports
  ``pipeline.api`` lazily;
- ``pipeline.io`` imports nothing from ``retrievers`` (the retrievers sit on top of it);
- ``hydra_plugins/`` (the Ray launcher) imports the library and computing tiers, Hydra and
  omegaconf, never the app tier or a command;
- only ``pipeline.tracking`` imports mlflow;
- ``tracking`` imports nothing from ``comparison``, ``figures`` or ``console``;
- ``metrics``, ``stats``, ``context`` and ``ranking`` (the computing tier) import only numpy,
  scipy, the standard library and each other;
- retrievers import no app module, and neither hydra, omegaconf nor mlflow;
- no module is over 500 lines, no function over 60, and no module imports another module's
  private (``_name``) names;
- an import inside a function is of a heavy package (``pipeline.lazy.HEAVY``) or of a project
  module that is heavy at import; everything else is imported at the top of its module.

Imports inside functions count for every rule.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.lazy import HEAVY_MODULES, is_heavy

ROOT = Path(__file__).resolve().parents[1]
STDLIB = set(sys.stdlib_module_names) | {"__future__"}
MAX_LINES = 500
MAX_FUNCTION_LINES = 60
PACKAGES = ("pipeline", "retrievers", "hydra_plugins")

APP = {"pipeline.__main__", "pipeline.config", "pipeline.job", "pipeline.stages", "pipeline.naming",
       "pipeline.sweep", "pipeline.sweep.callback", "pipeline.sweep.summary", "pipeline.sweep.table",
       "pipeline.sweep.parent", "pipeline.sweep.pareto", "pipeline.console", "pipeline.api", "pipeline.api.inputs",
       "pipeline.api.evaluation", "pipeline.api.jobs", "pipeline.sweep.sync"}
COMMANDS = {f"pipeline.{name}" for name in ("score", "compare", "sync", "pool", "judgments", "fetch", "index")}
#: A package of command modules is the command tier as a whole.
COMMAND_PACKAGES = ("pipeline.cli",)
#: The package facade exports the Python API lazily (``pipeline.evaluate``): its one import of the app tier.
FACADE_IMPORTS = {"pipeline": {"pipeline.api"}}
COMPUTING = ("pipeline.metrics", "pipeline.stats", "pipeline.context", "pipeline.ranking")
LIBRARY = ("pipeline.io", "pipeline.tracking", "pipeline.comparison", "pipeline.figures", "pipeline.judging",
           "pipeline.chunkers", "pipeline.errors", "pipeline.lazy", "retrievers")
#: Hydra plugins of this project (found by Hydra in the ``hydra_plugins`` namespace package).
PLUGINS = ("hydra_plugins",)
#: Scripts that build data files; nothing imports them.
TOOLS = {"pipeline.sample_long.build"}

#: Imports inside functions that are neither heavy nor of a module heavy at import, and why.
#: Keyed by (the importing module, the imported name as written); an entry that matches nothing
#: is reported too.
LAZY_EXCEPTIONS: dict[tuple[str, str], str] = {}


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES: dict[str, Path] = {_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def tier(name: str) -> str:
    if name in APP:
        return "app"
    if name in COMMANDS or _within(name, COMMAND_PACKAGES):
        return "command"
    if _within(name, COMPUTING):
        return "computing"
    if name == "pipeline" or _within(name, LIBRARY):
        return "library"
    if _within(name, PLUGINS):
        return "plugin"
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


def _import_nodes(tree: ast.AST, *, in_function: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import node with whether it runs inside a function; ``if TYPE_CHECKING:`` blocks
    never run, so they are left out."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, in_function
        elif isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            yield from _import_nodes(ast.Module(body=node.orelse, type_ignores=[]), in_function=in_function)
        else:
            inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from _import_nodes(node, in_function=inner)


def _names(node: ast.Import | ast.ImportFrom, path: Path) -> list[tuple[str, list[str]]]:
    if isinstance(node, ast.Import):
        return [(alias.name, []) for alias in node.names]
    if node.level:
        raise AssertionError(f"{path}: relative import (use the package name)")
    names = [alias.name for alias in node.names]
    # ``from pipeline.io import results``: a module imported by name
    return [(node.module or "", names)] + [(f"{node.module}.{n}", []) for n in names if f"{node.module}.{n}" in MODULES]


_PARSED: dict[Path, list[tuple[int, bool, list[tuple[str, list[str]]]]]] = {}
_TREES: dict[Path, ast.Module] = {}


def tree_of(path: Path) -> ast.Module:
    """A file's syntax tree, parsed once per session (the rules below read every module)."""
    if path not in _TREES:
        _TREES[path] = ast.parse(path.read_text(), filename=str(path))
    return _TREES[path]


def parsed(path: Path) -> list[tuple[int, bool, list[tuple[str, list[str]]]]]:
    """(line, inside a function, [(module, names imported from it)]) for every import of a file."""
    if path not in _PARSED:
        _PARSED[path] = [(node.lineno, lazy, _names(node, path)) for node, lazy in _import_nodes(tree_of(path))]
    return _PARSED[path]


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names imported from it) for every import of a file, at any depth."""
    return [pair for _, _, pairs in parsed(path) for pair in pairs]


def project_imports(module: str) -> set[str]:
    return {m for name, _ in imports(MODULES[module]) if (m := _module_of(name)) is not None and m != module}


def third_party(module: str) -> set[str]:
    return {name.split(".")[0] for name, _ in imports(MODULES[module]) if _module_of(name) is None}


def _parents(module: str) -> list[str]:
    """The packages Python imports before ``module`` (``pipeline``, ``pipeline.io`` for ``pipeline.io.results``)."""
    parts = module.split(".")
    return [p for i in range(1, len(parts)) if (p := ".".join(parts[:i])) in MODULES]


_HEAVY_AT_IMPORT: dict[str, str | None] = {}


def heavy_at_import(module: str) -> str | None:
    """The heavy package (``pipeline.lazy.HEAVY``) that importing ``module`` loads, through its
    top-level imports and those of the project modules and packages they import; None where
    it loads none."""
    if module not in _HEAVY_AT_IMPORT:
        todo, seen, found = [*_parents(module), module], set(), None
        while todo and found is None:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            for _, lazy, pairs in parsed(MODULES[current]):
                for name, _ in [] if lazy else pairs:
                    inner = _module_of(name)
                    if inner is None and is_heavy(name):
                        found = name
                    elif inner is not None:
                        todo += [*_parents(inner), inner]
        _HEAVY_AT_IMPORT[module] = found
    return _HEAVY_AT_IMPORT[module]


def _shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def _report(violations: list[str], rule: str) -> None:
    assert not violations, f"{len(violations)} violation(s) of: {rule}\n  " + "\n  ".join(violations)


def test_every_module_is_in_a_tier_and_the_tiers_exist():
    tiers, unplaced = {}, []
    for m in MODULES:
        try:
            tiers[m] = tier(m)
        except AssertionError as err:
            unplaced.append(str(err))
    _report(unplaced, "every module is in a tier")
    assert set(tiers.values()) == {"app", "command", "computing", "library", "plugin", "tool"}
    assert APP <= set(MODULES), sorted(APP - set(MODULES))
    assert {"pipeline.metrics", "pipeline.stats", "pipeline.context.placement", "pipeline.ranking", "pipeline.io.results",
            "pipeline.tracking", "pipeline.figures", "pipeline.comparison.report", "pipeline.io.drilldown",
            "pipeline.sweep.summary", "retrievers.bm25", "retrievers.dense",
            "hydra_plugins.pipeline_ray_launcher.ray_launcher"} <= set(MODULES)


def test_the_library_tier_never_imports_the_app_tier_or_a_command():
    _report([f"{module} imports {m}" for module in sorted(MODULES) if tier(module) == "library"
             for m in sorted(project_imports(module)) if tier(m) in ("app", "command")
             and m not in FACADE_IMPORTS.get(module, set())], "the library tier never imports the app tier")


def test_pipeline_io_imports_nothing_from_retrievers():
    _report([f"{module} imports {m}" for module in sorted(MODULES) if _within(module, ("pipeline.io",))
             for m in sorted(project_imports(module)) if _within(m, ("retrievers",))],
            "pipeline.io imports nothing from retrievers")


def test_hydra_plugins_import_the_library_tier_and_hydra_only():
    allowed = STDLIB | {"hydra", "omegaconf", "numpy"}
    _report([f"{module} imports {m}" for module in sorted(MODULES) if tier(module) == "plugin"
             for m in sorted(project_imports(module)) if tier(m) not in ("library", "computing", "plugin")]
            + [f"{module} imports {t}" for module in sorted(MODULES) if tier(module) == "plugin"
               for t in sorted(third_party(module)) if t not in allowed],
            "hydra_plugins import the library and computing tiers, Hydra and omegaconf, never the app tier")


def test_only_tracking_imports_mlflow():
    importers = sorted(m for m in MODULES if "mlflow" in third_party(m))
    assert importers, "no module imports mlflow: the checker is blind"
    _report([m for m in importers if not _within(m, ("pipeline.tracking",))], "only pipeline.tracking imports mlflow")


def test_tracking_imports_nothing_from_comparison_figures_or_console():
    banned = ("pipeline.comparison", "pipeline.figures", "pipeline.console")
    _report([f"{module} imports {m}" for module in sorted(MODULES) if _within(module, ("pipeline.tracking",))
             for m in sorted(project_imports(module)) if _within(m, banned)],
            "tracking imports nothing from comparison, figures or console")


def test_computing_imports_only_numpy_scipy_the_standard_library_and_itself():
    computing = [m for m in sorted(MODULES) if tier(m) == "computing"]
    assert "pipeline.ranking" in computing and "pipeline.metrics" in computing
    _report([f"{module} imports {m}" for module in computing for m in sorted(project_imports(module))
             if tier(m) != "computing"]
            + [f"{module} imports {t}" for module in computing for t in sorted(third_party(module))
               if t not in STDLIB and t not in ("numpy", "scipy")],
            "the computing tier imports only numpy, scipy, the standard library and itself")


def test_retrievers_import_no_app_module_hydra_or_mlflow():
    retrievers = [m for m in sorted(MODULES) if _within(m, ("retrievers",))]
    _report([f"{module} imports {m}" for module in retrievers for m in sorted(project_imports(module))
             if tier(m) in ("app", "command")]
            + [f"{module} imports {t}" for module in retrievers for t in sorted(third_party(module))
               if t in ("hydra", "omegaconf", "mlflow")],
            "retrievers import no app module, and neither hydra, omegaconf nor mlflow")


def test_no_module_is_over_500_lines():
    sizes = {m: len(p.read_text().splitlines()) for m, p in MODULES.items()}
    _report([f"{m}: {n} lines; split it by responsibility" for m, n in sorted(sizes.items()) if n > MAX_LINES],
            f"no module over {MAX_LINES} lines")


_FUNCTIONS: dict[Path, list[tuple[str, int, int]]] = {}


def functions(path: Path) -> Iterator[tuple[str, int, int]]:
    """(name, first line, lines) of every function and method of a file, nested ones too;
    the lines run from ``def`` (decorators not counted) to the last, docstring included."""
    if path not in _FUNCTIONS:
        _FUNCTIONS[path] = [(node.name, node.lineno, node.end_lineno - node.lineno + 1) for node in ast.walk(tree_of(path))
                            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    yield from _FUNCTIONS[path]


def test_no_function_is_over_60_lines():
    _report([f"{_shown(MODULES[m])}:{line} {name}: {n} lines" for m in sorted(MODULES)
             for name, line, n in functions(MODULES[m]) if n > MAX_FUNCTION_LINES],
            f"no function over {MAX_FUNCTION_LINES} lines (def to last line, docstring included)")


def test_no_module_imports_another_modules_private_names():
    _report([f"{module} imports {name}.{n}: make it public (no underscore) or keep it inside"
             for module in sorted(MODULES) for name, names in imports(MODULES[module]) if _module_of(name) is not None
             for n in names if n.startswith("_") and not n.startswith("__")],
            "no module imports another module's private (_name) names")


def lazy_violations(modules: dict[str, Path]) -> tuple[list[str], set[tuple[str, str]]]:
    """Imports inside functions that are neither heavy nor of a project module heavy at import
    (``module:line imports name``), and the exceptions of :data:`LAZY_EXCEPTIONS` that matched."""
    found, used = [], set()
    for module, path in sorted(modules.items()):
        for line, lazy, pairs in parsed(path):
            if not lazy:
                continue
            written = pairs[0][0]  # ``from X import a, b``: X, or X.a where that is a module
            targets = [name for name, _ in pairs[1:]] or [written]
            inner = [_module_of(t) for t in targets]
            if all(m is None and is_heavy(t) for m, t in zip(inner, targets)):
                continue
            if all(m is not None and m != module and (m in HEAVY_MODULES or heavy_at_import(m)) for m in inner):
                continue
            for t in targets:
                if (module, t) in LAZY_EXCEPTIONS or (module, written) in LAZY_EXCEPTIONS:
                    used.add((module, t) if (module, t) in LAZY_EXCEPTIONS else (module, written))
                    break
            else:
                found.append(f"{_shown(path)}:{line} "
                             f"imports {', '.join(targets)} inside a function")
    return found, used


def test_imports_inside_functions_are_heavy_ones_only():
    """``pipeline.lazy``: a function-level import names a HEAVY package or a project module
    that loads one when imported; anything else goes to the top of its module."""
    found, used = lazy_violations(MODULES)
    found += [f"pipeline.lazy.HEAVY_MODULES: {m} imports no heavy package" for m in sorted(HEAVY_MODULES)
              if m not in MODULES or not any(is_heavy(name) for name, _ in imports(MODULES[m]))]
    stale = sorted(f"LAZY_EXCEPTIONS{key}: matches no import inside a function" for key in set(LAZY_EXCEPTIONS) - used)
    _report(found + stale, "imports inside functions are of heavy packages or heavy project modules only "
                           "(pipeline/lazy.py); move the others to the top of their module")


def test_the_checker_sees_lazy_imports_and_names_imported_from_packages(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"
                      "def f():\n    import mlflow\n    from pipeline.io import results\n"
                      "    from pipeline.stats import _private\n    import json\n")
    found = imports(source)
    assert ("mlflow", []) in found and ("pipeline.io.results", []) in found
    assert ("pipeline.stats", ["_private"]) in found
    assert ("torch", []) not in found  # under TYPE_CHECKING: never imported
    assert _module_of("pipeline.io.results.write_json") == "pipeline.io.results"
    assert tier("pipeline.job") == "app" and tier("pipeline.score") == "command" and tier("pipeline.cli.score") == "command"
    assert tier("pipeline.metrics") == "computing" and tier("pipeline.ranking") == "computing"
    assert tier("retrievers.bm25") == "library" and tier("hydra_plugins.pipeline_ray_launcher") == "plugin"
    # the lazy-import rule: mlflow is heavy; pipeline.io.results (light), json (light) are not
    lazy, _ = lazy_violations({"m": source})
    assert [v.split(" ", 1)[1] for v in lazy] == ["imports pipeline.io.results inside a function",
                                                  "imports pipeline.stats inside a function",
                                                  "imports json inside a function"], lazy
    assert heavy_at_import("pipeline.tracking.store") is None  # mlflow waits inside it
    assert heavy_at_import("pipeline.config")  # Hydra and omegaconf at its top
    assert heavy_at_import("pipeline.ranking") is None and heavy_at_import("pipeline.metrics") is None


def test_every_rule_reports_every_violation(tmp_path, monkeypatch):
    """A rule fails with the whole list, not the first violation: two bad modules, two lines."""
    for name, text in (("pipeline.io.bad_a", "from retrievers.bm25 import BM25Retriever\n"),
                       ("pipeline.io.bad_b", "def f():\n    from retrievers import dense\n")):
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        monkeypatch.setitem(MODULES, name, path)
    with pytest.raises(AssertionError) as failed:
        test_pipeline_io_imports_nothing_from_retrievers()
    assert "3 violation(s)" in str(failed.value)  # ``from retrievers import dense``: retrievers and retrievers.dense
    assert "pipeline.io.bad_a imports retrievers.bm25" in str(failed.value)
    assert "pipeline.io.bad_b imports retrievers" in str(failed.value)


def test_a_function_over_60_lines_is_reported_with_its_size(tmp_path, monkeypatch):
    """61 lines from ``def`` to the end (a docstring counts) is one too many; 60 is not."""
    body = "    \"\"\"Docstring.\"\"\"\n" + "    x = 1\n" * 58
    path = tmp_path / "long.py"
    path.write_text(f"def fits():\n{body}\n\ndef too_long():\n{body}    return x\n")
    assert [(name, n) for name, _, n in functions(path)] == [("fits", 60), ("too_long", 61)]
    monkeypatch.setitem(MODULES, "pipeline.io.long", path)
    with pytest.raises(AssertionError) as failed:
        test_no_function_is_over_60_lines()
    assert "1 violation(s)" in str(failed.value) and "too_long: 61 lines" in str(failed.value)
