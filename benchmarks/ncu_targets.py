"""One call of a half-precision kernel, after warm-up, for Nsight Compute to profile.

    # on the GPU machine:
    ncu --clock-control none -k regex:make_hgemm_kernel -c 1 --set full -o hgemm \\
        python3 benchmarks/ncu_targets.py hgemm
    ncu --clock-control none -k regex:make_flash_half_kernel -c 1 --set full -o attention \\
        python3 benchmarks/ncu_targets.py attention
    # then benchmarks/ncu_summary.py reduces the reports to what the chapters cite.

`hgemm`: half_matmul (level 7, its default) on a 4096^3 fp16 product;
`hgemm_k768`: the same on 8192 x 3072 x 768 (GPT-2's MLP, the weakest
shape class at 0.33-0.35 of cuBLAS: where a short K leaves the pipeline's
start and C's stores uncovered).
`attention`: flash_attention's forward in fp16 at B4 H16 N4096 d64, causal
(FlashAttention-2 in half precision, attention.half). `tf32`: tf32_matmul
in one pass at 4096^3. `backward`: flash_attention_backward in fp16 at B4
H16 N4096 d64, not causal (version 5: its dK/dV kernel and its dQ kernel,
profiled one at a time). `backward_fp32_causal`: the same in float32 under a
causal mask (version 6, on 3xTF32: one dK/dV kernel that adds dQ atomically;
1.01x SDPA memory-efficient's backward on the H200, issue 29's target 1.0).
`backward_fp32_128`: flash_attention_backward in float32 at B4 H16 N4096
d128, not causal (version 6's split sums: a dV kernel, then a dK kernel that
adds dQ atomically, both named kernel in _build_dkdv_kernel; 1.05x SDPA
memory-efficient's backward on the H200 when first profiled, 0.93x after): each call launches the two in that
order, so the profiled call's dV kernel is launch 2 x WARM_UP of the name and
its dK kernel the next.
`sgemm_ragged`: matmul (auto, float32) on 1537 x 1023 x 771, the grid's
weakest large shape (0.77 of cuBLAS, issue 33: K and N odd, so loads of one
float and edge checks); `sgemm_aligned`: the same plan (tiles, slices) on
1536 x 1024 x 768, where every load is 128 bits and no tile crosses an edge,
so that the two profiles tell what the ragged edges cost; `sgemm_1000`:
auto on 1000^3 (0.81: loads of 128 bits, but 1000 is no multiple of the
tiles). Kernel name: sgemm_vectorized. `cublas_1000`: torch.mm on the same
1000^3 (TF32 off; cuBLAS's 64 x 128 x 8 kernel of three cp.async stages, whose
name holds "xmma"). The warm-up calls
compile the kernels; Nsight Compute's filter (-k, -c 1) then profiles the
first launch whose kernel name matches, so warm-up launches are skipped with
--launch-skip where a name repeats (the script prints how many launches of
the kernel came before the profiled one).
"""

from __future__ import annotations

import os
import sys

import numpy as np

if not hasattr(np, "row_stack"):  # numba-cuda 0.30.4 with numpy 2.5 (PLATFORM.md)
    np.row_stack = np.vstack
os.environ.setdefault("GPUCOURSE_DEVICE", "gpu")

