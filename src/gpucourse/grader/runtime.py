"""Watching what a student's function runs while the grader calls it, to fail an answer that is not its own.

The static check (:mod:`gpucourse.grader.own_work`) reads the names a
function's code uses; a name can be hidden. ``importlib.import_module("gpu"
+ "course.hpc")``, ``__import__``, ``sys.modules[...]``, ``getattr`` on a
module, ``exec`` of a string: each reaches the course's reference
implementation with no forbidden name in the code. What cannot be hidden is
that the reference then *runs*. So, once a test cell has called
``expect_own_work(f)``, this module records every Python function that runs
while ``f`` is on the stack (``sys.monitoring`` on Python 3.12 and later,
``sys.setprofile`` on 3.11), and fails the answer when code of a forbidden
package runs on its behalf: the course's package (other than the grader's
own helpers and what the exercise allows) or torch.

* **When it fails.** As the watched function returns to the grader, with an
  ``AssertionError`` that names what ran (the student's code has finished,
  so it cannot catch it), and again at every later check of the cell, in
  case the student's code switched the watching off (which is itself
  recorded as a forbidden call).
* **Kernels.** A Numba kernel launched by the student's code is seen at its
  launch: the simulator's kernel object and the GPU dispatcher both hold the
  kernel's Python function, whose code tells where it was written.
* **How long.** From ``expect_own_work`` to the end of the notebook cell
  (IPython's ``post_run_cell``; outside a notebook, until the code that
  called it returns), so the student's own cells and the other test cells
  run unwatched and pay nothing.

Only the thread that calls the function is watched. A kernel itself is not
watched as it runs (the simulator runs each CUDA thread in a thread of its
own, a GPU runs compiled code): what it may call is read from its code, and
one launched by the student's Python code is seen at its launch.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import types
import warnings

from gpucourse.grader.captured import _isinstance

# Calls that would switch the watching off; any of them on the student's behalf is a
# cheat. Those written in C by the function object, those in Python by their code.
_SWITCHES = {id(sys.setprofile): "sys.setprofile"}
_SWITCH_CODES = {id(threading.setprofile.__code__): "threading.setprofile"}
if hasattr(threading, "setprofile_all_threads"):
    _SWITCH_CODES[id(threading.setprofile_all_threads.__code__)] = \
        "threading.setprofile_all_threads"
if hasattr(sys, "monitoring"):
    for _name in ("set_events", "set_local_events", "free_tool_id", "register_callback",
                  "use_tool_id", "restart_events"):
        _SWITCHES[id(getattr(sys.monitoring, _name))] = f"sys.monitoring.{_name}"

# The grader's own modules a student's code may run (a helper a test cell passes
# in, a check called inside an answer); this module, which does the watching, is
# not one of them.
GRADER_PACKAGE = "gpucourse.grader"
THIS_MODULE = __name__
# The course's fixes to Numba's simulator (a barrier, a shared array's creation):
# a launch on the simulator runs them as it runs Numba's own code.
SIMULATOR_MODULE = "gpucourse.simulator"
# The methods of Numba's kernel objects that a launch goes through, simulator and GPU.
_LAUNCH_METHODS = frozenset({"__call__", "__getitem__", "forall", "configure"})


def _package_roots(names) -> dict[str, str]:
    """{top-level package: its folder}, found without importing it (torch takes seconds)."""
    roots = {}
    for top in sorted({name.split(".")[0] for name in names}):
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            continue
        for folder in (spec.submodule_search_locations or []) if spec else []:
            roots[os.path.realpath(folder) + os.sep] = top
    return roots


class _Rules:
    """Which modules a watched function may not run, and where their files are."""

    def __init__(self, forbidden, allowed):
        self.forbidden = tuple(forbidden)
        self.allowed = tuple(allowed)
        self.roots = _package_roots(self.forbidden + (GRADER_PACKAGE,))
        self.modules: dict[str, str] = {}  # file -> module name, "" for a file of no package

    def module_of_file(self, filename: str) -> str:
        module = self.modules.get(filename)
        if module is None:
            module = ""
            path = os.path.realpath(filename)
            for root, top in self.roots.items():
                if path.startswith(root):
                    parts = path[len(root):].split(os.sep)
                    parts[-1] = os.path.splitext(parts[-1])[0]
                    if parts[-1] == "__init__":
                        parts.pop()
                    module = ".".join([top, *parts])
                    break
            self.modules[filename] = module
        return module

    def forbids(self, module: str, qualname: str = "") -> bool:
        if not module or not _within(module, self.forbidden):
            return False
        if module == THIS_MODULE:
            return True
        if _within(module, (GRADER_PACKAGE, SIMULATOR_MODULE)):
            return False
        return not (_within(module, self.allowed) or _within(f"{module}.{qualname}", self.allowed))


def _within(module: str, packages) -> bool:
    return any(module == name or module.startswith(name + ".") for name in packages)


def _code_of(function):
    """The Python code a callable runs: a function's, a kernel's (simulator or GPU), a
    method's, a functools.partial's, an object's ``__call__``; None for code of C."""
    for _ in range(8):  # a few layers of wrapping at most
        if _isinstance(function, types.FunctionType):
            return original_code(function)
        inner = (getattr(function, "py_func", None) or getattr(function, "__func__", None)
                 or getattr(function, "func", None))
        if inner is None and _isinstance(getattr(function, "fn", None), types.FunctionType):
            inner = function.fn  # the simulator's kernel
        if inner is None:
            call = getattr(type(function), "__call__", None)
            inner = call if _isinstance(call, types.FunctionType) else None
        if inner is None:
            return None
        function = inner
    return None


