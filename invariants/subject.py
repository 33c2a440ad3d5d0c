"""Loading a subject: the implementation that pagecheck checks, reports on and grades.

A spec names where the subject's API lives:

    impl                 this project's fast implementation (impl/)
    reference            the float64 oracle behind the same API
    some.module          any importable module exposing the names at top level
    path/to/file.py      a single file exposing the names at top level
    sandbox:SPEC         SPEC loaded in a sandboxed worker process (pagecheck/grading/remote_subject.py)
    tiny-llm:PATH        a tiny-llm checkout: its Week 3 modules are imported from PATH/src

A subject may lack names (a Week 3 learner may not have written
BatchingKvCache yet); each missing name keeps the reason it is missing, so a
check that needs it can be skipped saying why. A spec that cannot be resolved
at all, a module that raises while importing, or one that exposes none of the
names is a SubjectError.

A subject written from the course's starter keeps the starter's stubs where
the learner has not got to yet. A stub among the API's functions and methods
(API_METHODS: a body that raises NotImplementedError, or one of only a
docstring, `pass` or `...` where doing nothing cannot be right, which is
everywhere but EMPTY_ALLOWED) is replaced, in the loaded class, by one that raises
NotImplementedError("TinyKvPagedPool.__init__ not implemented ..."), so every
check that reaches it names the missing function instead of failing on a None
further on. The subject lists them in `stubs`.

This module uses the standard library only: a worker that hosts the subject
without pagecheck reuses its source.
"""

from __future__ import annotations

import ast
import errno
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import re
import reprlib
import signal
import sys
import textwrap
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

# The subject API: every check asks for one of these by name.
API_NAMES = ("paged_attention", "TinyKvPagedPool", "TinyKvPagedCache", "BatchingKvCache")

# Where tiny-llm keeps each name; this project's impl/ mirrors the same layout.
PACKAGE_MODULES = {
    "paged_attention": "attention",
    "TinyKvPagedPool": "paged_kv_cache",
    "TinyKvPagedCache": "paged_kv_cache",
    "BatchingKvCache": "kv_cache",
}

# The methods and properties of each API class the course's starter declares (and leaves as stubs).
API_METHODS = {
    "TinyKvPagedPool": (
        "__init__", "num_pages", "num_free_pages", "allocate_page", "read_page", "write_page_slice", "free_page",
    ),
    "TinyKvPagedCache": (
        "__init__", "num_pages", "gather_dense", "update_and_fetch", "block_table", "context_lens",
        "paged_metadata", "update_and_fetch_paged", "materialize", "rewind", "release",
    ),
    "BatchingKvCache": ("__init__", "update_and_fetch", "update_and_fetch_paged", "add_request", "remove_request"),
}  # fmt: skip
# Methods that may rightly do nothing (a cache whose storage needs no materializing): an empty body there
# is left to the checks; only an explicit `raise NotImplementedError` names it.
EMPTY_ALLOWED = frozenset({"TinyKvPagedCache.materialize"})

TINY_LLM_PREFIX = "tiny-llm:"
# Specs that name this project's own subjects, never a module of that name (load_subject).
BUILT_IN_SUBJECTS = ("impl", "reference")
SANDBOX_PREFIX = "sandbox:"
# A checkout's C++ extension package, built in place under src/extensions (`from extensions import tiny_llm_ext`).
TINY_LLM_EXTENSIONS = "extensions"
# What a spec may be, in words; SANDBOX_PREFIX specs only where grading's worker can run (spec_help).
SPEC_KINDS = ("impl", "reference", "a dotted module name", "a path to a .py file or a package folder", "tiny-llm:PATH")


def spec_help(sandbox: bool = True) -> str:
    """The spec kinds as one phrase, with or without sandbox:SPEC."""
    kinds = (*SPEC_KINDS, f"{SANDBOX_PREFIX}SPEC") if sandbox else SPEC_KINDS
    return ", ".join(kinds[:-1]) + ", or " + kinds[-1]


SPEC_HELP = spec_help()
# Loaders of spec prefixes that layers above the suite provide (grading registers SANDBOX_PREFIX), so the
# suite loads such a subject without importing them: register_prefix_loader.
PREFIX_LOADERS: dict[str, Callable[[str], "Subject"]] = {}


def register_prefix_loader(prefix: str, loader: Callable[[str], "Subject"]) -> None:
    """Resolve specs that start with `prefix` by `loader(spec)`."""
    if not prefix.endswith(":"):
        raise ValueError(f"prefix={prefix!r} must end with ':'")
    PREFIX_LOADERS[prefix] = loader


