"""gpucourse.grader.attention: the checks behind chapter 9's kernel exercises.

A correct tiled kernel of the exercises' contract (written here, independently
of the checks) passes every check, causal and not, on ragged lengths, head
dimensions 16 to 64 and scores scaled 40 times up. Kernels that only look
right fail the check that is about them, with a message that says what is
wrong: one that re-reads K and V, one without shared memory, one that keeps a
score for every key of the sequence, NumPy in disguise and PyTorch in
disguise. Shapes stay small: the simulator runs one OS thread per CUDA thread.
"""

import math

import numpy as np
import pytest

from gpucourse.device import cuda, on_gpu
from gpucourse.kernels import attention
from gpucourse.chapters import attention_timing
from gpucourse.grader import attention as check
from gpucourse.grader.attention import BLOCK_K, BLOCK_Q, HEAD_DIM_MAX
from gpucourse.kernels import timing_attention
from numba import float32

# The longest sequence the score-buffer cheat below can hold.
SEQ_MAX = 1024


def _flash(causal: bool, extra_tiles: int = 0):
    """The tiled kernel: one thread per query row, BLOCK_K keys and values at a time
    through shared memory, each thread loading an equal share of each tile.
    ``extra_tiles``: a causal kernel that visits that many key tiles past the
    diagonal (masked, so its values stay right)."""
    extra_keys = extra_tiles * BLOCK_K

    @cuda.jit
    def flash(q, k, v, out, lse, scale):
        k_tile = cuda.shared.array((BLOCK_K, HEAD_DIM_MAX), float32)
        v_tile = cuda.shared.array((BLOCK_K, HEAD_DIM_MAX), float32)
        q_row = cuda.local.array(HEAD_DIM_MAX, float32)
        acc = cuda.local.array(HEAD_DIM_MAX, float32)
        scores = cuda.local.array(BLOCK_K, float32)
        head = cuda.blockIdx.y
        t = cuda.threadIdx.x
        row = cuda.blockIdx.x * BLOCK_Q + t
        seq = q.shape[1]
        d = q.shape[2]
        inside = row < seq
        for c in range(d):
            q_row[c] = q[head, row, c] * scale if inside else float32(0.0)
            acc[c] = 0.0
        row_max = float32(-math.inf)
        row_sum = float32(0.0)
        # Causal: the key tiles that start at or before the block's last row.
        keys_seen = min(seq, (cuda.blockIdx.x + 1) * BLOCK_Q + extra_keys) if causal else seq
        for k0 in range(0, keys_seen, BLOCK_K):
            for i in range(t, BLOCK_K * d, BLOCK_Q):
                j = i // d
                c = i % d
                if k0 + j < seq:
                    k_tile[j, c] = k[head, k0 + j, c]
                    v_tile[j, c] = v[head, k0 + j, c]
            cuda.syncthreads()
            keys = min(BLOCK_K, seq - k0)
            if causal:
                keys = min(keys, row - k0 + 1)
            if inside and keys > 0:
                tile_max = float32(-math.inf)
                for j in range(keys):
                    s = float32(0.0)
                    for c in range(d):
                        s += q_row[c] * k_tile[j, c]
                    scores[j] = s
                    tile_max = max(tile_max, s)
                new_max = max(row_max, tile_max)
                alpha = math.exp(row_max - new_max)
                row_sum *= alpha
                for c in range(d):
                    acc[c] *= alpha
                for j in range(keys):
                    p = math.exp(scores[j] - new_max)
                    row_sum += p
                    for c in range(d):
                        acc[c] += p * v_tile[j, c]
                row_max = new_max
            cuda.syncthreads()
        if inside:
            for c in range(d):
                out[head, row, c] = acc[c] / row_sum
            lse[head, row] = row_max + math.log(row_sum)

    return flash


flash_forward = _flash(causal=False)
flash_causal = _flash(causal=True)


