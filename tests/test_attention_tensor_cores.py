"""The tensor-core (3xTF32) attention forward: attention.tensor_cores, and how
flash_attention chooses it.

On the simulator the mma instruction is a stand-in (tensor_cores) that
rebuilds the warp's matrices from the fragment places, so a kernel that
places a fragment wrongly gives wrong answers here; small tile shapes keep
its barriers cheap. What the GPU compiles is checked through PTX and ptxas
without one; the GPU tests run where there is one.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpucourse.device import on_gpu
from gpucourse.kernels import attention as A
from gpucourse.kernels.attention import flash as launch_path  # where the GPU queries are read
from gpucourse.kernels.attention.tensor_cores import TensorCoreConfig, check_tc_config

# 3xTF32 keeps about fp32's accuracy: the same bounds as the CUDA-core kernel's tests.
ATOL, RTOL = 2e-5, 2e-4


def qkv(q_shape, key_seq=None, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    b, h, n, d = q_shape
    m = n if key_seq is None else key_seq
    return (rng.standard_normal((b, h, n, d)).astype(np.float32) * scale,
            rng.standard_normal((b, h, m, d)).astype(np.float32),
            rng.standard_normal((b, h, m, d)).astype(np.float32))


def _error(function, *args, **kwargs):
    with pytest.raises(ValueError) as info:
        function(*args, **kwargs)
    return str(info.value)


# Small shapes: one or two warps, so that the simulator's barriers stay few.
@pytest.mark.parametrize("config, shape, key_seq, causal", [
    # Ragged: 40 rows in tiles of 32, keys in tiles of 16; operands split as they are read.
    (TensorCoreConfig(32, warps=2, block_cols=16), (1, 1, 40, 32), None, False),
    # K and V split in shared memory (and Q too), cross-attention, causal:
    # the diagonal starts at the top left, and some rows see no key past the mask.
    (TensorCoreConfig(64, warps=1, block_cols=8, prefetch=False, split_kv=True, split_q=True),
     (1, 1, 24, 64), 37, True),
    (TensorCoreConfig(32, warps=2, block_cols=8, split_q=True), (1, 2, 21, 32), 50, True),
])
def test_the_tensor_core_kernel_computes_attention(config, shape, key_seq, causal):
    q, k, v = qkv(shape, key_seq, seed=3, scale=3.0)  # logits of a few units
    scale = shape[-1] ** -0.5
    out, lse = A._run_flash("numpy", q, k, v, config, causal, scale, False)
    ref, ref_lse = A.reference_attention(q, k, v, causal=causal, scale=scale, return_lse=True)
    np.testing.assert_allclose(out, ref, atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(lse, ref_lse, atol=ATOL, rtol=RTOL)


def test_flash_attention_takes_the_tensor_cores_when_asked(monkeypatch):
    # On the simulator the default is the CUDA-core kernel; tensor_cores=True
    # takes the tensor-core table (here a small shape, for the simulator).
    small = TensorCoreConfig(32, warps=2, block_cols=16, split_kv=True)
    monkeypatch.setitem(A.TENSOR_CORE_CONFIGS, 32, small)
    assert isinstance(A._config_for(32, tensor_cores=False), A.FlashConfig)
    if not on_gpu():  # the simulator's default: the CUDA cores
        assert isinstance(A._config_for(32), A.FlashConfig)
    assert A._config_for(32, tensor_cores=True) == small
    q, k, v = qkv((1, 1, 33, 32), seed=4)
    out = A.flash_attention(q, k, v, causal=True, tensor_cores=True)
    np.testing.assert_allclose(out, A.reference_attention(q, k, v, causal=True), atol=ATOL,
                               rtol=RTOL)
    assert "tensor_cores must be None" in _error(A.flash_attention, q, k, v, tensor_cores="yes")


def test_a_gpu_gets_the_tensor_cores_where_it_has_them(monkeypatch):
    monkeypatch.setattr(launch_path, "on_gpu", lambda: True)
    monkeypatch.setattr(launch_path, "_current_gpu", lambda: 0)
    monkeypatch.setattr(launch_path, "_max_shared_bytes_per_block", lambda device: 227 * 1024)
    monkeypatch.setattr(launch_path, "_has_tf32_tensor_cores", lambda device: True)
    for d in (64, 128):
        assert A._config_for(d) == A.TENSOR_CORE_CONFIGS[d]
        assert A._config_for(d, tensor_cores=False) == A.FLASH_CONFIGS[d]
    for longest, shape in A.CAUSAL_TENSOR_CORE_CONFIGS[64]:
        assert A._config_for(64, causal=True, seq=longest) == shape
    assert A._config_for(64, causal=True, seq=1 << 20) == A.TENSOR_CORE_CONFIGS[64]
    assert A._config_for(32) == A.FLASH_CONFIGS[32]  # no tensor-core shape: CUDA cores
    # No TF32 tensor cores (before compute capability 8.0), or too little shared
    # memory: the portable CUDA-core shape, even when asked for tensor cores.
    monkeypatch.setattr(launch_path, "_has_tf32_tensor_cores", lambda device: False)
    assert A._config_for(128) == A.FLASH_CONFIGS[128]
    assert A._config_for(128, tensor_cores=True) == A.PORTABLE_FLASH_CONFIGS[128]
    monkeypatch.setattr(launch_path, "_has_tf32_tensor_cores", lambda device: True)
    monkeypatch.setattr(launch_path, "_max_shared_bytes_per_block", lambda device: 99 * 1024)
    assert A._config_for(128) == A.PORTABLE_FLASH_CONFIGS[128]


def test_tensor_core_shapes_are_checked():
    assert "multiple of 32" in _error(check_tc_config, TensorCoreConfig(16, 4, 32))
    assert "multiple of 8" in _error(check_tc_config, TensorCoreConfig(64, 4, 12))
    assert "warps" in _error(check_tc_config, TensorCoreConfig(64, 0, 32))
    assert "divide one another" in _error(check_tc_config, TensorCoreConfig(128, 3, 32))
    assert "max_registers" in _error(check_tc_config, TensorCoreConfig(64, 4, 32,
                                                                      max_registers=16))
    assert "shared memory" in _error(check_tc_config, TensorCoreConfig(128, 16, 64, split_kv=True,
                                                                       split_q=True))
    for config in [*A.TENSOR_CORE_CONFIGS.values(),
                   *(c for shapes in A.CAUSAL_TENSOR_CORE_CONFIGS.values() for _, c in shapes)]:
        assert A.check_config(config).shared_bytes <= A.DYNAMIC_SHARED_LIMIT_BYTES
    config = TensorCoreConfig(128, 8, 32, split_kv=True)
    # Q (128 rows of 144 floats), K and V (32 rows of 144 and 132), twice each.
    assert config.shared_bytes == 4 * (128 * 144 + 2 * 32 * (144 + 132))
    assert config.grid(4, 16, 1000) == (64, 8, 1)
    assert config.label == "128 x 32, 8 warps (prefetch, split K, V)"


TC_PTX_SCRIPT = """
import json
from gpucourse.kernels import attention as A
from gpucourse.kernels.attention import forward
forward.on_gpu = lambda: False  # build the lazy kernel: compile_ptx compiles it here for sm_90
# The defaults with and without the mask; the causal mask's own tiles with it alone.
shapes = [(c, causal) for c in A.TENSOR_CORE_CONFIGS.values() for causal in (False, True)]
shapes += [(c, True) for s in A.CAUSAL_TENSOR_CORE_CONFIGS.values() for _, c in s]
texts = [[c.max_registers,
          numba.cuda.compile_ptx(A._flash_kernel(c, causal, True).py_func,
                                 A._flash_signature("float32"), cc=(9, 0))[0]]
         for c, causal in shapes]
