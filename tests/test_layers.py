"""The package stands in layers and imports only downwards (../shared/STYLE.md): no module imports
one that imports it back, at module level or inside a function; each subpackage imports only those
in the layers below it; and no name private by its leading underscore is imported across packages."""

import ast
import re
from pathlib import Path

import ridgeline

PACKAGE = Path(ridgeline.__file__).parent

#: The layers, lowest first: a module may import from its own layer's units and those below. The
#: base layer is errors and data access, plus the name parser both models and the catalog read.
LAYERS = (
    {"errors", "_core", "_data", "_io", "_checks", "_fmt", "_version", "names"},
    {"models"},
    {"catalog"},
    {"engine"},
    {"sweeps"},
    {"serving"},
    {"calibration"},
    {"recommend", "snapshot", "planner", "launch"},
    {"plot"},
    {"cli"},
    {"__init__"},
)
BASE = LAYERS[0]


def _modules() -> dict[str, Path]:
    """Every module by its dotted name under the package (``engine.estimate``, ``cli`` for a
    package's ``__init__``), and the compiled core."""
    mods = {"_core": PACKAGE}
    for p in sorted(PACKAGE.rglob("*.py")):
        parts = p.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


def _imports() -> dict[str, set[tuple[str, str]]]:
    """Each module's imports of the package's own modules, as (module, name imported): a
    ``from . import x`` of a module gives (x, ""), a name from a package's ``__init__`` gives
    (that package, name)."""
    mods = _modules()
    out: dict[str, set[tuple[str, str]]] = {}
    for name, p in mods.items():
        if name == "_core":
            continue
        here = name.split(".") if p.name == "__init__.py" else name.split(".")[:-1]
        if name == "__init__":
            here = []
        found: set[tuple[str, str]] = set()
        for node in ast.walk(ast.parse(p.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level >= 1):
                continue
            base = here[: len(here) - (node.level - 1)]
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            for a in node.names:
                sub = f"{target}.{a.name}" if target else a.name
                if sub in mods:
                    found.add((sub, ""))
                else:
                    found.add((target or "__init__", a.name))
        out[name] = found
    return out


def _unit(module: str) -> str:
    """The layer unit a module belongs to: its top-level subpackage or module."""
    return module.split(".")[0]


def _layer(module: str) -> int:
    return next(i for i, units in enumerate(LAYERS) if _unit(module) in units)


def test_no_module_imports_one_that_imports_it_back():
    graph = {m: {t for t, _ in deps} for m, deps in _imports().items()}
    assert len(graph) > 30 and "engine.runtimes" in graph["engine.estimate"]
    _assert_acyclic(graph, "import cycle")


def test_every_package_imports_only_its_layer_and_those_below():
    imports = _imports()
    assert {_unit(m) for m in imports} | {"_core"} == set().union(*LAYERS)
    upward = sorted(
        f"{m} imports {t} (layer {_layer(t)} above {_layer(m)})"
        for m, deps in imports.items()
        for t, _ in deps
        if _layer(t) > _layer(m)
    )
    assert not upward, upward


def test_no_private_name_crosses_a_package():
    # a name another package needs is its package's public name (the base layer's modules
    # _data, _io, _checks, _fmt and _version are the whole package's own, so their module names
    # are allowed; the names imported from them are not, when private)
    crossing = sorted(
        f"{m} imports {t}.{name}" if name else f"{m} imports module {t}"
        for m, deps in _imports().items()
        for t, name in deps
        if _unit(t) != _unit(m)
        and (
            (name.startswith("_") and name != "__version__")
            or (not name and t.split(".")[-1].startswith("_") and _unit(t) not in BASE)
        )
    )
    assert not crossing, crossing


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
    assert all(t != "__init__" for m, deps in _imports().items() if m != "__init__" for t, _ in deps)


def test_no_file_over_800_lines_and_no_function_over_120():
    # the sizes a reader can hold (issue 43): a file that grows past them is cut by concept
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50
    long_files = [f"{p.relative_to(PACKAGE)}: {n}" for p in files if (n := p.read_text().count("\n")) > 800]
    long_functions = [
        f"{p.relative_to(PACKAGE)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1}"
        for p in files
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 120
    ]
    assert long_files == [] and long_functions == [], (long_files, long_functions)


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