def _kernel_function(frame):
    """The Python function of the kernel that a Numba launch method in ``frame`` launches."""
    this = frame.f_locals.get("self")
    for holder in (this, getattr(this, "dispatcher", None)):
        for attribute in ("py_func", "fn"):
            function = getattr(holder, attribute, None)
            if _isinstance(function, types.FunctionType):
                return function
    return None


def _passed_callables(function, frame) -> set[int]:
    """The code of the callables passed to ``function`` in ``frame`` (the grader's
    helpers: a counting matmul, a timing function), not those left at their
    defaults, which the student chose."""
    function = getattr(function, "py_func", function)
    defaults = [*(getattr(function, "__defaults__", None) or ()),
                *(getattr(function, "__kwdefaults__", None) or {}).values()]
    code = frame.f_code
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount
                             + bool(code.co_flags & 4) + bool(code.co_flags & 8)]
    values = []
    for name in names:
        value = frame.f_locals.get(name)
        values += list(value.values()) if _isinstance(value, dict) else \
            list(value) if _isinstance(value, tuple) else [value]
    found = set()
    for value in values:
        if callable(value) and not any(value is default for default in defaults):
            inner = _code_of(value)
            if inner is not None:
                found.add(id(inner))
    return found


class Watch:
    """The state of the watching in this process: the watched code, what ran."""

    def __init__(self):
        # id(code) -> (the function, its name, its rules); the function keeps the code alive
        self.watched: dict[int, tuple[object, str, _Rules]] = {}
        # The watched code now running, innermost last, and the grader's helpers
        # (callables the grader passed in) running inside it: (id(code), rules or None).
        self.active: list[tuple[int, _Rules | None]] = []
        self.helpers: set[int] = set()  # code of the callables the grader passed in
        self.caught: list[str] = []
        # What the watching lasts for: ("cell", IPython's execution count), or a frame.
        self.owner = None
        self.on = False

    # -- what the hooks decide -------------------------------------------------
    def entered(self, code, frame) -> None:
        """A Python function starts (``frame`` may be None where it is not at hand)."""
        key = id(code)
        if key in self.watched:
            if not self.active:  # called by the grader: its arguments are the grader's
                self.helpers = _passed_callables(self.watched[key][0],
                                                 frame or sys._getframe(2))
            self.active.append((key, self.watched[key][2]))
            return
        if not self.active:
            return
        rules = self.active[-1][1]
        if key in self.helpers:
            self.active.append((key, None))  # a helper the grader passed in runs as it likes
            return
        if rules is None or key == _RUN_WATCHED_CODE:
            return
        switch = _SWITCH_CODES.get(key)
        if switch:
            self.record(f"{switch} (which would stop the grader from seeing what runs)")
            return
        module = rules.module_of_file(code.co_filename)
        if code.co_name == "<module>":
            return  # importing a module runs its top level: not the work of an answer
        if rules.forbids(module, code.co_qualname):
            # Named where the forbidden code is entered, not for each function it calls.
            caller = (frame or sys._getframe(2)).f_back
            if caller is None or not rules.forbids(rules.module_of_file(
                    caller.f_code.co_filename), caller.f_code.co_qualname):
                self.record(f"{module}.{code.co_qualname}")
        elif code.co_name in _LAUNCH_METHODS and module == "" and "numba" in code.co_filename:
            kernel = _kernel_function(frame or sys._getframe(2))
            if kernel is not None and id(kernel.__code__) not in self.helpers:
                inner = kernel.__code__
                where = rules.module_of_file(inner.co_filename)
                if rules.forbids(where, inner.co_qualname):
                    self.record(f"the kernel {where}.{inner.co_qualname}")

    def called_c(self, function) -> None:
        """A function written in C is called (a builtin, a torch or NumPy function)."""
        if not self.active or self.active[-1][1] is None:
            return
        switch = _SWITCHES.get(id(function))
        if switch:
            self.record(f"{switch} (which would stop the grader from seeing what runs)")
            return
        rules = self.active[-1][1]
        module = getattr(function, "__module__", None)
        if not _isinstance(module, str):
            owner = getattr(function, "__self__", None)
            module = getattr(owner, "__name__", None) if _isinstance(owner, types.ModuleType) \
                else None
        if _isinstance(module, str) and module.split(".")[0] != "gpucourse" \
                and rules.forbids(module, getattr(function, "__qualname__", "")):
            self.record(f"{module}.{getattr(function, '__qualname__', '?')}")

    def left(self, code) -> str | None:
        """A Python function returns or raises; the failure to raise, where there is one."""
        if self.active and self.active[-1][0] == id(code):
            self.active.pop()
            if not self.active and self.caught:
                return self.message(self.watched[id(code)][1])
        return None

    def record(self, what: str) -> None:
        if what not in self.caught:
            self.caught.append(what)

    def message(self, name: str | None = None) -> str:
        who = name or ", ".join(sorted({label for _, label, _ in self.watched.values()}))
        return (f"your answer must do the work itself, not run the course's package or another "
                f"library: while the grader called {who}, it ran " + "; ".join(self.caught))


