"""The launch machinery every kernel family shares: found once, then cheap.

Numba's ``kernel[grid, block](...)`` re-checks every argument and looks up the
context on each call: tens of microseconds of Python, which dominate a small
product or a short sequence. The kernels' entry points (``sgemm.matmul``,
``attention.flash_attention``, the attention backward) instead hand
``cuda.core.launch`` the compiled function and the arguments in the form it
takes, found once per GPU. This module holds what they share, so that a
kernel module holds kernels and their entry points and nothing of the driver:

* which GPU, and what it can do: ``current_gpu``, ``gpu_name``,
  ``has_tf32_tensor_cores``, ``max_shared_bytes_per_block``,
  ``multiprocessors``;
* a compiled kernel in cuda.core's forms: ``launchable``, and
  ``launchable_with_shared`` for kernels that opt in to more than 48 KiB of
  dynamic shared memory, ``compiled_launchable`` for a kernel not yet
  compiled; ``core_launch`` and ``launch_config``;
* arguments as a compiled kernel takes them: ``flat_argument``,
  ``matrix_argument``;
* the caller's arrays: ``is_torch_tensor``, ``torch_float32``,
  ``is_device_array``, ``to_kernel``, ``empty_like``, ``from_kernel``, and
  ``numba_empty``, a Numba device array from the GPU's stream-ordered pool.

Nothing here runs on Numba's simulator but the array helpers; the rest needs
the CUDA driver.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from gpucourse.device import cuda, on_gpu


def current_gpu() -> int:
    """The GPU of the calling thread's current CUDA context: the one a launch
    runs on, and the one Numba reports (it attaches to the current context).
    Asked of the driver directly, since Numba's `get_current_device` costs
    several microseconds of Python on every call (and so would importing the
    driver's bindings on every call: they are looked up once, `_driver`)."""
    get_device, success = _driver()
    error, device = get_device()
    if error != success:  # no context yet: Numba makes one
        return cuda.get_current_device().id
    return int(device)


@lru_cache(maxsize=None)
def _driver() -> tuple:
    """(cuCtxGetDevice, CUDA_SUCCESS) from the CUDA driver's Python bindings."""
    from cuda.bindings import driver

    return driver.cuCtxGetDevice, driver.CUresult.CUDA_SUCCESS


@lru_cache(maxsize=None)
def core_launch():
    """`cuda.core.launch`, imported once (an import statement on every call costs
    a microsecond or two of Python)."""
    from cuda.core import launch

    return launch


@lru_cache(maxsize=1024)
def launch_config(grid, block, shared: int = 0, dependent: bool = False):
    """cuda.core's LaunchConfig for `grid` and `block` (ints, or tuples of up to
    three) and `shared` bytes of dynamic shared memory, built once per
    distinct launch shape (building one costs microseconds of Python). With
    `dependent`, a programmatic dependent launch: the kernel may start while
    the one before it on the stream finishes, and waits for it where it
    calls ``_async_copy.grid_dependency_wait``. Raises RuntimeError naming
    the cuda.core it needs where the installed one cannot."""
    from cuda.core import LaunchConfig

    grid = grid if isinstance(grid, tuple) else (grid,)
    block = block if isinstance(block, tuple) else (block,)
    shape = {"grid": grid + (1,) * (3 - len(grid)), "block": block + (1,) * (3 - len(block)),
             "shmem_size": shared}
    if not dependent:
        return LaunchConfig(**shape)
    try:
        return LaunchConfig(**shape, programmatic_stream_serialization=True)
    except TypeError as error:
        raise RuntimeError("a dependent launch needs cuda.core 1.2 or newer (its "
                           "LaunchConfig.programmatic_stream_serialization)") from error


def launchable(kernel, signature) -> tuple:
    """(function, stream): `kernel` (a Numba dispatcher) compiled for `signature`
    on the current GPU, and Numba's default stream, in the forms
    `cuda.core.launch` takes."""
    compiled = kernel.compile(signature)
    return compiled._codelibrary.get_cufunc().kernel, kernel.configure((1,), (1,)).stream


def memset_zeros(stream):
    """zero(pointer, count): the driver's ``cuMemsetD32Async`` writing `count`
    32-bit zeros from `pointer` on `stream` (a Numba stream, a handle or an
    int), in order with the kernels launched on it; None where there are no
    cuda.bindings (the simulator). On the H200 it runs at 3.6-4.4 TB/s from 9
    million floats on, where a kernel of one float a thread ran at 1.6
    (results/sgemm_zeroing-h200-2026-11-30.json)."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return None
    memset, success = driver.cuMemsetD32Async, driver.CUresult.CUDA_SUCCESS
    handle = driver.CUstream(_handle(stream))

    def zero(pointer, count):
        (error,) = memset(pointer, 0, count, handle)
        if error != success:
            raise RuntimeError(f"the CUDA driver refused to zero {count} floats at "
                               f"{pointer:#x}: error {error}")
    return zero


def pitched_copy(stream, rows: int, row_bytes: int, source_pitch: int, destination_pitch: int):
    """copy(source, destination): the driver's ``cuMemcpy2DAsync`` of `rows`
    rows of `row_bytes` bytes each, from device address `source` (rows
    `source_pitch` bytes apart) to `destination` (rows `destination_pitch`
    bytes apart), on `stream`, in order with the kernels launched on it; the
    bytes of a destination row past `row_bytes` are left as they were. None
    where there are no cuda.bindings (the simulator)."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return None
    plan = driver.CUDA_MEMCPY2D()
    plan.srcMemoryType = plan.dstMemoryType = driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
    plan.srcPitch, plan.dstPitch = source_pitch, destination_pitch
    plan.WidthInBytes, plan.Height = row_bytes, rows
    memcpy, success = driver.cuMemcpy2DAsync, driver.CUresult.CUDA_SUCCESS
    handle = driver.CUstream(_handle(stream))

    def copy(source, destination):
        plan.srcDevice, plan.dstDevice = source, destination
        (error,) = memcpy(plan, handle)
        if error != success:
            raise RuntimeError(f"the CUDA driver refused to copy {rows} rows of {row_bytes} "
                               f"bytes from {source:#x} to {destination:#x}: error {error}")
    return copy


# -----------------------------------------------------------------------------
# A launch with its arguments packed once
#
# cuda.core's launch converts every argument on every call: a Numba matrix is
# nine of them, and an SGEMM launch about thirty, which costs about 6 us of
# Python (results/sgemm_host_costs-h200-2026-11-30.json), more than cuBLAS
# needs for a whole small product. Every argument of these kernels is 8
# bytes (pointers, sizes, strides, uint64 scalars), so they can be laid out
# once in one buffer that the driver copies at each launch (cuLaunchKernel's
# `extra`), and a call then writes only the pointers that change.


@lru_cache(maxsize=None)
def _fast_driver():
    """(launch, parameter query, CUDA_SUCCESS, takes_ints): cuda.bindings'
    launch that takes plain integers (its _v2 API, takes_ints True) or else
    cuLaunchKernel, which takes the driver's handle objects; the query is
    cuKernelGetParamInfo, None where the bindings lack it. None where there
    are no bindings."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return None
    query = getattr(driver, "cuKernelGetParamInfo", None)  # None: the signature decides
    try:
        from cuda.bindings._v2 import driver as v2

        return v2.launch_kernel, query, driver.CUresult.CUDA_SUCCESS, True
    except (ImportError, AttributeError):
        launch = driver.cuLaunchKernel
        return (lambda *args: launch(*args)[0]), query, driver.CUresult.CUDA_SUCCESS, False


def _handle(x) -> int:
    """A driver handle (a cuda.bindings object, a ctypes pointer, a Numba
    stream or an int) as the int the driver knows it by."""
    x = getattr(x, "handle", x)  # a Numba stream holds its driver handle
    if isinstance(x, int) or x is None:
        return int(x or 0)
    if type(x).__module__.startswith("ctypes"):
        return int(x.value or 0)
    return int(x)  # cuda.bindings' handles convert to their value


def _eight_byte_parameters(signature) -> int | None:
    """How many parameters a kernel compiled for `signature` takes, by Numba's
    calling convention, where every one of them is 8 bytes (an array is its
    meminfo, parent, size, itemsize and data pointer, then its shape and
    strides; a 64-bit integer is itself); None where one is not."""
    from numba import types

    count = 0
    for argument in signature:
        if isinstance(argument, types.Array):
            count += 5 + 2 * argument.ndim
        elif isinstance(argument, types.Integer) and argument.bitwidth == 64:
            count += 1
        else:
            return None
    return count


def _parameter_layout(function, count: int, query) -> bool:
    """Whether `function` takes exactly `count` parameters, each 8 bytes at
    offset 8 x its index, as the driver says (query: cuKernelGetParamInfo;
    None: taken on the signature's word, ``_eight_byte_parameters``)."""
    if query is None:
        return True
    success = _fast_driver()[2]
    for index in range(count + 1):
        try:
            error, offset, size = query(function.handle, index)
        except Exception:  # a handle this query does not take
            return False
        if index == count:
            return error != success  # no parameter after the last
        if error != success or (int(offset), int(size)) != (8 * index, 8):
            return False


def packed_launch(kernel, signature, stream, grid, block, arguments, slots, shared: int = 0):
    """go(*values): a launch of `kernel` (a Numba dispatcher compiled for
    `signature`) on `stream` (a Numba stream) over `grid` x `block` (tuples of
    three), with `shared` bytes of dynamic shared memory and `arguments`
    (ints, one per kernel parameter as cuda.core takes them), the parameters
    at positions `slots` set to go's values at each call. None where the
    fast path cannot be used: an older cuda.bindings, or a kernel whose
    parameters are not all 8 bytes and packed (each checked once, here,
    against the signature and, where the bindings can ask, the driver)."""
    import threading

    api = _fast_driver()
    if api is None:
        return None
    launch_kernel, parameter_info, success, takes_ints = api
    if _eight_byte_parameters(signature) != len(arguments):
        return None
    function = kernel.compile(signature)._codelibrary.get_cufunc()
    if not _parameter_layout(function, len(arguments), parameter_info):
        return None
    if takes_ints:
        handle, stream_handle = _handle(function.handle), _handle(stream)
    else:
        from cuda.bindings import driver

        handle, stream_handle = function.handle, driver.CUstream(_handle(stream))
    buffer = np.array([int(x) for x in arguments], dtype=np.uint64)
    size = np.array([buffer.nbytes], dtype=np.uint64)
    # CU_LAUNCH_PARAM_BUFFER_POINTER (1), the buffer, CU_LAUNCH_PARAM_BUFFER_SIZE
    # (2), its size, CU_LAUNCH_PARAM_END (0).
    extra = np.array([1, buffer.ctypes.data, 2, size.ctypes.data, 0], dtype=np.uint64)
    where, lock = extra.ctypes.data, threading.Lock()
    (gx, gy, gz), (bx, by, bz) = grid, block
    keep = (buffer, size, extra, function)  # alive as long as go is

    def go(*values):
        with lock:
            for slot, value in zip(slots, values):
                buffer[slot] = value
            error = launch_kernel(handle, gx, gy, gz, bx, by, bz, shared, stream_handle, None,
                                  where)
        if error is not None and error != success:
            raise RuntimeError(f"the CUDA driver refused the launch of {kernel.__name__}: "
                               f"error {error}")
    go.keep = keep
    return go


def flat_argument(pointer: int, size: int, itemsize: int) -> tuple:
    """A C-contiguous 1D array as a compiled kernel takes it (Numba's array
    model: meminfo, parent, nitems, itemsize, data, shape, strides)."""
    return (0, 0, size, itemsize, pointer, size, itemsize)


def matrix_argument(pointer: int, rows: int, cols: int, itemsize: int = 4,
                    row_stride: int | None = None) -> tuple:
    """A 2D array as a compiled kernel takes it: C-contiguous, or with rows
    `row_stride` elements apart (a slice of columns; the kernel must then be
    compiled for layout "A")."""
    return (0, 0, rows * cols, itemsize, pointer, rows, cols, (row_stride or cols) * itemsize,
            itemsize)



# -----------------------------------------------------------------------------
# Which GPU, and what it can do


@lru_cache(maxsize=None)
def gpu_name(device_id: int) -> str:
    """The name the driver gives GPU `device_id` (for example 'NVIDIA H100 80GB HBM3')."""
    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


# TF32 mma.sync needs compute capability 8.0 (Ampere) or later.
TENSOR_CORE_CAPABILITY = (8, 0)
# The shared memory a block may declare statically, and have without opting in.
STATIC_SHARED_LIMIT_BYTES = 48 * 1024


@lru_cache(maxsize=None)
def compute_capability(device_id: int) -> tuple[int, int]:
    """(major, minor) of this GPU; (0, 0) where the driver does not say."""
    from cuda.bindings import driver as cu

    found = []
    for attribute in (cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                      cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR):
        error, value = cu.cuDeviceGetAttribute(attribute, device_id)
        if error != cu.CUresult.CUDA_SUCCESS:
            return (0, 0)
        found.append(int(value))
    return tuple(found)


def has_tf32_tensor_cores(device_id: int) -> bool:
    """Whether this GPU runs mma.sync with TF32 (compute capability 8.0 on)."""
    return compute_capability(device_id) >= TENSOR_CORE_CAPABILITY


@lru_cache(maxsize=None)
def max_shared_bytes_per_block(device_id: int) -> int:
    """The most shared memory a block may opt in to on this GPU."""
    from cuda.bindings import driver as cu

    attribute = cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    error, value = cu.cuDeviceGetAttribute(attribute, device_id)
    return int(value) if error == cu.CUresult.CUDA_SUCCESS else STATIC_SHARED_LIMIT_BYTES


@lru_cache(maxsize=None)
def multiprocessors(device_id: int) -> int:
    """How many streaming multiprocessors (SMs) this GPU has (132 on an H100 SXM)."""
    from cuda.bindings import driver as cu

    attribute = cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
    error, value = cu.cuDeviceGetAttribute(attribute, device_id)
    if error != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"the CUDA driver did not say how many SMs GPU {device_id} has "
                           f"({error})")
    return int(value)


@lru_cache(maxsize=None)
def launchable_with_shared(kernel, dynamic_bytes, device_id):
    """What a launch of an already compiled kernel needs on one GPU, found once:
    the compiled function and the default stream, in the forms
    `cuda.core.launch` takes (the forms Numba's own launch passes it). A
    kernel with more than 48 KiB of dynamic shared memory must opt in to it,
    once: Numba has no API for that, so this sets the function attribute the
    way Numba's own `set_shared_memory_carveout` sets its attribute."""
    compiled = next(iter(kernel.overloads.values()))
    function = compiled._codelibrary.get_cufunc()
    if dynamic_bytes > STATIC_SHARED_LIMIT_BYTES:
        from numba.cuda.cudadrv.driver import binding, driver

        attribute = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        try:
            driver.cuKernelSetAttribute(attribute, int(dynamic_bytes), function.handle,
                                        function.device.id)
        except Exception as error:
            raise ValueError(f"this GPU cannot give a block {dynamic_bytes} bytes of shared "
                             f"memory ({error}); choose smaller tiles") from None
    return function.kernel, kernel.configure((1,), (1,)).stream


@lru_cache(maxsize=None)
def compiled_launchable(kernel, signature, dynamic_bytes, device_id):
    """launchable_with_shared for `kernel` compiled for `signature` first: what
    a launch of a kernel built by a factory needs, found once per kernel,
    signature, dynamic shared bytes and GPU (the tensor-core entry points'
    one call; build each kernel once, or each call compiles anew)."""
    kernel.compile(signature)
    return launchable_with_shared(kernel, dynamic_bytes, device_id)



def launch_with_shared(kernel, grid, block, dynamic_bytes, *arrays):
    """kernel[grid, block, 0, dynamic_bytes](*arrays) through Numba's own launch
    (Numba device arrays on a GPU, numpy arrays on the simulator), opting in
    first, on a GPU, to more than 48 KiB of dynamic shared memory for the
    overload these arrays select (without it the launch fails)."""
    if on_gpu() and dynamic_bytes > STATIC_SHARED_LIMIT_BYTES:
        from numba import typeof

        compiled_launchable(kernel, tuple(typeof(x) for x in arrays), dynamic_bytes,
                            current_gpu())
    kernel[grid, block, 0, dynamic_bytes](*arrays)

# -----------------------------------------------------------------------------
# The caller's arrays: numpy, Numba device arrays, CUDA torch tensors


def is_torch_tensor(x) -> bool:
    """True for a torch tensor (found by its type's module: torch is not imported)."""
    return type(x).__module__.split(".")[0] == "torch"


@lru_cache(maxsize=None)
def torch_float32():
    """torch.float32, imported once (this package does not import torch at import time)."""
    import torch

    return torch.float32


def is_device_array(x) -> bool:
    """A Numba device array (the simulator's stand-in has no CUDA array interface)."""
    if on_gpu():
        return cuda.is_cuda_array(x)
    return type(x).__name__ == "FakeCUDAArray"


def to_kernel(x, kind):
    """What a kernel launch takes: a device array (or a torch CUDA tensor as is).
    `kind`: "numpy", "device" (a Numba device array) or "torch"."""
    if kind == "numpy":
        return cuda.to_device(x)
    if kind == "torch":
        return cuda.as_cuda_array(x.detach())
    return x


def empty_like(kind, like, shape, dtype="float32"):
    """An output in the caller's kind, of element type dtype (a name: "float32"
    or "float16"); returns (what the caller gets, what a kernel takes)."""
    if kind == "torch":
        import torch

        out = torch.empty(shape, dtype=getattr(torch, dtype), device=like.device)
        return out, cuda.as_cuda_array(out)
    out = cuda.device_array(shape, dtype=np.dtype(dtype))
    return out, out


def from_kernel(out, kind):
    """A kernel's output as the caller gets it: numpy copied back to the host."""
    return out.copy_to_host() if kind == "numpy" else out


_FLOAT32 = np.dtype(np.float32)


def numba_empty(m: int, n: int, device_id: int):
    """An uninitialised m x n float32 Numba device array, its memory taken from
    the GPU's stream-ordered pool and handed back to it asynchronously.

    With `cuda.device_array`, a 1 x 1 x 1 call of matmul from Numba arrays
    took 39.4 microseconds on the H100 against 12.6 from torch tensors, and
    50-55 more at 512^3 and 1024^3 (the first sgemm_shapes run of
    2026-11-26, in git at commit 75a6878; with this function, 14.0 against
    13.6 in the committed file). `cuda.device_array` goes through Numba's
    memory manager (a checked driver call, an allocation table, a
    weak-reference finaliser) and frees with `cuMemFree`, ten at a time,
    which waits for the GPU. Here the memory comes from `cuMemAllocAsync`'s
    pool (cuda.core's DeviceMemoryResource) on the legacy default stream, the
    stream the kernels run on; the Numba array owns the buffer, and when the
    last array or view of it goes the buffer is freed on that same stream,
    after the work queued there. (Numba's external memory manager, if one is
    set, is not asked: the result of matmul is the only array made this way.)"""
    if not (m and n):
        return cuda.device_array((m, n), np.float32)
    allocate, stream, context, pointer_type, memory_type, array_type = _numba_allocator(device_id)
    buffer = allocate(m * n * 4, stream=stream)
    memory = memory_type(context, pointer_type(int(buffer.handle)), m * n * 4, owner=buffer)
    return array_type((m, n), (n * 4, 4), _FLOAT32, stream=0, gpu_data=memory)


@lru_cache(maxsize=None)
def _numba_allocator(device_id: int) -> tuple:
    """What numba_empty needs, found once per GPU: the pool's allocate, the
    legacy default stream, Numba's context, and the types of a device pointer,
    of Numba's memory pointer and of its device array."""
    from cuda.core import LEGACY_DEFAULT_STREAM, DeviceMemoryResource
    from numba.cuda.cudadrv.devicearray import DeviceNDArray
    from numba.cuda.cudadrv.driver import MemoryPointer, binding

    resource = DeviceMemoryResource(device_id)
    return (resource.allocate, LEGACY_DEFAULT_STREAM, cuda.current_context(), binding.CUdeviceptr,
            MemoryPointer, DeviceNDArray)
