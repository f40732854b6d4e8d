"""Every ``>>>`` example in the package's docstrings runs and prints what it shows (against the
installed package, as the rest of the suite does)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest
import ridgeline

# every module of the package and its subpackages (not the compiled core, not ``python -m``'s entry)
MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(ridgeline.__path__, "ridgeline.")
    if not m.name.endswith(("_core", "__main__"))
)


def test_the_package_has_examples():
    finder = doctest.DocTestFinder()
    found = sum(len([t for t in finder.find(importlib.import_module(m)) if t.examples]) for m in MODULES)
    assert found >= 50  # about 60 examples: a module that loses its docstrings is noticed


@pytest.mark.parametrize("module", MODULES)
def test_every_example_in_the_docstrings_is_true(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0, f"{module}: {result.failed} of {result.attempted} examples failed (run it verbose)"
