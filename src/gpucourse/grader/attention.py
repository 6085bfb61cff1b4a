"""The checks behind chapter 9's FlashAttention kernel exercises (exercises/09_flash_attention).

The student writes the tiled forward kernel, then its causal version, to one
contract (:data:`BLOCK_Q`, :data:`BLOCK_K`, :data:`HEAD_DIM_MAX`,
:func:`launch_shape`)::

    kernel[grid, block](q, k, v, out, lse, scale)

with ``q``, ``k``, ``v`` and ``out`` float32 arrays of shape (heads, seq,
head_dim), ``lse`` of shape (heads, seq) and ``scale`` a float32 number. Block
``(x, y)`` owns query rows ``x * BLOCK_Q`` to ``x * BLOCK_Q + BLOCK_Q - 1`` of
head ``y``, one thread per row; it streams the keys and values through shared
memory ``BLOCK_K`` at a time. The graded test cells check each kernel four
ways, none of which needs a GPU:

* **by value** (:func:`expect_attention`): on ragged sequence lengths, head
  dimensions 16 to 64, causal or not, and scores scaled up to 40 times (whose
  exponentials overflow float32 unless the running maximum is subtracted),
  against :func:`gpucourse.kernels.attention.reference_attention` in float64,
  output and log-sum-exp alike;
* **by what each thread and each block touches** (:func:`expect_accesses`):
  counted on the simulator, each block reads its own query rows once, each
  element of the key and value tiles it visits once (a causal block none of
  the tiles above the diagonal), and writes its rows of the output once; no
  thread does more than its share;
* **by what a GPU would run** (:func:`expect_flash_structure`): compiled to
  PTX for compute capability 9.0, the kernel must declare shared memory, read
  it, synchronise its block twice per key tile, and keep its shared and local
  arrays small enough that no buffer grows with the sequence;
* **by whether it does its own work** (:func:`expect_own_work`).

:func:`attention_traffic_bytes` counts, on the simulator, the device-memory
bytes any kernel of this contract (or the library's) moves, for the traffic
exercise. Timing the student's kernels on a GPU is not grading, and lives
apart: :func:`gpucourse.kernels.timing_attention.time_attention` measures,
and :mod:`gpucourse.chapters.attention_timing` reads the course's H100
figures and shows either as a table or a plot.

Every check raises ``AssertionError`` with a message for the student, and
``ValueError`` for a bad argument of its own.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import numpy as np

from gpucourse.device import cuda
from gpucourse.grader.expect import expect_array
from gpucourse.grader import ptx, tracing
from gpucourse.kernels import attention
# The kernel checks' shared helpers: tiles covering a size, whole-number arguments,
# and a launch that stops its simulated threads when interrupted and does not warn
# about the overflows of NumPy scalars (a kernel that exponentiates unshifted scores
# fails by value, not by warning).
# An index outside an array fails naming the array, the block and the thread.
from gpucourse.grader.launches import (_quiet, _stopping, _whole, blocks, naming_out_of_bounds,
                                       traced)
# The same check as everywhere: no calls to the course's package or to PyTorch.
from gpucourse.grader.own_work import expect_own_work  # noqa: F401 (re-exported)

# The exercises' tile shape: BLOCK_Q query rows per block (one thread each) and
# BLOCK_K keys per tile. Different on purpose: a kernel that mixes them up fails.
BLOCK_Q = 16
BLOCK_K = 8
# The kernels' local and shared arrays hold rows of HEAD_DIM_MAX floats; they
# work for any head_dim up to it.
HEAD_DIM_MAX = 64
PARAMETERS = ("q", "k", "v", "out", "lse", "scale")
# What a thread may keep in local arrays: its query row, its output row and a
# few tiles' worth of scores (a row of scores for the whole sequence is not
# that), and what a block may declare in shared memory: the key and value
# tiles and one BLOCK_Q x BLOCK_K tile of scores (nothing that grows with seq).
LOCAL_FLOATS_MAX = 2 * HEAD_DIM_MAX + 4 * BLOCK_K
SHARED_FLOATS_MAX = 2 * BLOCK_K * HEAD_DIM_MAX + BLOCK_Q * BLOCK_K
# Shared-memory reads per thread and key tile: a key's row for each score and a
# value's row for each output update, and two more per key for a score tile.
EXTRA_SHARED_READS_PER_KEY = 2
# float32 against float64. A score s = scale * q . k computed in float32 is off by
# up to a few float32 epsilons times scale * sum |q_c k_c| (its size before
# cancellation), and an error d in a score moves lse by up to d and each output
# weight by a factor e^d. So both tolerances grow with that size (SCORE_ROUNDING
# per unit of it, room for a GPU's fused multiply-adds and the compiler's
# reordering) on top of a fixed part: about 2e-4 for scores scaled 40 times up at
# head_dim 64, where a kernel without the running maximum is wrong by inf.
OUT_REL, OUT_ABS = 1e-4, 1e-4
LSE_REL, LSE_ABS = 1e-5, 1e-5
SCORE_ROUNDING = 1e-6
FLOAT32_BYTES = 4
# e^s overflows float32 for s above log(largest float32), about 88.72.
FLOAT32_EXP_MAX = math.log(float(np.finfo(np.float32).max))


def _head_dim(value) -> int:
    head_dim = _whole("head_dim", value)
    if head_dim > HEAD_DIM_MAX:
        raise ValueError(f"head_dim must be at most HEAD_DIM_MAX = {HEAD_DIM_MAX} (the "
                         f"kernels' arrays hold rows of that many floats), got {head_dim}")
    return head_dim


def _flag(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def launch_shape(heads: int, seq: int) -> tuple[tuple, tuple]:
    """(grid, block) of the exercises' kernels: a block of BLOCK_Q threads per tile of
    BLOCK_Q query rows (grid x) and per head (grid y)."""
    heads, seq = _whole("heads", heads), _whole("seq", seq)
    return (blocks(seq, BLOCK_Q), heads), (BLOCK_Q,)


def key_tiles(query_tile: int, seq: int, causal: bool) -> int:
    """How many key tiles (0, 1, ..., n - 1) the block of query tile `query_tile` visits:
    all of them, or under a causal mask those that start at or before its last row."""
    seq = _whole("seq", seq)
    query_tile = _whole("query_tile", query_tile, 0)
    if query_tile >= blocks(seq, BLOCK_Q):
        raise ValueError(f"query_tile must be below {blocks(seq, BLOCK_Q)} for seq={seq}, "
                         f"got {query_tile}")
    if not _flag("causal", causal):
        return blocks(seq, BLOCK_K)
    return attention.causal_key_tiles(query_tile, BLOCK_Q, BLOCK_K, seq)


def random_qkv(heads: int, seq: int, head_dim: int, seed: int = 0):
    """Float32 q, k, v of shape (heads, seq, head_dim), standard normal values."""
    shape = (_whole("heads", heads), _whole("seq", seq), _head_dim(head_dim))
    rng = np.random.default_rng(_whole("seed", seed, 0))
    return tuple(rng.standard_normal(shape).astype(np.float32) for _ in range(3))


def _check_inputs(q, k, v) -> tuple[int, int, int]:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 3:
            raise ValueError(f"{name} must be a float32 numpy array of shape (heads, seq, "
                             f"head_dim), got {x!r}")
    if not q.shape == k.shape == v.shape:
        raise ValueError(f"q, k and v must have the same shape, got {q.shape}, {k.shape} "
                         f"and {v.shape}")
    heads, seq, head_dim = q.shape
    _head_dim(head_dim)
    return heads, seq, head_dim


def _check_scale(scale) -> np.float32:
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating)) \
            or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    return np.float32(scale)


def run(kernel, q, k, v, scale) -> tuple[np.ndarray, np.ndarray]:
    """kernel[grid, block](q, k, v, out, lse, scale) on the device (the simulator or a
    GPU), with the exercises' launch; returns (out, lse). Both start as NaN, so an
    element the kernel never writes shows up as NaN."""
    heads, seq, head_dim = _check_inputs(q, k, v)
    scale = _check_scale(scale)
    _parameters(kernel)
    grid, block = launch_shape(heads, seq)
    host_out = np.full((heads, seq, head_dim), np.nan, dtype=np.float32)
    host_lse = np.full((heads, seq), np.nan, dtype=np.float32)
    out, lse = cuda.to_device(host_out), cuda.to_device(host_lse)
    with naming_out_of_bounds(kernel, grid, block, q, k, v, host_out, host_lse, scale), \
            _quiet(), _stopping():
        kernel[grid, block](cuda.to_device(q), cuda.to_device(k), cuda.to_device(v), out, lse,
                            scale)
    return out.copy_to_host(), lse.copy_to_host()


def _parameters(kernel) -> tuple[str, ...]:
    """The kernel's names for q, k, v, out, lse and scale."""
    function = getattr(kernel, "py_func", None)
    if function is None:
        raise ValueError(f"kernel must be a @cuda.jit kernel, got {type(kernel).__name__}")
    code = function.__code__
    if code.co_argcount != len(PARAMETERS):
        raise AssertionError(f"{function.__name__} must take six arguments "
                             f"({', '.join(PARAMETERS)}), takes {code.co_argcount}")
    return code.co_varnames[:len(PARAMETERS)]


