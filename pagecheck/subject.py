"""Loading a subject: the implementation that pagecheck checks, reports on and grades.

A spec names where the subject's API lives:

    impl                 this project's fast implementation (impl/)
    reference            the float64 oracle behind the same API
    some.module          any importable module exposing the names at top level
    path/to/file.py      a single file exposing the names at top level
    tiny-llm:PATH        a tiny-llm checkout: the package is imported from PATH/src
    sandbox:SPEC         SPEC loaded in a sandboxed worker process (pagecheck/grading/remote_subject.py)

A subject may lack names (a Week 3 learner may not have written
BatchingKvCache yet); each missing name keeps the reason it is missing, so a
check that needs it can be skipped saying why. A spec that cannot be resolved
at all, or a module that raises while importing, is a SubjectError.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

# The subject API: every check asks for one of these by name.
API_NAMES = ("paged_attention", "TinyKvPagedPool", "TinyKvPagedCache", "BatchingKvCache")

# Where tiny-llm keeps each name; this project's impl/ mirrors the same layout.
PACKAGE_MODULES = {
    "paged_attention": "attention",
    "TinyKvPagedPool": "paged_kv_cache",
    "TinyKvPagedCache": "paged_kv_cache",
    "BatchingKvCache": "kv_cache",
}

TINY_LLM_PREFIX = "tiny-llm:"
SANDBOX_PREFIX = "sandbox:"
SPEC_HELP = "impl, reference, a dotted module name, a path to a .py file, tiny-llm:PATH, or sandbox:SPEC"


class SubjectError(ValueError):
    """The spec names no loadable subject."""


@dataclass(frozen=True)
class Subject:
    spec: str
    origin: str  # the module file or checkout the names came from
    names: dict[str, Any] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # name -> why it is absent

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
        return text


def load_subject(spec: str) -> Subject:
    """Resolve a spec (see the module docstring) to a Subject, or raise SubjectError."""
    if not isinstance(spec, str) or not spec.strip():
        raise SubjectError(f"subject spec={spec!r} is empty; use {SPEC_HELP}")
    spec = spec.strip()
    if spec == "impl":
        return _from_package(spec, "impl", top_level_too=True)
    if spec == "reference":
        return _from_modules(spec, [_import(spec, "reference.subject")])
    if spec.startswith(TINY_LLM_PREFIX):
        return _from_tiny_llm(spec, spec[len(TINY_LLM_PREFIX) :])
    if spec.startswith(SANDBOX_PREFIX):
        # Imported here: this module stays standard-library only, since the worker runs it too.
        from pagecheck.grading.remote_subject import load_sandbox_subject

        return load_sandbox_subject(spec)
    if spec.endswith(".py") or "/" in spec or "\\" in spec:
        return _from_modules(spec, [_import_file(spec)])
    if all(part.isidentifier() for part in spec.split(".")):
        return _from_modules(spec, [_import(spec, spec)])
    raise SubjectError(f"subject spec={spec!r} is not one of: {SPEC_HELP}")


def _import(spec: str, module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise SubjectError(f"subject spec={spec!r}: no module named {exc.name!r}") from exc
        raise SubjectError(f"subject spec={spec!r}: importing {module_name} failed: {exc!r}") from exc
    except Exception as exc:
        raise SubjectError(f"subject spec={spec!r}: importing {module_name} failed: {exc!r}") from exc


def _import_file(spec: str) -> ModuleType:
    path = Path(spec).expanduser().resolve()
    if path.suffix != ".py" or not path.is_file():
        raise SubjectError(f"subject spec={spec!r}: {path} is not an existing .py file")
    # A file-specific module name, registered in sys.modules, lets dataclasses and pickling find it.
    module_name = f"pagecheck_subject_{path.stem}_{zlib.crc32(str(path).encode()):08x}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise SubjectError(f"subject spec={spec!r}: {path} cannot be imported")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise SubjectError(f"subject spec={spec!r}: importing {path} failed: {exc!r}") from exc
    return module


def _from_modules(spec: str, modules: list[ModuleType], absent: dict[str, str] | None = None) -> Subject:
    names: dict[str, Any] = {}
    missing: dict[str, str] = {}
    for name in API_NAMES:
        found = next((getattr(m, name) for m in modules if hasattr(m, name)), None)
        if found is not None:
            names[name] = found
        else:
            where = ", ".join(m.__name__ for m in modules) or "no module"
            missing[name] = (absent or {}).get(name, f"not defined in {where}")
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
    source = Path(checkout).expanduser().resolve() / "src"
    if not (source / "tiny_llm" / "__init__.py").is_file():
        raise SubjectError(f"subject spec={spec!r}: {source / 'tiny_llm'} is not a tiny_llm package")
    loaded = sys.modules.get("tiny_llm")
    if loaded is not None and Path(loaded.__file__ or "").resolve().parent != source / "tiny_llm":
        raise SubjectError(f"subject spec={spec!r}: another tiny_llm is already imported from {loaded.__file__}")
    if str(source) not in sys.path:
        sys.path.insert(0, str(source))
    return _from_package(spec, "tiny_llm", top_level_too=False)
