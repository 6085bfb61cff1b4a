"""launch.packed_launch: a kernel's arguments laid out once in the buffer the
driver copies at each launch, the changing pointers written per call.

No GPU here: the driver's two calls are stood in for, and the stand-in reads
back, through the addresses the launch hands it, exactly what the driver
would read. The real launch is checked on a GPU by every matmul test there
(entry_point takes this path by default)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from gpucourse.kernels import launch  # first: gpucourse.device sets up the simulator
from numba import types  # noqa: E402 (after gpucourse.device, which configures Numba)

VECTOR = types.Array(types.float32, 1, "C")  # 7 parameters of 8 bytes
MATRIX = types.Array(types.float32, 2, "C")  # 9


class _Kernel:
    """A Numba dispatcher as packed_launch uses it: compile -> a code library -> a function."""
    __name__ = "fake_kernel"

    def __init__(self, handle):
        function = type("Function", (), {"handle": handle})()
        library = type("Library", (), {"get_cufunc": lambda self: function})()
        self.compiled = type("Compiled", (), {"_codelibrary": library})()

    def compile(self, signature):
        return self.compiled


def _driver(parameters, launches, sizes=None):
    """(launch_kernel, parameter query, CUDA_SUCCESS) stand-ins: a kernel of
    `parameters` 8-byte parameters (or of `sizes`); each launch appends what
    the driver would copy: (function, grid, block, shared, stream, values)."""
    sizes = sizes or [8] * parameters

    def query(handle, index):
        if index >= len(sizes):
            return 1, 0, 0
        return 0, sum(sizes[:index]), sizes[index]

    def launch_kernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        assert params is None  # the arguments go through `extra`, never both
        tags = np.ctypeslib.as_array((ctypes.c_uint64 * 5).from_address(extra))
        assert (tags[0], tags[2], tags[4]) == (1, 2, 0)  # BUFFER_POINTER, BUFFER_SIZE, END
        size = ctypes.c_uint64.from_address(int(tags[3])).value
        values = np.ctypeslib.as_array((ctypes.c_uint64 * (size // 8)).from_address(int(tags[1])))
        launches.append((f, (gx, gy, gz), (bx, by, bz), shared, stream, values.tolist()))
        return 0
    return launch_kernel, query, 0, True


def test_each_call_launches_the_template_with_its_pointers(monkeypatch):
    launches = []
    monkeypatch.setattr(launch, "_fast_driver", lambda: _driver(8, launches))
    arguments = launch.flat_argument(0, 12, 4) + (3,)  # a vector of 12 floats, then a uint64
    go = launch.packed_launch(_Kernel(77), (VECTOR, types.uint64), 5, (2, 3, 1), (128, 1, 1),
                              arguments, slots=(4, 7), shared=1024)
    go(1000, 9)
    go(3000, 10)
    assert launches == [(77, (2, 3, 1), (128, 1, 1), 1024, 5, [0, 0, 12, 4, 1000, 12, 4, 9]),
                        (77, (2, 3, 1), (128, 1, 1), 1024, 5, [0, 0, 12, 4, 3000, 12, 4, 10])]


def test_the_signature_says_how_many_eight_byte_parameters_a_kernel_takes():
    assert launch._eight_byte_parameters((MATRIX, MATRIX, MATRIX, types.uint64)) == 28
    assert launch._eight_byte_parameters((VECTOR, types.int64)) == 8
    # A 4-byte scalar would sit at an offset the packed buffer does not give it.
    assert launch._eight_byte_parameters((MATRIX, types.float32)) is None
    assert launch._eight_byte_parameters((MATRIX, types.int32)) is None


def test_a_kernel_whose_parameters_are_not_all_eight_bytes_takes_the_usual_launch(monkeypatch):
    launches = []
    # The driver says a parameter is 4 bytes, or that there is one more than
    # the signature has: not packed.
    for sizes in ([8] * 6 + [4], [8] * 8):
        monkeypatch.setattr(launch, "_fast_driver", lambda: _driver(0, launches, sizes))
        assert launch.packed_launch(_Kernel(1), (VECTOR,), 0, (1, 1, 1), (1, 1, 1),
                                    launch.flat_argument(0, 1, 4), (4,)) is None
    # Arguments that do not match the signature, a signature with a 4-byte
    # parameter, or no fast launch in the driver's bindings: not packed.
    monkeypatch.setattr(launch, "_fast_driver", lambda: _driver(7, launches))
    assert launch.packed_launch(_Kernel(1), (VECTOR,), 0, (1, 1, 1), (1, 1, 1), (0,) * 6,
                                (4,)) is None
    assert launch.packed_launch(_Kernel(1), (VECTOR, types.float32), 0, (1, 1, 1), (1, 1, 1),
                                (0,) * 8, (4,)) is None
    monkeypatch.setattr(launch, "_fast_driver", lambda: None)
    assert launch.packed_launch(_Kernel(1), (VECTOR,), 0, (1, 1, 1), (1, 1, 1),
                                launch.flat_argument(0, 1, 4), (4,)) is None
    assert launches == []


def test_without_the_drivers_query_the_signature_decides(monkeypatch):
    launches = []
    launch_kernel, _, success, takes_ints = _driver(7, launches)
    monkeypatch.setattr(launch, "_fast_driver",
                        lambda: (launch_kernel, None, success, takes_ints))
    go = launch.packed_launch(_Kernel(3), (VECTOR,), 0, (1, 1, 1), (32, 1, 1),
                              launch.flat_argument(0, 8, 4), (4,))
    go(64)
    assert launches[0][-1] == [0, 0, 8, 4, 64, 8, 4]


def test_a_refused_launch_is_an_error_that_names_the_kernel(monkeypatch):
    launch_kernel, query, success, takes_ints = _driver(7, [])
    monkeypatch.setattr(launch, "_fast_driver",
                        lambda: (lambda *args: 700, query, success, takes_ints))
    go = launch.packed_launch(_Kernel(1), (VECTOR,), 0, (1, 1, 1), (1, 1, 1),
                              launch.flat_argument(0, 1, 4), (4,))
    with pytest.raises(RuntimeError, match="refused the launch of fake_kernel: error 700"):
        go(5)


def test_handles_of_every_kind_become_the_drivers_ints():
    stream = type("Stream", (), {"handle": ctypes.c_void_p(None)})()
    assert launch._handle(stream) == 0
    assert launch._handle(ctypes.c_void_p(1234)) == 1234
    assert launch._handle(55) == 55
    assert launch._handle(type("Handle", (), {"__int__": lambda self: 99})()) == 99