def _case(heads, seq, head_dim, causal, logit_scale) -> str:
    grid, block = launch_shape(heads, seq)
    what = (f"{'causal ' if causal else ''}attention at heads={heads}, seq={seq}, "
            f"head_dim={head_dim}")
    if logit_scale != 1:
        what += f", scores scaled {logit_scale:g} times up"
    return f"{what} (grid {grid}, block {block})"


def expect_attention(kernel, heads: int, seq: int, head_dim: int, *, causal: bool = False,
                     logit_scale: float = 1.0, seed: int = 0):
    """Run `kernel` with the exercises' launch on random q, k, v and compare out and lse
    with the float64 reference, scale = logit_scale / sqrt(head_dim). A logit_scale of
    40 makes scores of a few hundred, whose exponentials overflow float32 unless the
    running maximum is subtracted first. Returns (out, lse)."""
    causal = _flag("causal", causal)
    if isinstance(logit_scale, bool) or not isinstance(logit_scale, (int, float)) \
            or not 0 < logit_scale <= 1000:
        raise ValueError(f"logit_scale must be a number in (0, 1000], got {logit_scale!r}")
    q, k, v = random_qkv(heads, seq, head_dim, seed)
    scale = np.float32(logit_scale / math.sqrt(head_dim))
    expected, expected_lse = attention.reference_attention(q, k, v, causal=causal,
                                                           scale=float(scale), return_lse=True)
    out, lse = run(kernel, q, k, v, scale)
    what = _case(heads, seq, head_dim, causal, logit_scale)
    score_size = float(scale) * float(
        (np.abs(q.astype(np.float64)) @ np.abs(k.astype(np.float64)).swapaxes(1, 2)).max())
    rounding = SCORE_ROUNDING * score_size
    if np.isnan(out).all() and np.isnan(lse).all():
        raise AssertionError(f"{what}: nothing was written to out or lse (both start as "
                             "NaN). Check the launch the exercise states and the bounds test")
    _expect_finite(out, lse, q, k, scale, causal, what)
    expect_array(out, expected, dtype=np.float32, rel=OUT_REL,
                        abs=OUT_ABS + rounding, name=f"out of {what}")
    expect_array(lse, expected_lse, dtype=np.float32, rel=LSE_REL,
                        abs=LSE_ABS + rounding,
                        name=f"lse (the log-sum-exp of each row's scores) of {what}")
    return out, lse


