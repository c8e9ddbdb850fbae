"""No import circle in ``src/``, and no arrow between rooms that must not cross.

Rooms are the package's first-level folders. The two methods (``meds/``, ``cliff/``) never import each other:
what both need lives in a shared room (``code/``, ``data.py``, ``sentences.py``, ...). The toy world (``toy/``) is
the ground floor: it never reaches up to the evaluation runner or to a method.

The graph is read from the source with ``ast`` (no module is imported): an edge ``a -> b`` for every import of
``b`` anywhere in ``a`` (module level or inside a function: a lazy import hides a circle, it does not remove it),
except under ``if TYPE_CHECKING:``. Importing ``pkg.sub`` also runs ``pkg/__init__.py``, so it is an edge to both.
"""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import ROOT

PACKAGE = "hf_meds_cliff"


def _module_names(source_root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """``{dotted name: (file, is a package __init__)}`` of every module of ``package`` under ``source_root``."""
    modules = {}
    for path in sorted((source_root / package).rglob("*.py")):
        parts = list(path.relative_to(source_root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return modules


def _imported_names(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """Absolute dotted names an import statement may load (``from a import b``: ``a`` and, if a module, ``a.b``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        stem = ".".join(base + ([node.module] if node.module else []))
    else:
        stem = node.module or ""
    return [stem] + [f"{stem}.{alias.name}" for alias in node.names]


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.body:
                skipped.update(id(inner) for inner in ast.walk(statement))
    return skipped


def import_graph(source_root: Path, package: str) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}``; importing ``a.b.c`` imports ``a``, ``a.b`` and ``a.b.c``.
    A module's own parent packages are left out (Python runs them before the module anyway)."""
    modules = _module_names(source_root, package)
    graph = {}
    for module, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = _type_checking_nodes(tree)
        targets = set()
        for node in ast.walk(tree):
            if id(node) in skipped or not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for name in _imported_names(module, is_package, node):
                parts = name.split(".")
                targets.update(
                    prefix for i in range(1, len(parts) + 1) if (prefix := ".".join(parts[:i])) in modules
                )
        graph[module] = {t for t in targets if t != module and not module.startswith(t + ".")}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component of more than one module."""
    order: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(start: str) -> None:  # iterative Tarjan: no recursion limit on deep graphs
        work = [(start, iter(sorted(graph[start])))]
        order[start] = lowest[start] = len(order)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in order:
                    order[successor] = lowest[successor] = len(order)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    lowest[node] = min(lowest[node], order[successor])
            if advanced:
                continue
            work.pop()
            if work:
                lowest[work[-1][0]] = min(lowest[work[-1][0]], lowest[node])
            if lowest[node] == order[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return [_cycle_within(graph, component) for component in components]


def _cycle_within(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself (breadth-first)."""
    start = min(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for successor in sorted(graph[node] & component):
                if successor == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if successor not in parents:
                    parents[successor] = node
                    following.append(successor)
        frontier = following
    raise AssertionError(f"{sorted(component)} is not strongly connected")


FORBIDDEN_CROSSINGS = (
    ("meds", "cliff"),
    ("cliff", "meds"),
    ("toy", "evaluation"),
    ("toy", "cliff"),
)
"""``(from room, to room)`` pairs with no import arrow allowed."""


def _room(module: str) -> str:
    """First-level folder of a module: ``pkg.meds.trainer`` -> ``meds``; ``pkg.data`` -> ``data``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def forbidden_arrows(graph: dict[str, set[str]], crossings=FORBIDDEN_CROSSINGS) -> list[str]:
    """``"a -> b"`` for every import of ``graph`` from one room to another that ``crossings`` forbids."""
    pairs = set(crossings)
    return [
        f"{module} -> {target}"
        for module in sorted(graph)
        for target in sorted(graph[module])
        if (_room(module), _room(target)) in pairs
    ]


def _write_package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_package_has_no_import_circle():
    graph = import_graph(ROOT / "src", PACKAGE)
    assert f"{PACKAGE}.data" in graph and f"{PACKAGE}.rewards.verifier" in graph  # the walk found the modules
    assert f"{PACKAGE}.text" in graph[f"{PACKAGE}.rewards.verifier"]
    cycles = import_cycles(graph)
    assert not cycles, "import circles in src/ (give the shared code one home below both):\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles
    )


def test_no_method_imports_the_other_and_the_toy_world_does_not_reach_up():
    graph = import_graph(ROOT / "src", PACKAGE)
    assert graph[f"{PACKAGE}.meds.trainer"] and graph[f"{PACKAGE}.toy.checker"]  # the walk found the rooms
    arrows = forbidden_arrows(graph)
    assert not arrows, (
        "imports between rooms that must not cross (move what both use into a shared room such as code/, "
        "data.py or sentences.py):\n" + "\n".join(arrows)
    )


def test_the_room_rule_sees_lazy_imports_package_inits_and_both_directions(tmp_path):
    source = _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/data.py": "",
            "pkg/meds/__init__.py": "",
            "pkg/meds/trainer.py": "def f():\n    from ..cliff.protocol import problem_text\n",
            "pkg/cliff/__init__.py": "",
            "pkg/cliff/protocol.py": "from ..data import x\n",
            "pkg/cliff/trainer.py": "from pkg.meds import trainer\n",
            "pkg/toy/__init__.py": "",
            "pkg/toy/warmup.py": "from ..evaluation.estimators import pass_at_k\nfrom ..data import x\n",
            "pkg/evaluation/__init__.py": "",
            "pkg/evaluation/estimators.py": "from ..toy import warmup\n",
        },
    )
    assert forbidden_arrows(import_graph(source, "pkg")) == [
        "pkg.cliff.trainer -> pkg.meds",
        "pkg.cliff.trainer -> pkg.meds.trainer",
        "pkg.meds.trainer -> pkg.cliff",
        "pkg.meds.trainer -> pkg.cliff.protocol",
        "pkg.toy.warmup -> pkg.evaluation",
        "pkg.toy.warmup -> pkg.evaluation.estimators",
    ]


def test_the_cycle_finder_sees_circles_through_lazy_imports_and_package_inits(tmp_path):
    """The two shapes the package had: a function-level import closing a circle through a package
    ``__init__`` (``data`` -> ``rewards`` -> ``rewards.verifier`` -> ``data``), and a plain one."""
    source = _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/data.py": "def load():\n    from .rewards import extract\n    return extract\n",
            "pkg/rewards/__init__.py": "from .verifier import extract\n",
            "pkg/rewards/verifier.py": "from ..data import load\n\ndef extract():\n    return load\n",
            "pkg/a.py": "import pkg.b\n",
            "pkg/b.py": "from pkg import a\n",
            "pkg/leaf.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import data\n",
        },
    )
    graph = import_graph(source, "pkg")
    assert graph["pkg.data"] == {"pkg.rewards"}
    assert graph["pkg.rewards.verifier"] == {"pkg.data"}  # its own parent package is not an edge
    assert graph["pkg.leaf"] == set()  # TYPE_CHECKING imports never run
    assert sorted(import_cycles(graph)) == [
        ["pkg.a", "pkg.b", "pkg.a"],
        ["pkg.data", "pkg.rewards", "pkg.rewards.verifier", "pkg.data"],
    ]

    (source / "pkg" / "text.py").write_text("def extract():\n    return 1\n")  # the fix: one home below both
    (source / "pkg" / "rewards" / "verifier.py").write_text("from ..text import extract\n")
    assert import_cycles(import_graph(source, "pkg")) == [["pkg.a", "pkg.b", "pkg.a"]]
