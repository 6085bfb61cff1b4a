"""What a GPU would run: a kernel compiled to PTX on the CPU, and the checks of its structure.

A kernel that computes the right values can still miss what its exercise is
about. :func:`ptx` compiles a kernel for a real GPU target (compute
capability 9.0 by default) into PTX, NVIDIA's assembly, with NVVM from the
``numba-cuda[cu13]`` wheels. That works on a machine with no GPU and no
driver. The PTX says whether the kernel declares shared memory, issues
128-bit loads, keeps several accumulators (one ``fma`` per accumulator in its
inner loop), or needs a large local buffer; :func:`expect_structure` turns
each such property into a check with a message that says what to change. A
kernel that Numba cannot compile for a GPU fails with the compiler's own
complaint.

Under the simulator, ``numba.cuda`` cannot compile for a GPU in the same
process, so :func:`ptx` hands the kernel's source (and the constants and
device functions it uses, gathered by :func:`kernel_module_source`) to a
compiler process, :mod:`gpucourse.grader.ptx_compiler`, that runs without the
simulator; it starts on first use (about two seconds) and then compiles a
kernel in a fraction of a second. On a GPU machine the kernel is compiled in
the notebook's own process. This module is apart from
:mod:`gpucourse.grader.tracing` because it never runs the kernel: it reads
its source and its compiled code.
"""

from __future__ import annotations

import ast
import atexit
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import types
from dataclasses import dataclass, field

import numpy as np

from gpucourse.device import cuda, on_gpu
from gpucourse.grader.own_work import global_names, visible_names

DEFAULT_CC = (9, 0)
# Library helpers a kernel may call: 128-bit loads and stores.
ALLOWED_HELPER_MODULES = ("gpucourse.kernels.vector", "gpucourse.kernels._vector_load",
                          "gpucourse.kernels._vector_store")
# The course's tensor-core instructions a kernel may call: compiler intrinsics on a
# GPU, Python stand-ins on the simulator, so imported by name into the compiled source.
INSTRUCTION_MODULES = ("gpucourse.kernels.tensor_cores.intrinsics",)


# --------------------------------------------------------------------------
# What a GPU would run: PTX compiled on the CPU
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class PTXFacts:
    """What one kernel's PTX shows (counts are of instructions in the text, not executed)."""

    shared_bytes: int          # static shared memory declared
    dynamic_shared: bool       # declares extern (dynamic) shared memory
    shared_loads: int          # ld.shared
    shared_stores: int         # st.shared
    vector_shared_loads: int   # ld.shared.v4 / .v2
    global_loads: int          # loads from global memory (ld.global and generic ld)
    vector_global_loads: int   # 128-bit loads from global memory (v4 of 32-bit)
    vector_global_stores: int
    barriers: int              # bar.sync / barrier.sync
    fma: int                   # fma.rn.f32
    local_bytes: int           # the thread's local-memory stack (spilled arrays)
    registers_f32: int         # .reg .f32 declared
    text: str = field(repr=False, default="")


_LOAD = re.compile(r"^\s*(?:@%p\d+\s+)?ld(\.global|\.shared|\.local|\.param|\.const)?"
                   r"((?:\.nc|\.ca|\.cg|\.cs|\.lu|\.cv|\.volatile|\.relaxed\.\w+)*)"
                   r"(\.v[24])?\.(\w+)", re.M)
_STORE = re.compile(r"^\s*(?:@%p\d+\s+)?st(\.global|\.shared|\.local|\.param)?"
                    r"((?:\.wb|\.cg|\.cs|\.wt|\.volatile)*)(\.v[24])?\.(\w+)", re.M)