_WATCH = Watch()
# The same objects, by names the hooks read fastest (cleared in place, never rebound).
_ACTIVE = _WATCH.active
_WATCHED = _WATCH.watched


# -----------------------------------------------------------------------------
# The two ways of seeing calls: sys.monitoring (3.12 and later), sys.setprofile (3.11).

def _profile(frame, event, arg):
    # Called on every call and return, of Python and of C, while a cell is watched:
    # outside the watched functions it does as little as it can.
    if _ACTIVE:
        if event == "call":
            _WATCH.entered(frame.f_code, frame)
        elif event == "return":
            failure = _WATCH.left(frame.f_code)
            if failure:
                _WATCH.on = False  # CPython unsets a profiler that raises
                raise AssertionError(failure)
        elif event == "c_call":
            _WATCH.called_c(arg)
    elif event == "call":
        if id(frame.f_code) in _WATCHED:
            _WATCH.entered(frame.f_code, frame)
    elif event == "return" and frame is _WATCH.owner:
        stop()


_TOOL_NAME = "gpucourse grader"


def _monitoring_start() -> None:
    monitoring = sys.monitoring
    events = monitoring.events
    if monitoring.get_tool(_tool_id()) != _TOOL_NAME:
        monitoring.use_tool_id(_tool_id(), _TOOL_NAME)

    def started(code, offset):
        _WATCH.entered(code, None)

    def returned(code, offset, value):
        failure = _WATCH.left(code)
        if sys._getframe(1) is _WATCH.owner:
            stop()
        elif failure:
            raise AssertionError(failure)

    def unwound(code, offset, exception):
        _WATCH.left(code)
        if sys._getframe(1) is _WATCH.owner:
            stop()

    def called(code, offset, function, first):
        if not _isinstance(function, types.FunctionType):
            _WATCH.called_c(function)

    for event, callback in ((events.PY_START, started), (events.PY_RESUME, started),
                            (events.PY_RETURN, returned), (events.PY_YIELD, returned),
                            (events.PY_UNWIND, unwound), (events.CALL, called)):
        monitoring.register_callback(_tool_id(), event, callback)
    monitoring.set_events(_tool_id(), events.PY_START | events.PY_RESUME | events.PY_RETURN
                          | events.PY_YIELD | events.PY_UNWIND | events.CALL)


