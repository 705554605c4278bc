"""Each part imports only what docs/architecture.md allows ("Parts and their rooms"): the import
graph of `src/mlyard`, read with `ast` (imports inside functions count), checked rule by rule."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src" / "mlyard"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every mlyard module (or name within one) the file imports, relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return {name for name in found if name == "mlyard" or name.startswith("mlyard.")}


GRAPH = {_module_name(path): _imports(path) for path in SOURCE.rglob("*.py") if "migrations" not in path.parts}


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


# (importing part, forbidden prefixes, allowed exceptions among them)
RULES = [
    ("mlyard.spec", ["mlyard.server", "mlyard.backends", "mlyard.runtime", "mlyard.scheduler"], []),
    ("mlyard.errors", ["mlyard.server", "mlyard.backends"], []),
    # The lifecycle stands apart from everything, the spec's models included (`mlyard jobs` imports it alone).
    ("mlyard.job_status", ["mlyard"], []),
    ("mlyard.scheduler", ["mlyard.server", "mlyard.backends", "mlyard.runtime", "mlyard.storage", "mlyard.client"], []),
    ("mlyard.sim", ["mlyard.server", "mlyard.backends", "mlyard.runtime", "mlyard.client"], []),
    ("mlyard.storage", ["mlyard.server", "mlyard.backends", "mlyard.scheduler", "mlyard.runtime"], []),
    ("mlyard.monitor", ["mlyard.server", "mlyard.backends", "mlyard.scheduler"], []),
    ("mlyard.environments", ["mlyard.server", "mlyard.backends"], []),
    ("mlyard.api", ["mlyard.server", "mlyard.backends", "mlyard.runtime", "mlyard.scheduler", "mlyard.client"], []),
    ("mlyard.backends", ["mlyard.server", "mlyard.client", "mlyard.cli", "mlyard.web"], []),
    ("mlyard.runtime", ["mlyard.server", "mlyard.backends", "mlyard.cli", "mlyard.web"], []),
    ("mlyard.client", ["mlyard.server", "mlyard.backends", "mlyard.runtime"], []),
    ("mlyard.sdk", ["mlyard.server", "mlyard.backends"], []),
    # Cleaning reports run inside a job, with only the library and the version's files.
    ("mlyard.cleaning", ["mlyard.server", "mlyard.backends", "mlyard.cli", "mlyard.web"], []),
    # Label formats and agreement are pure functions over paths and bytes, for the server and jobs alike.
    ("mlyard.annotation", ["mlyard.server", "mlyard.backends", "mlyard.cli", "mlyard.web"], []),
    # The CLI talks to the server through the client; `mlyard server` alone controls the daemon.
    ("mlyard.cli", ["mlyard.server", "mlyard.backends"], ["mlyard.server.daemon", "mlyard.server.settings"]),
    # Pages call the services the API calls; rows, sessions and the controller are not theirs.
    ("mlyard.web", ["mlyard.server.store.rows", "mlyard.server.control", "mlyard.server.workers",
                    "mlyard.server.lifecycle", "mlyard.backends", "sqlalchemy"], []),
    # Request handling never reaches into the controller or the background workers.
    ("mlyard.server.services", ["mlyard.server.control", "mlyard.server.workers", "mlyard.server.routers",
                                "mlyard.web"], []),
    ("mlyard.server.routers", ["mlyard.server.control", "mlyard.server.workers", "mlyard.server.store.rows",
                               "mlyard.web"], []),
    ("mlyard.server.store", ["mlyard.server.services", "mlyard.server.control", "mlyard.server.workers",
                             "mlyard.server.routers", "mlyard.server.lifecycle"], []),
    ("mlyard.server.lifecycle", ["mlyard.server.services", "mlyard.server.control", "mlyard.server.workers"], []),
    ("mlyard.server.workers", ["mlyard.server.control", "mlyard.server.routers"], []),
]


def _third_party_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize(("part", "forbidden", "allowed"), RULES, ids=[rule[0] for rule in RULES])
def test_each_part_imports_only_what_it_may(part: str, forbidden: list[str], allowed: list[str]) -> None:
    modules = {name: imported for name, imported in GRAPH.items() if _within(name, part)}
    assert modules, f"no module of {part}: the rule is stale"
    broken = []
    for name, imported in sorted(modules.items()):
        extra = _third_party_imports(SOURCE.parent / (name.replace(".", "/") + ".py")) if not (
            SOURCE.parent / name.replace(".", "/")).is_dir() else _third_party_imports(
            SOURCE.parent / name.replace(".", "/") / "__init__.py")
        for target in sorted(imported | extra):
            if any(_within(target, prefix) for prefix in forbidden) and not any(
                    _within(target, exception) for exception in allowed):
                broken.append(f"{name} imports {target}")
    assert not broken, "\n".join(broken)


def test_the_graph_sees_lazy_and_relative_imports() -> None:
    """The checker itself: imports inside functions and relative ones are in the graph."""
    assert "mlyard.server.daemon" in " ".join(GRAPH["mlyard.cli.server"])  # imported inside commands
    assert "mlyard.scheduler.cycle.decide_round" in GRAPH["mlyard.scheduler"]  # `from .cycle import`


def test_no_module_passes_500_lines() -> None:
    long = [f"{path.relative_to(SOURCE)}: {count}" for path in SOURCE.rglob("*.py")
            if "migrations" not in path.parts and (count := len(path.read_text().splitlines())) > 500]
    assert not long, long


def test_no_function_passes_80_lines() -> None:
    long = []
    for path in SOURCE.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 80:
                long.append(f"{path.relative_to(SOURCE)}:{node.lineno} {node.name}")
    assert not long, long