@cuda.jit
def rereads_kv(q, k, v, out, lse, scale):
    # Right values, but every thread copies the whole tile: each block reads K and V
    # BLOCK_Q times over.
    k_tile = cuda.shared.array((BLOCK_K, HEAD_DIM_MAX), float32)
    v_tile = cuda.shared.array((BLOCK_K, HEAD_DIM_MAX), float32)
    q_row = cuda.local.array(HEAD_DIM_MAX, float32)
    acc = cuda.local.array(HEAD_DIM_MAX, float32)
    head = cuda.blockIdx.y
    row = cuda.blockIdx.x * BLOCK_Q + cuda.threadIdx.x
    seq, d = q.shape[1], q.shape[2]
    inside = row < seq
    for c in range(d):
        q_row[c] = q[head, row, c] * scale if inside else float32(0.0)
        acc[c] = 0.0
    row_max = float32(-math.inf)
    row_sum = float32(0.0)
    for k0 in range(0, seq, BLOCK_K):
        keys = min(BLOCK_K, seq - k0)
        for j in range(keys):
            for c in range(d):
                k_tile[j, c] = k[head, k0 + j, c]
                v_tile[j, c] = v[head, k0 + j, c]
        cuda.syncthreads()
        if inside:
            for j in range(keys):
                s = float32(0.0)
                for c in range(d):
                    s += q_row[c] * k_tile[j, c]
                new_max = max(row_max, s)
                alpha = math.exp(row_max - new_max)
                p = math.exp(s - new_max)
                row_sum = row_sum * alpha + p
                for c in range(d):
                    acc[c] = acc[c] * alpha + p * v_tile[j, c]
                row_max = new_max
        cuda.syncthreads()
    if inside:
        for c in range(d):
            out[head, row, c] = acc[c] / row_sum
        lse[head, row] = row_max + math.log(row_sum)


@cuda.jit
def without_shared_memory(q, k, v, out, lse, scale):
    # The online softmax, one thread per row, every key and value read from global memory.
    q_row = cuda.local.array(HEAD_DIM_MAX, float32)
    acc = cuda.local.array(HEAD_DIM_MAX, float32)
    head = cuda.blockIdx.y
    row = cuda.blockIdx.x * BLOCK_Q + cuda.threadIdx.x
    seq, d = q.shape[1], q.shape[2]
    if row < seq:
        for c in range(d):
            q_row[c] = q[head, row, c] * scale
            acc[c] = 0.0
        row_max = float32(-math.inf)
        row_sum = float32(0.0)
        for j in range(seq):
            s = float32(0.0)
            for c in range(d):
                s += q_row[c] * k[head, j, c]
            new_max = max(row_max, s)
            alpha = math.exp(row_max - new_max)
            p = math.exp(s - new_max)
            row_sum = row_sum * alpha + p
            for c in range(d):
                acc[c] = acc[c] * alpha + p * v[head, j, c]
            row_max = new_max
        for c in range(d):
            out[head, row, c] = acc[c] / row_sum
        lse[head, row] = row_max + math.log(row_sum)