class UserInterrupt(KeyboardInterrupt):
    """The KeyboardInterrupt a command's signal handler raises (pagecheck.cli, for SIGINT, SIGTERM and SIGHUP):
    the user stopping the run, as opposed to a subject raising KeyboardInterrupt itself."""


def raise_if_interrupted() -> None:
    """Raise again the UserInterrupt that the command's handler raised and a subject swallowed (it is raised in
    whatever frame runs, often the subject's, whose bare `except:` takes it): call after each call into it. The
    handler records what it raised as `pending`."""
    pending = getattr(signal.getsignal(signal.SIGINT), "pending", None)
    if pending is not None:
        raise UserInterrupt(pending)


def raise_user_interrupt(signum: int, frame: object) -> None:
    """A SIGINT handler for a process that calls a subject: Ctrl-C as a UserInterrupt."""
    raise UserInterrupt(signal.Signals(signum).name)


raise_user_interrupt.raises = UserInterrupt  # type: ignore[attr-defined]


def is_user_interrupt(exc: BaseException) -> bool:
    """Whether `exc` stops the run rather than failing the subject's call or import.

    Under a handler that raises UserInterrupt (one whose `raises` is that class), only a UserInterrupt is the
    user's: any other KeyboardInterrupt came from the subject. Where SIGINT is ignored (a run started in the
    background or under nohup), Ctrl-C raises nothing, so none is the user's. Under another handler (Python's
    own, in a pytest run or an embedding program) every KeyboardInterrupt may be Ctrl-C, and stops the run.
    """
    if not isinstance(exc, KeyboardInterrupt):
        return False
    if isinstance(exc, UserInterrupt):
        return True
    handler = signal.getsignal(signal.SIGINT)
    if handler is signal.SIG_IGN:
        return False
    return getattr(handler, "raises", None) is not UserInterrupt


class SubjectError(ValueError):
    """The spec names no loadable subject."""


@dataclass(frozen=True)
class Subject:
    spec: str
    origin: str  # the module file or checkout the names came from
    names: dict[str, Any] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # name -> why it is absent
    stubs: tuple[str, ...] = ()  # API functions left as stubs, e.g. "TinyKvPagedPool.__init__"
    # How a check makes one of the subject's methods fail: (object, method name, the call that fails, message) ->
    # a wrapper now in the method's place whose `calls` counts its calls, the `at`-th raising
    # RuntimeError(message) without calling through. None: wrapped here (invariants/calls.py).
    fail_on_call: Callable[[Any, str, int, str], Any] | None = None
    # How a check watches cache.materialize(): cache -> what it did with gather_dense and mx.eval, as plain data
    # (injection.watch_materialize). None: watched here.
    watch_materialize: Callable[[Any], dict[str, Any]] | None = None
    # How a check asks whether a method returns the same object call after call: (object, method name) -> a probe
    # whose same() says so (injection.ResultIdentity). None: probed here.
    result_identity: Callable[[Any, str], Any] | None = None
    # A subject whose calls cross a pipe (a sandboxed worker): `begin_check(name)` says a new check starts, so a
    # worker an earlier check stopped is started afresh rather than failing every later check; and
    # `call_time_limit(seconds)` bounds each call there, where an alarm here would leave the pipe mid-reply.
    # None: the subject runs in this process, and check_timeout.time_limit's alarm bounds its calls.
    begin_check: Callable[[str], None] | None = None
    call_time_limit: Callable[[float], None] | None = None

    def has(self, name: str) -> bool:
        return name in self.names

    def get(self, name: str) -> Any:
        if name not in API_NAMES:
            raise KeyError(f"{name!r} is not part of the subject API {API_NAMES}")
        if name not in self.names:
            raise AttributeError(f"subject {self.spec} has no {name}: {self.missing[name]}")
        return self.names[name]

    def describe(self) -> str:
        found = ", ".join(n for n in API_NAMES if n in self.names) or "nothing"
        text = f"subject {self.spec} ({self.origin}): {found}"
        if self.missing:
            text += "; missing " + ", ".join(f"{n} ({why})" for n, why in self.missing.items())
        if self.stubs:
            text += "; not implemented: " + ", ".join(self.stubs)
        return text