print(json.dumps(texts))
"""
# The register caps cost a few spilled registers (what ptxas 13 reports for
# sm_90), which the H100 runs measured as the faster trade for these shapes.
MOST_SPILLED_BYTES = {0: 0, 128: 128}


def test_the_tuned_tensor_core_shapes_compile_to_mma_for_an_h100():
    import re

    from ptx_helpers import compile_without_a_gpu, ptxas_report

    texts = json.loads(compile_without_a_gpu(TC_PTX_SCRIPT).strip().splitlines()[-1])
    for cap, text in texts:
        assert ".target sm_90" in text
        # The tile products are TF32 tensor-core instructions, the splits TF32
        # conversions, and the fragments come from shared memory 128 bits at a time.
        assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in text
        assert "cvt.rna.tf32.f32" in text and "ld.shared.v4.f32" in text
        report = ptxas_report(text, max_registers=cap)
        spilled = int(re.search(r"(\d+) bytes spill stores", report).group(1))
        assert spilled <= MOST_SPILLED_BYTES[cap], report


@pytest.mark.skipif(not on_gpu(), reason="needs a GPU")
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_on_a_gpu_the_default_kernel_is_the_tensor_cores_and_exact(head_dim, causal):
    from gpucourse.kernels.launch import current_gpu

    if not A._has_tf32_tensor_cores(current_gpu()):
        pytest.skip("this GPU has no TF32 tensor cores")
    assert isinstance(A._config_for(head_dim, causal=causal, seq=300), TensorCoreConfig)
    # Ragged lengths, cross-attention, and logits of a few units.
    for shape, key_seq in (((2, 3, 300, head_dim), None), ((1, 2, 130, head_dim), 517)):
        q, k, v = qkv(shape, key_seq, seed=head_dim, scale=3.0)
        out, lse = A.flash_attention(q, k, v, causal=causal, return_lse=True)
        ref, ref_lse = A.reference_attention(q, k, v, causal=causal, return_lse=True)
        np.testing.assert_allclose(out, ref, atol=ATOL, rtol=RTOL)
        np.testing.assert_allclose(lse, ref_lse, atol=ATOL, rtol=RTOL)
        cuda_cores = A.flash_attention(q, k, v, causal=causal, tensor_cores=False)
        np.testing.assert_allclose(out, cuda_cores, atol=ATOL, rtol=RTOL)
    # Half-precision inputs and outputs, as the CUDA-core kernel takes them.
    q, k, v = (x.astype(np.float16) for x in qkv((1, 2, 200, head_dim), seed=1))
    out = A.flash_attention(q, k, v, causal=causal)
    assert out.dtype == np.float16
    ref = A.reference_attention(*(x.astype(np.float32) for x in (q, k, v)), causal=causal)
    np.testing.assert_allclose(out.astype(np.float32), ref, atol=2e-3, rtol=2e-3)


@pytest.mark.skipif(not on_gpu(), reason="needs a GPU")
def test_the_quick_torch_path_gives_what_the_long_way_gives():
    # flash_attention's common case skips the long checks; what it computes
    # must be the long way's (an explicit default scale takes the long way).
    torch = pytest.importorskip("torch")
    for dtype in (torch.float32, torch.float16):
        q, k, v = (torch.from_numpy(x).to("cuda", dtype) for x in qkv((2, 3, 77, 64), 90, seed=2))
        for causal in (False, True):
            out, lse = A.flash_attention(q, k, v, causal=causal, return_lse=True)
            long_out, long_lse = A.flash_attention(q, k, v, causal=causal, scale=64 ** -0.5,
                                                   return_lse=True)
            assert torch.equal(out, long_out) and torch.equal(lse, long_lse)
            assert out.dtype == dtype and lse.dtype == torch.float32
    # What the quick path does not take, the long way still explains.
    strided = q[:, :, ::2]
    assert "C-contiguous" in _error(A.flash_attention, strided, strided, strided)
    assert "one dtype" in _error(A.flash_attention, q, k.float(), v)


def _row(variant, head_dim, causal, seq, ms, tflops=1.0):
    return dict(variant=variant, batch=4, heads=16, seq=seq, head_dim=head_dim, causal=causal,
                ms=ms, tflops=tflops, peak_mem_bytes=1, max_abs_err=0.0, mean_rel_err=0.0,
                status="ok" if ms else "skipped")


def test_the_chapter_reads_both_kernels_against_the_peer():
    results = [_row("sdpa_efficient", 128, False, 1024, 2.0, 40.0),
               _row("flash", 128, False, 1024, 1.9, 42.0),
               _row("flash_cuda_cores", 128, False, 1024, 2.6, 31.0),
               _row("sdpa_efficient", 128, True, 512, 1.0),
               _row("flash", 128, True, 512, 1.05),
               _row("flash_cuda_cores", 128, True, 512, 1.5),
               _row("sdpa_efficient", 64, False, 8192, 1.0),  # no CUDA-core row: left out
               _row("flash", 64, False, 8192, 0.7)]
    table = A.kernels_markdown({"results": results}).splitlines()
    assert table[2] == "| 128 | none | 1,024 | 0.95 | 1.30 | ≤ 1.0 |"
    assert table[3] == "| 128 | causal | 512 | 1.05 | 1.50 | ≤ 1.1 |"
    assert len(table) == 4
    assert A.throughput(results[:6], ours="flash_cuda_cores") == ({128: (31.0, 40.0)}, 1024)
    assert A.throughput(results[:3]) == ({128: (42.0, 40.0)}, 1024)
    assert "no rows" in A.kernels_markdown({"results": results[6:]})
    assert "ours must be" in _error(A.throughput, results, ours="sdpa_efficient")
