"""Tiles of the half-precision backward (version 5) at head dims 64 and 128, timed against SDPA flash.

    PYTHONPATH=src GPUCOURSE_DEVICE=gpu python3 benchmarks/attention_half_sweep.py [--out DIR]

Version 5's two kernels ran 4 warps a block with 64-wide walks at head dim
64 (at 128, dK/dV 32 and dQ 16), the one choice timed until 2026-11-28, when
the whole backward took 2.35-2.55 times SDPA flash's at N = 4096 and head dim
64, 2.02-2.21 at 128 (issue 29's target: 2.0). This script times the other
tiles that compile without spilling at sm_90 (checked on a machine without a
GPU with ptxas, 2026-11-28); its first run (results/attention_half_sweep-h200-
2026-11-28.json) chose half_backward.backward_configs' tiles at head dim 64,
which now depend on the mask. The candidates are timed beside the default
for each mask (a candidate equal to it is not timed twice):

* head dim 64: dK and dV's kernel at 4 warps, 64- and 32-wide walks (the
  default under one mask is the candidate under the other); dQ's at 8 warps
  x 32 (second in the first run); and version 5 in one kernel, dQ added
  atomically by dK and dV's kernel (half_backward_atomic; "atomic 4x32",
  231 registers, and "atomic 4x64", 255, no spill; "atomic 4x32 r168"
  capped at 168 registers, 28 bytes of spills, for three blocks an SM),
  which drops the dQ kernel's recomputation of S and dP: five tile products
  a pair of tiles instead of seven; also "atomic 4x16" (160 registers, three
  blocks an SM) and "atomic 8x32" (168, one block of 8 warps), no spill;
* head dim 128: dK and dV's at 8 warps x 32 (255 registers, no spill, like
  the default's); dQ's at 8 warps x 16 and 4 x 32 (161, 172); atomic at 4 x
  32 (36 bytes of spills: timed to see what they cost), and at 4 x 16 and
  8 x 16 (255 registers, no spill, causal or not).

The first run's other candidates (8 warps at head dim 64) lost at both masks.
Each candidate's kernel is timed with the other kernel at its default tiles
(the atomic plans have one kernel).
Each runs the whole backward (half_attention_backward with its configs) in
fp16 at batch 4, 16 heads, N 4096, causal and not;
its gradients are checked against the default tiles' (the same sums in
another order: within 8 units of fp16 of the largest), then all are timed
in turns with SDPA flash's backward (benchmarks/attention.py's
interleaved_ms). Writes attention_half_sweep-<gpu>-<date>.json (rows:
head_dim, kernel, warps, block_cols, causal, ms, sdpa_flash_ms, ratio,
max_diff, max_registers; the default's rows name both kernels' tiles,
dkdv_tiles and dq_tiles) under --out (default benchmarks/results): the tiles
to make the default where one wins at both masks.
"""

from __future__ import annotations

import os

os.environ.setdefault("GPUCOURSE_DEVICE", "gpu")

from _common import benchmark_parser, record_start, results_path, short_versions, start, write_json  # noqa: E402
from attention_half import _benchmark_module  # noqa: E402 (benchmarks/attention.py, loaded once)

BATCH, HEADS, SEQ = 4, 16, 4096
CANDIDATES = {64: {"dkdv": [(4, 64), (4, 32)], "dq": [(8, 32), (4, 32)],
                   "atomic": [(4, 32, None), (4, 32, 168), (4, 64, None), (4, 16, None),
                              (8, 32, None)]},
              128: {"dkdv": [(8, 32)], "dq": [(8, 16), (4, 32)],
                    "atomic": [(4, 32, None), (4, 16, None), (8, 16, None)]}}
ROUNDS = 5
UNITS = 8 * 2.0 ** -11  # fp16's unit at one, eight of them


def plan(configs, kernel="both", tiles=(None, None), max_registers=None) -> dict:
    """One timed plan: the pair of configs, the kernel whose tiles it changes
    ("both" for the default; "atomic", version 5 in one kernel), those tiles
    (warps, block_cols) and a register cap."""
    return dict(configs=configs, kernel=kernel, tiles=tiles, max_registers=max_registers)


