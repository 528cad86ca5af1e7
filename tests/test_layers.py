"""The package's layers: a module imports only from its own layer or the ones below, counting
imports inside functions too (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "advisor"

LAYERS = (
    ("core", ("advisor.core", "advisor.catalog",
              # The pipeline's stage geometry (model and pp only): the space's split rules.
              "advisor.perf.layout",
              # Where the reference measurements lie (a path, no code): the fits read them.
              "advisor.data.reference")),
    ("perf", ("advisor.perf",)),
    ("data", ("advisor.data",)),
    ("learn", ("advisor.learn",)),
    ("predict", ("advisor.predict",)),
    ("explain", ("advisor.explain",)),
    ("search", ("advisor.search",)),
    ("cli", ("advisor.cli", "advisor.__main__")),
)


def layer_of(module: str) -> int | None:
    """The index in `LAYERS` of `module` (its longest matching prefix)."""
    best, length = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = i, len(prefix)
    return best


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "advisor":  # from advisor import catalog
                yield from (f"advisor.{a.name}" for a in node.names)
            elif node.module.startswith("advisor."):
                yield node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("advisor."))


def test_every_module_has_a_layer():
    unplaced = [name for name, _ in _modules() if name != "advisor" and layer_of(name) is None]
    assert not unplaced, f"add these to LAYERS: {unplaced}"


def test_no_module_imports_from_a_higher_layer():
    back = []
    for name, path in _modules():
        source = layer_of(name)
        if source is None:  # advisor/__init__: the public API re-exports from every layer
            continue
        for target in _imports(path):
            layer = layer_of(target)
            if layer is not None and layer > source:
                back.append(f"{name} ({LAYERS[source][0]}) imports {target} "
                            f"({LAYERS[layer][0]})")
    assert not back, "\n".join(back)


def _modules_named(node: ast.Import | ast.ImportFrom) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    return {node.module} if node.module and node.level == 0 else set()


def test_no_import_inside_a_function_repeats_the_module_s_own():
    """A lazy import keeps a heavy module off the import path; one from a module the file
    already imports at the top gains nothing."""
    repeated = []
    for name, path in _modules():
        tree = ast.parse(path.read_text())
        top = set().union(*(_modules_named(n) for n in tree.body
                            if isinstance(n, (ast.Import, ast.ImportFrom))))
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    repeated += [f"{name}:{node.lineno} {m}" for m in _modules_named(node) & top]
    assert not repeated, "\n".join(repeated)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle of `graph` (module -> modules it imports), each once, as the path
    from its first module back to it (Tarjan's strongly connected components)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
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
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_models_modules_import_no_circle():
    """advisor.perf's modules (the analytical model) import one another in one direction, lazy
    imports inside functions included: a circle (power.py needing the thermal fit that needed
    power.py's parameters) makes the import order matter and hides which module owns what."""
    graph = {name: {t for t in _imports(path) if t.startswith("advisor.perf.") and t != name}
             for name, path in _modules() if name.startswith("advisor.perf.")}
    assert not _cycles(graph), _cycles(graph)
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
