"""How pagecheck starts a Python child that runs one of its modules: `python -m MODULE`, without the current
folder in front of the standard library.

`python -m` (and `-c`) put the current folder first on sys.path, so a student's random.py or json.py there
would stand in for the standard library's in the child. The child started here drops that entry before
anything is imported and puts the folder last instead, so that a module subject there still resolves.
"""

from __future__ import annotations

import sys

# argv[1] is the module; the rest are its arguments, as `python -m MODULE ARGS` would see them.
_LAUNCH = (
    "import os, runpy, sys\n"
    "here = os.getcwd()\n"
    "sys.path[:] = [p for p in sys.path if p not in ('', here)] + [here]\n"
    "module = sys.argv.pop(1)\n"
    "sys.argv[0] = module\n"
    "runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
)


def module_command(module: str, *args: str) -> list[str]:
    """The command line that runs `module` as `python -m` would, with the current folder last on sys.path."""
    return [sys.executable, "-c", _LAUNCH, module, *args]