WARM_UP = 3


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv not in (["hgemm"], ["hgemm_k768"], ["attention"], ["tf32"], ["backward"],
                    ["backward_fp32_causal"], ["backward_fp32_128"], ["sgemm_ragged"],
                    ["sgemm_aligned"], ["sgemm_1000"], ["cublas_1000"]):
        sys.exit("usage: python3 benchmarks/ncu_targets.py hgemm|hgemm_k768|attention|tf32|backward"
                 "|backward_fp32_causal|backward_fp32_128|sgemm_ragged|sgemm_aligned|sgemm_1000"
                 "|cublas_1000")
    import torch

    torch.manual_seed(0)
    if argv == ["hgemm"]:
        from gpucourse.kernels.tensor_cores.half_matmul import half_matmul

        a, b = (torch.randn(4096, 4096, device="cuda", dtype=torch.float16) for _ in range(2))
        call = lambda: half_matmul(a, b)  # noqa: E731
    elif argv == ["hgemm_k768"]:
        from gpucourse.kernels.tensor_cores.half_matmul import half_matmul

        a = torch.randn(8192, 768, device="cuda", dtype=torch.float16)
        b = torch.randn(768, 3072, device="cuda", dtype=torch.float16)
        call = lambda: half_matmul(a, b)  # noqa: E731
    elif argv == ["tf32"]:
        from gpucourse.kernels.tensor_cores.tf32_fast import tf32_matmul

        a, b = (torch.randn(4096, 4096, device="cuda") for _ in range(2))
        call = lambda: tf32_matmul(a, b, passes=1)  # noqa: E731
    elif argv == ["attention"]:
        from gpucourse.kernels.attention import flash_attention

        q, k, v = (torch.randn(4, 16, 4096, 64, device="cuda", dtype=torch.float16)
                   for _ in range(3))
        call = lambda: flash_attention(q, k, v, causal=True)  # noqa: E731
    elif argv[0].startswith("sgemm"):
        from gpucourse.kernels import sgemm

        shapes = {"sgemm_ragged": (1537, 1023, 771), "sgemm_aligned": (1536, 1024, 768),
                  "sgemm_1000": (1000, 1000, 1000)}
        m, n, k = shapes[argv[0]]
        a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
        if argv == ["sgemm_aligned"]:  # the ragged shape's plan, on the aligned one
            plan = sgemm.choose_plan(shapes["sgemm_ragged"], torch.cuda.get_device_name())
            print(f"the plan of {shapes['sgemm_ragged']}: {plan['config']}, "
                  f"{plan['splits']} slices of K")
            call = lambda: sgemm.matmul(a, b, 6, config=plan["config"],  # noqa: E731
                                        splits=plan["splits"])  # auto's plans are level 6's
        else:
            call = lambda: sgemm.matmul(a, b)  # noqa: E731
    elif argv == ["cublas_1000"]:  # what matmul's 1000^3 is measured against
        a, b = torch.randn(1000, 1000, device="cuda"), torch.randn(1000, 1000, device="cuda")
        torch.backends.cuda.matmul.allow_tf32 = False
        call = lambda: torch.mm(a, b)  # noqa: E731
    elif argv == ["backward_fp32_causal"]:
        from gpucourse.kernels.attention import flash_attention, flash_attention_backward

        q, k, v, dout = (torch.randn(4, 16, 4096, 64, device="cuda") for _ in range(4))
        out, lse = flash_attention(q, k, v, causal=True, return_lse=True)
        call = lambda: flash_attention_backward(q, k, v, out, lse, dout, causal=True)  # noqa: E731
    elif argv == ["backward_fp32_128"]:
        from gpucourse.kernels.attention import flash_attention, flash_attention_backward

        q, k, v, dout = (torch.randn(4, 16, 4096, 128, device="cuda") for _ in range(4))
        out, lse = flash_attention(q, k, v, return_lse=True)
        call = lambda: flash_attention_backward(q, k, v, out, lse, dout)  # noqa: E731
    else:
        from gpucourse.kernels.attention import flash_attention, flash_attention_backward

        q, k, v, dout = (torch.randn(4, 16, 4096, 64, device="cuda", dtype=torch.float16)
                         for _ in range(4))
        out, lse = flash_attention(q, k, v, return_lse=True)
        call = lambda: flash_attention_backward(q, k, v, out, lse, dout)  # noqa: E731
    for _ in range(WARM_UP + 1):
        call()
    torch.cuda.synchronize()
    print(f"{WARM_UP} warm-up launches, then the profiled one: ncu --launch-skip {WARM_UP}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
