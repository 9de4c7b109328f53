"""The import structure of gpuops, read from the sources with ``ast`` (every import statement, at module
level or inside a function): no cycles between rooms (``gpuops.X``: a module or a package), and no
import against the layering.

The data path is model -> optimizer -> plan -> executor -> device arrays -> ops -> kernels. In imports
a layer may use the layers after it, with one turn: the ops take device arrays and use the device
module's host copies and dtypes, so ``ops -> device`` is an allowed arrow and ``device -> ops`` is not.
Under them all are the array libraries' bindings (CuPy / NumPy backends, cuBLAS).
The optimizer sits above the plan and beside it: neither imports the other (the optimizer evaluates
nodes through the executor, :mod:`gpuops.executor.evaluate`). The executor imports no plan and no
session: the session hands it what it needs of the plan layer (the shape specializer of CUDA graphs).
Modules outside the layers (the API: sessions, MDF, the command line, selftest, benchmarks) may
import any layer; no layer may import them. ``gpuops.errors`` is under everything.
"""

from __future__ import annotations

import ast
import collections
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "gpuops"

LAYERS = {
    "model": ("gpuops.onnx.model", "gpuops.onnx.validate"),
    "optimizer": ("gpuops.optimizer",),
    "plan": ("gpuops.onnx.plan", "gpuops.onnx.specialize", "gpuops.onnx.shape_plans"),
    "executor": ("gpuops.executor",),
    "device": ("gpuops.device", "gpuops.dtypes", "gpuops.memory", "gpuops.threads"),
    "ops": ("gpuops.ops", "gpuops.registry"),
    "kernels": ("gpuops.kernels", "gpuops.native", "gpuops.native_abi"),
    "libraries": ("gpuops.backends", "gpuops.cublas"),  # the array libraries' bindings
}
# what each layer may import besides itself and gpuops.errors
ALLOWED = {
    "model": set(),
    "optimizer": {"executor", "device", "ops"},
    "plan": {"executor", "device", "ops"},
    "executor": {"device", "ops", "libraries"},
    "device": {"libraries"},
    "ops": {"device", "kernels", "libraries"},
    "kernels": {"libraries"},
    "libraries": set(),
}
BASE = ("gpuops.errors",)

# Test doubles (the CuPy stand-in, the kernel emulator): the runtime never imports them.
TESTING = "gpuops.testing"

# Imports against the rules that remain for now, each (importer, imported), the only other exceptions
# to the checks; an entry goes with its import.
PENDING: set = set()


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for p in ROOT.rglob("*.py"):
        rel = p.relative_to(ROOT.parent).with_suffix("")
        mods[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = p
    return mods


def _targets(mods, module: str, node) -> list[str]:
    package = module if mods[module].name == "__init__.py" else module.rpartition(".")[0]
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        parts = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(parts + ([base] if base else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]


def import_graph() -> dict[str, set[str]]:
    """gpuops module -> the gpuops modules it imports."""
    mods = _modules()
    edges = collections.defaultdict(set)
    for module, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for t in _targets(mods, module, node):
                    while t and t not in mods:
                        t = t.rpartition(".")[0]
                    if t and t != module and t.startswith("gpuops"):
                        edges[module].add(t)
    return edges


def _room(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _layer(module: str) -> str | None:
    best = None
    for layer, prefixes in LAYERS.items():
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) > len(best[1])):
                best = (layer, p)
    return best and best[0]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def test_no_cycles_between_rooms():
    rooms = collections.defaultdict(set)
    for a, targets in import_graph().items():
        for b in targets:
            if (a, b) in PENDING:
                continue
            if _room(a) != _room(b) and _room(b) != "gpuops":  # the package itself: __version__
                rooms[_room(a)].add(_room(b))
    assert _cycles(rooms) == []


def test_no_import_against_the_layers():
    wrong = []
    for a, targets in sorted(import_graph().items()):
        la = _layer(a)
        if la is None:
            continue  # the API and the tools: they may import any layer
        for b in sorted(targets):
            if (a, b) in PENDING or b in BASE:
                continue
            lb = _layer(b)
            if lb != la and lb not in ALLOWED[la]:
                wrong.append(f"{a} ({la}) imports {b} ({lb or 'above the layers'})")
    assert wrong == []


def test_the_known_modules_are_read():
    graph = import_graph()
    assert "gpuops.ops.checks" in graph["gpuops.executor.run"]
    assert "gpuops.executor.run" in graph["gpuops.onnx.session"]
    assert "gpuops.executor.evaluate" in graph["gpuops.optimizer.constant_folding"]
    assert {"gpuops.models", "gpuops.dependencies"} <= graph["gpuops.selftest"] | graph["gpuops.selftest.models"]  # in functions


def test_the_runtime_never_imports_the_test_doubles():
    wrong = [f"{a} imports {b}" for a, targets in sorted(import_graph().items()) if _layer(a) is not None
             for b in sorted(targets) if b.startswith(TESTING)]
    assert wrong == []


def test_long_modules_say_why():
    """A module past 500 lines says why in its docstring ("past 500 lines"), or is split."""
    long = [m for m, p in sorted(_modules().items()) if p.read_text().count("\n") > 500
            and "past 500 lines" not in (ast.get_docstring(ast.parse(p.read_text())) or "")]
    assert long == []
