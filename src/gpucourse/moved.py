"""Names that moved, still answered for at their old address.

The figures, tables and results readers of the theory chapters used to live
beside the models they draw (``gpucourse.hpc.plot_amdahl``); they now live in
``gpucourse.chapters``, one module per chapter, which imports the models. The
old addresses must keep working, for the solutions, the exercises and any
student code that says ``hpc.plot_amdahl(...)``. But if ``gpucourse.hpc``
imported ``gpucourse.chapters.hpc`` at the top, and that module imports the
models from ``gpucourse.hpc``, the two would import each other.

So a model package does not import its chapter module. It hands Python a
module-level ``__getattr__`` (PEP 562) made here, which is called only for a
name the package does not hold: the first time someone asks for
``hpc.plot_amdahl``, the chapter module is imported and its function returned.
Importing the models alone still imports no chapter module, and no matplotlib.

A package split into modules by topic also keeps the address its functions
are known by: ``publish`` gives each function the package's name as its
``__module__``, so ``gpucourse.collectives.fit_alpha_beta`` says it belongs
to ``gpucourse.collectives`` (as NumPy's functions say ``numpy``), which is
what the grader prints when an answer calls it.
"""

from __future__ import annotations

import importlib
import types


def served_from(old_module, new_module, names):
    """A module ``__getattr__`` for `old_module` that answers each of `names`
    with the attribute of the same name in `new_module`, imported on first use,
    and raises the usual AttributeError for any other name."""
    names = frozenset(names)

    def __getattr__(name):
        if name in names:
            return getattr(importlib.import_module(new_module), name)
        raise AttributeError(f"module {old_module!r} has no attribute {name!r}")

    return __getattr__


def publish(package, namespace):
    """Give every function in `namespace` (a package's globals) that was defined
    in one of `package`'s own modules the package's name as its ``__module__``.
    Each of them is importable from the package under the same name, so
    pickling (which the process workers need) still finds it."""
    for name, value in namespace.items():
        if (isinstance(value, types.FunctionType) and value.__name__ == name
                and value.__module__.startswith(package + ".")):
            value.__module__ = package