def largest_score(q, k, scale, causal: bool = False) -> float:
    """The largest score scale * q_i . k_j of any row (causal: of keys j <= i), in float64."""
    scores = float(scale) * (q.astype(np.float64) @ k.astype(np.float64).swapaxes(1, 2))
    if causal:
        scores = np.where(np.tri(q.shape[1], dtype=bool), scores, -np.inf)
    return float(scores.max())


def _expect_finite(out, lse, q, k, scale, causal, what) -> None:
    """Fail, naming the overflow, when the kernel left inf or NaN: attention is finite."""
    for name, values in (("out", out), ("lse", lse)):
        wrong = np.argwhere(~np.isfinite(values))
        if not len(wrong):
            continue
        index = tuple(int(i) for i in wrong[0])
        top = largest_score(q, k, scale, causal)
        if top > FLOAT32_EXP_MAX:
            why = (f"The largest score here is {top:.1f}, and e^s overflows float32 above "
                   f"{FLOAT32_EXP_MAX:.1f}: subtract the running maximum before each "
                   "exponential (e^(s - m) <= 1), and rescale the sum and the output row by "
                   "e^(m - m') when a tile raises the maximum")
        else:
            why = ("Both start as NaN, so a NaN may be an element never written: check that "
                   "the thread of every row writes its row of out and its lse")
        raise AssertionError(f"{name} of {what} holds {values[index]} at {index} "
                             f"({len(wrong)} elements are not finite), where attention is "
                             f"finite. {why}")


