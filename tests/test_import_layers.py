"""The import contract: pagecheck's layers import downward only, and the suite uses the reference alone.

Every `import` and `from ... import` in the package's source (functions included) is read with `ast`, so
a lazy import inside a hook counts as much as one at the top. A module may import its own layer and the
layers it is allowed; anything else is a violation, named with its file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Each layer: its folder in the repository, and the layers it may import (besides itself).
# reference <- impl <- serving; the suite (invariants) uses reference only; the tools above use anything
# below them, and commands/cli sit on top.
LAYERS: dict[str, tuple[str, frozenset[str]]] = {
    "pagecheck.reference": ("reference", frozenset()),
    "pagecheck.ext": ("ext", frozenset()),
    "pagecheck.impl": ("impl", frozenset({"pagecheck.reference", "pagecheck.ext"})),
    "pagecheck.serving": ("serving", frozenset({"pagecheck.reference", "pagecheck.ext", "pagecheck.impl"})),
    "pagecheck.invariants": ("invariants", frozenset({"pagecheck.reference"})),
}
BELOW_TOOLS = frozenset(LAYERS)
UTILITIES = frozenset({"pagecheck.arg_types", "pagecheck.device", "pagecheck.environment", "pagecheck.exit_codes", "pagecheck.input_files",
                       "pagecheck.progress", "pagecheck.python_child"})
TOOLS: dict[str, tuple[str, frozenset[str]]] = {
    "pagecheck.bench": ("pagecheck/bench", BELOW_TOOLS | UTILITIES),
    "pagecheck.gpu": ("pagecheck/gpu", BELOW_TOOLS | UTILITIES),
    "pagecheck.reports": ("reports", BELOW_TOOLS | UTILITIES | {"pagecheck.bench"}),
    "pagecheck.grading": ("pagecheck/grading", BELOW_TOOLS | UTILITIES | {"pagecheck.reports"}),
}
TOP = frozenset({"pagecheck.commands", "pagecheck.cli", "pagecheck.supervisor"})
# The utilities import nothing of pagecheck but the extension's build facts.
UTILITY_IMPORTS = frozenset({"pagecheck.ext"})
OLD_TOP_LEVEL = ("reference", "impl", "ext", "invariants", "serving", "reports")


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every absolute import in a file; `from pagecheck import x` counts as pagecheck.x."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "pagecheck":
                found += [(node.lineno, f"pagecheck.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
    return found


def layer_of(module: str, layers: dict[str, tuple[str, frozenset[str]]] | None = None) -> str | None:
    for name in (layers or {**LAYERS, **TOOLS}):
        if module == name or module.startswith(name + "."):
            return name
    if module in UTILITIES or module in TOP or any(module.startswith(t + ".") for t in TOP):
        return module.split(".")[0] + "." + module.split(".")[1]
    return None


def violations(name: str, folder: str, allowed: frozenset[str]) -> list[str]:
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for line, module in imported_modules(path):
            where = f"{path.relative_to(ROOT)}:{line}"
            if module.split(".")[0] in OLD_TOP_LEVEL:
                found.append(f"{where} imports {module}: the layers are pagecheck.<name> now")
                continue
            if not module.startswith("pagecheck"):
                continue
            target = layer_of(module)
            if target != name and target not in allowed:
                found.append(f"{where}: {name} imports {module} ({target or 'the package root'})")
    return found


@pytest.mark.parametrize("name", [*LAYERS, *TOOLS])
def test_layer_imports_only_what_lies_below(name: str) -> None:
    folder, allowed = {**LAYERS, **TOOLS}[name]
    assert violations(name, folder, allowed) == []


def test_utilities_import_nothing_above_them() -> None:
    found = []
    for module in sorted(UTILITIES):
        path = ROOT / (module.replace(".", "/") + ".py")
        found += [f"{path.name}:{line} imports {target}" for line, target in imported_modules(path)
                  if target.startswith("pagecheck") and target not in UTILITY_IMPORTS and target not in UTILITIES]
    assert found == []


def test_the_contract_catches_an_upward_import(tmp_path: Path) -> None:
    # The checker itself: a reference module that reaches up into impl is reported.
    module = tmp_path / "leak.py"
    module.write_text("def f():\n    from pagecheck.impl import attention\n    import invariants\n")
    assert imported_modules(module) == [(2, "pagecheck.impl"), (3, "invariants")]
    assert layer_of("pagecheck.impl.attention") == "pagecheck.impl"
    assert "pagecheck.impl" not in LAYERS["pagecheck.reference"][1]


def test_every_package_folder_is_a_declared_layer() -> None:
    declared = {folder for folder, _ in [*LAYERS.values(), *TOOLS.values()]} | {"pagecheck/commands"}
    packages = {str(p.parent.relative_to(ROOT)) for p in ROOT.glob("*/__init__.py")}
    packages |= {str(p.parent.relative_to(ROOT)) for p in ROOT.glob("pagecheck/*/__init__.py")}
    packages -= {"tests", "pagecheck"}
    assert packages <= declared, packages - declared


def test_installing_adds_one_import_name() -> None:
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {package.split(".")[0] for package in setuptools["packages"]} == {"pagecheck"}
    assert all(name.startswith("pagecheck.") for name in setuptools["package-dir"])


def test_data_files_ship_from_their_own_listed_packages() -> None:
    """A folder of data files inside a package (the kernels, the probes, the report schemas) is listed as a
    package of its own, with patterns of its own: setuptools warns at every install about a pattern that
    reaches into a folder it was not told of."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages, mapped = set(setuptools["packages"]), setuptools["package-dir"]

    def folder(package: str) -> Path:
        if package in mapped:
            return ROOT / mapped[package]
        parent, _, name = package.rpartition(".")
        return folder(parent) / name if parent else ROOT / name

    assert all(folder(package).is_dir() for package in packages)
    for package, patterns in setuptools["package-data"].items():
        assert package in packages, package
        assert not [pattern for pattern in patterns if "/" in pattern], (package, patterns)
        assert all(any(folder(package).glob(pattern)) for pattern in patterns), (package, patterns)
