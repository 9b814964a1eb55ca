"""The shape of the package, read from the source alone (ast; nothing is imported or run).

Two rules keep rlvr readable from the bottom up:
- no import cycle, counting every `import` of an rlvr module wherever it stands: at module level,
  inside a function (a "lazy" import is still a dependency; hiding a cycle in a function only
  defers it) or under `if TYPE_CHECKING`, and every "rlvr.module:NAME" string, which importlib
  turns into an import when it is read (config's `choice` fields name their registries so);
- the floors below: a module imports from its own floor or lower ones, never from a higher one.

A new module must be given a floor in FLOORS (the test says so): that is where its place in the
picture of the package is decided. docs/architecture.md describes the same floors.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "rlvr"

# Lowest first. A module's floor is its longest matching prefix (rlvr.verifiers.contract before
# rlvr.verifiers), so a package can sit high while one of its modules sits lower (stages.estimators).
# "rlvr" itself names the package's __init__ only: every other module is placed on purpose.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("foundations: pure math, verifiers, files", (
        "rlvr", "rlvr.errors", "rlvr.files", "rlvr.allocator", "rlvr.batching", "rlvr.algorithms", "rlvr.verifiers",
        "rlvr.stages.estimators")),
    # config validates names against the registries below it, and run.trackers against what is installed;
    # the tasks read the config, so their own rules are checked by rlvr.tasks.task_for, not by the config
    ("config", ("rlvr.config", "rlvr.config_paths", "rlvr.sampling", "rlvr.trackers", "rlvr.verifiers.contract", "rlvr.verifiers.pool")),
    ("data, tasks, rewards, metrics", (
        "rlvr.data", "rlvr.data_check", "rlvr.tasks", "rlvr.reward", "rlvr.metrics", "rlvr.monitor", "rlvr.doctor", "rlvr.checkpoint")),
    # weight_sync moves a model's weights (it imports only errors): the vLLM server sampler in rollout/ broadcasts through it
    ("models, sampling, scoring", ("rlvr.architecture", "rlvr.models", "rlvr.sharded_checkpoint", "rlvr.logprobs", "rlvr.rollout",
                                    "rlvr.sources", "rlvr.distributed.weight_sync")),
    ("one step: update, learner, stages", ("rlvr.optim", "rlvr.update", "rlvr.learner", "rlvr.stages")),
    ("the RL loop", ("rlvr.loop",)),
    ("the run floor: settings, run directories, model and data set-up, reports", ("rlvr.runtime", "rlvr.report")),
    ("backends", ("rlvr.distributed",)),
    ("the lab/train recipe", ("rlvr.pipeline",)),
    ("commands", ("rlvr.commands", "rlvr.labs", "rlvr.audit")),
    ("the command line", ("rlvr.cli",)),
]


BY_NAME = re.compile(r"(rlvr(?:\.\w+)*):\w+")  # "rlvr.algorithms.surrogate:SURROGATES", as config.choice names a registry


@functools.cache
def module_files() -> dict[str, Path]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The rlvr modules `module` imports, each with the line of its first import (a whole string
    "rlvr.x.y:NAME" counts: importlib imports rlvr.x.y when the name is looked up)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and (spec := BY_NAME.fullmatch(node.value)):
            names = [spec.group(1)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import name` imports the submodule pkg.name when there is one
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:  # `import rlvr.a.b` names a module; an attribute path does not
                name = name.rpartition(".")[0]
            if name and name != module and name.startswith("rlvr"):
                found.setdefault(name, node.lineno)
    return found


@functools.cache
def import_graph() -> dict[str, dict[str, int]]:
    modules = module_files()
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def floor_of(module: str) -> int | None:
    best, floor = -1, None
    for index, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            covers = module == prefix or (prefix != "rlvr" and module.startswith(prefix + "."))
            if covers and len(prefix) > best:
                best, floor = len(prefix), index
    return floor


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as one cycle through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(_one_cycle(graph, set(component)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _one_cycle(graph: dict[str, dict[str, int]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module, as a readable path a -> b -> a."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:
                    return paths[v] + [start]
                if w in component and w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return sorted(component)


def test_the_package_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles (function-level imports count):\n" + "\n".join(" -> ".join(c) for c in found)


def test_every_module_has_a_floor():
    unplaced = [m for m in module_files() if floor_of(m) is None]
    assert not unplaced, f"modules on no floor: {unplaced}; add each to FLOORS in {Path(__file__).name}"


def test_no_module_imports_from_a_higher_floor():
    graph, modules = import_graph(), module_files()
    upward = []
    for module, targets in graph.items():
        here = floor_of(module)
        for target, line in targets.items():
            there = floor_of(target)
            if here is not None and there is not None and there > here:
                upward.append(f"{modules[module].relative_to(PACKAGE.parent)}:{line}: {module} ({FLOORS[here][0]}) imports "
                              f"{target} ({FLOORS[there][0]})")
    assert not upward, "imports from a higher floor:\n" + "\n".join(upward)


# Modules whose docstring says why all their function-level imports are there.
LAZY_BY_DESIGN = {"rlvr.cli"}  # each command imports what it runs: `rlvr --help` starts without torch


def lazy_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of an rlvr module inside a function."""
    found = []
    for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("rlvr")):
                    found.append((node.lineno, node.module or "."))
                elif isinstance(node, ast.Import) and any(a.name.startswith("rlvr") for a in node.names):
                    found.append((node.lineno, node.names[0].name))
    return found


