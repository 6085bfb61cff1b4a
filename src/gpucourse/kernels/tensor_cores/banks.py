"""Shared-memory bank conflicts, counted: how many passes a warp's access to shared memory takes.

Shared memory is cut into 32 banks, 4 bytes wide: the 32-bit word at byte
address ``a`` lies in bank ``(a // 4) % 32``. Each bank serves one word per
pass (a *wavefront*, as Nsight Compute calls it), so when the lanes of a warp
touch two different words of one bank, the access takes two passes: a
two-way bank conflict. Lanes reading the same word share it (a broadcast).
An access wider than 4 bytes a lane is served in *phases*, each covering 128
bytes' worth of lanes: 16 lanes of 8 bytes, 8 lanes of 16 bytes. An
``ldmatrix.x4``, for one, reads four 8 x 8 matrices of halves, each in one
phase whose 8 lanes give the addresses of its 8 rows of 16 bytes.

The banks are those of the CUDA C++ Best Practices Guide ("Shared Memory":
32 banks of 32 bits, successive words in successive banks, a broadcast for
lanes reading one word). The phases of wide accesses are as NVIDIA's
engineers describe them on the developer forum ("Unexpected shared memory
bank conflict", forums.developer.nvidia.com/t/77228: shared memory returns
128 bytes a cycle, so a 128-bit load takes four requests); it is a model of
the hardware, as Nsight Compute's counts of wavefronts are its measurement.

:func:`wavefronts` counts the passes of one warp-wide access from its lanes'
byte addresses; :func:`bank_conflicts` the passes beyond the one each phase
needs at least; :func:`ldmatrix_x4_rows` says which row and 16-byte chunk of
a tile each lane of an ``ldmatrix.x4`` names, for a 16 x 16 fragment of A.
The module counts addresses and runs nothing, so it is plain Python, readable
without Numba: week 11's exercise on the XOR swizzle and its grader count a
tile's reads with it.
"""

from __future__ import annotations

import numbers

BANKS = 32
BANK_BYTES = 4  # each bank serves one 32-bit word a pass
PHASE_BYTES = BANKS * BANK_BYTES  # 128 bytes: what one pass can serve without conflict
CHUNK_BYTES = 16  # one row of an ldmatrix matrix, one cp.async: 8 halves
WARP = 32
ACCESS_BYTES = (4, 8, 16)


def _check(addresses, access_bytes) -> list[int]:
    if access_bytes not in ACCESS_BYTES or isinstance(access_bytes, bool):
        raise ValueError(f"access_bytes must be one of {ACCESS_BYTES}, got {access_bytes!r}")
    addresses = list(addresses)
    if not 1 <= len(addresses) <= WARP:
        raise ValueError(f"addresses must hold one byte address for each of 1 to {WARP} "
                         f"lanes, got {len(addresses)}")
    for address in addresses:
        if isinstance(address, bool) or not isinstance(address, numbers.Integral) \
                or address < 0 or address % access_bytes:
            raise ValueError(f"addresses must be whole numbers >= 0, multiples of "
                             f"access_bytes={access_bytes} (aligned), got {address!r}")
    return [int(a) for a in addresses]


def wavefronts(addresses, access_bytes: int = 4) -> int:
    """The passes shared memory takes to serve one warp-wide access.

    addresses: the byte address each lane accesses, lane 0 first (1 to 32 of
    them), each a multiple of ``access_bytes`` (4, 8 or 16: the bytes each
    lane reads or writes). The lanes are served in phases of 128 bytes' worth
    of lanes (32, 16 or 8 lanes); a phase takes as many passes as the most
    distinct 32-bit words any one bank holds among its lanes' words. Returns
    the sum over the phases. Raises ValueError for anything else.
    """
    addresses = _check(addresses, access_bytes)
    lanes_per_phase = PHASE_BYTES // access_bytes
    total = 0
    for start in range(0, len(addresses), lanes_per_phase):
        words_of_bank: dict[int, set] = {}
        for address in addresses[start:start + lanes_per_phase]:
            for word in range(address // BANK_BYTES, (address + access_bytes) // BANK_BYTES):
                words_of_bank.setdefault(word % BANKS, set()).add(word)
        total += max(len(words) for words in words_of_bank.values())
    return total


def bank_conflicts(addresses, access_bytes: int = 4) -> int:
    """The passes beyond one a phase: 0 for a conflict-free access (see
    :func:`wavefronts`, which takes the same arguments); 7 for an
    ``ldmatrix`` matrix whose 8 rows all start in the same bank."""
    addresses = _check(addresses, access_bytes)
    phases = -(-len(addresses) // (PHASE_BYTES // access_bytes))
    return wavefronts(addresses, access_bytes) - phases


def ldmatrix_x4_rows(first_row: int, first_chunk: int) -> list[tuple[int, int]]:
    """(row, chunk) of the tile that each lane of an ``ldmatrix.x4`` names, lane 0
    first, when it reads the 16 x 16 fragment of A whose top-left element is
    row ``first_row`` and chunk ``first_chunk`` (a chunk is 8 halves, 16 bytes).

    Matrix j is read from the addresses of lanes 8j to 8j + 7: matrices 0 and
    1 are rows 0-7 and 8-15 of the chunk, matrices 2 and 3 the same rows of
    the next chunk (a0 a1, a2 a3, a4 a5, a6 a7 of the mma's fragment). So lane
    l names row ``first_row + l % 16`` and chunk ``first_chunk + l // 16``.
    """
    for name, value in (("first_row", first_row), ("first_chunk", first_chunk)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise ValueError(f"{name} must be a whole number >= 0, got {value!r}")
    return [(first_row + lane % 16, first_chunk + lane // 16) for lane in range(WARP)]