def trace_attention(kernel, heads: int, seq: int, head_dim: int, *, seed: int = 0):
    """The :class:`~gpucourse.grader.tracing.Trace` of `kernel` run with the
    exercises' launch on the simulator, every array counted under the kernel's own
    names for it."""
    q, k, v = random_qkv(heads, seq, head_dim, seed)
    _parameters(kernel)
    grid, block = launch_shape(heads, seq)
    out = np.full(q.shape, np.nan, dtype=np.float32)
    lse = np.full(q.shape[:2], np.nan, dtype=np.float32)
    with _quiet():
        return traced(kernel, grid, block, q, k, v, out, lse, np.float32(1 / math.sqrt(head_dim)))


def _block_rows(block: tuple, seq: int) -> range:
    """The query rows of a block (its x index), within the sequence."""
    start = block[0] * BLOCK_Q
    return range(start, min(start + BLOCK_Q, seq))


def _by_block(trace, name: str, kind: str) -> dict:
    """{block: Counter of the elements its threads accessed}."""
    found: dict = defaultdict(Counter)
    for thread, elements in trace.accesses(name, kind).items():
        block = ("host",) if thread == ("host",) else thread[0]
        found[block].update(elements)
    return found


def _idle_threads(trace, name: str, block: tuple, role: str) -> str:
    """Why a block missed part of a key or value tile, when some of its threads read none
    of it: they returned early, or a guard kept them from loading their share."""
    if role == "q":
        return ""
    reads = trace.accesses(name, "read")
    idle = [thread[1][0] for thread in trace.threads
            if thread[0] == block and not reads.get(thread)]
    if not idle:
        return ""
    shown = ", ".join(map(str, idle[:4])) + (f" and {len(idle) - 4} more" if len(idle) > 4 else "")
    return (f". Threads {shown} of block {block} read no element of {name}: every thread "
            "of a block, also one whose row lies past the end of the sequence, must copy its "
            "share of each tile and reach every barrier. A thread that returns early (or "
            "whose load sits under the row's bounds test) leaves its share unloaded; and a "
            "barrier that some threads of a block never reach is undefined on a GPU")


def _shown(name: str, elements) -> str:
    return ", ".join(f"{name}[{', '.join(map(str, e))}]" for e in elements)