def load_subject(spec: str) -> Subject:
    """Resolve a spec (see the module docstring) to a Subject that exposes at least one API name, or raise
    SubjectError."""
    subject = _resolve(spec)
    for name, value in subject.names.items():
        if not callable(value):
            kind = "function" if name == "paged_attention" else "class"
            raise SubjectError(
                f"subject spec={spec!r} ({subject.origin}): {name}={reprlib.repr(value)} is "
                f"{type(value).__name__}, not a {kind}"
            )
    if not subject.names:
        raise SubjectError(
            f"subject spec={spec!r} ({subject.origin}) exposes none of {', '.join(API_NAMES)}: nothing to check"
        )
    return subject


def _resolve(spec: str) -> Subject:
    if not isinstance(spec, str) or not spec.strip():
        raise SubjectError(f"subject spec={spec!r} is empty; use {SPEC_HELP}")
    spec = spec.strip()
    if spec == "impl":
        return _from_package(spec, "pagecheck.impl", top_level_too=True)
    if spec == "reference":
        return _from_modules(spec, [_import(spec, "pagecheck.reference.subject")])
    if spec.startswith(TINY_LLM_PREFIX):
        return _name_stubs(_from_tiny_llm(spec, spec[len(TINY_LLM_PREFIX) :]))
    for prefix, loader in PREFIX_LOADERS.items():
        if spec.startswith(prefix):
            return loader(spec)
    if spec.startswith(SANDBOX_PREFIX):
        raise SubjectError(
            f"subject spec={spec!r}: {SANDBOX_PREFIX} subjects run in grading's sandboxed worker; "
            "load it with `-p pagecheck.grading.child_plugin`"
        )
    if spec.endswith(".py") or "/" in spec or "\\" in spec:
        return _name_stubs(_from_modules(spec, [_import_file(spec)]))
    if all(part.isidentifier() for part in spec.split(".")):
        return _name_stubs(_from_modules(spec, [_import(spec, spec)]))
    raise SubjectError(f"subject spec={spec!r} is not one of: {SPEC_HELP}")


def absolute_spec(spec: str) -> str:
    """The same subject named so that it resolves from any working directory.

    A file path or a tiny-llm checkout becomes absolute; impl, reference and
    module names are returned as they are (a module resolves through sys.path).
    """
    spec = spec.strip()
    if spec.startswith(SANDBOX_PREFIX):
        return SANDBOX_PREFIX + absolute_spec(spec[len(SANDBOX_PREFIX) :])
    if spec.startswith(TINY_LLM_PREFIX):
        return TINY_LLM_PREFIX + str(resolved(spec, spec[len(TINY_LLM_PREFIX) :]))
    if spec not in BUILT_IN_SUBJECTS and (spec.endswith(".py") or "/" in spec or "\\" in spec):
        return str(resolved(spec, spec))
    return spec


def resolved(spec: str, path: str | Path) -> Path:
    """`path` made absolute with links followed; a loop of links is a SubjectError naming the spec."""
    loop = SubjectError(f"subject spec={spec!r}: {path} is a symbolic link that leads back to itself")
    try:
        resolved = Path(path).expanduser().resolve()  # Python 3.11 and 3.12 raise RuntimeError on a loop
    except RuntimeError:
        raise loop from None
    try:
        os.stat(resolved)  # Python 3.13 returns the loop's own path
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise loop from None
    return resolved


def is_module_spec(spec: str) -> bool:
    """A dotted module name other than the built-in subjects: it resolves through sys.path."""
    return spec not in BUILT_IN_SUBJECTS and all(part.isidentifier() for part in spec.split("."))


