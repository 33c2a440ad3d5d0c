"""How pagecheck starts a Python child that runs one of its modules: `python -m MODULE`, without the current
folder in front of the standard library.

`python -m` (and `-c`) put the current folder first on sys.path, so a student's random.py or json.py there
would stand in for the standard library's in the child. The child started here drops that entry before
anything is imported and puts the folder last instead, so that a module subject there still resolves; or, for a
process that must import nothing from the folder (the grader, started among the submissions), leaves it out.
"""

from __future__ import annotations

import sys

# Imported before the folder joins sys.path: a namespace package (mlx) gives way to a regular package of its name
# anywhere on sys.path, last place included, so a folder named mlx there would stand in for MLX.
NAMESPACE_MODULES = ("mlx.core",)
# argv[1] is "last" or "out" (the current folder last on sys.path, or left out), argv[2] the module; the rest are
# its arguments, as `python -m MODULE ARGS` would see them.
_LAUNCH = (
    "import importlib, os, runpy, sys\n"
    "here = os.getcwd()\n"
    "sys.path[:] = [p for p in sys.path if p not in ('', here)]\n"
    "if sys.argv.pop(1) == 'last':\n"
    f"    for name in {NAMESPACE_MODULES!r}:\n"
    "        try:\n"
    "            importlib.import_module(name)\n"
    "        except ImportError:\n"
    "            pass\n"
    "    sys.path.append(here)\n"
    "module = sys.argv.pop(1)\n"
    "sys.argv[0] = module\n"
    "runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
)


def module_command(module: str, *args: str, folder: bool = True) -> list[str]:
    """The command line that runs `module` as `python -m` would, with the current folder last on sys.path (or,
    without `folder`, not on it at all)."""
    return [sys.executable, "-c", _LAUNCH, "last" if folder else "out", module, *args]