def ptx_facts(text: str) -> PTXFacts:
    """Read the properties the graders check out of a kernel's PTX text."""
    if not isinstance(text, str) or ".entry" not in text:
        raise ValueError("text must be the PTX of a kernel (it has no .entry)")
    shared_bytes = sum(int(n) for n in re.findall(
        r"^\s*(?:\.visible\s+|\.global\s+)?\.shared\s+\.align\s+\d+\s+\.b8\s+\S+\[(\d+)\]", text,
        re.M))
    dynamic = bool(re.search(r"\.extern\s+\.shared", text))
    local_bytes = sum(int(n) for n in re.findall(
        r"^\s*\.local\s+\.align\s+\d+\s+\.b8\s+\S+\[(\d+)\]", text, re.M))
    shared_loads = vector_shared = global_loads = vector_global = 0
    for space, _, vector, kind in _LOAD.findall(text):
        if space == ".shared":
            shared_loads += 1
            vector_shared += bool(vector)
        elif space in ("", ".global"):  # Numba addresses arrays generically
            global_loads += 1
            vector_global += vector == ".v4" and kind in ("f32", "b32", "u32", "s32")
    shared_stores = vector_global_stores = 0
    for space, _, vector, kind in _STORE.findall(text):
        if space == ".shared":
            shared_stores += 1
        elif space in ("", ".global"):
            vector_global_stores += vector == ".v4" and kind in ("f32", "b32", "u32", "s32")
    registers = sum(int(n) for n in re.findall(r"\.reg\s+\.f32\s+%f<(\d+)>", text))
    return PTXFacts(
        shared_bytes=shared_bytes, dynamic_shared=dynamic, shared_loads=shared_loads,
        shared_stores=shared_stores, vector_shared_loads=vector_shared,
        global_loads=global_loads, vector_global_loads=vector_global,
        vector_global_stores=vector_global_stores,
        barriers=len(re.findall(r"^\s*(?:@%p\d+\s+)?(?:bar|barrier)\.sync", text, re.M)),
        fma=len(re.findall(r"^\s*(?:@%p\d+\s+)?fma\.rn\.f32", text, re.M)),
        local_bytes=local_bytes, registers_f32=registers, text=text)


def _argument_types(args) -> list:
    """A description of each example argument that the compiler process turns into a Numba type."""
    described = []
    for position, value in enumerate(args):
        if isinstance(value, np.ndarray):
            layout = "C" if value.flags.c_contiguous else ("F" if value.flags.f_contiguous else "A")
            described.append(["array", value.dtype.str, value.ndim, layout])
        elif isinstance(value, (bool, np.bool_)):
            described.append(["scalar", "bool"])
        elif isinstance(value, (int, np.integer)):
            described.append(["scalar", "int64" if isinstance(value, int) else value.dtype.name])
        elif isinstance(value, (float, np.floating)):
            described.append(["scalar", "float64" if isinstance(value, float)
                              else value.dtype.name])
        else:
            raise ValueError(f"argument {position} must be a numpy array or a number (an "
                             f"example of what the kernel is launched with), got "
                             f"{type(value).__name__}")
    return described


class KernelSourceError(ValueError):
    """The kernel refers to something that cannot be compiled for a GPU."""


def _is_jitted(value) -> bool:
    return hasattr(value, "py_func") and (hasattr(value, "targetoptions")
                                          or type(value).__name__ == "FakeCUDAKernel")


def _is_device_function(value) -> bool:
    if type(value).__name__ == "FakeCUDAKernel":
        return bool(value._device)
    return bool(getattr(value, "targetoptions", {}).get("device"))


