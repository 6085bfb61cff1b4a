"""Which thread of a warp holds which element: the fragment maps of the tensor-core instructions.

A tensor-core instruction is warp-wide: 32 threads multiply two small
matrices together, and no thread holds a whole matrix. Each holds a
*fragment*, a few elements at places the PTX ISA fixes. This module lists
those places as numpy arrays, one row per lane, so that a kernel, a test and
the simulator's stand-ins all read the same rules. For
``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`` (A 16 x 16 and B 16 x 8
in fp16, C and D 16 x 8 in fp32) each lane holds 8 elements of A, 4 of B and 4
of C and D ("Matrix fragments for mma.m16n8k16 with floating point type").
With ``g = lane // 4`` and ``t = lane % 4``:

* A (row-major): a0, a1 at row g, columns 2t and 2t+1; a2, a3 at row g+8,
  the same columns; a4, a5 at row g, columns 2t+8 and 2t+9; a6, a7 at row g+8,
  columns 2t+8 and 2t+9;
* B (column-major, "col"): b0, b1 at rows 2t and 2t+1, column g; b2, b3 at
  rows 2t+8 and 2t+9, column g;
* C and D: c0, c1 at row g, columns 2t and 2t+1; c2, c3 at row g+8, the same
  columns.

``A_FRAGMENT``, ``B_FRAGMENT`` and ``C_FRAGMENT`` list those places;
``A_FRAGMENT_TF32``, ``B_FRAGMENT_TF32`` and ``C_FRAGMENT_TF32`` those of the
TF32 instruction m16n8k8 (the notes below say where they come from). It is
separate from the instructions themselves because it is plain data: numpy
only, no Numba, readable and testable without a GPU or a compiler; the
layouts that later kernels need (ldmatrix, swizzled shared tiles) belong here
too.
"""

from __future__ import annotations

import numpy as np

WARP = 32
M, N, K = 16, 8, 16  # the shape of one instruction (the fp16 mma.m16n8k16)


def _places():
    """(A, B, C) fragment places: for each lane, the (row, column) of each of
    its 8, 4 and 4 elements, from the PTX ISA's rules."""
    a_places, b_places, c_places = [], [], []
    for lane in range(WARP):
        g, t = lane // 4, lane % 4
        a_places.append([(g + 8 * ((i // 2) % 2), 2 * t + (i % 2) + 8 * (i // 4)) for i in range(8)])
        b_places.append([(2 * t + (i % 2) + 8 * (i // 2), g) for i in range(4)])
        c_places.append([(g + 8 * (i // 2), 2 * t + (i % 2)) for i in range(4)])
    return (np.array(a_places, dtype=np.int32), np.array(b_places, dtype=np.int32),
            np.array(c_places, dtype=np.int32))


# A_FRAGMENT[lane, i] = (row, column) of element i of lane's fragment of A; likewise B and C.
A_FRAGMENT, B_FRAGMENT, C_FRAGMENT = _places()


# ---------------------------------------------------------------------------
# TF32: the fragments of mma.m16n8k8, fp32 inputs on the tensor cores
# ---------------------------------------------------------------------------
#
# The instruction (PTX ISA, sm_80+):
#
#     mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
#
# D = A B + C with A 16 x 8 and B 8 x 8 in TF32 (8 exponent bits like fp32, 10
# fraction bits like fp16), C and D 16 x 8 in fp32. Each lane holds 4 elements
# of A and 2 of B, one per 32-bit register, and 4 of C and D. Fragment places,
# from the PTX ISA's "Matrix Fragments for mma.m16n8k8", the .tf32 cases
# (section 9.7.14.5.7 of PTX ISA 9.0, Figures 72, 75 and 77;
# docs.nvidia.com/cuda/parallel-thread-execution/#warp-level-matrix-fragment-mma-1688;
# read in the ISA's text as mirrored in the public repository
# jIab-b/nvfp4_gemv-kernel, kernel_thing/ptx_llm/sections/
# 9-7-14-5-7-matrix-fragments-for-mma-m16n8k8.md), with g = lane // 4 and
# t = lane % 4:
#
# * A (row-major): row g for a0 and a2, g + 8 for a1 and a3; column t for a0
#   and a1, t + 4 for a2 and a3. Note the order differs from the fp16
#   instruction's: here the second register is 8 rows down, not 1 column on;
# * B (column-major): row t for b0, t + 4 for b1; column g;
# * C and D: as for m16n8k16 (C_FRAGMENT): row g for c0 and c1, g + 8 for c2
#   and c3; column 2t + (i % 2).
#
# The same places appear in public kernels that issue this instruction in
# inline assembly (a CUDA C++ FlashAttention's fragment loaders; a Mojo test
# kernel citing the same ISA section: row_a0_a2 = groupId, row_a1_a3 =
# groupId + 8, col_a0_a1 = threadIdInGroup, col_a2_a3 = threadIdInGroup + 4).

TF32_M, TF32_N, TF32_K = 16, 8, 8  # the shape of one TF32 instruction


def _places_tf32():
    """(A, B) fragment places of mma.m16n8k8 with .tf32, from the PTX ISA's rules."""
    a_places, b_places = [], []
    for lane in range(WARP):
        g, t = lane // 4, lane % 4
        a_places.append([(g + 8 * (i % 2), t + 4 * (i // 2)) for i in range(4)])
        b_places.append([(t + 4 * i, g) for i in range(2)])
    return np.array(a_places, dtype=np.int32), np.array(b_places, dtype=np.int32)


# A_FRAGMENT_TF32[lane, i] = (row, column) of element i of lane's fragment of A
# (16 x 8); B_FRAGMENT_TF32 likewise for B (8 x 8). C and D: C_FRAGMENT_TF32,
# the same places as the fp16 instruction's C_FRAGMENT.
A_FRAGMENT_TF32, B_FRAGMENT_TF32 = _places_tf32()
C_FRAGMENT_TF32 = C_FRAGMENT
