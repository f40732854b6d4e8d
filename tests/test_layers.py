"""The package's modules stand in layers and import only downwards (../shared/STYLE.md): no
module imports one that imports it back, at module level or inside a function."""

import ast
import re
from pathlib import Path

import ridgeline

PACKAGE = Path(ridgeline.__file__).parent


def _imports() -> dict[str, set[str]]:
    """Each module's imports of its siblings (``from . import x``, ``from .x import y``)."""
    # the package's modules: its .py files and the compiled core (_core.abi3.so)
    mods = {p.name.split(".")[0] for p in PACKAGE.iterdir() if p.suffix in (".py", ".so", ".pyd")}
    out: dict[str, set[str]] = {}
    for p in sorted(PACKAGE.glob("*.py")):
        found = set()
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    found.add(node.module.split(".")[0])
                else:  # a name that is not a sibling module comes from the package's __init__
                    found |= {a.name if a.name in mods else "__init__" for a in node.names}
        out[p.stem] = found & mods
    return out


def test_no_module_imports_one_that_imports_it_back():
    graph = _imports()
    assert len(graph) > 15 and "runtimes" in graph["estimate"]
    _assert_acyclic(graph, "import cycle")


def _assert_acyclic(graph: dict[str, set[str]], what: str) -> None:
    """A depth-first search for a back edge: the first cycle found is named."""
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph.get(m, ())):
            assert state.get(n) != 1, f"{what}: {' -> '.join([*path[path.index(n) :], n])}"
            if n not in state:
                visit(n, [*path, n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def test_the_package_itself_is_imported_by_no_module():
    # `from . import __version__` made the package's __init__ a dependency of the layers below it
    graph = _imports()
    assert all("__init__" not in deps for m, deps in graph.items() if m != "__init__")


RUST_SRC = Path(__file__).resolve().parents[1] / "rust" / "src"


def _rust_imports() -> dict[str, set[str]]:
    """Each top-level module of rust/src (a file, or a folder with its file) and the others its
    non-test code names (``crate::x``): a module's ``#[cfg(test)]`` tail and its tests.rs files are
    left out (a test may use a layer above the code it tests)."""
    mods = {p.stem for p in RUST_SRC.glob("*.rs")} | {p.name for p in RUST_SRC.iterdir() if p.is_dir()}
    mods.discard("lib")
    out: dict[str, set[str]] = {m: set() for m in mods}
    for p in sorted(RUST_SRC.rglob("*.rs")):
        top = p.relative_to(RUST_SRC).parts[0].removesuffix(".rs")
        if top == "lib" or p.name == "tests.rs":
            continue
        text = p.read_text()
        cut = text.find("#[cfg(test)]")
        text = text if cut < 0 else text[:cut]
        out[top] |= {m for m in re.findall(r"crate::(\w+)", text) if m in mods and m != top}
    return out


def test_no_rust_module_uses_one_that_uses_it_back():
    # engine, graph, model, params, plan, power and roofline imported each other in one circle
    # (issue 43): limits, the prefill schedule and the parameter count now sit where the layers allow
    graph = _rust_imports()
    assert len(graph) > 15 and "limits" in graph["plan"] and "schedule" in graph["plan"]
    assert "engine" not in graph["plan"] and "plan" not in graph["model"]
    _assert_acyclic(graph, "rust module cycle")