def kernel_module_source(kernel) -> tuple[str, str]:
    """(source of a module that defines the kernel, the kernel's name).

    The module holds the kernel's own source, the device functions it calls
    (their sources, first), the numeric constants it reads (as literals) and
    imports of the modules and Numba types it names. A kernel made by a
    factory (a function that computes tile sizes and defines the kernel
    inside it) works too: the values it captured become the module's
    constants. Anything else a kernel refers to cannot run on a GPU and is a
    :class:`KernelSourceError`, and so is one name that two of the functions
    see with different values.
    """
    import numba

    function = getattr(kernel, "py_func", None)
    if function is None or not isinstance(function, types.FunctionType):
        raise ValueError(f"kernel must be a @cuda.jit function, got {type(kernel).__name__}")
    # `_real_cuda` is provided by the compiler process (see ptx_compiler).
    header = ["import math", "import numpy", "import numba"]
    constants, sources = [], []
    defined: dict[str, str] = {}  # each name's line in the module, to catch two values
    done: set[str] = set()

    def define(fn, used: str, line: str) -> None:
        if defined.setdefault(used, line) != line:
            raise KernelSourceError(
                f"{fn.__name__} sees {used} as `{line}`, another function of the kernel as "
                f"`{defined[used]}`; give the two different names")
        constants.append(line)

    def add(fn, name: str) -> None:
        if name in done:
            return
        done.add(name)
        scope = visible_names(fn)
        for used in dict.fromkeys(global_names(fn.__code__) + list(fn.__code__.co_freevars)):
            if used not in scope or (used in done and used not in defined):
                continue
            value = scope[used]
            if isinstance(value, types.ModuleType):
                if value.__name__ in ("numba.cuda", "gpucourse.device") or \
                        value.__name__.startswith("numba.cuda.simulator"):
                    define(fn, used, f"{used} = _real_cuda")
                elif value.__name__ in ("math", "numpy", "numba", "cmath", "operator"):
                    define(fn, used, f"import {value.__name__} as {used}")
                elif value.__name__ in ALLOWED_HELPER_MODULES:
                    define(fn, used, f"import {value.__name__} as {used}")
                else:
                    raise KernelSourceError(
                        f"{fn.__name__} uses the module {value.__name__} ({used}); a GPU "
                        "kernel can only use cuda, math and the course's vector helpers")
            elif isinstance(value, (bool, int, float, complex)) or value is None:
                define(fn, used, f"{used} = {value!r}")
            elif isinstance(value, np.generic):
                define(fn, used, f"{used} = numpy.{value.dtype.name}({value.item()!r})")
            elif isinstance(value, tuple) and all(isinstance(v, (int, float)) for v in value):
                define(fn, used, f"{used} = {value!r}")
            elif isinstance(value, numba.core.types.Type):
                if getattr(numba, str(value), None) is value:
                    define(fn, used, f"{used} = numba.{value}")
                else:
                    define(fn, used, f"{used} = numba.types.{value}")
            elif getattr(getattr(value, "py_func", value), "__module__", "") \
                    in INSTRUCTION_MODULES:
                function = getattr(value, "py_func", value)
                define(fn, used, f"from {function.__module__} import {function.__name__} as "
                                 f"{used}")
            elif _is_jitted(value):
                if not _is_device_function(value):
                    raise KernelSourceError(f"{fn.__name__} calls {used}, a kernel; a kernel "
                                            "can only call device functions "
                                            "(@cuda.jit(device=True))")
                if used not in done:
                    add(value.py_func, used)
                    sources.append(_function_source(value.py_func, used, device=True))
                continue
            elif getattr(value, "__module__", "") in ALLOWED_HELPER_MODULES:
                define(fn, used, f"from {value.__module__} import {value.__name__} as {used}")
            elif used in ("range", "len", "min", "max", "abs", "float", "int", "bool", "round"):
                continue
            else:
                module = getattr(value, "__module__", None) or type(value).__module__
                raise KernelSourceError(
                    f"{fn.__name__} uses {used}, a {type(value).__name__} from {module}, "
                    "which a GPU kernel cannot call; a kernel may use numbers, cuda, math, "
                    "its own device functions (@cuda.jit(device=True)) and the course's "
                    "vector helpers")
            done.add(used)

    add(function, function.__name__)
    sources.append(_function_source(function, function.__name__))
    body = "\n".join(header + sorted(set(constants), key=constants.index)) + "\n\n"
    return body + "\n\n".join(sources) + "\n", function.__name__


def _function_source(function, name: str, device: bool = False) -> str:
    """The function's source without its decorators, defined under `name`; a device
    function is made one again with ``cuda.jit(device=True)``. (A decorator may name
    things the compiler process does not have, such as a module's option dict.)"""
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError) as error:
        raise KernelSourceError(f"the source of {name} cannot be found ({error}); define it "
                                "in a notebook cell or a file") from None
    # The name its `def` line gives it: a factory may rename the function before
    # compiling it (the sgemm levels' kernels from building_blocks._make_kernel).
    defined_as = function.__code__.co_name
    tree = ast.parse(source)
    definition = next((node for node in tree.body
                       if isinstance(node, ast.FunctionDef) and node.name == defined_as),
                      None)
    if definition is not None:
        source = "\n".join(source.splitlines()[definition.lineno - 1:]) + "\n"
    if function.__name__ != defined_as:  # renamed, so that its PTX shows the same name
        source += (f"\n{defined_as}.__name__ = {defined_as}.__qualname__ = "
                   f"{function.__name__!r}\n")
    if device:
        source += f"\n{defined_as} = _real_cuda.jit(device=True)({defined_as})\n"
    if defined_as != name:
        source += f"\n{name} = {defined_as}\n"
    return source


