"""The package's modules stand in layers and import only downwards (../shared/STYLE.md): no
module imports one that imports it back, at module level or inside a function."""

import ast
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
    # depth-first search for a back edge: the first cycle found is named
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph.get(m, ())):
            assert state.get(n) != 1, f"import cycle: {' -> '.join([*path[path.index(n) :], n])}"
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
