"""Tiles of the half-precision backward (version 5) at head dim 64, timed against SDPA flash.

    PYTHONPATH=src GPUCOURSE_DEVICE=gpu python3 benchmarks/attention_half_sweep.py [--out DIR]

Version 5's two kernels run 4 warps a block and walk 64-wide tiles at head
dim 64 (half_backward.backward_configs), the one choice timed until
2026-11-28, when the whole backward took 2.35-2.55 times SDPA flash's at
N = 4096 (issue 29's target: 2.0). This script times the other tiles that
compile without spilling at sm_90 (checked on a machine without a GPU with
ptxas, 2026-11-28: dK/dV's kernel 237 registers at 8 warps x 64, 159 at
8 x 32, 165 at 4 x 32, 248 at the default; dQ's 162, 124, 126, 168):

* dK and dV's kernel: 8 warps (128 keys a block, so each query tile is read
  half as often) at 64- and 32-wide query tiles, and 4 warps at 32 (fewer
  registers: three blocks an SM instead of two);
* dQ's kernel: the same three, with dK and dV's tiles at their default.

Each candidate runs the whole backward (half_attention_backward with its
configs) in fp16 at batch 4, 16 heads, N 4096, head dim 64, causal and not;
its gradients are checked against the default tiles' (the same sums in
another order: within 8 units of fp16 of the largest), then all are timed
in turns with SDPA flash's backward (benchmarks/attention.py's
interleaved_ms). Writes attention_half_sweep-<gpu>-<date>.json (rows:
kernel, warps, block_cols, causal, ms, sdpa_flash_ms, ratio, max_diff) under
--out (default benchmarks/results): the tiles to make the default if one
wins at both masks.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

os.environ.setdefault("GPUCOURSE_DEVICE", "gpu")

from _common import benchmark_parser, record_start, results_path, short_versions, start, write_json  # noqa: E402

BATCH, HEADS, SEQ, HEAD_DIM = 4, 16, 4096, 64
CANDIDATES = {"dkdv": [(8, 64), (8, 32), (4, 32)], "dq": [(8, 64), (8, 32), (4, 32)]}
ROUNDS = 5
UNITS = 8 * 2.0 ** -11  # fp16's unit at one, eight of them


def _benchmark_module():
    """benchmarks/attention.py, whose interleaved_ms this script shares."""
    spec = importlib.util.spec_from_file_location("attention_benchmark",
                                                  Path(__file__).with_name("attention.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    from gpucourse.kernels import attention as A
    from gpucourse.kernels.attention.half import HalfConfig
    from gpucourse.kernels.attention.half_backward import backward_configs, half_attention_backward

    args, _ = start(benchmark_parser(__doc__), argv)
    bench = _benchmark_module()
    default = backward_configs(HEAD_DIM)
    plans = {"default": default}
    for warps, cols in CANDIDATES["dkdv"]:
        plans[f"dkdv {warps}x{cols}"] = (HalfConfig(HEAD_DIM, warps=warps, block_cols=cols),
                                         default[1])
    for warps, cols in CANDIDATES["dq"]:
        plans[f"dq {warps}x{cols}"] = (default[0],
                                       HalfConfig(HEAD_DIM, warps=warps, block_cols=cols))
    record = record_start("attention_half_sweep", torch.cuda.get_device_name(), short_versions(),
                          __doc__.split("\n\n", 1)[1].strip(),
                          shape=dict(batch=BATCH, heads=HEADS, seq=SEQ, head_dim=HEAD_DIM,
                                     dtype="float16"))
    rows = []
    for causal in (False, True):
        g = torch.Generator(device="cuda").manual_seed(7)
        q, k, v, dout = (torch.randn(BATCH, HEADS, SEQ, HEAD_DIM, device="cuda", generator=g)
                         .half() for _ in range(4))
        out, lse = A.flash_attention(q, k, v, causal=causal, return_lse=True)
        calls = {name: (lambda c=configs: half_attention_backward(
            q, k, v, out, lse, dout, causal=causal, configs=c)) for name, configs in plans.items()}
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            result = scaled_dot_product_attention(*leaves, is_causal=causal)

        def sdpa_backward(result=result, leaves=leaves):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return torch.autograd.grad(result, leaves, dout, retain_graph=True)

        reference = calls["default"]()
        diffs = {}
        for name, call in calls.items():
            got = call()
            diffs[name] = max(float((a.float() - b.float()).abs().max() / b.float().abs().max())
                              for a, b in zip(got, reference))
        good = {name: call for name, call in calls.items() if diffs[name] <= UNITS}
        ms = bench.interleaved_ms({**good, "sdpa_flash_bwd": sdpa_backward}, rounds=ROUNDS)
        for name in plans:
            kernel, _, tiles = name.partition(" ")
            warps, cols = (int(x) for x in tiles.split("x")) if tiles else (4, 64)
            rows.append(dict(variant=name, kernel=kernel if tiles else "both", warps=warps,
                             block_cols=cols, causal=causal, ms=ms.get(name),
                             sdpa_flash_ms=ms["sdpa_flash_bwd"],
                             ratio=ms[name] / ms["sdpa_flash_bwd"] if name in ms else None,
                             max_diff=diffs[name], passed=name in good))
        print(f"causal={causal}: sdpa flash {ms['sdpa_flash_bwd']:.3f} ms; " + ", ".join(
            f"{name} {ms[name]:.3f} ms ({ms[name] / ms['sdpa_flash_bwd']:.2f}x)"
            if name in ms else f"{name} FAILED (diff {diffs[name]:.1e})" for name in plans),
            flush=True)
    record["results"] = rows
    path = write_json(results_path(args.out, record), record)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
