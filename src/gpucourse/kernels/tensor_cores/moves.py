"""Moving half-precision tiles: ``cp.async`` into shared memory, ``ldmatrix`` out of it, and the mma on packed registers.

The first two HGEMM levels move every element of A and B by itself: a thread
loads a half from global memory into a register, stores it to shared memory,
and later each lane reads its fragment's halves one at a time. Fast kernels on
tensor cores move data in larger pieces and never through registers when they
can help it. Three instructions do that (PTX ISA, "Data Movement and
Conversion Instructions"), and this module gives each to Numba:

* ``cp_async_16(to, source, valid)``: ``cp.async.cg.shared.global``, 16
  bytes (8 halves) copied from global memory straight into shared memory,
  without passing through the thread's registers, and without waiting for
  it: the thread goes on while the copy is in flight. When ``valid`` is
  false nothing is read and the 16 bytes are zeros (the instruction's source
  size of 0), which pads tiles beyond the matrices' edges.
  ``cp_async_commit()`` closes a group of copies; ``cp_async_wait(n)``
  waits until at most ``n`` groups are still in flight (``cp.async.wait_group
  n``; n must be a constant: one function per n).
* ``ldmatrix_x4(address)`` and ``ldmatrix_x4_trans(address)``:
  ``ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16``. A warp reads four 8 x
  8 matrices of halves from shared memory. Lanes 8j to 8j + 7 each give the
  address of one 16-byte row of matrix j; lane l receives, in register j,
  the two halves of matrix j at row l // 4, columns 2(l % 4) and 2(l % 4) +
  1: exactly a fragment of the mma (``fragments``). With ``.trans`` each
  matrix arrives transposed, so a B stored row by row (k, then n) arrives as
  the "col" fragment the mma wants.
* Addresses are plain integers, as the instructions take them:
  ``shared_address(tile, i)`` is the 32-bit shared-memory address of
  ``tile[i]``, ``global_address(matrix, row, col)`` the 64-bit address of
  ``matrix[row, col]`` (``global_address_flat(array, i)`` of
  ``array[i]``). A kernel works them out once and then adds offsets (the
  next stage, the next step along K), which is most of what makes the fast
  levels fast.
* ``mma_packed(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)`` for fp16 and
  ``mma_packed_bf16`` for bf16: ``mma.sync.aligned.m16n8k16`` on registers
  as ``ldmatrix`` leaves them, two halves per 32-bit register, the first in
  the low bits; ``pack_f16x2`` and ``pack_bf16x2`` round two float32 into such
  a register (``cvt.rn.f16x2.f32``, ``cvt.rn.bf16x2.f32``) for the output;
  ``f16_to_float`` and ``bf16_to_float`` widen one half's bits to float32,
  and ``as_float32`` reads a register's 32 bits as a float32 (ldmatrix moves
  float32 too, two halves at a time); ``shared_word(address, offset)`` loads the 32
  bits at a shared address plus an offset (``ld.shared.b32``), and
  ``shared_store_word(address, offset, word)`` stores them, so that a kernel
  moving 32 bits at a time through shared memory adds constant offsets to
  addresses it worked out once, as it does for ldmatrix.

Halves travel as ``uint16`` (their bits): numpy has no bfloat16, and the
kernels never compute with a half themselves, they only move it and hand it
to the tensor cores.

On Numba's simulator each instruction has a stand-in with the same meaning:
an address holds the array's number in its high bits and the byte offset in
its low ones, ``cp_async_16`` copies at once (waiting is then a no-op), ``ldmatrix_x4``
gathers the warp's addresses through a scratch area and a block-wide barrier
(like the mma stand-ins; every thread of the block must call it together),
and the mma unpacks the bits, multiplies in float64 and rounds to float32.
"""

from __future__ import annotations

import threading

import numpy as np

from gpucourse.device import cuda, on_gpu
# Committing and waiting for cp.async groups are the float32 copies' too
# (_async_copy, below this package); the kernels here import them from moves.
from gpucourse.kernels._async_copy import (SHARED_SPACE, cp_async_commit,  # noqa: F401
                                           cp_async_wait)
from gpucourse.kernels.tensor_cores.fragments import C_FRAGMENT, WARP, K, M, N

_MMA = {"f16": ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};"),
        "bf16": ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};")}
_LDMATRIX = {False: "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {$0,$1,$2,$3}, [$4];",
             True: "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {$0,$1,$2,$3}, [$4];"}
_CP_ASYNC = "cp.async.cg.shared.global [$0], [$1], 16, $2;"
_PACK = {"f16": "cvt.rn.f16x2.f32 $0, $1, $2;", "bf16": "cvt.rn.bf16x2.f32 $0, $1, $2;"}