def _import(spec: str, module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise SubjectError(f"subject spec={spec!r}: no module named {exc.name!r}") from exc
        raise SubjectError(f"subject spec={spec!r}: importing {module_name} failed: {exc!r}") from exc
    except BaseException as exc:  # a module that calls sys.exit() on import is a subject that does not load
        if is_user_interrupt(exc):
            raise
        raise SubjectError(f"subject spec={spec!r}: importing {module_name} failed: {exc!r}") from exc


def _import_file(spec: str) -> ModuleType:
    """Import a .py file the way pytest imports a test file: a file inside a package (folders with
    __init__.py) by its dotted name with the top package's parent on sys.path, so its relative and
    package imports work; a lone file under a file-specific name with its own folder on sys.path, so
    it can import its sibling modules."""
    path = resolved(spec, spec)
    if path.is_dir() and (path / "__init__.py").is_file():
        path = path / "__init__.py"  # a package's folder is the package
    elif path.is_dir():
        checkout = (path / "src" / "tiny_llm" / "__init__.py").is_file()
        hint = f"{TINY_LLM_PREFIX}{path} for a tiny-llm checkout" if checkout else "a .py file in it"
        raise SubjectError(f"subject spec={spec!r}: {path} is a folder without __init__.py, so not a package: "
                           f"name {hint}")  # fmt: skip
    if path.suffix != ".py" or not path.is_file():
        raise SubjectError(f"subject spec={spec!r}: {path} is not an existing .py file")
    packages = []
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.name.isidentifier():
        packages.insert(0, folder.name)
        folder = folder.parent
    if packages and path.stem.isidentifier():
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
        # A package's __init__.py is the package itself.
        module = _import(spec, ".".join(packages if path.stem == "__init__" else [*packages, path.stem]))
        if Path(module.__file__ or "").resolve() != path:
            raise SubjectError(f"subject spec={spec!r}: {'.'.join(packages)} resolves to {module.__file__}, not {path}")
        return module
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    # A file-specific module name, registered in sys.modules, lets dataclasses and pickling find it.
    # (A file name need not be UTF-8: its bytes go into the hash, only its safe characters into the name.)
    stem = re.sub(r"\W", "_", path.stem.encode("ascii", "replace").decode())
    module_name = f"pagecheck_subject_{stem}_{zlib.crc32(os.fsencode(path)):08x}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise SubjectError(f"subject spec={spec!r}: {path} cannot be imported")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except BaseException as exc:  # sys.exit() on import included: the subject does not load
        del sys.modules[module_name]
        if is_user_interrupt(exc):
            raise
        raise SubjectError(f"subject spec={spec!r}: importing {path} failed: {exc!r}") from exc
    return module


def _from_modules(spec: str, modules: list[ModuleType], absent: dict[str, str] | None = None) -> Subject:
    names: dict[str, Any] = {}
    missing: dict[str, str] = {}
    for name in API_NAMES:
        found, failure = None, None
        for module in modules:
            try:
                found = getattr(module, name)
            except AttributeError:
                continue
            except BaseException as exc:  # a module __getattr__ that raises: the name does not load
                if is_user_interrupt(exc):
                    raise
                failure = f"reading it from {module.__name__} raised {exc!r}"
            break
        if found is not None:
            names[name] = found
        else:
            where = ", ".join(m.__name__ for m in modules) or "no module"
            missing[name] = failure or (absent or {}).get(name, f"not defined in {where}")
    origin = ", ".join(str(getattr(m, "__file__", m.__name__)) for m in modules)
    return Subject(spec=spec, origin=origin, names=names, missing=missing)


def _from_package(spec: str, package: str, *, top_level_too: bool) -> Subject:
    """Look each name up in the package's tiny-llm-style submodule (and optionally its top level)."""
    root = _import(spec, package)
    modules: dict[str, ModuleType] = {}
    absent: dict[str, str] = {}
    for name, submodule in PACKAGE_MODULES.items():
        qualified = f"{package}.{submodule}"
        if qualified not in modules and importlib.util.find_spec(qualified) is not None:
            modules[qualified] = _import(spec, qualified)
        if qualified not in modules:
            absent[name] = f"no module {qualified}"
        elif not hasattr(modules[qualified], name):
            absent[name] = f"{qualified} defines no {name}"
    order = ([root] if top_level_too else []) + list(modules.values())
    found = _from_modules(spec, order, absent)
    origin = str(Path(root.__file__).parent) if root.__file__ else package
    return Subject(spec=spec, origin=origin, names=found.names, missing=found.missing)


def _from_tiny_llm(spec: str, checkout: str) -> Subject:
    """Import the Week 3 modules of a checkout without running its package `__init__`.

    tiny-llm's `__init__` star-imports every chapter, and some chapters import
    course-only dependencies (`mlx_lm` for the tokenizer, `model_names`, the
    agent code) that the Week 3 API never uses and a grading machine need not
    have. So the package is registered as an empty shell whose `__path__` is
    the checkout's `src/tiny_llm`, and only the modules of PACKAGE_MODULES are
    imported; their relative imports (`from .kv_cache import ...`) load just
    what they use. Nothing in the checkout is edited and no stand-in module is
    invented: a Week 3 module that itself imports a missing package is a
    SubjectError naming it.

    The checkout's `src/extensions` (no `__init__.py`: a namespace package in
    the course) is registered the same way, so `from extensions import
    tiny_llm_ext` finds the extension built in this checkout and never another
    `extensions` package that happens to be installed.
    """
    root = resolved(spec, checkout)
    if not root.is_dir():
        raise SubjectError(f"subject spec={spec!r}: {root} does not exist or is not a folder")
    source = root / "src"
    package_dir = source / "tiny_llm"
    if not (package_dir / "__init__.py").is_file():
        raise SubjectError(f"subject spec={spec!r}: {package_dir} is not a tiny_llm package")
    loaded = sys.modules.get("tiny_llm")
    if loaded is not None and Path(loaded.__file__ or "").resolve().parent != package_dir:
        raise SubjectError(f"subject spec={spec!r}: another tiny_llm is already imported from {loaded.__file__}")
    if str(source) not in sys.path:
        sys.path.insert(0, str(source))
    if loaded is None:
        _register_package_shell("tiny_llm", package_dir / "__init__.py", package_dir)
    extensions_dir = source / TINY_LLM_EXTENSIONS
    if (
        extensions_dir.is_dir()
        and not (extensions_dir / "__init__.py").exists()
        and TINY_LLM_EXTENSIONS not in sys.modules
    ):
        _register_package_shell(TINY_LLM_EXTENSIONS, None, extensions_dir)
    return _from_package(spec, "tiny_llm", top_level_too=False)


def _register_package_shell(name: str, init_file: Path | None, directory: Path) -> None:
    """Put package `name` in sys.modules with `directory` as its path, its __init__ (if any) not run."""
    if init_file is None:
        module_spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        module_spec.submodule_search_locations = [str(directory)]
    else:
        module_spec = importlib.util.spec_from_file_location(
            name, init_file, submodule_search_locations=[str(directory)]
        )
        if module_spec is None:
            raise SubjectError(f"{init_file} cannot be imported")
    sys.modules[name] = importlib.util.module_from_spec(module_spec)


def _name_stubs(subject: Subject) -> Subject:
    """Replace the subject's stub functions by ones that raise NotImplementedError naming them."""
    names = dict(subject.names)
    stubs: list[str] = []
    function = names.get("paged_attention")
    if function is not None and _is_stub(function):
        names["paged_attention"] = _raise_not_implemented("paged_attention", function)
        stubs.append("paged_attention")
    for class_name, members in API_METHODS.items():
        cls = names.get(class_name)
        if not isinstance(cls, type):
            continue
        for member in members:
            label = f"{class_name}.{member}"
            try:
                found = inspect.getattr_static(cls, member)
            except AttributeError:
                continue
            may_be_empty = label in EMPTY_ALLOWED
            if isinstance(found, property) and found.fget is not None and _is_stub(found.fget, may_be_empty):
                setattr(cls, member, property(_raise_not_implemented(label, found.fget)))
                stubs.append(label)
            elif inspect.isfunction(found) and _is_stub(found, may_be_empty):
                setattr(cls, member, _raise_not_implemented(label, found))
                stubs.append(label)
    if not stubs:
        return subject
    return Subject(spec=subject.spec, origin=subject.origin, names=names, missing=subject.missing, stubs=tuple(stubs))


def _is_stub(function: Any, may_be_empty: bool = False) -> bool:
    """True when the function's body cannot be a working implementation: `raise NotImplementedError`, or
    only a docstring, `pass` or `...` unless an empty body may be right (`may_be_empty`: EMPTY_ALLOWED)."""
    try:
        source = textwrap.dedent(inspect.getsource(function))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return False  # no readable source (a C function, a lambda in an expression): not a stub we can see
    definition = tree.body[0] if tree.body else None
    if not isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    body = list(definition.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            body = body[1:]
    if not all(_is_stub_statement(statement) for statement in body):
        return False
    return may_be_empty is False or any(isinstance(statement, ast.Raise) for statement in body)


def _is_stub_statement(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Pass):
        return True
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return statement.value.value is Ellipsis
    if isinstance(statement, ast.Raise) and statement.exc is not None:
        raised = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
        return isinstance(raised, ast.Name) and raised.id == "NotImplementedError"
    return False


def _raise_not_implemented(label: str, stub: Any) -> Any:
    code = stub.__code__
    where = f"{code.co_filename}:{code.co_firstlineno}"

    def not_implemented(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{label} not implemented (its body at {where} is a stub)")

    not_implemented.__name__ = stub.__name__
    not_implemented.__qualname__ = stub.__qualname__
    return not_implemented
