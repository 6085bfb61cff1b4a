"""The PTX compiler process behind :func:`gpucourse.grader.ptx.ptx`.

Run as ``python -m gpucourse.grader.ptx_compiler`` with
``NUMBA_ENABLE_CUDASIM=0``. It reads one JSON request per line from stdin,
``{"source": module text, "kernel": name, "types": [...], "cc": [9, 0]}``,
executes the module with ``cuda.jit`` deferred (so that nothing needs a GPU),
compiles the kernel with ``numba.cuda.compile_ptx`` and writes one JSON line
back: ``{"ptx": text}`` or ``{"error": message}``. No GPU or driver is needed:
NVVM comes from the ``numba-cuda[cu13]`` wheels. It is a module of its own
because it runs as a process of its own: it must import the real
``numba.cuda``, where the notebook that starts it runs the simulator.

It also holds :func:`link_ptx`, PTX linked by nvJitLink as a driver would
(ptxas's report of registers and spills, and the cubin), for the tests and
benchmarks that read what a kernel costs without a GPU: like the rest of this
module, it imports nothing that chooses the simulator.
"""

from __future__ import annotations

import json
import sys
import types as pytypes


def numba_type(described):
    """The Numba type of an argument described by ``ptx._argument_types``."""
    import numpy as np
    from numba import from_dtype, types

    if described[0] == "array":
        _, dtype, ndim, layout = described
        return types.Array(from_dtype(np.dtype(dtype)), int(ndim), layout)
    if described[1] == "bool":
        return types.boolean
    return from_dtype(np.dtype(described[1]))


class LinkerUnavailable(RuntimeError):
    """nvJitLink (``cuda.bindings.nvjitlink``, from the CUDA wheels) cannot be
    loaded on this machine."""


def link_ptx(text: str, arch: str = "sm_90", max_registers: int = 0) -> tuple[str, bytes]:
    """PTX linked by nvJitLink for `arch`, as a GPU's driver would link it, with
    no GPU: (ptxas's report, registers and spills among it; the cubin). With
    `max_registers`, the cap a kernel compiled with Numba's max_registers gets.
    Raises LinkerUnavailable where nvJitLink cannot be loaded, and nvJitLink's
    own error where the PTX does not link; ValueError unless `text` is PTX
    text (a str) and `max_registers` a whole number >= 0."""
    if not isinstance(text, str):
        raise ValueError(f"text must be PTX as a str, got {type(text).__name__}")
    if isinstance(max_registers, bool) or not isinstance(max_registers, int) or max_registers < 0:
        raise ValueError(f"max_registers must be a whole number >= 0 (0: no cap), "
                         f"got {max_registers!r}")
    try:
        from cuda.bindings import nvjitlink

        options = [f"-arch={arch}", "-verbose", "-O3"]
        if max_registers:
            options.append(f"-maxrregcount={max_registers}")
        handle = nvjitlink.create(len(options), options)
    except Exception as error:  # no libnvJitLink here
        raise LinkerUnavailable(f"nvJitLink is not available here ({error})") from error
    try:
        data = text.encode()
        nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), "kernel.ptx")
        nvjitlink.complete(handle)
        log = bytearray(nvjitlink.get_info_log_size(handle))
        nvjitlink.get_info_log(handle, log)
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
    finally:
        nvjitlink.destroy(handle)
    return log.decode(errors="replace"), bytes(cubin)


class _DeferredCuda(pytypes.ModuleType):
    """``cuda`` while a student's module executes: ``@cuda.jit`` on a kernel keeps the
    plain function (compiled later for the asked target); on a device function it
    makes a real, lazily compiled device function."""

    def __init__(self, real):
        super().__init__("cuda")
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def jit(self, *args, **kwargs):
        if args and callable(args[0]) and not kwargs:  # bare @cuda.jit
            return args[0]
        device = kwargs.get("device", False)
        options = {k: v for k, v in kwargs.items() if k in ("device", "inline", "fastmath")}

        def decorate(function):
            return self._real.jit(**options)(function) if device else function

        return decorate


class _TargetDevice:
    """Stands for "the current GPU" where Numba asks for one while compiling device
    functions: there is no GPU here, only the compute capability asked for."""

    compute_capability = (9, 0)


def _compile_without_a_gpu() -> None:
    from numba.cuda import dispatcher

    dispatcher.get_current_device = lambda: _TargetDevice


def compile_request(request: dict) -> dict:
    from numba import cuda

    _TargetDevice.compute_capability = tuple(request["cc"])

    namespace: dict = {"__name__": "student_kernels"}
    try:
        code = compile(request["source"], "<student kernel>", "exec")
        namespace["_real_cuda"] = _DeferredCuda(cuda)
        exec(code, namespace)
        # Inside the compiled functions, `cuda` must be Numba's own module again.
        for name, value in list(namespace.items()):
            if isinstance(value, _DeferredCuda):
                namespace[name] = cuda
        function = namespace[request["kernel"]]
        function = getattr(function, "py_func", function)
        signature = tuple(numba_type(t) for t in request["types"])
        text, _ = cuda.compile_ptx(function, signature, cc=tuple(request["cc"]))
        return {"ptx": text}
    except Exception as error:  # reported to the grader, which explains it to the student
        return {"error": f"{type(error).__name__}: {error}"}


def _warm_up() -> None:
    """Compile a tiny kernel once, so that the first request finds the compiler loaded
    (started early, the process does this while the notebook goes on)."""
    from numba import cuda, float32

    def warm(x):
        x[0] = float32(1.0)

    try:
        cuda.compile_ptx(warm, (float32[:],), cc=(9, 0))
    except Exception:  # a request will meet the same problem and report it
        pass


def main() -> int:
    import numpy as np

    if not hasattr(np, "row_stack"):  # numba-cuda 0.30 on numpy 2.5 (see gpucourse.device)
        np.row_stack = np.vstack
    import numba.cuda  # noqa: F401  (before gpucourse.device: the real one, not the simulator)

    _compile_without_a_gpu()
    _warm_up()

    for line in sys.stdin:
        if not line.strip():
            continue
        reply = compile_request(json.loads(line))
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