if on_gpu():
    from llvmlite import ir
    from numba import types
    from numba.cuda.core.errors import NumbaTypeError
    from numba.cuda.extending import intrinsic

    from gpucourse.kernels._async_copy import _element_pointer, _shared_address

    def _check_tile(name, tile, index):
        if not (isinstance(tile, types.Array) and tile.ndim == 1
                and tile.dtype == types.uint16):
            raise NumbaTypeError(f"{name} needs a 1D uint16 shared array, got {tile}")
        if not isinstance(index, types.Integer):
            raise NumbaTypeError(f"{name} needs an integer index, got {index}")

    @intrinsic
    def shared_address(typingctx, tile, index):
        """The 32-bit shared-memory address (in bytes) of tile[index]."""
        _check_tile("shared_address", tile, index)

        def codegen(context, builder, sig, args):
            pointer = _element_pointer(context, builder, sig.args[0], args[0], [args[1]],
                                       [sig.args[1]])
            return _shared_address(builder, pointer)

        return types.uint32(tile, index), codegen

    @intrinsic
    def global_address(typingctx, matrix, row, col):
        """The 64-bit address (in bytes) of matrix[row, col], a 2D uint16 array."""
        if not (isinstance(matrix, types.Array) and matrix.ndim == 2
                and matrix.dtype == types.uint16):
            raise NumbaTypeError(f"global_address needs a 2D uint16 matrix, got {matrix}")

        def codegen(context, builder, sig, args):
            pointer = _element_pointer(context, builder, sig.args[0], args[0], args[1:],
                                       sig.args[1:])
            return builder.ptrtoint(pointer, ir.IntType(64))

        return types.uint64(matrix, row, col), codegen

    @intrinsic
    def global_address_flat(typingctx, array, index):
        """The 64-bit address (in bytes) of array[index], a 1D uint16 array."""
        if not (isinstance(array, types.Array) and array.ndim == 1
                and array.dtype == types.uint16):
            raise NumbaTypeError(f"global_address_flat needs a 1D uint16 array, got {array}")

        def codegen(context, builder, sig, args):
            pointer = _element_pointer(context, builder, sig.args[0], args[0], [args[1]],
                                       [sig.args[1]])
            return builder.ptrtoint(pointer, ir.IntType(64))

        return types.uint64(array, index), codegen

    def _as_i32(context, builder, value, kind):
        return builder.trunc(context.cast(builder, value, kind, types.uint64), ir.IntType(32))

    def _make_ldmatrix(trans):
        @intrinsic
        def ldmatrix(typingctx, address):
            if not isinstance(address, types.Integer):
                raise NumbaTypeError(f"ldmatrix_x4 needs a shared address, got {address}")
            signature = types.UniTuple(types.uint32, 4)(address)

            def codegen(context, builder, sig, args):
                i32 = ir.IntType(32)
                asm = ir.InlineAsm(ir.FunctionType(ir.LiteralStructType([i32] * 4), [i32]),
                                   _LDMATRIX[trans], "=r,=r,=r,=r,r,~{memory}",
                                   side_effect=True)
                out = builder.call(asm, [_as_i32(context, builder, args[0], sig.args[0])])
                return context.make_tuple(builder, sig.return_type,
                                          [builder.extract_value(out, j) for j in range(4)])

            return signature, codegen

        return ldmatrix

    ldmatrix_x4 = _make_ldmatrix(False)
    ldmatrix_x4_trans = _make_ldmatrix(True)

    @intrinsic
    def cp_async_16(typingctx, destination, source, valid):
        """16 bytes from global address `source` to shared address
        `destination` (zeros when not valid), asynchronously."""
        if not (isinstance(destination, types.Integer) and isinstance(source, types.Integer)):
            raise NumbaTypeError(f"cp_async_16 needs a shared and a global address, got "
                                 f"{destination}, {source}")

        def codegen(context, builder, sig, args):
            i32, i64 = ir.IntType(32), ir.IntType(64)
            valid_value = context.cast(builder, args[2], sig.args[2], types.boolean)
            size = builder.select(valid_value, ir.Constant(i32, 16), ir.Constant(i32, 0))
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [i32, i64, i32]), _CP_ASYNC,
                               "r,l,r,~{memory}", side_effect=True)
            builder.call(asm, [_as_i32(context, builder, args[0], sig.args[0]),
                               context.cast(builder, args[1], sig.args[1], types.uint64), size])
            return context.get_dummy_value()

        return types.void(destination, source, valid), codegen

    def _make_mma(kind):
        @intrinsic
        def mma(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
            registers, sums = (a0, a1, a2, a3, b0, b1), (c0, c1, c2, c3)
            if not all(isinstance(x, types.Integer) and x.bitwidth == 32 for x in registers) \
                    or not all(x == types.float32 for x in sums):
                raise NumbaTypeError(f"mma_packed takes 6 uint32 registers (A, B) and 4 "
                                     f"float32 (C), got {registers + sums}")
            signature = types.UniTuple(types.float32, 4)(*registers, *sums)

            def codegen(context, builder, sig, args):
                i32, f32 = ir.IntType(32), ir.FloatType()
                asm = ir.InlineAsm(ir.FunctionType(ir.LiteralStructType([f32] * 4),
                                                   [i32] * 6 + [f32] * 4), _MMA[kind],
                                   "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f")
                out = builder.call(asm, list(args))
                return context.make_tuple(builder, sig.return_type,
                                          [builder.extract_value(out, j) for j in range(4)])

            return signature, codegen

        return mma

    mma_packed = _make_mma("f16")
    mma_packed_bf16 = _make_mma("bf16")

    def _make_pack(kind):
        @intrinsic
        def pack(typingctx, low, high):
            if not (low == types.float32 and high == types.float32):
                raise NumbaTypeError(f"pack takes two float32, got {low}, {high}")

            def codegen(context, builder, sig, args):
                i32, f32 = ir.IntType(32), ir.FloatType()
                asm = ir.InlineAsm(ir.FunctionType(i32, [f32, f32]), _PACK[kind], "=r,f,f")
                return builder.call(asm, [args[1], args[0]])  # the first operand goes high

            return types.uint32(types.float32, types.float32), codegen

        return pack

    pack_f16x2 = _make_pack("f16")
    pack_bf16x2 = _make_pack("bf16")

    def _make_widen(kind):
        @intrinsic
        def widen(typingctx, bits):
            if not (isinstance(bits, types.Integer) and bits.bitwidth == 16):
                raise NumbaTypeError(f"widen takes a half's 16 bits (uint16), got {bits}")

            def codegen(context, builder, sig, args):
                i16, i32, f32 = ir.IntType(16), ir.IntType(32), ir.FloatType()
                if kind == "bf16":  # a bf16 is the top half of a float32
                    shifted = builder.shl(builder.zext(args[0], i32), i32(16))
                    return builder.bitcast(shifted, f32)
                asm = ir.InlineAsm(ir.FunctionType(f32, [i16]), "cvt.f32.f16 $0, $1;", "=f,h")
                return builder.call(asm, [args[0]])

            return types.float32(bits), codegen

        return widen

    f16_to_float = _make_widen("f16")
    bf16_to_float = _make_widen("bf16")

    def _word_pointer(context, builder, sig, args):
        """A pointer to the 32 bits at shared address args[0] plus byte offset
        args[1] (a constant offset stays one, for the instruction to take)."""
        base = builder.inttoptr(_as_i32(context, builder, args[0], sig.args[0]),
                                ir.PointerType(ir.IntType(8), SHARED_SPACE))
        step = context.cast(builder, args[1], sig.args[1], types.int64)
        return builder.bitcast(builder.gep(base, [step], inbounds=True),
                               ir.PointerType(ir.IntType(32), SHARED_SPACE))

    @intrinsic
    def shared_word(typingctx, address, offset):
        """The 32 bits at a shared-memory address plus a byte offset
        (shared_address's, a multiple of 4 in all) as uint32: a plain load
        that the compiler can schedule, with a constant offset folded into
        the instruction ([R + offset]), where an indexed read of a shared
        array works its address out again each time."""
        if not (isinstance(address, types.Integer) and isinstance(offset, types.Integer)):
            raise NumbaTypeError(f"shared_word needs a shared address and an offset, got "
                                 f"{address}, {offset}")

        def codegen(context, builder, sig, args):
            return builder.load(_word_pointer(context, builder, sig, args), align=4)

        return types.uint32(address, offset), codegen

    @intrinsic
    def shared_store_word(typingctx, address, offset, word):
        """Store 32 bits (uint32) at a shared-memory address plus a byte
        offset (a multiple of 4 in all), as shared_word reads them."""
        if not all(isinstance(x, types.Integer) for x in (address, offset, word)):
            raise NumbaTypeError(f"shared_store_word needs a shared address, an offset and "
                                 f"32 bits, got {address}, {offset}, {word}")

        def codegen(context, builder, sig, args):
            builder.store(_as_i32(context, builder, args[2], sig.args[2]),
                          _word_pointer(context, builder, sig, args), align=4)
            return context.get_dummy_value()

        return types.void(address, offset, word), codegen

    @intrinsic
    def as_float32(typingctx, bits):
        """A 32-bit register's bits seen as a float32 (what ldmatrix leaves,
        when the matrix held float32)."""
        if not (isinstance(bits, types.Integer) and bits.bitwidth == 32):
            raise NumbaTypeError(f"as_float32 takes 32 bits (uint32), got {bits}")

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], ir.FloatType())

        return types.float32(bits), codegen

