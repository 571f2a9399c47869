"""The package's import graph: layers point one way, no module cycle, commands stay leaves, networks load nothing,
imports inside the package are relative.

Every import in the source is counted, those inside functions too (an import moved into a function to
dodge a cycle still couples the two modules). The graph is read from the source with ``ast``; nothing is
imported.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("pipeline", "models", "eval", "data_prep", "recipes", "api")
# What each layer may import of the others (itself always). api/ is the package ``voxanon`` itself (its __init__,
# voxanon.metrics, voxanon.corpus): the public facade over every layer, which no layer imports.
ALLOWED = {"pipeline": {"models", "eval", "data_prep", "recipes"}, "models": {"data_prep"}, "eval": {"data_prep"},
           "data_prep": set(), "recipes": set(), "api": {"pipeline", "models", "eval", "data_prep", "recipes"}}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if parts[0] == "api":  # installed as voxanon itself (pyproject's package-dir)
        parts.pop(0)
    return ".".join(["voxanon", *parts])


def _modules(root: Path = ROOT) -> dict[str, Path]:
    return {_module_name(path): path for layer in LAYERS for path in (root / layer).rglob("*.py")}


def _imports(name: str, path: Path, modules: dict[str, Path]) -> dict[str, list[tuple[int, bool]]]:
    """Project modules ``name`` imports -> [(line, relative)], resolving ``from package import module``."""
    found: dict[str, list[tuple[int, bool]]] = {}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def known(candidate: str) -> str | None:
        while candidate and candidate not in modules:
            candidate = candidate.rpartition(".")[0]
        return candidate or None

    tree = ast.parse(path.read_text(encoding="utf-8"))
    # Imports only type checkers run are no dependency at run time.
    typing_only = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING"
                   for inner in ast.walk(node)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # ``from package import module`` imports the module (the package's __init__ runs first for every
            # module inside it, so it is no edge of its own).
            names = [f"{prefix}.{alias.name}" for alias in node.names]
            targets = names if all(name in modules for name in names) else names + [prefix]
        else:
            continue
        for target in targets:
            module = known(target)
            if module and module != name:
                found.setdefault(module, []).append((node.lineno, bool(getattr(node, "level", 0))))
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, list[tuple[int, bool]]]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "api"


def test_layers_point_one_way(graph):
    wrong = [f"{module} imports {target}" for module, targets in graph.items() for target in targets
             if _layer(target) != _layer(module) and _layer(target) not in ALLOWED[_layer(module)]]
    assert not wrong, "\n".join(wrong)


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for node in graph:
        if node not in index:
            visit(node)
    return components


def test_no_module_cycle(graph):
    assert not _cycles(graph)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b": []}, "b": {"c": []}, "c": {"a": []}, "d": {"a": []}}) == [["a", "b", "c"]]


def test_no_command_is_imported_by_another_module(graph):
    commands = "voxanon.pipeline.commands."
    wrong = [f"{module} imports {target}" for module, targets in graph.items() for target in targets
             if target.startswith(commands) and module != "voxanon.pipeline.cli"
             and not target.endswith(".options")]
    assert not wrong, "\n".join(wrong)


def test_networks_import_no_loader(graph):
    """models/nets/ holds torch modules and their device forms: loading code imports them, never the reverse. They
    may use the signal processing they compute with (F0, DSP, speaker sets)."""
    computing = ("voxanon.models.nets", "voxanon.models.f0", "voxanon.models.speakers", "voxanon.models.dsp")
    wrong = [f"{module} imports {target}" for module, targets in graph.items() if module.startswith("voxanon.models.nets.")
             for target in targets if target.startswith("voxanon.models.") and not target.startswith(computing)]
    assert not wrong, "\n".join(wrong)


def test_imports_inside_the_package_are_relative(graph):
    absolute = [f"{module}:{line}" for module, targets in graph.items() for lines in targets.values()
                for line, relative in lines if not relative]
    assert not absolute, "\n".join(absolute)



FAMILY_ROOTS = ("voxanon.pipeline.systems.", "voxanon.models.nets.")


def _family(module: str, modules: dict[str, Path]) -> str | None:
    """The system family a module belongs to: the sub-package of pipeline/systems/ or models/nets/ it is in."""
    for root in FAMILY_ROOTS:
        if module.startswith(root):
            package = root + module[len(root):].split(".")[0]
            return package[len(root):] if modules[package].name == "__init__.py" else None
    return None


def _family_crossings(graph, modules: dict[str, Path]) -> list[str]:
    return [f"{module} ({_family(module, modules)}) imports {target} ({_family(target, modules)})"
            for module, targets in graph.items() for target in targets
            if None is not _family(module, modules) != _family(target, modules) is not None]


def _private_imports(graph, modules: dict[str, Path]) -> list[str]:
    return [f"{module} imports {target}" for module, targets in graph.items() for target in targets
            if _family(target, modules) and any(part.startswith("_") for part in target.split(".")[3:])
            and _family(module, modules) != _family(target, modules)]


def test_no_family_imports_another_family(graph):
    """pipeline/systems/<family>/ and models/nets/<family>/ use what is shared (the stage base, the flat
    networks), never another family's modules: a family can be added, or removed, alone."""
    wrong = _family_crossings(graph, _modules())
    assert not wrong, "\n".join(wrong)


def test_nothing_outside_a_family_imports_its_private_modules(graph):
    wrong = _private_imports(graph, _modules())
    assert not wrong, "\n".join(wrong)


def test_the_family_rules_find_a_crossing():
    systems, nets = "voxanon.pipeline.systems", "voxanon.models.nets"
    modules = {f"{systems}.one": Path("one/__init__.py"), f"{systems}.one._private": Path("one/_private.py"),
               f"{systems}.one.stages": Path("one/stages.py"), f"{systems}.two": Path("two/__init__.py"),
               f"{systems}.two.stages": Path("two/stages.py"), f"{systems}.stage": Path("stage.py"),
               f"{nets}.one": Path("one/__init__.py"), f"{nets}.one.net": Path("one/net.py"),
               f"{nets}.hifigan": Path("hifigan.py"), "voxanon.pipeline.runner": Path("runner.py")}
    graph = {f"{systems}.one.stages": {f"{systems}.one._private": [], f"{nets}.one.net": [], f"{systems}.stage": [],
                                       f"{nets}.hifigan": []},
             f"{systems}.two.stages": {f"{nets}.one.net": [], f"{systems}.stage": []},
             "voxanon.pipeline.runner": {f"{systems}.one._private": [], f"{systems}.two.stages": []}}
    assert _family_crossings(graph, modules) == [f"{systems}.two.stages (two) imports {nets}.one.net (one)"]
    assert _private_imports(graph, modules) == [f"voxanon.pipeline.runner imports {systems}.one._private"]


def test_no_stage_module_at_the_pipeline_root():
    """Stages live in pipeline/systems/ (one folder per family), not as ``*_stages.py`` beside the runner."""
    assert not sorted(path.name for path in (ROOT / "pipeline").glob("*_stages.py"))