def _tool_id() -> int:
    """The first sys.monitoring tool id that is free or already ours (debuggers,
    coverage and profilers take 0 to 2 by convention, so the search starts at 3)."""
    for tool in (3, 4, 5, 2, 1, 0):
        if sys.monitoring.get_tool(tool) in (None, _TOOL_NAME):
            return tool
    raise RuntimeError("every sys.monitoring tool id is taken: the grader cannot watch")


def _switch(on: bool) -> None:
    if on == _WATCH.on:
        return
    if hasattr(sys, "monitoring"):
        if on:
            _monitoring_start()
        else:
            sys.monitoring.set_events(_tool_id(), 0)
    else:
        if on:
            sys.setprofile(_profile)
        elif sys.getprofile() is _profile:
            sys.setprofile(None)
    _WATCH.on = on


# -----------------------------------------------------------------------------
# Watching each call instead of the whole cell. A hook makes all Python code of
# the cell slower (on 3.11 about twice as slow: the grader's own reference
# computations too), so in a notebook the watched function's code is swapped,
# until the cell ends, for a trampoline that switches the hook on for the call
# alone. Every reference to the function, the grader's included, goes through it.

# id(function) -> (the function, its own code), for the functions now swapped.
_SWAPPED: dict[int, tuple[types.FunctionType, types.CodeType]] = {}
# Generators, coroutines and async generators run after their call returns.
_RUNS_LATER = 0x20 | 0x80 | 0x100 | 0x200


def original_code(function) -> types.CodeType:
    """``function.__code__``, or its own code while a trampoline stands in for it."""
    swapped = _SWAPPED.get(id(function))
    return swapped[1] if swapped is not None else function.__code__


def _plain_function(function):
    """The Python function whose code a trampoline may replace, or None: code that
    runs after its call returns (a generator) is watched for the whole cell instead."""
    inner = getattr(function, "__func__", function)
    if not _isinstance(inner, types.FunctionType):
        return None
    return None if inner.__code__.co_flags & _RUNS_LATER else inner


def _run_watched(function, args, kwargs):
    """Call ``function`` with the hook on (a trampoline's body), and fail, naming
    what ran, if it ran forbidden code; a call from inside a watched call runs as
    it is, already watched."""
    if _WATCH.on:
        return function(*args, **kwargs)
    _switch(True)
    try:
        result = function(*args, **kwargs)
    except BaseException:
        _switch(False)
        if _WATCH.caught:
            raise AssertionError(_WATCH.message(function.__name__)) from None
        raise
    _switch(False)
    if _WATCH.caught:
        raise AssertionError(_WATCH.message(function.__name__))
    return result


_RUN_WATCHED_CODE = id(_run_watched.__code__)


def _trampoline_code(code: types.CodeType, run, own) -> types.CodeType:
    """Code with ``code``'s name and free variables (so that it may replace it in its
    function) whose body is ``run(own, args, kwargs)``."""
    free = code.co_freevars
    source = (f"def _outer({', '.join(free)}):\n"
              f"    def _gpucourse_trampoline(*_gpucourse_args, **_gpucourse_kwargs):\n"
              + (f"        ({', '.join(free)},)\n" if free else "")
              + "        return '_gpucourse_run'('_gpucourse_own', _gpucourse_args, "
                "_gpucourse_kwargs)\n")
    with warnings.catch_warnings():  # calling a string: a placeholder, replaced below
        warnings.simplefilter("ignore", SyntaxWarning)
        outer = compile(source, "<gpucourse grader: watched call>", "exec").co_consts[0]
    inner = next(c for c in outer.co_consts if _isinstance(c, types.CodeType))
    objects = {"_gpucourse_run": run, "_gpucourse_own": own}
    consts = tuple(objects.get(c, c) if _isinstance(c, str) else c for c in inner.co_consts)
    return inner.replace(co_consts=consts, co_name=code.co_name, co_qualname=code.co_qualname)