@cuda.jit
def score_buffer(q, k, v, out, lse, scale):
    # A deliberate variant of _flash's kernel, the same opening, then a wrong middle.
    # The three-pass softmax of the naive pipeline inside one kernel: tiles through
    # shared memory (K once, then V once, so the counts pass), but every thread keeps
    # a score for each of up to SEQ_MAX keys.
    k_tile = cuda.shared.array((BLOCK_K, HEAD_DIM_MAX), float32)
    v_tile = cuda.shared.array((BLOCK_K, HEAD_DIM_MAX), float32)
    scores = cuda.local.array(SEQ_MAX, float32)
    q_row = cuda.local.array(HEAD_DIM_MAX, float32)
    acc = cuda.local.array(HEAD_DIM_MAX, float32)
    head = cuda.blockIdx.y
    t = cuda.threadIdx.x
    row = cuda.blockIdx.x * BLOCK_Q + t
    seq, d = q.shape[1], q.shape[2]
    inside = row < seq
    for c in range(d):
        q_row[c] = q[head, row, c] if inside else float32(0.0)
    row_max = float32(-math.inf)
    for k0 in range(0, seq, BLOCK_K):
        for i in range(t, BLOCK_K * d, BLOCK_Q):
            if k0 + i // d < seq:
                k_tile[i // d, i % d] = k[head, k0 + i // d, i % d]
        cuda.syncthreads()
        if inside:
            for j in range(min(BLOCK_K, seq - k0)):
                s = float32(0.0)
                for c in range(d):
                    s += q_row[c] * k_tile[j, c]
                scores[k0 + j] = s * scale
                row_max = max(row_max, s * scale)
        cuda.syncthreads()
    row_sum = float32(0.0)
    for c in range(d):
        acc[c] = 0.0
    for k0 in range(0, seq, BLOCK_K):
        for i in range(t, BLOCK_K * d, BLOCK_Q):
            if k0 + i // d < seq:
                v_tile[i // d, i % d] = v[head, k0 + i // d, i % d]
        cuda.syncthreads()
        if inside:
            for j in range(min(BLOCK_K, seq - k0)):
                p = math.exp(scores[k0 + j] - row_max)
                row_sum += p
                for c in range(d):
                    acc[c] += p * v_tile[j, c]
        cuda.syncthreads()
    if inside:
        for c in range(d):
            out[head, row, c] = acc[c] / row_sum
        lse[head, row] = row_max + math.log(row_sum)


@cuda.jit
def numpy_in_disguise(q, k, v, out, lse, scale):
    # The first thread computes everything with NumPy; on the simulator that works.
    if cuda.blockIdx.x == 0 and cuda.blockIdx.y == 0 and cuda.threadIdx.x == 0:
        for h in range(q.shape[0]):
            s = np.asarray(q[h]) @ np.asarray(k[h]).T * scale
            m = s.max(axis=1)
            p = np.exp(s - m[:, None])
            out[h] = (p / p.sum(axis=1)[:, None]) @ np.asarray(v[h])
            lse[h] = m + np.log(p.sum(axis=1))


@cuda.jit
def torch_in_disguise(q, k, v, out, lse, scale):
    # The first thread hands the work to PyTorch.
    if cuda.blockIdx.x == 0 and cuda.blockIdx.y == 0 and cuda.threadIdx.x == 0:
        import torch

        tq, tk, tv = (torch.from_numpy(np.array(x, dtype=np.float64)) for x in (q, k, v))
        s = tq @ tk.transpose(1, 2) * float(scale)
        out[:] = (torch.softmax(s, dim=-1) @ tv).numpy()
        lse[:] = torch.logsumexp(s, dim=-1).numpy()


CASES = [(1, 37, 16, 1.0), (2, 20, 32, 1.0), (1, 24, 64, 1.0), (1, 37, 16, 40.0),
         (1, 21, 64, 40.0)]


@pytest.mark.parametrize("causal", [False, True])
def test_a_correct_kernel_passes_every_check(causal):
    kernel = flash_causal if causal else flash_forward
    for heads, seq, head_dim, logit_scale in CASES:
        out, lse = check.expect_attention(kernel, heads, seq, head_dim, causal=causal,
                                          logit_scale=logit_scale, seed=seq)
        assert np.isfinite(out).all() and np.isfinite(lse).all()
    trace = check.expect_accesses(kernel, 2, 37, 16, causal=causal)
    # Each block reads its key and value tiles once: 3 query tiles, 37 keys each (causal:
    # 16, 32 and 37 keys, whole key tiles of 8 up to the block's last row).
    keys_read = (16 + 32 + 37) if causal else 3 * 37
    assert trace.total("k") == trace.total("v") == 2 * keys_read * 16
    facts = check.expect_flash_structure(kernel)
    assert facts.barriers >= 2 and facts.local_bytes <= 4 * check.LOCAL_FLOATS_MAX


def test_the_causal_kernel_is_caught_without_its_mask_and_with_too_many_tiles():
    with pytest.raises(AssertionError, match="out of causal attention at heads=1, seq=20"):
        check.expect_attention(flash_forward, 1, 20, 16, causal=True)
    # Masked right but visiting every key tile: the counts see the tiles above the diagonal.
    with pytest.raises(AssertionError, match=r"read 37 elements of k .* at most 32: its share "
                                             r"of each of the 2 key tiles its block visits "
                                             r"\(causal: the tiles that start at or before "
                                             r"the block's last row, row 15\)"):
        check.expect_accesses(flash_forward, 1, 37, 16, causal=True)


def test_a_causal_kernel_that_visits_a_tile_above_the_diagonal_is_told_which():
    one_too_many = _flash(causal=True, extra_tiles=1)
    check.expect_attention(one_too_many, 1, 37, 16, causal=True)
    # Within each thread's share, but block 0 (rows 0 to 15) also loads key tile 2.
    with pytest.raises(AssertionError, match=r"block \(0, 0, 0\) read k\[0, 16, 0\].* key tile "
                                             r"2 and later lie wholly above the diagonal for "
                                             r"query rows 0 to 15: a causal kernel skips them"):
        check.expect_accesses(one_too_many, 1, 37, 16, causal=True)


def test_scores_scaled_40_times_make_a_log_sum_exp_whose_exponential_overflows_float32():
    # float32 overflows above e^88.7: a kernel that does not subtract the running
    # maximum before exponentiating gets inf, then NaN.
    assert check.expect_attention(flash_forward, 1, 16, 16, logit_scale=40)[1].max() > 88


def test_a_kernel_that_rereads_k_and_v_fails_the_counts():
    check.expect_attention(rereads_kv, 1, 20, 16)
    with pytest.raises(AssertionError, match=r"thread \(0, 0, 0\) read 320 elements of k .*"
                                             "at most 48: its share of each of the 3 key tiles"):
        check.expect_accesses(rereads_kv, 1, 20, 16)


def test_a_kernel_without_shared_memory_fails_the_counts_and_the_ptx():
    check.expect_attention(without_shared_memory, 1, 20, 16)
    with pytest.raises(AssertionError, match=r"thread \(0, 0, 0\) read 320 elements of k .*"
                                             "at most 48: its share of each of the 3 key tiles"):
        check.expect_accesses(without_shared_memory, 1, 20, 16)
    with pytest.raises(AssertionError, match="must stage tiles in shared memory"):
        check.expect_flash_structure(without_shared_memory)


def test_a_score_for_every_key_passes_the_counts_and_fails_the_ptx():
    check.expect_attention(score_buffer, 1, 37, 16, logit_scale=40)
    check.expect_accesses(score_buffer, 1, 37, 16)
    with pytest.raises(AssertionError, match="keeps 4[0-9]{3} bytes of local memory per "
                                             "thread.*never holds a row of the whole sequence"):
        check.expect_flash_structure(score_buffer)


def test_numpy_in_disguise_passes_by_value_and_fails_by_counts_and_compile():
    if on_gpu():  # there the kernel is compiled, and NumPy in it fails at once
        with pytest.raises(Exception):
            check.expect_attention(numpy_in_disguise, 1, 20, 16)
    else:  # on the simulator a kernel is Python: value tests alone are fooled
        check.expect_attention(numpy_in_disguise, 1, 20, 16)
    with pytest.raises(AssertionError, match=r"thread \(0, 0, 0\) read 320 elements of q"):
        check.expect_accesses(numpy_in_disguise, 1, 20, 16)
    with pytest.raises(AssertionError, match="does not compile for a GPU"):
        check.expect_flash_structure(numpy_in_disguise)


def test_torch_in_disguise_fails_own_work():
    # (Its value on the simulator is right; importing PyTorch takes seconds.)
    with pytest.raises(AssertionError, match=r"imports torch"):
        check.expect_own_work(torch_in_disguise)
    check.expect_own_work(flash_forward)
    with pytest.raises(AssertionError, match="comes from gpucourse.kernels.attention"):
        check.expect_own_work(attention.reference_attention)


def test_a_kernel_that_writes_nothing_is_told_so():
    @cuda.jit
    def does_nothing(q, k, v, out, lse, scale):
        pass

    with pytest.raises(AssertionError, match="nothing was written to out or lse"):
        check.expect_attention(does_nothing, 1, 8, 16)


def test_traffic_is_counted_element_by_element():
    # The exercise's kernel: q, out once; each of 3 query tiles reads all of K and V;
    # one lse per row.
    assert check.attention_traffic_bytes(1, 37, 16, kernel=flash_forward) == \
        4 * (2 * 37 * 16 + 2 * 3 * 37 * 16 + 37)
    assert check.attention_traffic_bytes(1, 37, 16, causal=True, kernel=flash_causal) == \
        4 * (2 * 37 * 16 + 2 * (16 + 32 + 37) * 16 + 37)
    # The library's kernel, against the library's own formula.
    rows = attention.PORTABLE_FLASH_CONFIGS[16].block_rows
    assert check.attention_traffic_bytes(1, 64, 16) == \
        attention.flash_hbm_bytes(1, 1, 64, 16, block_rows=rows)


def test_launch_shape_and_key_tiles_follow_the_contract():
    assert check.launch_shape(3, 37) == ((3, 3), (BLOCK_Q,))
    assert [check.key_tiles(t, 37, False) for t in range(3)] == [5, 5, 5]
    assert [check.key_tiles(t, 37, True) for t in range(3)] == [2, 4, 5]


def test_timing_rows_format_and_plot_without_a_gpu():
    record, rows = attention_timing.committed_rows()
    assert record["gpu"].startswith("NVIDIA") and rows
    assert {r["variant"] for r in rows} <= set(attention_timing.COMMITTED_VARIANTS)
    table = attention_timing.format_table(rows)
    assert "flash (causal)" in table and "seq 1024" in table
    import matplotlib

    matplotlib.use("Agg")
    assert attention_timing.plot_rows(rows).get_xlabel() == "sequence length N"


@pytest.mark.parametrize("call, message", [
    (lambda: check.launch_shape(0, 8), "heads must be a whole number"),
    (lambda: check.random_qkv(1, 8, 128), "head_dim must be at most HEAD_DIM_MAX"),
    (lambda: check.key_tiles(3, 37, False), "query_tile must be below 3"),
    (lambda: check.key_tiles(0, 37, "yes"), "causal must be True or False"),
    (lambda: check.run(flash_forward, *check.random_qkv(1, 8, 16)[:2],
                       np.zeros((1, 8, 16)), 0.5), "v must be a float32 numpy array"),
    (lambda: check.run(flash_forward, *check.random_qkv(1, 8, 16), -1.0), "scale must be"),
    (lambda: check.expect_attention(flash_forward, 1, 8, 16, logit_scale=0),
     "logit_scale must be"),
    (lambda: check.expect_attention(lambda q: q, 1, 8, 16), "kernel must be a @cuda.jit"),
    (lambda: check.attention_traffic_bytes(1, 8, 24), "head_dim must be one of"),
    (lambda: attention_timing.format_table([]), "rows must be a non-empty list"),
    (lambda: timing_attention.time_attention({"mine": flash_forward}), "kernels must be a dict"),
])
def test_bad_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_kernel_with_other_parameters_is_told_what_to_take():
    @cuda.jit
    def five(q, k, v, out, lse):
        pass

    with pytest.raises(AssertionError, match="must take six arguments"):
        check.expect_attention(five, 1, 8, 16)


def test_time_attention_checks_each_result_before_timing_it():
    # On the simulator, with a stand-in clock: a right kernel is timed, a wrong one is not.
    @cuda.jit
    def writes_zeros(q, k, v, out, lse, scale):
        row = cuda.blockIdx.x * BLOCK_Q + cuda.threadIdx.x
        if row < q.shape[1]:
            for c in range(q.shape[2]):
                out[cuda.blockIdx.y, row, c] = 0.0

    timed = []
    rows = timing_attention.time_attention(
        {"right": (flash_forward, False), "wrong": (writes_zeros, False)},
        seqs=(20,), batch=1, heads=2, head_dim=16, library=False,
        sdpa=False, time_s=lambda run: timed.append(run) or 2e-3)
    by = {row["variant"]: row for row in rows}
    assert len(timed) == 1 and by["right"]["ms"] == 2.0 and by["right"]["max_abs_err"] < 1e-5
    assert by["right"]["tflops"] == pytest.approx(
        attention.attention_flops(1, 2, 20, 16) / 2e-3 / 1e12)
    assert by["wrong"]["ms"] is None and by["wrong"]["max_abs_err"] > timing_attention.WRONG_ABOVE
    assert "wrong" in attention_timing.format_table(rows)
