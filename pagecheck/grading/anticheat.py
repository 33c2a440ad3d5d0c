"""The static half of anti-cheat: what the submission's paged attention calls, read from its source.

The course's own rule is a source check of paged_attention (its test_paged_attention_is_course_owned): the
function's source text, decorators included, may not contain "mx.fast", "scaled_dot_product_attention" or
"gather_dense". In what a module binds `paged_attention` to (a function of that name, or the one an assignment,
a wrapper call, a lambda or an import under that name leads to, at module level or in its if/try blocks: what
inspect.getsource would read), the same text is a finding of the course's rule:

    sdpa_call     its source names mx.fast or scaled_dot_product_attention
    dense_gather  its source names gather_dense

What the course's check does not read is a finding beyond the course. Inside
those functions, and every function of the same file they call by name
(followed transitively):

    sdpa_route    a call that resolves, through the file's imports, to
                  mlx.core.fast.scaled_dot_product_attention
    dense_route   a call to a helper the course's source check names
                  (COURSE_DENSE_HELPERS: gather_dense, the
                  scaled_dot_product_attention helpers)
    page_join     a call to another dense attention helper
                  (OTHER_DENSE_HELPERS), or concatenate/stack over an
                  expression that names pages

Anywhere in the submission, a third:

    project_import  an import of pagecheck's own code (PROJECT_PACKAGES): the
                    references and the fast implementation are importable
                    wherever pagecheck is installed, and wrapping them passes
                    every check. A package of that name inside the submission
                    is the student's own and does not count.

And in native code anywhere in the submission (its C/C++/CUDA/Metal sources, and the
libraries and objects its build made), where neither the scan above nor the worker's SDPA trap
(a Python attribute of mlx.core.fast) can see a call:

    sdpa_route    a source that calls fast::scaled_dot_product_attention, or any
                  other file (a library loads under any name) that names
                  mlx::core::fast::scaled_dot_product_attention
                  (its mangled name: what a direct call, or a dlsym of the literal
                  name, leaves in it), unless the file is byte for byte one of
                  the installed MLX's own (which define it). A name computed at
                  run time, or a library written out and loaded at run time, is
                  not seen.

And for a reviewer:

    unscanned     a .py file whose syntax tree the grader cannot build
                  (nesting deeper than its parser takes, where a worker
                  that raised its own recursion limit may still compile it):
                  nothing in it was read, so the scan says so
    entry_unresolved  paged_attention bound in a way the source does not
                  follow to one function (one of several, a decorator of
                  the module's own, a name bound at run time through global,
                  exec, a namespace or a module __getattr__): the course's
                  source check could not be applied to it

The scan is a heuristic for a reviewer, not a proof: it sees only the
submission's own files and direct calls. The sandboxed worker's tripwires
(tripwires.py) back it up at run time, whatever the names in the source:
sdpa_trap (any Python route to SDPA in the worker, which may start no
process) and gather_trap (gathers through MLX's and
NumPy's gathering and indexing functions, arithmetic copies and products
with a whole pool), and its audit hook refuses (and reports) pagecheck's own
code.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import inspect
import re
import tokenize
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

# Native code: what the extension's build compiles, and what it (or anything else) left compiled.
NATIVE_SOURCES = frozenset({".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp", ".hxx", ".inl", ".ipp", ".cu",
                            ".cuh", ".m", ".mm", ".metal"})  # fmt: skip
NATIVE_SDPA_CALL = re.compile(rb"fast[ \t\r\n]{0,64}::[ \t\r\n]{0,64}scaled_dot_product_attention\b")
# mlx::core::fast::scaled_dot_product_attention as the Itanium C++ ABI mangles it (_ZN3mlx4core4fast28...).
NATIVE_SDPA_SYMBOL = re.compile(rb"3mlx4core4fast28scaled_dot_product_attention")
NATIVE_CHUNK = 1 << 20
NATIVE_OVERLAP = 256  # longer than any match, so one that straddles two chunks is still found


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


def _module_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run when the module is imported: `body` and the bodies of its if, try, with, for,
    while and match statements, not those of functions or classes."""
    for node in body:
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(node, field, None)
            if isinstance(inner, list):
                yield from _module_statements(inner)
        for part in [*(getattr(node, "handlers", None) or []), *(getattr(node, "cases", None) or [])]:
            yield from _module_statements(part.body)