def test_every_function_level_import_says_why():
    """A lazy import of an rlvr module is there for start-up time or an optional dependency, never
    to hide a cycle: a comment on its line or just above says which."""
    silent = []
    for module, path in module_files().items():
        if module in LAZY_BY_DESIGN:
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for line, target in lazy_imports(path):
            if not any("#" in text for text in lines[max(0, line - 3):line]):
                silent.append(f"{path.relative_to(PACKAGE.parent)}:{line}: imports {target} inside a function without saying why")
    assert not silent, "\n".join(silent)


def test_the_checks_can_fail(tmp_path):
    """The graph reader sees relative, aliased and function-level imports, and the cycle finder finds a cycle."""
    modules = {"rlvr.a": Path("a.py"), "rlvr.b": Path("b.py"), "rlvr.b.c": Path("b/c.py")}
    probe = tmp_path / "a.py"
    probe.write_text("from .b import c\ndef f():\n    import rlvr.b as b\n    from rlvr.a import thing\n", encoding="utf-8")
    assert imports_of("rlvr.a", probe, modules) == {"rlvr.b.c": 1, "rlvr.b": 3}
    by_name = tmp_path / "d.py"  # a registry named by string is an import; a docstring that mentions one is not
    by_name.write_text('"""Set reward.functions = ["rlvr.a:f"]."""\nX = choice("rlvr.b.c:REGISTRY", "x", "help")\n', encoding="utf-8")
    assert imports_of("rlvr.d", by_name, modules) == {"rlvr.b.c": 2}
    assert lazy_imports(probe) == [(3, "rlvr.b"), (4, "rlvr.a")]
    assert cycles({"rlvr.a": {"rlvr.b": 1}, "rlvr.b": {"rlvr.c": 1}, "rlvr.c": {"rlvr.a": 1}}) == [["rlvr.a", "rlvr.b", "rlvr.c", "rlvr.a"]]
    assert cycles({"rlvr.a": {"rlvr.b": 1}, "rlvr.b": {}}) == []
    assert floor_of("rlvr.verifiers.contract") > floor_of("rlvr.verifiers.math.parse") == floor_of("rlvr.verifiers")
    assert floor_of("rlvr.cli") == len(FLOORS) - 1
    assert floor_of("rlvr.somewhere_new") is None  # the package's own entry places nothing beneath it


def test_floors_name_real_modules():
    """A module renamed or removed leaves no stale entry behind."""
    modules = module_files()
    stale = [prefix for _, prefixes in FLOORS for prefix in prefixes if prefix not in modules]
    assert not stale, f"FLOORS names modules that do not exist: {stale}"
