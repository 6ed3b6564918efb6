"""The layout a newcomer reads from the folder names, kept true by test.

- no package folder holds more than 12 modules;
- every import goes down the layers below (type-only and function-level
  imports included), and no import circle exists between modules;
- every Lua script is a ``.lua`` file, every exception class lives in its
  package's errors module;
- ``docs/architecture.md``'s module map names every module and folder there is.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("scheduler", "somatize_tasks")

#: Lowest first: a module may import its own layer and the layers before it.
LAYERS = (
    "scheduler",
    "somatize_tasks.errors",
    "somatize_tasks.config",
    "somatize_tasks.lua",
    "somatize_tasks.messaging",
    "somatize_tasks.catalog",
    "somatize_tasks.authoring",
    "somatize_tasks.examples",
    "somatize_tasks.store",
    "somatize_tasks.cache",
    "somatize_tasks.transfer",
    "somatize_tasks.workers",
    "somatize_tasks.runtime.compile",
    "somatize_tasks.runtime.state",
    "somatize_tasks.runtime.engine",
    "somatize_tasks.runtime.recovery",
    "somatize_tasks.runtime.worker",
    "somatize_tasks.runtime.producer",
    "somatize_tasks.runtime",
    "somatize_tasks.study",
    "somatize_tasks.observe",
    "somatize_tasks.sizing",
    "somatize_tasks.local_cluster",
    "somatize_tasks.cli",
    "somatize_tasks",
)


def modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join(parts), path


def layer_of(module: str) -> int:
    best = -1
    for index, prefix in enumerate(LAYERS):
        if (module == prefix or module.startswith(prefix + ".")) and (
            best < 0 or len(prefix) > len(LAYERS[best])
        ):
            best = index
    assert best >= 0, f"{module} is in no layer: add its folder to LAYERS"
    return best


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """Every project module ``module`` imports, wherever the import stands."""
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for imported in names:
            name = imported
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


GRAPH = dict(modules())
EDGES = {name: imports_of(name, path, set(GRAPH)) for name, path in GRAPH.items()}


def test_no_folder_holds_more_than_twelve_modules() -> None:
    crowded = {}
    for package in PACKAGES:
        for folder in [REPO / package, *(REPO / package).rglob("*")]:
            if folder.is_dir() and (folder / "__init__.py").exists():
                count = len(list(folder.glob("*.py")))
                if count > 12:
                    crowded[str(folder.relative_to(REPO))] = count
    assert not crowded, f"folders over 12 modules: {crowded}"


def test_imports_go_down_the_layers() -> None:
    upward = [
        f"{module} ({LAYERS[layer_of(module)]}) imports {target} ({LAYERS[layer_of(target)]})"
        for module, targets in EDGES.items()
        for target in targets
        if layer_of(target) > layer_of(module)
        and not module.startswith(target + ".")  # a module may import its package's docstring
    ]
    assert not upward, "\n".join(upward)


def test_no_import_circle() -> None:
    """Tarjan's strongly connected components over the module graph."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in EDGES[node]:
            if node.startswith(target + "."):
                continue  # importing one's own package is not a circle
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in GRAPH:
        if node not in index:
            visit(node)
    assert not circles, f"import circles: {circles}"


def test_lua_lives_in_lua_files() -> None:
    inline = [
        str(path.relative_to(REPO))
        for _, path in GRAPH.items()
        if "redis.call(" in path.read_text()
    ]
    assert not inline, f"Lua written inside Python: {inline}"
    scripts = list((REPO / "somatize_tasks").rglob("*.lua"))
    bodies = [path.read_text().strip() for path in scripts]
    assert len(set(bodies)) == len(bodies), "a Lua script is written twice"


def test_every_exception_lives_in_its_errors_module() -> None:
    misplaced = []
    for name, path in GRAPH.items():
        if name.endswith(".errors"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                re.search(r"(Error|Exception)$", ast.unparse(base)) for base in node.bases
            ):
                misplaced.append(f"{name}.{node.name}")
    assert not misplaced, f"exception classes outside an errors module: {misplaced}"


@pytest.mark.parametrize("package", ["somatize_tasks", "scheduler"])
def test_architecture_doc_maps_every_module(package: str) -> None:
    doc = (REPO / "docs" / "architecture.md").read_text()
    missing = [
        str(path.relative_to(REPO))
        for name, path in GRAPH.items()
        if name.split(".")[0] == package
        and path.name != "__init__.py"
        and str(path.relative_to(REPO / package).as_posix()) not in doc
    ]
    assert not missing, f"docs/architecture.md does not name: {missing}"
    named = set(re.findall(r"`((?:[\w]+/)*[\w]+\.py)`", doc))
    gone = [
        rel
        for rel in named
        if not any(
            path.relative_to(REPO / pkg).as_posix() == rel
            for pkg in PACKAGES
            for _, path in GRAPH.items()
            if path.is_relative_to(REPO / pkg)
        )
    ]
    assert not gone, f"docs/architecture.md names modules that do not exist: {gone}"