def expect_accesses(kernel, heads: int, seq: int, head_dim: int, *, causal: bool = False,
                    seed: int = 0):
    """Trace `kernel` on the simulator and fail when a thread or a block reads or writes
    other than the contract says:

    * a thread reads at most head_dim elements of q (its query row), at most head_dim
      elements of k and of v per key tile its block visits (its share of the tile), at
      most BLOCK_K x (2 head_dim + 2) values from shared memory per key tile, and
      writes at most head_dim elements of out and one of lse;
    * a block reads exactly its own query rows of q, and exactly the key tiles it
      visits of k and v (all of them, or causal: those that start at or before its
      last row), each element once; it writes its rows of out and lse, each once.

    Returns the Trace."""
    causal = _flag("causal", causal)
    heads, seq, head_dim = _whole("heads", heads), _whole("seq", seq), _head_dim(head_dim)
    trace = trace_attention(kernel, heads, seq, head_dim, seed=seed)
    q, k, v, out, lse, _ = _parameters(kernel)
    what = f"{'the causal kernel' if causal else 'the kernel'} at heads={heads}, seq={seq}, " \
           f"head_dim={head_dim}"

    def fail(message: str) -> None:
        raise AssertionError(f"{what}: {message}")

    # Each thread's share.
    shared_names = trace.shared_names()
    for thread in trace.threads:
        block = thread[0]
        tiles = key_tiles(block[0], seq, causal)
        visits = (f"its block visits (causal: the tiles that start at or before the "
                  f"block's last row, row {_block_rows(block, seq).stop - 1})" if causal
                  else "its block visits")
        limits = ((q, "read", head_dim, "its query row, once"),
                  (k, "read", head_dim * tiles, f"its share of each of the {tiles} key tiles "
                                                f"{visits}, at most head_dim each"),
                  (v, "read", head_dim * tiles, f"its share of each of the {tiles} value "
                                                f"tiles {visits}, at most head_dim each"),
                  (out, "write", head_dim, "its row of the output, once"),
                  (lse, "write", 1, "the log-sum-exp of its row, once"))
        for name, kind, limit, why in limits:
            elements = trace.accesses(name, kind).get(thread, [])
            if len(elements) > limit:
                shown = _shown(name, elements[:tracing.SHOWN_ACCESSES])
                more = len(elements) - tracing.SHOWN_ACCESSES
                verb = "read" if kind == "read" else "wrote"
                fail(f"{tracing.thread_name(thread)} {verb} {len(elements)} elements of "
                     f"{name} ({shown}{f' and {more} more' if more > 0 else ''}); a thread "
                     f"may {kind} at most {limit}: {why}")
        reads = sum(trace.counts(n, "read")[thread] for n in shared_names)
        allowed = tiles * BLOCK_K * (2 * head_dim + EXTRA_SHARED_READS_PER_KEY)
        if reads > allowed:
            detail = ", ".join(f"{trace.counts(n, 'read')[thread]} of {n}"
                               for n in shared_names if trace.counts(n, "read")[thread])
            fail(f"{tracing.thread_name(thread)} made {reads} shared-memory reads "
                 f"({detail}); at most {allowed} allowed: per key tile, each of its "
                 f"{BLOCK_K} keys' rows for a score and values' rows for the output "
                 f"(BLOCK_K x (2 x head_dim + {EXTRA_SHARED_READS_PER_KEY}))")
    try:
        trace.expect(uses_shared=True)
    except AssertionError as error:
        fail(f"{error}: each block loads its key and value tiles there, once, for all its "
             "threads")
    # Each block's rows of q, and its key and value tiles: exactly, once each.
    for name, role in ((q, "q"), (k, "k"), (v, "v")):
        seen = _by_block(trace, name, "read")
        if ("host",) in seen:
            fail(f"the host read {name} during the launch")
        for block in sorted({thread[0] for thread in trace.threads}):
            counted = seen.get(block, Counter())
            head = block[1]
            if role == "q":
                rows = _block_rows(block, seq)
                wanted_rows = f"its query rows {rows.start} to {rows.stop - 1} of head {head}"
                how = "keep your row in a local array"
            else:
                tiles = key_tiles(block[0], seq, causal)
                rows = range(min(tiles * BLOCK_K, seq))
                diagonal = ", the tiles at or left of the diagonal" if causal else ""
                wanted_rows = (f"keys 0 to {rows.stop - 1} of head {head} (key tiles 0 to "
                               f"{tiles - 1}{diagonal})")
                how = "each block loads each tile once, into shared memory, for all its threads"
            stray = sorted(e for e in counted if e[0] != head or e[1] not in rows)
            if stray:
                if causal and role != "q" and all(e[0] == head for e in stray):
                    first = stray[0][1] // BLOCK_K
                    reason = (f"key tile {first} and later lie wholly above the diagonal for "
                              f"query rows {_block_rows(block, seq).start} to "
                              f"{_block_rows(block, seq).stop - 1}: a causal kernel skips them")
                else:
                    reason = f"block {block} must read {wanted_rows}"
                fail(f"block {block} read {_shown(name, stray[:3])}"
                     f"{f' and {len(stray) - 3} more' if len(stray) > 3 else ''} of {name}; "
                     f"{reason}")
            again = sorted(e for e, n in counted.items() if n > 1)
            if again:
                fail(f"block {block} read {_shown(name, again[:1])} {counted[again[0]]} "
                     f"times ({len(again)} elements of {name} more than once); each block "
                     f"reads {wanted_rows} once each: {how}")
            missing = [(head, r, c) for r in rows for c in range(head_dim)
                       if (head, r, c) not in counted]
            if missing:
                fail(f"block {block} never read {_shown(name, missing[:3])}"
                     f"{f' and {len(missing) - 3} more' if len(missing) > 3 else ''}; "
                     f"it must read {wanted_rows}{_idle_threads(trace, name, block, role)}")
    # The output: each element once, by the block that owns its row.
    for name, shape in ((out, (heads, seq, head_dim)), (lse, (heads, seq))):
        written = _by_block(trace, name, "write")
        for block, counted in sorted(written.items()):
            rows = _block_rows(block, seq) if block != ("host",) else range(0)
            stray = sorted(e for e in counted if block == ("host",) or e[0] != block[1]
                           or e[1] not in rows)
            if stray:
                owner = ("the host" if block == ("host",) else
                         f"block {block} owns rows {rows.start} to {rows.stop - 1} of head "
                         f"{block[1]}")
                fail(f"block {block} wrote {_shown(name, stray[:3])}; {owner}")
        counts = trace.element_counts(name, "write")
        if (counts != 1).any():
            index = tuple(int(i) for i in np.argwhere(counts != 1)[0])
            fail(f"{name}[{', '.join(map(str, index))}] was written {counts[index]} times; "
                 f"each element of {name} must be written once")
    return trace