else:
    # The simulator's stand-ins (see the module's docstring).
    from gpucourse.kernels.tensor_cores.intrinsics import _warp_and_lane
    _LDMATRIX_SCRATCH: dict = {}
    _LOCK = threading.Lock()

    def _halves_as_float(bits, kind):
        """uint16 bits as the float32 values of fp16 or bf16 halves."""
        bits = np.asarray(bits, dtype=np.uint16)
        if kind == "f16":
            return bits.view(np.float16).astype(np.float32)
        return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)

    def round_to_bf16_bits(x):
        """float32 values rounded to bf16, to nearest with ties to even (what
        cvt.rn.bf16x2.f32 does), as uint16 bits; NaN stays NaN."""
        x = np.asarray(x, dtype=np.float32)
        bits = x.view(np.uint32).astype(np.uint64)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        nan = np.isnan(x)
        return np.where(nan, (bits >> 16) | 0x40, rounded).astype(np.uint16)

    def _unpack(register):
        register = int(register)
        return register & 0xFFFF, register >> 16

    # Addresses on the simulator: an array's number (in _ARRAYS) in the high
    # bits, the byte offset in the low ones, so that kernels add offsets to
    # them as they do on a GPU.
    _ARRAYS: dict = {}  # number -> array
    _NUMBERS: dict = {}  # id(array) -> number
    _SHARED_BITS, _GLOBAL_BITS = 18, 40  # shared memory: at most 256 KiB a block

    def _number(array):
        with _LOCK:
            number = _NUMBERS.get(id(array))
            if number is None:
                number = _NUMBERS[id(array)] = len(_ARRAYS) + 1
                _ARRAYS[number] = array
            return number

    def _read(address, bits):
        """The half at an address made by shared_address or global_address."""
        array, element = _ARRAYS[int(address) >> bits], (int(address) & ((1 << bits) - 1)) // 2
        if array.ndim == 1:
            return array[element]
        return array[element // array.shape[1], element % array.shape[1]]

    @cuda.jit(device=True)
    def shared_address(tile, index):
        """tile[index]'s address (see above)."""
        return np.uint32((_number(tile) << _SHARED_BITS) + 2 * int(index))

    @cuda.jit(device=True)
    def global_address(matrix, row, col):
        """matrix[row, col]'s address (see above)."""
        return np.uint64((_number(matrix) << _GLOBAL_BITS)
                         + 2 * (int(row) * matrix.shape[1] + int(col)))

    @cuda.jit(device=True)
    def global_address_flat(array, index):
        """array[index]'s address (see above)."""
        return np.uint64((_number(array) << _GLOBAL_BITS) + 2 * int(index))

    @cuda.jit(device=True)
    def cp_async_16(destination, source, valid):
        """The 8 halves at `source` to `destination`, or zeros."""
        destination = int(destination)
        tile = _ARRAYS[destination >> _SHARED_BITS]
        first = (destination & ((1 << _SHARED_BITS) - 1)) // 2
        for j in range(8):
            tile[first + j] = _read(int(source) + 2 * j, _GLOBAL_BITS) if valid else 0

    @cuda.jit(device=True)
    def _ldmatrix(address, trans):
        key, lane = _warp_and_lane()
        with _LOCK:
            call = _LDMATRIX_SCRATCH.setdefault(("calls",) + key + (lane,), 0) + 1
            _LDMATRIX_SCRATCH[("calls",) + key + (lane,)] = call
            _LDMATRIX_SCRATCH.setdefault(key + (call,), {})[lane] = int(address)
        cuda.syncthreads()
        addresses = _LDMATRIX_SCRATCH[key + (call,)]
        registers = []
        for j in range(4):  # matrix j: rows at the addresses of lanes 8j .. 8j + 7
            rows = np.array([[_read(addresses[8 * j + r] + 2 * c, _SHARED_BITS)
                              for c in range(8)] for r in range(8)], dtype=np.uint16)
            if trans:
                rows = rows.T
            low, high = rows[lane // 4, 2 * (lane % 4)], rows[lane // 4, 2 * (lane % 4) + 1]
            registers.append(np.uint32(int(low) | (int(high) << 16)))
        cuda.syncthreads()  # all have read the addresses before the next call's
        return tuple(registers)

    @cuda.jit(device=True)
    def ldmatrix_x4(address):
        """Four 8 x 8 matrices of halves, each lane's fragment of each."""
        return _ldmatrix(address, False)

    @cuda.jit(device=True)
    def ldmatrix_x4_trans(address):
        """The same, each matrix transposed."""
        return _ldmatrix(address, True)

    _MMA_SCRATCH: dict = {}

    def _make_mma(kind):
        @cuda.jit(device=True)
        def mma(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
            """D = A B + C on packed registers (see the module's docstring)."""
            key, lane = _warp_and_lane()
            with _LOCK:
                call = _MMA_SCRATCH.setdefault(("calls",) + key + (lane,), 0) + 1
                _MMA_SCRATCH[("calls",) + key + (lane,)] = call
                _MMA_SCRATCH.setdefault(key + (call,), {})[lane] = (a0, a1, a2, a3, b0, b1,
                                                                    c0, c1, c2, c3)
            cuda.syncthreads()
            parts = _MMA_SCRATCH[key + (call,)]
            a = np.zeros((M, K))
            b = np.zeros((K, N))
            c = np.zeros((M, N))
            for other in range(WARP):
                g, t = other // 4, other % 4
                regs = parts[other]
                halves_a = [h for r in regs[:4] for h in _unpack(r)]
                halves_b = [h for r in regs[4:6] for h in _unpack(r)]
                values_a = _halves_as_float(halves_a, kind)
                values_b = _halves_as_float(halves_b, kind)
                for i in range(8):  # A_FRAGMENT: row g (+8), column 2t (+1) (+8)
                    a[g + 8 * ((i // 2) % 2), 2 * t + i % 2 + 8 * (i // 4)] = values_a[i]
                for i in range(4):  # B_FRAGMENT: row 2t (+1) (+8), column g
                    b[2 * t + i % 2 + 8 * (i // 2), g] = values_b[i]
                for i in range(4):
                    c[C_FRAGMENT[other, i, 0], C_FRAGMENT[other, i, 1]] = regs[6 + i]
            d = (a @ b + c).astype(np.float32)
            cuda.syncthreads()
            return tuple(np.float32(d[C_FRAGMENT[lane, i, 0], C_FRAGMENT[lane, i, 1]])
                         for i in range(4))

        return mma

    mma_packed = _make_mma("f16")
    mma_packed_bf16 = _make_mma("bf16")

    def pack_f16x2(low, high):
        """Two float32 rounded to fp16, in one register, the first low."""
        bits = np.array([low, high], dtype=np.float32).astype(np.float16).view(np.uint16)
        return np.uint32(int(bits[0]) | (int(bits[1]) << 16))

    def pack_bf16x2(low, high):
        """Two float32 rounded to bf16, in one register, the first low."""
        bits = round_to_bf16_bits(np.array([low, high], dtype=np.float32))
        return np.uint32(int(bits[0]) | (int(bits[1]) << 16))

    @cuda.jit(device=True)
    def shared_word(address, offset):
        """The two halves at a shared address plus offset, as one uint32, the first low."""
        at = int(address) + int(offset)
        return np.uint32(int(_read(at, _SHARED_BITS)) | (int(_read(at + 2, _SHARED_BITS)) << 16))

    @cuda.jit(device=True)
    def shared_store_word(address, offset, word):
        """The two halves of a uint32 to a shared address plus offset, the low one first."""
        at = int(address) + int(offset)
        tile = _ARRAYS[at >> _SHARED_BITS]
        first = (at & ((1 << _SHARED_BITS) - 1)) // 2
        tile[first] = int(word) & 0xFFFF
        tile[first + 1] = (int(word) >> 16) & 0xFFFF

    def as_float32(bits):
        """A 32-bit register's bits seen as a float32."""
        return np.array([bits], dtype=np.uint32).view(np.float32)[0]

    def f16_to_float(bits):
        """An fp16's bits as the float32 it is."""
        return np.float32(_halves_as_float([bits], "f16")[0])

    def bf16_to_float(bits):
        """A bf16's bits as the float32 it is."""
        return np.float32(_halves_as_float([bits], "bf16")[0])


def forget_earlier_moves():
    """Forget the simulator stand-ins' record of earlier calls, before a launch."""
    if not on_gpu():
        for state in (_LDMATRIX_SCRATCH, _MMA_SCRATCH, _ARRAYS, _NUMBERS):
            state.clear()
