"""Reading which names a function's code refers to, to fail an answer that is not the student's own.

A test cell cannot see how an answer was computed, only the function that
computed it. The function's code, though, lists every global name it reads
and every module it imports, and so does every notebook function it calls.
:func:`expect_own_work` reads them and fails a function that refers to the
course's package (or another forbidden module), directly or through the
notebook functions it calls: calling ``gpucourse.hpc.amdahl_speedup`` in
place of writing Amdahl's law earns nothing.

Week 4's collectives need a stricter reading of the same code,
:func:`referenced_names`, which also counts attribute names and strings (a
ring may not even name ``all_reduce``); it lives here beside
:func:`library_uses` because both walk the same tree of notebook functions.
The module is separate from :mod:`gpucourse.grader.expect` because it reads
code (with :mod:`dis`), not values.
"""

from __future__ import annotations

import dis
import types

from gpucourse.grader import runtime
# Captured at import, before any student code runs in the notebook.
from gpucourse.grader.captured import _isinstance

# The modules a student's answer may not call in place of doing the work.
FORBIDDEN_MODULES = ("gpucourse", "torch")


def global_names(code: types.CodeType) -> list[str]:
    """The global names a function's code reads, and the modules it imports, in
    order of first use, its nested functions included.

    Only loads of globals count: ``co_names`` also lists attribute names, so a
    function reading ``cuda.blockIdx.x`` would otherwise seem to use a
    notebook's global ``x``.
    """
    names = [instruction.argval for instruction in dis.get_instructions(code)
             if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME", "IMPORT_NAME")]
    for constant in code.co_consts:
        if _isinstance(constant, types.CodeType):
            names += global_names(constant)
    return names


def _module_of(value) -> str:
    if _isinstance(value, types.ModuleType):
        return value.__name__
    module = getattr(value, "__module__", None)
    return module if _isinstance(module, str) else ""


def _within(module: str, packages) -> bool:
    """True when ``module`` is one of ``packages`` or inside one of them."""
    return any(module == name or module.startswith(name + ".") for name in packages)


def _own_code(fn):
    """A function's code: its own, also while the run-time watch has a trampoline
    standing in for it (gpucourse.grader.runtime); None for what has none."""
    return runtime.original_code(fn) if _isinstance(fn, types.FunctionType) \
        else getattr(fn, "__code__", None)


def visible_names(fn) -> dict:
    """What a function's code can name: its module's globals, then the variables
    it captured from an enclosing function (a kernel factory's constants, a
    notebook helper's closure). A captured variable not assigned yet is left out."""
    scope = dict(getattr(fn, "__globals__", {}))
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            scope[name] = cell.cell_contents
        except ValueError:  # an empty closure cell
            pass
    return scope


def library_uses(function, forbidden=FORBIDDEN_MODULES, allowed=()) -> list[str]:
    """What ``function`` refers to in the ``forbidden`` modules, as "name (module)" strings.

    The function's own code is read (names it uses, ``import`` statements
    inside it) and so is every function of the notebook it calls, however
    deep (functions defined beside it, in the same module). ``allowed``:
    names of modules or objects (``"gpucourse.kernels.vector"``) that are
    fine to use. A simulator or GPU kernel is read through its Python
    function.
    """
    if _isinstance(forbidden, str) or _isinstance(allowed, str):
        raise ValueError("forbidden and allowed must be sequences of module names, not strings")
    found: list[str] = []
    seen: set[int] = set()

    def is_forbidden(module: str) -> bool:
        return _within(module, forbidden) and not _within(module, allowed)

    def visit(fn, path: str) -> None:
        fn = getattr(fn, "py_func", fn)
        code = _own_code(fn)
        if code is None or id(code) in seen:
            return
        seen.add(id(code))
        scope = visible_names(fn)
        for name in sorted(set(global_names(code)) | set(code.co_freevars)):
            if is_forbidden(name):  # `import gpucourse...` inside the function
                found.append(f"{path} imports {name}")
                continue
            if name not in scope:
                continue
            value = scope[name]
            module = _module_of(value)
            if module and is_forbidden(module):
                found.append(f"{path} uses {name} ({module})")
            elif module == home and (_isinstance(value, types.FunctionType)
                                     or hasattr(value, "py_func")):
                visit(value, f"{path} -> {name}")  # another function of the notebook

    home = _module_of(function)
    visit(function, getattr(function, "__name__", "the function"))
    return found


def expect_own_work(function, forbidden=FORBIDDEN_MODULES, allowed=()) -> None:
    """Fail when ``function`` (or what it calls) uses the course's package or another
    forbidden module in place of doing the work itself.

    First the names its code uses are read (the clearest message); then, for
    the rest of the notebook cell, what it runs is watched
    (:mod:`gpucourse.grader.runtime`): a name hidden from this reading
    (``importlib``, ``__import__``, ``sys.modules``, ``getattr``, ``exec``)
    still fails as the forbidden code runs."""
    module = _module_of(function)
    if _within(module, forbidden) and not _within(module, allowed):
        raise AssertionError(f"{getattr(function, '__name__', function)} comes from {module}: "
                             "write it yourself instead of importing the course's version")
    uses = library_uses(function, forbidden, allowed)
    if uses:
        raise AssertionError("your answer must do the work itself, not call the course's "
                             "package or another library: " + "; ".join(uses))
    runtime.watch(function, forbidden, allowed)


# -----------------------------------------------------------------------------
# The stricter reading, for week 4's collectives. A deliberate variant of
# library_uses above: it walks the same notebook functions, but keeps every
# name the code holds (attributes and string constants too, not only the
# globals it loads), because a ring may not even name a collective, however
# it reaches it; library_uses must not, or `cuda.blockIdx.x` would read as
# the notebook's global `x`.


def referenced_names(function) -> set[str]:
    """Every name that ``function``'s code refers to: globals, attributes,
    imports, in nested functions and comprehensions too, and in every function
    of the same module that it calls, however deep (the helpers a student
    writes beside it in the notebook). A global or captured name also brings
    in the ``__name__`` of the object it is bound to, so that an alias
    (``from torch.distributed import all_reduce as add_up``) shows its real name."""
    if not callable(function):
        raise ValueError(f"function must be a function, got {function!r}")
    home = getattr(function, "__module__", None)
    names: set[str] = set()
    seen: set[int] = set()

    def visit(fn) -> None:
        code = _own_code(fn)
        if code is None or id(code) in seen:
            return
        seen.add(id(code))
        scope = visible_names(fn)
        own = _code_names(code)
        names.update(own)
        for name in own:
            value = scope.get(name)
            if value is None or _isinstance(value, types.ModuleType):
                continue
            try:
                real_name = getattr(value, "__name__", None)
            except Exception:  # an object whose attributes misbehave
                real_name = None
            if _isinstance(real_name, str):
                names.add(real_name)
            if _isinstance(value, types.FunctionType) and value.__module__ == home:
                visit(value)

    visit(function)
    return names


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names) | set(code.co_freevars)
    # String constants that name something: getattr(dist, "all_reduce").
    for constant in code.co_consts:
        if _isinstance(constant, types.CodeType):
            names |= _code_names(constant)
        elif _isinstance(constant, str) and constant.isidentifier():
            names.add(constant)
    return names


def expect_no_names(function, names, advice: str) -> None:
    """Fail (AssertionError) when ``function`` refers to any of ``names``
    (see ``referenced_names``); ``advice`` says what to do instead."""
    if _isinstance(names, str):
        raise ValueError("names must be a collection of names, not one string")
    found = sorted(referenced_names(function) & set(names))
    if found:
        raise AssertionError(f"{getattr(function, '__name__', function)} uses "
                             f"{', '.join(found)}: {advice}")
