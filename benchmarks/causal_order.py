"""Under a causal mask, in which order blocks take their tiles: heads in groups or all at once.

    PYTHONPATH=src GPUCOURSE_DEVICE=gpu python3 benchmarks/causal_order.py [--out DIR]

Under a causal mask the attention kernels take their tiles heaviest first
(attention.limits.heaviest_first), so that no head's heaviest tile starts
late and runs alone at the end. Over all heads at once (the order of
2026-11-29's first runs) the blocks that run together come from every head,
and each streams its head's other side, too much for L2 at long sequences:
the fp32 backward (version 4) at head dim 128, N 4096 took 8% longer in that
order than in blockIdx's the day before. Since then the heads go in groups
that fit a share of L2 (limits.head_group). This script times three orders
of the same kernels side by side, each in a process of its own (Numba fixes
limits' constants when it compiles a kernel): the library's groups; every
head at once (L2_SHARE_BYTES made huge, so that one group holds every head);
blockIdx's order (limits._heaviest_first replaced before the first
compilation). Timed: the
fp32 backward's default version at head dims 64 and 128 and the
half-precision forward and backward (float16, head dim 128), causal, B4 H16,
N 4096 and 1024, each beside its SDPA peer in the same process
(attention_backward.py's time_in_turns: CUDA events in turns, median).

Writes results/causal_order-<gpu-slug>-<date>.json under --out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from _common import benchmark_parser, record_start, short_versions, start, write_record

# L2_SHARE_BYTES; None: the library's; "index": blockIdx's order (each head's
# tiles in turn, lightest first), the order before 2026-11-29.
ORDERS = {"groups": None, "all_heads": 2 ** 50, "index": "index"}
CASES = [(4096, 128), (4096, 64), (1024, 128)]


def one_order(share) -> list:
    """The rows of one order, in this process (its kernels compiled with it)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    from gpucourse.kernels import attention as A
    from gpucourse.kernels.attention import limits

    if share == "index":  # block_place reads this when a kernel is first compiled
        limits._heaviest_first = limits.cuda.jit(device=True)(
            lambda start, tiles, heads, heavy_last, group: (start // tiles, start % tiles))
    elif share is not None:
        limits.L2_SHARE_BYTES = share
    from attention_backward import sdpa_backward, time_in_turns

    rows = []
    for seq, d in CASES:
        q, k, v, dout = (torch.randn(4, 16, seq, d, device="cuda") for _ in range(4))
        out, lse = A.flash_attention(q, k, v, causal=True, return_lse=True)
        calls = {"flash_bwd": lambda: A.flash_attention_backward(q, k, v, out, lse, dout,
                                                                 causal=True),
                 "sdpa_efficient_bwd": sdpa_backward(q, k, v, dout, True)}
        if d == 128:
            qh, kh, vh, doh = (x.half() for x in (q, k, v, dout))
            outh, lseh = A.flash_attention(qh, kh, vh, causal=True, return_lse=True)
            leaves = [x.clone().requires_grad_() for x in (qh, kh, vh)]
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                result = scaled_dot_product_attention(*leaves, is_causal=True)

            def sdpa_flash_bwd():
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    return torch.autograd.grad(result, leaves, doh, retain_graph=True)

            def sdpa_flash():
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    return scaled_dot_product_attention(qh, kh, vh, is_causal=True)

            calls.update({
                "flash_fp16": lambda: A.flash_attention(qh, kh, vh, causal=True),
                "sdpa_flash_fp16": sdpa_flash,
                "flash_bwd_fp16": lambda: A.flash_attention_backward(qh, kh, vh, outh, lseh,
                                                                     doh, causal=True),
                "sdpa_flash_bwd_fp16": sdpa_flash_bwd})
        ms = time_in_turns(calls, rounds=7)
        # The order must not change the answer: ours against the peer's gradients.
        errors = {name: max(float((x.float() - w.float()).abs().max()
                                  / w.float().abs().max())
                            for x, w in zip(calls[name](), calls[peer]()))
                  for name, peer in (("flash_bwd", "sdpa_efficient_bwd"),
                                     ("flash_bwd_fp16", "sdpa_flash_bwd_fp16")) if name in calls}
        rows += [dict(variant=name, batch=4, heads=16, seq=seq, head_dim=d, causal=True, ms=t,
                      **({"max_rel_err_vs_peer": errors[name]} if name in errors else {}))
                 for name, t in ms.items()]
        print(f"  N{seq} d{d}: " + ", ".join(f"{n} {t:.3f}" for n, t in ms.items())
              + "; errors " + ", ".join(f"{n} {e:.1e}" for n, e in errors.items()), flush=True)
        del calls
        torch.cuda.empty_cache()
    return rows


def main():
    parser = benchmark_parser(__doc__)
    parser.add_argument("--order", choices=sorted(ORDERS), help="(internal) one order's rows "
                        "as JSON on stdout's last line")
    args, _ = start(parser)
    if args.order:
        print(json.dumps(one_order(ORDERS[args.order])))
        return
    report = record_start("causal_order", torch.cuda.get_device_name(), short_versions(),
                          __doc__.split("\n\n", 1)[1].strip(), results=[])
    for order in ORDERS:
        print(f"order {order}:", flush=True)
        done = subprocess.run([sys.executable, __file__, "--order", order], text=True,
                              stdout=subprocess.PIPE, env=os.environ, check=True)
        lines = done.stdout.strip().splitlines()
        print("\n".join(lines[:-1]), flush=True)
        report["results"] += [dict(row, order=order) for row in json.loads(lines[-1])]
    mine = {(r["order"], r["variant"], r["seq"], r["head_dim"]): r["ms"]
            for r in report["results"]}
    for (order, variant, seq, d), ms in sorted(mine.items()):
        if order == "groups" and not variant.startswith("sdpa"):
            print(f"{variant} N{seq} d{d}: groups {ms:.3f} ms, all heads "
                  f"{mine['all_heads', variant, seq, d]:.3f} ms, index "
                  f"{mine['index', variant, seq, d]:.3f} ms")
    print(f"wrote {write_record(report, args.out)}")


if __name__ == "__main__":
    main()