def _example_arguments():
    qkv = np.zeros((1, 8, 16), dtype=np.float32)
    return qkv, qkv.copy(), qkv.copy(), qkv.copy(), np.zeros((1, 8), np.float32), \
        np.float32(0.25)


def expect_flash_structure(kernel, *, what: str = "the FlashAttention kernel"):
    """Compile `kernel` for a GPU (compute capability 9.0, on this CPU) and fail when its
    PTX does not stage tiles in shared memory and read them there, does not synchronise
    its block twice (after loading a tile, and before loading the next one over it), or
    keeps more local or shared memory than its rows and tiles need
    (:data:`LOCAL_FLOATS_MAX`, :data:`SHARED_FLOATS_MAX`): no buffer may grow with the
    sequence. Returns the PTX facts."""
    _parameters(kernel)
    found = ptx.expect_structure(kernel, *_example_arguments(), what=what, shared=True,
                                 barriers=True)
    problems = []
    if found.barriers < 2:
        problems.append(f"{what} must synchronise its block twice per key tile: once after "
                        "loading the tiles (before any thread reads them) and once after "
                        "using them (before any thread overwrites them with the next "
                        f"tile); the compiled kernel has {found.barriers} barrier")
    if found.shared_bytes > FLOAT32_BYTES * SHARED_FLOATS_MAX or found.dynamic_shared:
        problems.append(f"{what} declares {found.shared_bytes} bytes of shared memory; it "
                        f"may hold the key and the value tile (BLOCK_K x HEAD_DIM_MAX floats "
                        f"each) and one BLOCK_Q x BLOCK_K tile of scores, "
                        f"{FLOAT32_BYTES * SHARED_FLOATS_MAX} bytes: nothing whose size "
                        "grows with the sequence")
    if found.local_bytes > FLOAT32_BYTES * LOCAL_FLOATS_MAX:
        problems.append(f"{what} keeps {found.local_bytes} bytes of local memory per thread; "
                        f"its query row, its output row and a tile of scores need at most "
                        f"{FLOAT32_BYTES * LOCAL_FLOATS_MAX} (2 x HEAD_DIM_MAX + 4 x BLOCK_K "
                        "floats): a thread never holds a row of the whole sequence")
    if problems:
        raise AssertionError("; ".join(problems))
    return found


# --------------------------------------------------------------------------
# Device-memory traffic, counted on the simulator
# --------------------------------------------------------------------------

def attention_traffic_bytes(heads: int, seq: int, head_dim: int, *, causal: bool = False,
                            kernel=None, seed: int = 0) -> int:
    """Bytes of device memory one launch reads and writes, counted element by element on
    the simulator: every read of q, k, v and every write of out and lse, 4 bytes each.

    ``kernel``: a kernel of the exercises' contract (the launch of
    :func:`launch_shape`); None counts the library's tiled kernel
    (:func:`gpucourse.kernels.attention.flash_attention`) with its portable tile shape
    for ``head_dim`` (see :data:`gpucourse.kernels.attention.PORTABLE_FLASH_CONFIGS`).
    """
    causal = _flag("causal", causal)
    heads, seq = _whole("heads", heads), _whole("seq", seq)
    if kernel is not None:
        head_dim = _head_dim(head_dim)
        trace = trace_attention(kernel, heads, seq, head_dim, seed=seed)
        names = _parameters(kernel)
    else:
        if head_dim not in attention.PORTABLE_FLASH_CONFIGS:
            raise ValueError(f"head_dim must be one of "
                             f"{sorted(attention.PORTABLE_FLASH_CONFIGS)} for the library's "
                             f"kernel, got {head_dim!r}")
        config = attention.PORTABLE_FLASH_CONFIGS[head_dim]
        q, k, v = random_qkv(heads, seq, head_dim, seed)
        out = np.zeros(q.size, dtype=np.float32)
        lse = np.zeros(heads * seq, dtype=np.float32)
        library = attention._flash_kernel(config, causal, False)
        grid = (blocks(seq, config.block_rows), heads, 1)
        scale = np.float32(math.log2(math.e) / math.sqrt(head_dim))
        with _quiet():
            trace = tracing.trace(library, grid, config.threads, q.reshape(-1),
                                  k.reshape(-1), v.reshape(-1), out, lse, np.int32(seq),
                                  np.int32(seq), np.int32(heads), scale)
        names = tuple(list(trace.arrays)[:5])
    q, k, v, out, lse = names[:5]
    elements = sum(trace.total(n, "read") for n in (q, k, v)) + \
        sum(trace.total(n, "write") for n in (out, lse))
    return FLOAT32_BYTES * elements