def _bindings(target: ast.expr, value: ast.expr | None) -> Iterator[tuple[str, ast.expr | None]]:
    """(name, the expression it is bound to, None where unknown) for an assignment's target."""
    if isinstance(target, ast.Name):
        yield target.id, value
    elif isinstance(target, (ast.Tuple, ast.List)):
        values = value.elts if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) else None
        for i, element in enumerate(target.elts):
            yield from _bindings(element, values[i] if values is not None else None)


@dataclass
class _Entry:
    """What a module binds its entry names to: the nodes whose source the course's check reads (a function or
    class, a maker a call goes through, a lambda's statement), and what the grader cannot follow (a binding whose
    function the source alone does not name: one of several, or one stored at run time), said in words."""

    nodes: list[ast.AST]
    unresolved: list[str]


def _is_namespace(node: ast.expr) -> bool:
    """globals(), vars() (of no object: at module level, the module's) or sys.modules[...].__dict__: a module's
    names, written through. An object's own (vars(self), self.__dict__) is not."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id in ("globals", "vars") and not node.args
    return (isinstance(node, ast.Attribute) and node.attr == "__dict__" and isinstance(node.value, ast.Subscript)
            and isinstance(node.value.value, ast.Attribute) and node.value.value.attr == "modules")


def _module_object(node: ast.expr, modules: set[str]) -> bool:
    """sys.modules[...] or a name the file imported a module as: an object whose attributes are a module's names."""
    if isinstance(node, ast.Name):
        return node.id in modules
    return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "modules"


# Attributes through which a function takes another's source: inspect.getsource follows __wrapped__ and reads
# __code__'s file and first line.
SOURCE_ATTRIBUTES = frozenset({"__code__", "__wrapped__"})