def sweep(bench, plans, head_dim, causal):
    """Rows for each plan (``plan``, by name) at one head dim and mask: checked
    against the default plan's gradients, then timed in turns with SDPA flash."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    from gpucourse.kernels import attention as A
    from gpucourse.kernels.attention.half_backward import half_attention_backward

    g = torch.Generator(device="cuda").manual_seed(7)
    q, k, v, dout = (torch.randn(BATCH, HEADS, SEQ, head_dim, device="cuda", generator=g).half()
                     for _ in range(4))
    out, lse = A.flash_attention(q, k, v, causal=causal, return_lse=True)
    calls = {name: (lambda p=p: half_attention_backward(
        q, k, v, out, lse, dout, causal=causal, configs=p["configs"],
        atomic_dq=p["kernel"] == "atomic", max_registers=p["max_registers"]))
             for name, p in plans.items()}
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        result = scaled_dot_product_attention(*leaves, is_causal=causal)

    def sdpa_backward():
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
    rows = []
    for name, p in plans.items():
        # The default's rows name both kernels' tiles, as they were this run.
        tiles_now = ({f"{which}_tiles": [c.warps, c.block_cols]
                      for which, c in zip(("dkdv", "dq"), p["configs"])}
                     if name == "default" else {})
        rows.append(dict(variant=name, head_dim=head_dim, kernel=p["kernel"], **tiles_now,
                         warps=p["tiles"][0], block_cols=p["tiles"][1],
                         max_registers=p["max_registers"], causal=causal, ms=ms.get(name),
                         sdpa_flash_ms=ms["sdpa_flash_bwd"],
                         ratio=ms[name] / ms["sdpa_flash_bwd"] if name in ms else None,
                         max_diff=diffs[name], passed=name in good))
    print(f"d{head_dim} causal={causal}: sdpa flash {ms['sdpa_flash_bwd']:.3f} ms; " + ", ".join(
        f"{name} {ms[name]:.3f} ms ({ms[name] / ms['sdpa_flash_bwd']:.2f}x)"
        if name in ms else f"{name} FAILED (diff {diffs[name]:.1e})" for name in plans),
        flush=True)
    return rows


def main(argv=None) -> int:
    import torch

    from gpucourse.kernels.attention.half import HalfConfig
    from gpucourse.kernels.attention.half_backward import backward_configs

    args, _ = start(benchmark_parser(__doc__), argv)
    bench = _benchmark_module()
    record = record_start("attention_half_sweep", torch.cuda.get_device_name(), short_versions(),
                          __doc__.split("\n\n", 1)[1].strip(),
                          shape=dict(batch=BATCH, heads=HEADS, seq=SEQ, dtype="float16"))
    rows = []
    for head_dim, candidates in CANDIDATES.items():
        for causal in (False, True):
            default = backward_configs(head_dim, causal)
            plans = {"default": plan(default)}
            for warps, cols in candidates["dkdv"]:
                tiles = HalfConfig(head_dim, warps=warps, block_cols=cols)
                if tiles != default[0]:
                    plans[f"dkdv {warps}x{cols}"] = plan((tiles, default[1]), "dkdv",
                                                         (warps, cols))
            for warps, cols in candidates["dq"]:
                tiles = HalfConfig(head_dim, warps=warps, block_cols=cols)
                if tiles != default[1]:
                    plans[f"dq {warps}x{cols}"] = plan((default[0], tiles), "dq", (warps, cols))
            for warps, cols, cap in candidates["atomic"]:  # one kernel: dQ added atomically
                tiles = HalfConfig(head_dim, warps=warps, block_cols=cols)
                plans[f"atomic {warps}x{cols}" + (f" r{cap}" if cap else "")] = plan(
                    (tiles, default[1]), "atomic", (warps, cols), cap)
            rows += sweep(bench, plans, head_dim, causal)
    record["results"] = rows
    path = write_json(results_path(args.out, record), record)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
