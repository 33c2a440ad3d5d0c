"""The static half of anti-cheat: what the submission's paged attention calls, read from its source.

Inside every function named `paged_attention`, and every function of the same
file it calls by name (followed transitively), three things are findings:

    sdpa_call     a call that resolves, through the file's imports, to
                  mlx.core.fast.scaled_dot_product_attention
    dense_gather  a call to a helper the course's own source check forbids in
                  paged_attention (COURSE_DENSE_HELPERS: gather_dense, the
                  scaled_dot_product_attention helpers)
    page_join     beyond the course: a call to another dense attention helper
                  (OTHER_DENSE_HELPERS), or concatenate/stack over an
                  expression that names pages

Anywhere in the submission, a third:

    project_import  an import of pagecheck's own code (PROJECT_PACKAGES): the
                    references and the fast implementation are importable
                    wherever pagecheck is installed, and wrapping them passes
                    every check. A package of that name inside the submission
                    is the student's own and does not count.

And for a reviewer:

    unscanned     a .py file whose syntax tree the grader cannot build
                  (nesting deeper than its parser takes, where a worker
                  that raised its own recursion limit may still compile it):
                  nothing in it was read, so the scan says so

The scan is a heuristic for a reviewer, not a proof: it sees only the
submission's own files and direct calls. The sandboxed worker's tripwires
(tripwires.py) back it up at run time, whatever the names in the source:
sdpa_trap (any route to SDPA) and gather_trap (gathers through MLX's and
NumPy's gathering and indexing functions, arithmetic copies and products
with a whole pool), and its audit hook refuses (and reports) pagecheck's own
code.
"""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

ENTRY_POINT = "paged_attention"
SDPA = "mlx.core.fast.scaled_dot_product_attention"
COURSE_DENSE_HELPERS = frozenset(
    {"gather_dense", "scaled_dot_product_attention_simple", "scaled_dot_product_attention_grouped"}
)
OTHER_DENSE_HELPERS = frozenset({"dense_attention"})
JOINS = frozenset({"concatenate", "stack", "vstack", "hstack"})
PROJECT_PACKAGES = frozenset({"pagecheck"})

Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True, order=True)
class Finding:
    file: str  # relative to where the student runs commands from
    line: int
    kind: str
    detail: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> the dotted name it was imported as, for every import in the file."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    names[head] = head
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """`a.b.c` with `a` resolved through the imports, or None for anything but names and attributes. A loop, not
    recursion: a chain of attributes may be as deep as the parser takes, past Python's recursion limit."""
    attributes = []
    while isinstance(node, ast.Attribute):
        attributes.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([aliases.get(node.id, node.id), *reversed(attributes)])


def _names_pages(node: ast.AST) -> bool:
    for inner in ast.walk(node):
        name = inner.id if isinstance(inner, ast.Name) else inner.attr if isinstance(inner, ast.Attribute) else ""
        if "page" in name.lower():
            return True
    return False


def _reachable_functions(tree: ast.Module) -> list[Function]:
    """paged_attention definitions and the module-level functions they call by name, transitively."""
    top_level = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    todo = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == ENTRY_POINT]
    seen: dict[int, Function] = {}
    while todo:
        function = todo.pop()
        if id(function) in seen:
            continue
        seen[id(function)] = function
        for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
            if isinstance(call.func, ast.Name) and call.func.id in top_level:
                todo.append(top_level[call.func.id])
    return sorted(seen.values(), key=lambda f: f.lineno)


def _call_findings(call: ast.Call, aliases: dict[str, str], where: str) -> Iterator[Finding]:
    name = _dotted(call.func, aliases)
    if name is None:
        return
    last = name.rsplit(".", 1)[-1]
    if name == SDPA or name.endswith(".fast.scaled_dot_product_attention"):
        yield Finding(where, call.lineno, "sdpa_call", f"calls {name}")
    elif last in COURSE_DENSE_HELPERS:
        yield Finding(where, call.lineno, "dense_gather", f"calls {name}, which works on dense K/V")
    elif last in OTHER_DENSE_HELPERS:
        yield Finding(where, call.lineno, "page_join", f"calls {name}, which works on dense K/V")
    elif last in JOINS and any(_names_pages(arg) for arg in [*call.args, *(k.value for k in call.keywords)]):
        yield Finding(where, call.lineno, "page_join", f"calls {name} over pages, building dense K/V")


def _imported_modules(tree: ast.Module) -> Iterator[tuple[str, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node.lineno


def scan_source(source: str | bytes, where: str, own_packages: frozenset[str] = frozenset()) -> list[Finding]:
    """Findings in one file; `own_packages` are top-level names the submission itself provides. Bytes are
    decoded as Python decodes a module (its coding declaration, else UTF-8)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # Python cannot compile it either: the suite reports a file that does not import
    except (RecursionError, MemoryError) as exc:  # the parser's own depth limits (MemoryError: its stack)
        return [Finding(where, 0, "unscanned", f"its syntax tree is nested too deep to build ({type(exc).__name__})")]
    aliases = _aliases(tree)
    findings: set[Finding] = set()
    for function in _reachable_functions(tree):
        for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
            findings.update(_call_findings(call, aliases, where))
    for module, line in _imported_modules(tree):
        top = module.split(".")[0]
        if top in PROJECT_PACKAGES and top not in own_packages:
            findings.add(Finding(where, line, "project_import", f"imports {module}, which is pagecheck's own code"))
    return sorted(findings)


def _top_level_names(directory: Path) -> frozenset[str]:
    return frozenset(p.stem if p.suffix == ".py" else p.name for p in directory.iterdir() if p.suffix == ".py" or p.is_dir())


def scan_submission(root: Path, relative_to: Path, import_root: Path) -> list[Finding]:
    """Findings in every .py file of a staged submission (a file or a directory tree), paths relative_to.

    `import_root` is the directory the subject is imported from (src/ of a checkout).
    """
    own = _top_level_names(import_root)
    files = [root] if root.is_file() else sorted(root.rglob("*.py"))
    findings: list[Finding] = []
    for path in files:
        # Printable: a file name need not be UTF-8, and the name ends up in feedback and grades.
        where = path.relative_to(relative_to).as_posix().encode("utf-8", "replace").decode("utf-8")
        findings.extend(scan_source(path.read_bytes(), where, own))
    return findings