def _stored_names(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """Names a module may come to hold, or whose source may change, other than by a module-level def, class,
    import or assignment: a global statement (a function may bind the name), a walrus, a for, with or match
    target, an attribute of the module stored (`sys.modules[__name__].x = ...`, `pkg.x = ...`), setattr with the
    name spelled out, a function's __code__ or __wrapped__ stored (or functools.update_wrapper), and "*" (any
    name) for a module-level __getattr__, for exec of the module's names, and for writes through globals(),
    vars() or a module's __dict__."""
    modules = {alias.asname or alias.name.split(".")[0]
               for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}  # fmt: skip
    module_level = {id(node) for node in _module_statements(tree.body)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            yield from ((name, node.lineno) for name in node.names)
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            yield node.target.id, node.lineno
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            yield from ((n.id, getattr(node, "lineno", 0)) for n in ast.walk(node.target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            yield from ((n.id, node.optional_vars.lineno) for n in ast.walk(node.optional_vars) if isinstance(n, ast.Name))
        elif isinstance(node, ast.MatchAs) and node.name:
            yield node.name, node.lineno
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if node.attr in SOURCE_ATTRIBUTES and isinstance(node.value, ast.Name):
                yield node.value.id, node.lineno
            elif _module_object(node.value, modules):
                yield node.attr, node.lineno
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and _is_namespace(node.value):
            key = node.slice
            yield (key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else "*"), node.lineno
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__getattr__":
            if id(node) in module_level:
                yield "*", node.lineno  # a module's __getattr__ may hand out any name
        elif isinstance(node, ast.Call):
            func = node.func.id if isinstance(node.func, ast.Name) else node.func.attr if isinstance(
                node.func, ast.Attribute) else ""
            if func == "setattr" and len(node.args) > 1:
                key = node.args[1]
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    yield key.value, node.lineno
                    if key.value in SOURCE_ATTRIBUTES and isinstance(node.args[0], ast.Name):
                        yield node.args[0].id, node.lineno
            elif func == "update_wrapper" and node.args and isinstance(node.args[0], ast.Name):
                yield node.args[0].id, node.lineno
            elif func == "exec" and (len(node.args) < 2 or _is_namespace(node.args[1])):
                yield "*", node.lineno  # exec(code) or exec(code, globals()): the module's own names
            elif func == "update" and isinstance(node.func, ast.Attribute) and _is_namespace(node.func.value):
                yield "*", node.lineno


def _decorator_problem(decorator: ast.expr, imported: set[str]) -> tuple[str | None, list[str]]:
    """(why the grader cannot say what a decorator returns, or None; names of functions whose source the course
    reads through it). A decorator imported from elsewhere (functools.lru_cache, mx.compile) returns what it
    decorates; functools.wraps(f) makes inspect.getsource read f."""
    call = decorator.func if isinstance(decorator, ast.Call) else decorator
    root = call
    while isinstance(root, ast.Attribute):
        root = root.value
    named = call.attr if isinstance(call, ast.Attribute) else call.id if isinstance(call, ast.Name) else ""
    if named == "wraps" and isinstance(decorator, ast.Call):
        return None, [a.id for a in decorator.args if isinstance(a, ast.Name)]
    if isinstance(root, ast.Name) and root.id in imported:
        return None, []
    return f"a decorator of its own ({ast.unparse(decorator)[:60]}), which may return another function", []


def _entry(tree: ast.Module, names: frozenset[str]) -> _Entry:
    """What the module-level names `names` are bound to, as inspect.getsource would find the function the name
    holds once the module ran: definitions (at module level or inside its if/try/with blocks), followed through
    assignments of a name (`paged_attention = _impl`), lambdas and calls that take or make exactly one
    module-level function (`paged_attention = wraps(_impl)(_impl)`). A binding that names several functions
    (`_a if FAST else _b`, a dict of them) or none the module defines, and any other store of the name, is
    unresolved: the source alone does not say which function runs."""
    defs: dict[str, list[ast.AST]] = {}
    values: dict[str, list[tuple[ast.stmt, ast.expr | None]]] = {}
    imported = {alias.asname or alias.name.split(".")[0]
                for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    for node in _module_statements(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for name, value in _bindings(target, node.value):
                    values.setdefault(name, []).append((node, value))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            value = node.value if isinstance(node, ast.AnnAssign) else None
            if value is not None or isinstance(node, ast.AugAssign):
                values.setdefault(node.target.id, []).append((node, value))
    found: list[ast.AST] = []
    unresolved: list[str] = []
    todo, seen = list(names), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        found.extend(defs.get(name, []))
        for node in defs.get(name, []):
            for decorator in node.decorator_list:
                problem, read_through = _decorator_problem(decorator, imported)
                todo.extend(read_through)
                if problem is not None:
                    unresolved.append(f"line {node.lineno}: {name} has {problem}")
        for statement, value in values.get(name, []):
            if isinstance(value, ast.Name):
                todo.append(value.id)
            elif isinstance(value, ast.Lambda):
                found.append(statement)
            elif isinstance(value, ast.Constant):
                continue  # a placeholder (None) that a later definition replaces, or no function at all
            else:
                named = {n.id for n in ast.walk(value) if isinstance(n, ast.Name) and n.id in defs} if value else set()
                # A call of an imported wrapper on one function, or of a maker the module defines: followed. One of
                # a callable bound by assignment (a lambda that returns another function) is not.
                callee = value.func if isinstance(value, ast.Call) else None
                while isinstance(callee, (ast.Attribute, ast.Call)):
                    callee = callee.value if isinstance(callee, ast.Attribute) else callee.func
                known = isinstance(callee, ast.Name) and (callee.id in defs or callee.id in imported)
                # Else an expression that holds one module function as a value ({"metal": _impl}["metal"]): that
                # function is what runs. Not an attribute of it (K.method: the class's source is not the method's).
                holds_one = len(named) == 1 and not isinstance(value, (ast.Call, ast.Attribute)) and all(
                    isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)) for d in defs[next(iter(named))])
                if (len(named) == 1 and known) or holds_one:
                    todo.extend(named)
                else:
                    unresolved.append(f"line {statement.lineno}: {name} is bound to an expression that names "
                                      f"{len(named)} of the module's functions")  # fmt: skip
    stored = sorted({(name, line) for name, line in _stored_names(tree) if name in seen or name == "*"})
    unresolved += [f"line {line}: " + ("a name computed at run time is bound" if name == "*" else
                                       f"{name} is bound at run time") for name, line in stored]  # fmt: skip
    return _Entry(sorted(found, key=lambda n: n.lineno), unresolved)


def _import_edges(tree: ast.Module) -> dict[str, set[str]]:
    """name -> the names it is imported as or assigned from in this module (`from .k import attend as
    paged_attention`, `paged_attention = attend`), for following an entry name across files."""
    edges: dict[str, set[str]] = {}
    for node in _module_statements(tree.body):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                edges.setdefault(alias.asname or alias.name.split(".")[0], set()).add(alias.name.rsplit(".", 1)[-1])
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for name, value in _bindings(target, node.value):
                    if isinstance(value, ast.Name):
                        edges.setdefault(name, set()).add(value.id)
    return edges


def _reachable_functions(tree: ast.Module, roots: list[ast.AST]) -> list[ast.AST]:
    """The entry's nodes (`roots`) and the module-level functions they call by name, transitively."""
    top_level = {node.name: node for node in _module_statements(tree.body)
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}  # fmt: skip
    todo = list(roots)
    seen: dict[int, ast.AST] = {}
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
        yield Finding(where, call.lineno, "sdpa_route", f"calls {name}")
    elif last in COURSE_DENSE_HELPERS:
        yield Finding(where, call.lineno, "dense_route", f"calls {name}, which works on dense K/V")
    elif last in OTHER_DENSE_HELPERS:
        yield Finding(where, call.lineno, "page_join", f"calls {name}, which works on dense K/V")
    elif last in JOINS and any(_names_pages(arg) for arg in [*call.args, *(k.value for k in call.keywords)]):
        yield Finding(where, call.lineno, "page_join", f"calls {name} over pages, building dense K/V")


# The course's source check of paged_attention: text it may not contain -> the finding.
COURSE_SOURCE_CHECK = (("mx.fast", "sdpa_call"), ("scaled_dot_product_attention", "sdpa_call"),
                       ("gather_dense", "dense_gather"))  # fmt: skip


def _source_lines(text: str) -> list[str]:
    """`text` split into lines as Python numbers them (\\n, \\r\\n and \\r): str.splitlines also breaks at
    \\f, \\v, \\x1c-\\x1e, \\x85 and \\u2028/9, which would shift every line number after one."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


MAX_UNRESOLVED = 5  # entry_unresolved findings per file


def _block_end(lines: list[str], first: int) -> int:
    """The last line of the block starting at line `first` as inspect.getsource reads it (inspect.getblock, which
    only tokenizes): past the syntax tree's end where comments indented inside the body follow its last
    statement."""
    try:
        return first - 1 + len(inspect.getblock([line + "\n" for line in lines[first - 1 :]]))
    except (SyntaxError, tokenize.TokenError, IndexError, RecursionError):
        return first


def _course_source_findings(tree: ast.Module, text: str, where: str, entry: _Entry) -> Iterator[Finding]:
    """The course's source check on what the module binds paged_attention to (`entry`): each node's lines,
    decorators included (what inspect.getsource gives), searched for COURSE_SOURCE_CHECK's words; and an
    entry_unresolved finding, for a reviewer, per binding the source does not follow."""
    lines = _source_lines(text)
    for node in entry.nodes:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        source = "\n".join(lines[first - 1 : max(node.end_lineno or node.lineno, _block_end(lines, first))])
        for kind, words in _course_words(source).items():
            yield Finding(where, node.lineno, kind, f"paged_attention's source names {' and '.join(words)}, "
                          "which the course's source check of it refuses")  # fmt: skip
    for why in entry.unresolved[:MAX_UNRESOLVED]:
        yield Finding(where, int(why.split(":")[0].removeprefix("line ")), "entry_unresolved",
                      f"{why}: the grader cannot tell from the source which function paged_attention is, so a "
                      "reviewer reads it")  # fmt: skip


def _course_words(text: str) -> dict[str, list[str]]:
    """finding kind -> the words of COURSE_SOURCE_CHECK that `text` holds."""
    named: dict[str, list[str]] = {}
    for word, kind in COURSE_SOURCE_CHECK:
        if word in text:
            named.setdefault(kind, []).append(word)
    return named


def _imported_modules(tree: ast.Module) -> Iterator[tuple[str, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node.lineno


# The largest .py file whose syntax tree the grader builds, in its own process: a tree takes some 500 times its
# source in memory (3.1 GB for a 6 MiB file; staging lets a file reach 64 MiB).
SCAN_LIMIT_BYTES = 1 << 20


def scan_source(
    source: str | bytes, where: str, own_packages: frozenset[str] = frozenset(),
    entry_names: frozenset[str] = frozenset({ENTRY_POINT}),
) -> list[Finding]:
    """Findings in one file; `own_packages` are top-level names the submission itself provides, `entry_names` the
    names paged_attention's source may be under (another file may import one as paged_attention). Bytes are
    decoded as Python decodes a module (its coding declaration, else UTF-8). A file over SCAN_LIMIT_BYTES is
    unscanned, and held to the course's source check over its whole text (no tree says where paged_attention's
    source is)."""
    if len(source) > SCAN_LIMIT_BYTES:
        text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
        findings = [Finding(where, 0, "unscanned", f"{len(source):,} bytes, over the {SCAN_LIMIT_BYTES:,} whose syntax "
                            "tree the grader builds")]  # fmt: skip
        findings += [Finding(where, 0, kind, f"the file, too large to find paged_attention's source in, names "
                             f"{' and '.join(words)}, which the course's source check refuses")  # fmt: skip
                     for kind, words in _course_words(text).items()]
        return findings
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # Python cannot compile it either: the suite reports a file that does not import
    except (RecursionError, MemoryError) as exc:  # the parser's own depth limits (MemoryError: its stack)
        return [Finding(where, 0, "unscanned", f"its syntax tree is nested too deep to build ({type(exc).__name__})")]
    aliases = _aliases(tree)
    findings: set[Finding] = set()
    text = importlib.util.decode_source(source) if isinstance(source, bytes) else source
    entry = _entry(tree, entry_names)
    findings.update(_course_source_findings(tree, text, where, entry))
    for function in _reachable_functions(tree, entry.nodes):
        for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
            findings.update(_call_findings(call, aliases, where))
    for module, line in _imported_modules(tree):
        top = module.split(".")[0]
        if top in PROJECT_PACKAGES and top not in own_packages:
            findings.add(Finding(where, line, "project_import", f"imports {module}, which is pagecheck's own code"))
    return sorted(findings)


def _native_match(path: Path, pattern: re.Pattern[bytes]) -> int | None:
    """The byte offset of the first match of `pattern` in the file, read in chunks (a built library may be large);
    None when there is none."""
    with open(path, "rb") as file:
        start, tail = 0, b""
        while chunk := file.read(NATIVE_CHUNK):
            window = tail + chunk
            found = pattern.search(window)
            if found is not None:
                return start - len(tail) + found.start()
            tail = window[-NATIVE_OVERLAP:]
            start += len(chunk)
    return None


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(NATIVE_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@functools.cache
def _installed_mlx_files() -> dict[int, frozenset[str]]:
    """Size -> SHA-256 digests of every file of the MLX package installed beside the grader. MLX's own libraries
    define the fused SDPA, so a copy of one in a submission (a virtual environment under a name staging keeps)
    names it without calling it."""
    spec = importlib.util.find_spec("mlx")
    found: dict[int, set[str]] = {}
    for location in (spec.submodule_search_locations or []) if spec else []:
        for path in Path(location).rglob("*"):
            if path.is_file() and not path.is_symlink():
                found.setdefault(path.stat().st_size, set()).add(_digest(path))
    return {size: frozenset(digests) for size, digests in found.items()}


def _is_installed_mlx_file(path: Path) -> bool:
    digests = _installed_mlx_files().get(path.stat().st_size)
    return digests is not None and _digest(path) in digests


def scan_native(path: Path, where: str) -> list[Finding]:
    """sdpa_route when a native source or binary of the submission reaches MLX's fused SDPA (module docstring);
    a file byte for byte one of the installed MLX's own is MLX, not the submission's code."""
    suffix = path.suffix.lower()
    if suffix in NATIVE_SOURCES:
        offset = _native_match(path, NATIVE_SDPA_CALL)
        if offset is not None:
            with open(path, "rb") as file:
                line = file.read(offset).count(b"\n") + 1
            return [Finding(where, line, "sdpa_route", "native code calls fast::scaled_dot_product_attention")]
    elif _native_match(path, NATIVE_SDPA_SYMBOL) is not None and not _is_installed_mlx_file(path):
        # any other file: a library loads under any name
        return [Finding(where, 0, "sdpa_route", "a compiled file names mlx::core::fast::scaled_dot_product_attention")]
    return []


def _top_level_names(directory: Path) -> frozenset[str]:
    return frozenset(p.stem if p.suffix == ".py" else p.name for p in directory.iterdir() if p.suffix == ".py" or p.is_dir())


def _entry_names(paths: list[Path]) -> frozenset[str]:
    """paged_attention and every name some file imports or assigns it from (`from .kernels import attend as
    paged_attention`, followed through further such links in any file): the names whose definitions are its
    source. Each file is parsed once; only its links are kept."""
    edges: dict[str, set[str]] = {}
    for path in paths:
        if path.stat().st_size > SCAN_LIMIT_BYTES:
            continue
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for name, targets in _import_edges(tree).items():
            edges.setdefault(name, set()).update(targets)
    names, todo = {ENTRY_POINT}, [ENTRY_POINT]
    while todo:
        for target in edges.get(todo.pop(), ()):
            if target not in names:
                names.add(target)
                todo.append(target)
    return frozenset(names)


def scan_submission(root: Path, relative_to: Path, import_root: Path) -> list[Finding]:
    """Findings in every .py file of a staged submission (a file or a directory tree), and in its native sources
    and binaries (after its build), paths relative_to.

    `import_root` is the directory the subject is imported from (src/ of a checkout).
    """
    own = _top_level_names(import_root)
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    entry_names = _entry_names([path for path in files if path.suffix == ".py"])
    findings: list[Finding] = []
    for path in files:
        # Printable: a file name need not be UTF-8, and the name ends up in feedback and grades.
        where = path.relative_to(relative_to).as_posix().encode("utf-8", "replace").decode("utf-8")
        if path.suffix == ".py":
            findings.extend(scan_source(path.read_bytes(), where, own, entry_names))
        else:
            findings.extend(scan_native(path, where))
    return findings
