"""The counting and the checks behind week 11's exercises, against independent references.

``gpucourse.kernels.tensor_cores.banks`` counts shared-memory passes by hand
rules checked here on accesses whose answer is known (consecutive words, one
bank, broadcasts, 16-byte phases); its ``ldmatrix`` lanes are checked against
the fragment map they must deliver. The grader's checks
(``gpucourse.grader.tensor_cores``) must refuse the answers that look right
and are not: a transposed fragment map, one read from the course's tables, a
plain or rotated tile layout. Nothing here runs a kernel: the notebook's
grading round trip (test_grading, test_tensor_cores_cheats) does that.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpucourse.grader import tensor_cores as check
from gpucourse.kernels.tensor_cores import fragments
from gpucourse.kernels.tensor_cores.banks import bank_conflicts, ldmatrix_x4_rows, wavefronts
from gpucourse.kernels.tensor_cores.half_step import half_online_softmax_step


def test_consecutive_words_take_one_pass_and_one_bank_takes_thirty_two():
    assert wavefronts([4 * lane for lane in range(32)]) == 1
    assert wavefronts([128 * lane for lane in range(32)]) == 32  # all in bank 0
    assert bank_conflicts([128 * lane for lane in range(32)]) == 31
    assert wavefronts([0] * 32) == 1  # one word, broadcast
    assert wavefronts([0, 128, 0, 128]) == 2  # two words of bank 0, each read twice
    # A stride of two words: lanes 0 and 16 share a bank.
    assert bank_conflicts([8 * lane for lane in range(32)]) == 1


def test_wide_accesses_are_served_in_phases_of_128_bytes():
    # 32 lanes of 16 bytes, consecutive: 4 phases of 8 lanes, each conflict-free.
    assert wavefronts([16 * lane for lane in range(32)], 16) == 4
    assert bank_conflicts([16 * lane for lane in range(32)], 16) == 0
    # 8 rows of 128 bytes, the same chunk of each: all 8 on the same 4 banks.
    assert bank_conflicts([128 * row for row in range(8)], 16) == 7
    # 8-byte accesses: 16 lanes a phase.
    assert wavefronts([8 * lane for lane in range(32)], 8) == 2


@pytest.mark.parametrize("addresses, access_bytes", [([], 4), ([0] * 33, 4), ([2], 4),
                                                      ([0, 8], 16), ([0], 12), ([-4], 4),
                                                      ([True], 4)])
def test_bad_accesses_are_refused(addresses, access_bytes):
    with pytest.raises(ValueError, match="addresses|access_bytes"):
        wavefronts(addresses, access_bytes)


def test_ldmatrix_lanes_deliver_the_fragments_of_a():
    """Lane l of an ldmatrix.x4 receives, in register j, row l // 4 and columns 2(l % 4),
    2(l % 4) + 1 of matrix j, whose rows are named by lanes 8j to 8j + 7: those must be
    a_{2j} and a_{2j+1} of lane l's fragment of A (fragments.A_FRAGMENT)."""
    named = ldmatrix_x4_rows(0, 0)
    for lane in range(32):
        for j in range(4):
            row, chunk = named[8 * j + lane // 4]
            for half in range(2):
                place = (row, 8 * chunk + 2 * (lane % 4) + half)
                assert tuple(fragments.A_FRAGMENT[lane, 2 * j + half]) == place, (lane, j)
    assert ldmatrix_x4_rows(16, 2)[31] == (31, 3)
    with pytest.raises(ValueError, match="first_row"):
        ldmatrix_x4_rows(-1, 0)


def _xor_swizzle(row, chunk, chunks_per_row):
    return chunk ^ ((row // max(1, 8 // chunks_per_row)) % chunks_per_row)


def test_the_swizzle_check_passes_the_xor_swizzle_and_counts_the_plain_layout():
    for chunks_per_row in (1, 2, 4, 8):
        check.expect_swizzle(_xor_swizzle, chunks_per_row, rows=32)
    # Plain rows of 128 bytes: 7 extra passes for each of the 4 matrices of each of the
    # 4 ldmatrix.x4 (16 rows, 4 pairs of chunks); rows of 32 bytes: rows r and r + 4 meet.
    assert check.read_conflicts(lambda row, chunk: chunk, 8) == 7 * 4 * 4
    assert check.read_conflicts(lambda row, chunk: chunk, 2) == 1 * 4
    assert check.store_conflicts(lambda row, chunk: chunk, 8) == 0


@pytest.mark.parametrize("layout, message", [
    (lambda row, chunk, per_row: chunk, "bank conflicts"),
    (lambda row, chunk, per_row: (chunk + row) % per_row, "not c XOR one value"),
    (lambda row, chunk, per_row: chunk ^ (row % 8), "each of 0 to 3 exactly once"),
])
def test_the_swizzle_check_refuses_other_layouts(layout, message):
    with pytest.raises(AssertionError, match=message):
        check.expect_swizzle(layout, 4)


def _place(operand, lane, index):
    """The PTX ISA's rules, written out once more (the test's own reference)."""
    g, t = lane // 4, lane % 4
    if operand == "A":
        return g + 8 * ((index // 2) % 2), 2 * t + index % 2 + 8 * (index // 4)
    if operand == "B":
        return 2 * t + index % 2 + 8 * (index // 2), g
    return g + 8 * (index // 2), 2 * t + index % 2


def test_the_fragment_check_passes_the_rules_and_names_a_wrong_place():
    check.expect_fragment_map(_place)

    def transposed_b(operand, lane, index):
        row, col = _place(operand, lane, index)
        return (col, row) if operand == "B" else (row, col)

    with pytest.raises(AssertionError, match=r"fragment_place\('B', 0, 1\) returned \(0, 1\)"):
        check.expect_fragment_map(transposed_b)


def test_the_fragment_check_hides_the_tables_and_refuses_copies():
    before = [table.copy() for table in (fragments.A_FRAGMENT, fragments.C_FRAGMENT)]

    def from_the_tables(operand, lane, index):
        table = {"A": fragments.A_FRAGMENT, "B": fragments.B_FRAGMENT,
                 "C": fragments.C_FRAGMENT}[operand]
        return tuple(int(x) for x in table[lane, index])

    with pytest.raises(AssertionError, match="returned"):
        check.expect_fragment_map(from_the_tables)
    copied = fragments.C_FRAGMENT.tolist()

    def from_a_copy(operand, lane, index):
        return tuple(copied[lane][index])

    with pytest.raises(AssertionError, match="reads copied, a copy of the course's"):
        check.expect_fragment_map(from_a_copy, operands=("C",))
    # The tables are back as they were.
    assert np.array_equal(before[0], fragments.A_FRAGMENT)
    assert np.array_equal(before[1], fragments.C_FRAGMENT)


def test_the_half_step_rounds_p_and_nothing_else():
    """Against float64 by hand: P = (1, 1/3) after the maximum; 1/3 in float16 is
    0.333251953125, so the P V product carries that and the sum does not."""
    m, l, o = half_online_softmax_step(
        np.array([-np.inf], np.float32), np.zeros(1, np.float32), np.zeros((1, 1), np.float32),
        np.array([[np.log(3.0), 0.0]], np.float32), np.array([[1.0], [1.0]], np.float16))
    third = float(np.float32(np.exp(np.float32(-np.log(3.0)))))
    assert m.dtype == l.dtype == o.dtype == np.float32
    assert abs(l[0] - (1 + third)) < 1e-7
    assert o[0, 0] == np.float32(1 + float(np.float16(third)))
    with pytest.raises(ValueError, match="values"):
        half_online_softmax_step(np.zeros(1), np.zeros(1), np.zeros((1, 1)), np.zeros((1, 1)),
                                 np.zeros((1, 1), np.float32))
    with pytest.raises(ValueError, match="scores"):
        half_online_softmax_step(np.zeros(1), np.zeros(1), np.zeros((1, 1)), np.zeros((1, 2)),
                                 np.zeros((1, 1), np.float16))


def test_a_kernel_calling_the_mma_instruction_is_compiled_with_the_real_one():
    """On the simulator mma_m16n8k16 is a Python stand-in; the source the PTX compiler
    gets must import the instruction instead of copying the stand-in."""
    from gpucourse.device import cuda
    from gpucourse.grader.ptx import kernel_module_source
    from gpucourse.kernels.tensor_cores.intrinsics import mma_m16n8k16 as mma

    @cuda.jit
    def one_mma(a, d):
        x = a[0]
        d[0] = mma(x, x, x, x, x, x, x, x, x, x, x, x, d[0], d[0], d[0], d[0])[0]

    source, name = kernel_module_source(one_mma)
    assert name == "one_mma"
    assert "from gpucourse.kernels.tensor_cores.intrinsics import mma_m16n8k16 as mma" in source
    assert "_SCRATCH" not in source  # nothing of the stand-in
