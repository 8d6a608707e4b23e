"""The package's shape: layers import only downwards, modules import no cycle,
and no module is named like a sibling plus a digit.

Layers, bottom to top (see docs/layout.md):

    base (errors, log, fast_paths, blas, std_order, numba_cache, threads, arraytools, io/) < nnet < compile
    < optimize < cache < compute < train < cli < dispatch

``pynnet3.testing`` (helpers for the tests) sits above all of them and nothing
in the library imports it.  Imports are read from the source with ``ast``, so
a lazy import inside a function counts for the layer rule as much as one at
the top of a module; cycles are looked for among module-level imports (what
runs when a module is imported).
"""
from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

PKG_DIR = Path(__file__).resolve().parents[1] / "src" / "pynnet3"
LAYERS = ["base", "nnet", "compile", "optimize", "cache", "compute", "train", "export", "cli", "dispatch", "testing"]
BASE = {"__init__", "errors", "log", "fast_paths", "blas", "std_order", "numba_cache", "io", "arraytools"}

BASE.add("threads")        # pynnet3.threads: the process's thread budget


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PKG_DIR.rglob("*.py"):
        parts = ["pynnet3", *path.relative_to(PKG_DIR).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in BASE:
        return "base"
    return parts[1]


def _imports(mods: dict[str, Path]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module-level imports, all imports) of every module, as module names."""
    top: dict[str, set[str]] = defaultdict(set)
    every: dict[str, set[str]] = defaultdict(set)

    def known(name: str) -> str:
        while name not in mods and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        is_pkg = path.name == "__init__.py"
        toplevel: set[int] = set()
        pending = list(tree.body)
        while pending:  # what runs on import: not function bodies, not TYPE_CHECKING
            node = pending.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            toplevel.add(id(node))
            pending.extend(ast.iter_child_nodes(node))
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [known(a.name) for a in node.names if a.name.startswith("pynnet3")]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[:len(base) - node.level + 1]
                    name = ".".join(base + ([node.module] if node.module else []))
                else:
                    name = node.module or ""
                if not name.startswith("pynnet3"):
                    continue
                targets = [f"{name}.{a.name}" if f"{name}.{a.name}" in mods else known(name)
                           for a in node.names]
            for target in targets:
                if target == mod:
                    continue
                every[mod].add(target)
                if id(node) in toplevel:
                    top[mod].add(target)
    return top, every


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in list(edges):
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def graph():
    mods = _modules()
    return mods, *_imports(mods)


def test_no_import_cycle(graph):
    _, top, _ = graph
    found = _cycles(top)
    assert not found, "\n".join(" <-> ".join(c) for c in found)


def test_layers_import_only_downwards(graph):
    _, _, every = graph
    bad = []
    for mod, targets in every.items():
        for target in targets:
            a, b = _layer(mod), _layer(target)
            if a in LAYERS and b in LAYERS and LAYERS.index(b) > LAYERS.index(a):
                bad.append(f"{mod} -> {target}")
    assert not bad, "\n".join(sorted(bad))


def test_library_never_imports_testing_helpers(graph):
    _, _, every = graph
    bad = [f"{m} -> {t}" for m, ts in every.items() for t in ts
           if _layer(t) == "testing" and _layer(m) != "testing"]
    assert not bad, "\n".join(bad)


def test_no_name_is_a_sibling_plus_a_digit():
    roots = [PKG_DIR, PKG_DIR.parents[1] / "tests"]
    bad = []
    for root in roots:
        for path in root.rglob("*.py"):
            stem = re.sub(r"_?\d+$", "", path.stem)
            if stem != path.stem:
                bad.append(str(path.relative_to(root.parent)))
    assert not bad, "\n".join(bad)


def test_no_module_says_it_exists_for_size():
    bad = []
    for path in PKG_DIR.rglob("*.py"):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if re.search(r"\bfor size\b|\bpart [23]\b|kept (apart|beside)", doc, re.I):
            bad.append(str(path.relative_to(PKG_DIR)))
    assert not bad, "\n".join(bad)