def _swap_in_trampoline(function: types.FunctionType, code: types.CodeType) -> bool:
    """Make ``function`` call a copy of itself through :func:`_run_watched` until
    the cell ends; False where its code cannot be replaced."""
    if id(function) in _SWAPPED:
        return True
    own = types.FunctionType(code, function.__globals__, function.__name__,
                             function.__defaults__, function.__closure__)
    own.__kwdefaults__ = function.__kwdefaults__
    own.__qualname__ = function.__qualname__
    try:
        function.__code__ = _trampoline_code(code, _run_watched, own)
    except (ValueError, TypeError, SyntaxError):
        return False
    _SWAPPED[id(function)] = (function, code)
    return True


# -----------------------------------------------------------------------------
# What the grader calls.

def _on_stack(target) -> bool:
    """Whether the frame ``target`` (or, for a set, a frame running one of the code
    ids in it) is running below the caller."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame is target or (_isinstance(target, dict) and id(frame.f_code) in target):
            return True
        frame = frame.f_back
    return False


def _shell():
    """IPython's shell when this runs in a notebook's kernel, else None."""
    return getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()


def _owner(frame):
    """What the watching lasts for, seen from the first frame outside the grader: the
    notebook cell (IPython runs each statement of a cell as code of its own, so
    the cell's end is IPython's post_run_cell), or else that frame's run."""
    while frame.f_back is not None and \
            str(frame.f_globals.get("__name__", "")).startswith(GRADER_PACKAGE):
        frame = frame.f_back
    shell = _shell()
    if shell is not None and frame.f_globals is shell.user_ns:
        callbacks = shell.events.callbacks.get("post_run_cell", [])
        if _stop_at_cell_end not in callbacks:
            shell.events.register("post_run_cell", _stop_at_cell_end)
        return ("cell", shell.execution_count)
    return frame


def _stop_at_cell_end(result=None) -> None:
    stop()


def _forget_a_finished_cell() -> None:
    """Stop a watching whose cell has finished without ending it (the student's code
    switched the watching off, or took IPython's post_run_cell away)."""
    owner = _WATCH.owner
    if owner is None:
        return
    if _isinstance(owner, tuple):
        shell = _shell()
        finished = shell is None or shell.execution_count != owner[1]
    else:
        finished = not _on_stack(owner)
    if finished:
        stop()


def watch(function, forbidden, allowed=(), name: str | None = None) -> None:
    """Until the caller outside the grader (the test cell) returns, record what
    ``function`` runs (see the module's description). Fails at once when
    ``function`` is not Python code that can be watched."""
    _forget_a_finished_cell()
    code = _code_of(function)
    label = name or getattr(function, "__name__", repr(function))
    if code is None:
        raise AssertionError(f"{label} must be a function written in the notebook (def ...), "
                             f"got {type(function).__name__}")
    rules = _Rules(forbidden, allowed)
    home = rules.module_of_file(code.co_filename)
    if rules.forbids(home, code.co_qualname):
        raise AssertionError(f"{label} runs {home}.{code.co_qualname}: write it yourself "
                             "instead of wrapping the course's version")
    if _WATCH.owner is None:
        _WATCH.owner = _owner(sys._getframe(1))
    _WATCH.watched[id(code)] = (function, label, rules)
    if hasattr(function, "py_func"):
        return  # a kernel runs on the simulator's threads or the GPU: its code is read
    if _isinstance(_WATCH.owner, tuple):
        # In a notebook cell: watch each call (see _run_watched), or, where the
        # function cannot be entered that way, the whole cell.
        target = _plain_function(function)
        if target is None or not _swap_in_trampoline(target, code):
            _switch(True)
    else:
        _switch(True)


def raise_if_caught() -> None:
    """Fail (AssertionError naming what ran) when a watched function ran forbidden
    code since the watching began in this cell."""
    _forget_a_finished_cell()
    if _WATCH.caught:
        raise AssertionError(_WATCH.message())


def stop() -> None:
    """End the watching and forget what it saw (the end of the cell does it); called
    while a watched function runs (by the student's code), it does nothing."""
    if _on_stack(_WATCH.watched):
        return
    _switch(False)
    for function, code in _SWAPPED.values():
        function.__code__ = code
    _SWAPPED.clear()
    _WATCH.owner = None
    _WATCH.watched.clear()
    _WATCH.active.clear()
    _WATCH.caught.clear()


def caught() -> list[str]:
    """What the watched functions ran that they may not, so far."""
    return list(_WATCH.caught)
