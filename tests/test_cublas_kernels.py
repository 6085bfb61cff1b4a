"""benchmarks/cublas_kernels.py's reading of cuBLAS's kernel names (issue 33).

The names are those torch.mm launched for fp32 products on the H200 (torch
2.11, cuBLAS 13): what the chapter and the notes say about cuBLAS's tiles and
stages is read from them by name_parts. Nothing here needs a GPU.
"""

import pytest

from gpucourse import results


@pytest.fixture
def script(monkeypatch):
    folder = results.find_results("sgemm_grid")[0].parents[1]
    monkeypatch.syspath_prepend(str(folder))
    import cublas_kernels

    return cublas_kernels


def test_the_tile_and_stages_come_from_the_kernels_name(script):
    xmma = ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x128x8_stage3_warpsize1x4x1_ffma_"
            "aligna4_alignc4_execute_kernel__5x_cublas")
    assert script.name_parts(xmma) == {"tile": [64, 128, 8], "stages": 3}
    simt = ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>"
            "(cutlass_80_simt_sgemm_256x128_8x4_nn_align1::Params)")
    assert script.name_parts(simt) == {"tile": [256, 128, 8], "stages": 4}
    # The reduction after split-K names no tile.
    reduce = "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float>"
    assert script.name_parts(reduce) == {"tile": None, "stages": None}
    assert (1537, 1023, 771) in script.SHAPES and (1000, 1000, 1000) in script.SHAPES
