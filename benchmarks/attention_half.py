"""The course's FlashAttention forward kernel in half precision, on a real GPU.

    PYTHONPATH=src GPUCOURSE_DEVICE=gpu python3 benchmarks/attention_half.py [--out DIR]

`flash_attention` takes float16 and bfloat16 tensors. Until 2026-11-28 it
converted each element to float32 as it loaded it and computed in float32
(on the CUDA cores until 2026-11-26, the committed run of 2026-11-25; then
in 3xTF32 on the tensor cores, attention.tensor_cores, the run of
2026-11-26). Since 2026-11-28, on GPUs with tensor cores, its forward pass is
FlashAttention-2 in half precision (attention.half: products on the
fp16/bf16 tensor cores, float32 statistics, P rounded to halves). This
script measures it against PyTorch's scaled_dot_product_attention in the
same precision, whose flash backend is FlashAttention-2, and whose
memory-efficient backend is the fp32 benchmark's peer. The backward pass is
timed too, in float16 and bfloat16, against the two backends' backward in
the same type: flash_bwd_<type> is flash_attention_backward's default for
the type, version 5 for both on a GPU with tensor cores (FlashAttention-2's
backward in half precision; version 4, which converts halves to float32 as
it loads them, ran 2.7-5.0 times as long in float16 at these shapes on an
H200: benchmarks/NOTES.md), in one kernel (dQ added atomically,
half_backward_atomic) at backward.ATOMIC_DQ_HEAD_DIMS[5];
flash_bwd_two_kernels_<type> is version 5 in two kernels (dQ by a kernel of
its own: what PyTorch's deterministic mode runs). Files before 2026-11-29
timed flash_bwd_atomic_<type> instead, the one kernel beside a default of
two.

At batch 4, 16 heads, head_dim 64 and 128, seq 1024 and 4096, causal and not,
for float16 and bfloat16: ours, SDPA flash, SDPA memory-efficient, and ours in
float32 on the same values, all timed in turns (benchmarks/attention.py's
interleaved_ms: CUDA events after warm-up, median of ROUNDS rounds). Each
output is checked against float32 attention (TF32 off) on the same
half-precision values: the largest absolute error must stay below the
tolerance of its type (outputs are of order one; the tolerance is a few units
in the last place of the type at one).

Writes results/attention_half-<gpu-slug>-<date>.json under --out (default:
benchmarks/results).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("GPUCOURSE_DEVICE", "gpu")
import torch  # noqa: E402
from torch.nn.attention import SDPBackend  # noqa: E402

from gpucourse.kernels import attention as A  # noqa: E402
from gpucourse.results import gpu_slug  # noqa: E402


def _benchmark_module():
    """benchmarks/attention.py, whose timing and helpers this script shares."""
    spec = importlib.util.spec_from_file_location("attention_benchmark",
                                                  Path(__file__).with_name("attention.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BATCH, HEADS = 4, 16
CASES = [(seq, d, causal) for d in (64, 128) for seq in (1024, 4096) for causal in (False, True)]
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
TOLERANCE = {"fp16": 4 * 2.0 ** -11, "bf16": 4 * 2.0 ** -8}  # a few half-units at 1
ROUNDS = 3
# The types the backward is timed in: float16 (its default version, and
# version 5) and bfloat16 (version 5, the only one that takes it).
BACKWARD_TAGS = ("fp16", "bf16")


def backward_rows(bench, q, k, v, causal, seq, d, tag):
    """The backward pass in float16 or bfloat16 (tag): ours (the default
    version, halves in and out, float32 inside) against SDPA's flash and
    memory-efficient backends' backward in the same type (torch.autograd.grad
    of their output, the forward done once beforehand), timed in turns;
    errors against float64 autograd."""
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    from gpucourse.kernels.attention import flash_attention_backward
    from gpucourse.kernels.attention.half_backward import half_attention_backward

    g = torch.Generator(device="cuda").manual_seed(seq + d)
    dout = torch.randn(q.shape, device="cuda", generator=g).to(q.dtype)
    out, lse = A.flash_attention(q, k, v, causal=causal, return_lse=True)
    calls = {f"flash_bwd_{tag}": lambda: flash_attention_backward(
        q, k, v, out, lse, dout, causal=causal),
             # Version 5 in two kernels (deterministic mode's).
             f"flash_bwd_two_kernels_{tag}": lambda: half_attention_backward(
        q, k, v, out, lse, dout, causal=causal, atomic_dq=False)}
    for name, backend in ((f"sdpa_flash_bwd_{tag}", SDPBackend.FLASH_ATTENTION),
                          (f"sdpa_efficient_bwd_{tag}", SDPBackend.EFFICIENT_ATTENTION)):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        with sdpa_kernel(backend):
            result = scaled_dot_product_attention(*leaves, is_causal=causal)

        def grad(result=result, leaves=leaves, backend=backend):
            with sdpa_kernel(backend):
                return torch.autograd.grad(result, leaves, dout, retain_graph=True)

        calls[name] = grad
    leaves = [x.detach().double().requires_grad_() for x in (q, k, v)]
    want = torch.autograd.grad(scaled_dot_product_attention(*leaves, is_causal=causal), leaves,
                               dout.double())
    rows = []
    ms = bench.interleaved_ms(calls, rounds=ROUNDS)
    for name, call in calls.items():
        got = call()
        error = max(float((x.double() - w).abs().max() / w.abs().max())
                    for x, w in zip(got, want))
        rows.append(dict(variant=name, dtype=tag, batch=BATCH, heads=HEADS, seq=seq,
                         head_dim=d, causal=causal, ms=ms[name], max_rel_err=error,
                         passed=error < 2 * TOLERANCE[tag]))
    print(f"{tag} backward N{seq} d{d} causal={causal!s:5}: "
          + ", ".join(f"{r['variant']} {r['ms']:.3f} ms (err {r['max_rel_err']:.1e})"
                      for r in rows), flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(Path(__file__).with_name("results")))
    parser.add_argument("--quick", action="store_true", help="one case per type")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("benchmarks/attention_half.py needs a GPU with CUDA torch")
    bench = _benchmark_module()  # also turns TF32 off
    sdpa_flash = bench._sdpa(SDPBackend.FLASH_ATTENTION)
    sdpa_efficient = bench._sdpa(SDPBackend.EFFICIENT_ATTENTION)
    gpu = torch.cuda.get_device_name(0)
    date = datetime.date.today().isoformat()
    rows = []
    cases = CASES[:1] if args.quick else CASES
    for tag, dtype in DTYPES.items():
        for seq, d, causal in cases:
            g = torch.Generator(device="cuda").manual_seed(seq + d + causal)
            q, k, v = (torch.randn(BATCH, HEADS, seq, d, device="cuda", generator=g).to(dtype)
                       for _ in range(3))
            q32, k32, v32 = (x.float() for x in (q, k, v))  # the same values, in float32
            ref = bench.reference(q32, k32, v32, causal)
            calls = {
                f"flash_{tag}": lambda: A.flash_attention(q, k, v, causal=causal),
                f"sdpa_flash_{tag}": lambda: sdpa_flash(q, k, v, causal),
                f"sdpa_efficient_{tag}": lambda: sdpa_efficient(q, k, v, causal),
                "flash_fp32": lambda: A.flash_attention(q32, k32, v32, causal=causal),
            }
            errors = {}
            for name, call in list(calls.items()):
                try:
                    errors[name] = float((call().float() - ref).abs().max())
                except Exception as error:  # a backend that refuses this case
                    print(f"{name} failed at seq {seq} d {d}: {type(error).__name__}: "
                          f"{str(error)[:160]}", flush=True)
                    del calls[name]
            ms = bench.interleaved_ms(calls, rounds=ROUNDS)
            flops = A.attention_flops(BATCH, HEADS, seq, d, causal)
            for name in calls:
                limit = TOLERANCE[tag] if name != "flash_fp32" else bench.MAX_ABS_ERR
                rows.append(dict(variant=name, dtype=tag if name != "flash_fp32" else "fp32",
                                 batch=BATCH, heads=HEADS, seq=seq, head_dim=d, causal=causal,
                                 ms=ms[name], tflops=flops / ms[name] / 1e9,
                                 max_abs_err=errors[name], passed=errors[name] < limit))
            ours, peer = ms[f"flash_{tag}"], ms.get(f"sdpa_flash_{tag}")
            print(f"{tag} N{seq} d{d} causal={causal!s:5}: ours {ours:.3f} ms, "
                  f"SDPA flash {peer or float('nan'):.3f} ms "
                  f"({ours / peer if peer else float('nan'):.1f}x), ours fp32 "
                  f"{ms['flash_fp32']:.3f} ms; errors "
                  + ", ".join(f"{n} {e:.1e}" for n, e in errors.items()), flush=True)
            if tag in BACKWARD_TAGS:
                rows += backward_rows(bench, q, k, v, causal, seq, d, tag)
            del q, k, v, q32, k32, v32, ref
    report = {
        "benchmark": "attention_half", "gpu": gpu, "date": date, "versions": bench.versions(),
        "method": (f"CUDA events after warm-up, the variants of one case timed in turns, "
                   f"median of {ROUNDS} rounds; errors: largest absolute difference from "
                   f"float32 attention (TF32 off) on the same half-precision values"),
        "backward_version": 5,  # the default for both types on a GPU with tensor cores
        "results": rows,
    }
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"attention_half-{gpu_slug(gpu)}-{date}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    failed = [r for r in rows if not r["passed"]]
    print(f"wrote {path}; {len(rows) - len(failed)}/{len(rows)} rows within tolerance")
    return 1 if any(r["variant"].startswith("flash_") for r in failed) else 0


if __name__ == "__main__":
    sys.exit(main())