class _Compiler:
    """A process that compiles kernels to PTX, without the simulator; one per session."""

    def __init__(self):
        self._process = None
        self._lock = threading.Lock()

    def _start(self):
        env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0", "GPUCOURSE_DEVICE": "auto"}
        # In a session of its own: interrupting a notebook's cell signals the kernel's
        # whole process group, and the compiler, which serves every later cell, must
        # outlive that (it ends when its input closes, as the kernel exits).
        self._process = subprocess.Popen(
            [sys.executable, "-u", "-m", "gpucourse.grader.ptx_compiler"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env, start_new_session=True)
        atexit.register(self.close)

    def start(self):
        """Start the process if it is not running (it then loads Numba in the background)."""
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._start()

    def compile(self, request: dict, timeout_s: float) -> dict:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._start()
            try:
                self._process.stdin.write(json.dumps(request) + "\n")
                self._process.stdin.flush()
                reply = _read_line(self._process.stdout, timeout_s)
            except BaseException:
                # Interrupted (a cell's time limit, Ctrl-C) while waiting: the reply
                # would arrive for the next request instead, so start afresh.
                self.close()
                raise
            if reply is None:
                error = ""
                if self._process.poll() is not None:
                    error = self._process.stderr.read()[-2000:]
                self.close()
                raise RuntimeError(f"the PTX compiler did not answer within {timeout_s:g} s"
                                   + (f":\n{error}" if error else ""))
            return json.loads(reply)

    def close(self):
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait()
            self._process = None


def _read_line(stream, timeout_s: float):
    line: list = []
    reader = threading.Thread(target=lambda: line.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return line[0] if line and line[0] else None


_compiler = _Compiler()


def start_compiler() -> None:
    """Start the compiler behind :func:`ptx` now, in the background, so that the first
    kernel compiled later does not wait the two seconds it takes to load (a notebook
    calls this in its set-up cell). On a GPU machine, where kernels compile in the
    notebook's own process, it does nothing."""
    if not on_gpu():
        _compiler.start()


def ptx(kernel, *example_args, cc=DEFAULT_CC, timeout_s: float = 120.0) -> str:
    """The PTX a GPU of compute capability ``cc`` would run for ``kernel``.

    ``example_args``: arguments like those the kernel is launched with (NumPy
    arrays, numbers); only their types, dimensions and layouts matter. Raises
    :class:`KernelSourceError` when the kernel uses something a GPU cannot
    run, and AssertionError carrying the compiler's message when Numba
    cannot compile it for a GPU.
    """
    if not (isinstance(cc, tuple) and len(cc) == 2 and all(isinstance(x, int) for x in cc)
            and cc >= (5, 0)):
        raise ValueError(f"cc must be a compute capability such as (9, 0), got {cc!r}")
    argument_types = _argument_types(example_args)
    if on_gpu():
        from gpucourse.grader.ptx_compiler import numba_type

        function = getattr(kernel, "py_func", None)
        if function is None:
            raise ValueError(f"kernel must be a @cuda.jit function, got {type(kernel).__name__}")
        signature = tuple(numba_type(t) for t in argument_types)
        try:
            text, _ = cuda.compile_ptx(function, signature, cc=cc)
        except Exception as error:  # the compiler's own complaint, for the student
            raise AssertionError(_compile_message(function.__name__, str(error))) from None
        return text
    source, name = kernel_module_source(kernel)
    reply = _compiler.compile({"source": source, "kernel": name, "types": argument_types,
                               "cc": list(cc)}, timeout_s)
    if "error" in reply:
        raise AssertionError(_compile_message(name, reply["error"]))
    return reply["ptx"]


def _compile_message(name: str, error: str) -> str:
    lines = [line for line in error.splitlines() if line.strip()]
    first = next((line for line in lines if "Error" in line or "error" in line), lines[0]
                 if lines else "unknown error")
    detail = "\n".join(lines[:12])
    return (f"{name} does not compile for a GPU (Numba-CUDA's compiler said: {first.strip()}). "
            f"On the simulator a kernel is plain Python, so it may run there anyway; on a GPU "
            f"only what Numba-CUDA can compile runs.\n{detail}")


def facts(kernel, *example_args, cc=DEFAULT_CC) -> PTXFacts:
    """:func:`ptx_facts` of the kernel compiled for ``example_args``."""
    return ptx_facts(ptx(kernel, *example_args, cc=cc))


def expect_structure(kernel, *example_args, cc=DEFAULT_CC, what: str = "this kernel",
                     shared: bool | None = None, barriers: bool | None = None,
                     vector_global_loads: bool | None = None,
                     vector_shared_loads: bool | None = None,
                     min_fma: int | None = None, max_local_bytes: int | None = None,
                     max_shared_bytes: int | None = None,
                     max_scalar_global_loads: int | None = None) -> PTXFacts:
    """Compile ``kernel`` for a GPU and fail when its PTX lacks a required property.

    ``what`` names the exercise in messages ("level 5"). ``shared``: must (True)
    or must not (False) declare shared memory; ``barriers``: must synchronise
    the block; ``vector_global_loads``: must read global memory 128 bits at a
    time; ``vector_shared_loads``: must read shared memory in vectors;
    ``min_fma``: the least number of fused multiply-adds in the code (a thread
    keeping N accumulators has at least N, once the compiler unrolls its
    loops); ``max_local_bytes``: the most per-thread local memory (a large
    local buffer is a sign of an array the size of the problem);
    ``max_shared_bytes``: the most static shared memory;
    ``max_scalar_global_loads``: the most loads from global memory that are not
    128 bits wide (0: every load of the inputs is a vector load).
    """
    found = facts(kernel, *example_args, cc=cc)
    problems = []
    if shared is True and not (found.shared_bytes or found.dynamic_shared):
        problems.append(f"{what} must stage tiles in shared memory (cuda.shared.array); "
                        "the compiled kernel declares none")
    if shared is True and (found.shared_bytes or found.dynamic_shared) and not found.shared_loads:
        problems.append(f"{what} declares shared memory but never reads it")
    if shared is False and (found.shared_bytes or found.dynamic_shared):
        problems.append(f"{what} must not use shared memory; the compiled kernel declares "
                        f"{found.shared_bytes} bytes")
    if barriers is True and not found.barriers:
        problems.append(f"{what} must synchronise its block (cuda.syncthreads()) between "
                        "loading a tile and using it; the compiled kernel has no barrier")
    if vector_global_loads is True and not found.vector_global_loads:
        problems.append(f"{what} must load A and B 128 bits at a time (load_float4); your "
                        f"kernel issues only 32-bit loads ({found.global_loads} of them)")
    scalar_loads = found.global_loads - found.vector_global_loads
    said_already = vector_global_loads is True and not found.vector_global_loads
    if max_scalar_global_loads is not None and scalar_loads > max_scalar_global_loads \
            and not said_already:
        problems.append(f"{what} must load its inputs 128 bits at a time (load_float4); your "
                        f"kernel issues {scalar_loads} narrower loads from global memory "
                        f"beside {found.vector_global_loads} 128-bit ones (at most "
                        f"{max_scalar_global_loads} allowed)")
    if vector_shared_loads is True and not found.vector_shared_loads:
        problems.append(f"{what} must read its shared tiles 128 bits at a time "
                        "(load_float4_flat); the compiled kernel issues only scalar "
                        "shared-memory loads")
    if min_fma is not None and found.fma < min_fma:
        problems.append(f"{what} must keep at least {min_fma} accumulators per thread (one "
                        f"fused multiply-add each per step); the compiled kernel has "
                        f"{found.fma} fma instructions. Keep them in cuda.local.array with "
                        "a size and loop bounds that are constants, so the compiler can "
                        "unroll the loops and hold them in registers")
    if max_local_bytes is not None and found.local_bytes > max_local_bytes:
        problems.append(f"{what} keeps {found.local_bytes} bytes of local memory per thread "
                        f"(at most {max_local_bytes} allowed): an array that large does not "
                        "belong in one thread")
    if max_shared_bytes is not None and found.shared_bytes > max_shared_bytes:
        problems.append(f"{what} declares {found.shared_bytes} bytes of shared memory, more "
                        f"than the {max_shared_bytes} allowed")
    if problems:
        raise AssertionError("; ".join(problems))
    return found
