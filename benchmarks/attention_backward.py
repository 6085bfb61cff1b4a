"""Validate and time gpucourse's FlashAttention backward pass on a real GPU.

    PYTHONPATH=src GPUCOURSE_DEVICE=gpu python3 benchmarks/attention_backward.py [--out DIR]
        [--versions 4,6]

1. Validation: dQ, dK, dV against torch autograd of plain attention in float64,
   on ragged shapes, head dims 16 to 128, causal and not, and scores scaled 20
   times up; the largest error relative to the largest gradient must stay below
   1e-4, for every float32 version (version 6, 3xTF32 on the tensor cores, at
   its head dims 32-128); and the same for the autograd operation
   (flash_attention_autograd).
2. Timing at batch 4, 16 heads, seq 1024 and 4096, head_dim 64 and 128, causal
   and not, fp32 with TF32 off: ours (`flash_attention_backward`, called on
   CUDA tensors as a user would; DEFAULT_VERSION, recorded as
   default_version, as flash_bwd (version 4: a call without a version runs
   version 6 instead at head dims 64 and 128 on GPUs with tensor cores,
   backward.TF32_DEFAULT_HEAD_DIMS, timed as flash_bwd_v6), the others as
   flash_bwd_v<n> (those that passed the validation: a version that failed it
   is not timed), and variants of version 6 (V6_VARIANTS): its small
   parts rounded to TF32 too, tf32_rounded_bwd; its walked tiles split
   once a block, tf32_split_bwd; at head dim 64, dQ added atomically by
   dK and dV's kernel, tf32_atomic_bwd; at head dim 128, dK and dV in two
   kernels of one sum each (split_sums, 32-row tiles), with dQ's own kernel,
   tf32_split_sums_bwd, and with dQ added atomically by the dK kernel,
   tf32_split_sums_atomic_bwd (the default there since 2026-11-29), and
   both sums in one kernel of 8-row tiles, with dQ's own kernel (the default
   before), tf32_one_kernel_bwd; the default split sums with the dV kernel
   walking 32 or 48 queries at a time instead of 64, tf32_dv_walks_32_bwd
   and tf32_dv_walks_48_bwd; and version 4 through Numba's own launches,
   QUICK_TORCH_PATH off, as flash_bwd_long, validated as version "long";
   --versions picks the versions besides the default, --variants version 6's
   variants, by default those not yet decided) against the
   backward of PyTorch's scaled_dot_product_attention with the memory-efficient backend
   (torch.autograd.grad of its output, the forward done once beforehand), timed
   in turns with CUDA events after warm-up, median of ROUNDS rounds. Then one
   call of ours at seq 16384, where the naive backward's N x N matrices
   (4 x 16 x 16384^2 floats, 64 GiB each) do not fit.

Writes results/attention_backward-<gpu-slug>-<date>.json under --out
(default: benchmarks/results). With --head-dims, or when shapes were left
untimed because the run passed --budget-s (each kernel compiles on its first
call: version 6's variants at head dim 128 alone took most of a device call
on the H200), it writes attention_backward_partial instead, which no chapter
reads as the full table; `--merge PART PART` (no GPU) joins two partial runs
of the same GPU, day and variants, one at each head dim and nothing left
untimed, into the full file.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from gpucourse.kernels import attention as A
from gpucourse.kernels.attention import (DEFAULT_VERSION, FLOAT32_VERSIONS, flash_attention_autograd,
                                         flash_attention_backward)
from gpucourse.kernels.attention.tf32_backward import TF32_BACKWARD_HEAD_DIMS

from _common import benchmark_parser, record_start, short_versions, start, write_record

ROUNDS = 5
BUDGET_S = 500.0  # timed shapes still waiting after this long are left untimed
LONG_SEQ = 16384  # the one call at a length the naive backward cannot hold
TIMED = [(seq, d, causal) for d in (64, 128) for seq in (1024, 4096) for causal in (False, True)]
ROUNDED = "tf32_rounded"  # version 6 with its small parts rounded to TF32 as well
SPLIT = "tf32_split"  # version 6 with its walked tiles split once a block (split_walked)
ATOMIC = "tf32_atomic"  # version 6 in one kernel, dQ added atomically (head dim 64 alone)
SPLIT_SUMS = "tf32_split_sums"  # dK and dV in two kernels, one sum each (head dim 128 alone)
SPLIT_SUMS_ATOMIC = "tf32_split_sums_atomic"  # the same, dQ added atomically by dK's kernel
ONE_KERNEL = "tf32_one_kernel"  # both sums in one kernel, dQ's own kernel (head dim 128 alone)
DV_WALKS_32 = "tf32_dv_walks_32"  # the split sums, the dV kernel walking 32 queries at a time
DV_WALKS_48 = "tf32_dv_walks_48"  # the same, walking 48 (dv_block_cols; the default walks 64)
V6_VARIANTS = (ROUNDED, SPLIT, ATOMIC, SPLIT_SUMS, SPLIT_SUMS_ATOMIC, ONE_KERNEL, DV_WALKS_32,
               DV_WALKS_48)
# The variants a run times unless told otherwise (each compiles its kernels
# again; all five of the first ones made a run longer than the device tool's
# 10 minutes on the H200, 2026-11-29): at head dim 128, the one kernel that
# was the default there before the split sums, and the split sums with dQ's
# own kernel, what PyTorch's deterministic mode runs. The rest were decided:
# rounded and split kept off, atomic dQ the default at 64, the split sums
# with atomic dQ the default at 128 (it is flash_bwd_v6 there).
DEFAULT_VARIANTS = (ONE_KERNEL, SPLIT_SUMS)
# The variants timed at one head dim alone (the others at all that version 6 takes)
ONE_HEAD_DIM = {ATOMIC: 64, SPLIT_SUMS: 128, SPLIT_SUMS_ATOMIC: 128, ONE_KERNEL: 128,
                DV_WALKS_32: 128, DV_WALKS_48: 128}


def autograd64(q, k, v, dout, causal):
    q, k, v = (x.detach().double().requires_grad_() for x in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return torch.autograd.grad(out, (q, k, v), dout.double())


def validate(versions=FLOAT32_VERSIONS, variants=V6_VARIANTS, head_dims=None):
    """Each of `versions` (and version 4 the long way, and version 6's
    `variants`, where 6 is among them) against float64 autograd; with
    `head_dims`, at the shapes of those head dims alone."""
    extra = ("long",) + (variants if 6 in versions else ())
    rows = []
    for (b, h, n, d, causal, logit) in [(1, 2, 37, 16, False, 1), (2, 2, 100, 32, True, 1),
                                         (1, 3, 129, 64, True, 20), (1, 2, 300, 64, False, 1),
                                         (1, 2, 77, 128, True, 1), (1, 1, 513, 128, False, 20)]:
        if head_dims and d not in head_dims:
            continue
        g = torch.Generator(device="cuda").manual_seed(n + d)
        q, k, v, dout = (torch.randn(b, h, n, d, device="cuda", generator=g) for _ in range(4))
        q = q * logit
        out, lse = A.flash_attention(q, k, v, causal=causal, return_lse=True)
        want = autograd64(q, k, v, dout, causal)
        for version in versions + extra:
            if version in (6,) + V6_VARIANTS and d not in TF32_BACKWARD_HEAD_DIMS \
                    or ONE_HEAD_DIM.get(version, d) != d:
                continue
            try:  # a version that fails here is recorded, and not timed
                ours = (long_way_v4(q, k, v, out, lse, dout, causal) if version == "long" else
                        v6_variant(version, q, k, v, out, lse, dout, causal)
                        if version in V6_VARIANTS else
                        flash_attention_backward(q, k, v, out, lse, dout, causal=causal,
                                                 version=version))
            except Exception as failure:
                print(f"validate v{version} d{d}: {type(failure).__name__}: {failure}", flush=True)
                rows.append(dict(batch=b, heads=h, seq=n, head_dim=d, causal=causal,
                                 logit_scale=logit, version=version, error=repr(failure),
                                 ok=False))
                continue
            errors = {name: float((o.double() - w).abs().max() / w.abs().max())
                      for name, o, w in zip(("dq", "dk", "dv"), ours, want)}
            ok = all(e < 1e-4 for e in errors.values())
            rows.append(dict(batch=b, heads=h, seq=n, head_dim=d, causal=causal,
                             logit_scale=logit, version=version, rel_err=errors, ok=ok))
            print(f"validate v{version} b{b} h{h} n{n} d{d} causal={causal} x{logit}: "
                  + ", ".join(f"{k} {e:.1e}" for k, e in errors.items())
                  + (" ok" if ok else " FAIL"), flush=True)
    # The autograd operation on CUDA tensors: the gradients a model would get.
    g = torch.Generator(device="cuda").manual_seed(7)
    q, k, v, dout = (torch.randn(2, 4, 200, 64, device="cuda", generator=g) for _ in range(4))
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    flash_attention_autograd(*leaves, causal=True).backward(dout)
    want = autograd64(q, k, v, dout, True)
    errors = {name: float((x.grad.double() - w).abs().max() / w.abs().max())
              for name, x, w in zip(("dq", "dk", "dv"), leaves, want)}
    ok = all(e < 1e-4 for e in errors.values())
    rows.append(dict(batch=2, heads=4, seq=200, head_dim=64, causal=True, logit_scale=1,
                     via="flash_attention_autograd", rel_err=errors, ok=ok))
    print("validate autograd b2 h4 n200 d64 causal: "
          + ", ".join(f"{k} {e:.1e}" for k, e in errors.items()) + (" ok" if ok else " FAIL"),
          flush=True)
    return rows


def time_in_turns(calls, rounds=ROUNDS):
    """Median milliseconds of each callable, timed in turns with CUDA events."""
    for call in calls.values():  # warm-up: compile, allocate
        call()
    torch.cuda.synchronize()
    times = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end))
    return {name: statistics.median(t) for name, t in times.items()}


def sdpa_backward(q, k, v, dout, causal):
    """A call of SDPA memory-efficient's backward alone: its forward is run once
    here, and the call differentiates that graph again (retain_graph)."""
    qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        sdpa_out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)

    def call():
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            return torch.autograd.grad(sdpa_out, (qg, kg, vg), dout, retain_graph=True)

    return call


def long_way_v4(q, k, v, out, lse, dout, causal):
    """Version 4 called with attention.backward.QUICK_TORCH_PATH off: Numba's
    own launches (the default, on CUDA tensors, is the quick path)."""
    import gpucourse.kernels.attention.backward as AB  # the module that reads the flag

    before, AB.QUICK_TORCH_PATH = AB.QUICK_TORCH_PATH, False
    try:
        return flash_attention_backward(q, k, v, out, lse, dout, causal=causal, version=4)
    finally:
        AB.QUICK_TORCH_PATH = before


def v6_variant(name, q, k, v, out, lse, dout, causal):
    """Version 6 with its default tiles changed (timed as <name>_bwd): ROUNDED,
    round_small on (tf32_backward.make_3xtf32: two conversions a split
    instead of one); SPLIT, split_walked on (each walked tile split once a
    block instead of once a warp; in dK and dV's kernel at head dim 64 and
    below alone: at 128 it spills there); ATOMIC, dQ added atomically by dK
    and dV's kernel (tf32_backward_atomic; its pieces of 16 queries x 32
    columns divide among the 4 warps at head dim 64's 32-query tiles alone);
    SPLIT_SUMS and SPLIT_SUMS_ATOMIC, dK and dV in two kernels
    (backward_configs(head_dim, split_sums=True)), dQ in its own kernel or
    added atomically by the dK kernel; ONE_KERNEL, dK and dV in one kernel
    (split_sums=False), dQ in its own; DV_WALKS_32 and DV_WALKS_48, the
    default split sums (dQ added atomically) with the dV kernel walking 32
    or 48 queries at a time instead of 64 (dv_block_cols)."""
    from dataclasses import replace

    from gpucourse.kernels.attention.tf32_backward import (backward_configs,
                                                           tf32_attention_backward)

    if name == ATOMIC:
        return tf32_attention_backward(q, k, v, out, lse, dout, causal=causal, atomic_dq=True)
    if name in (SPLIT_SUMS, SPLIT_SUMS_ATOMIC):
        return tf32_attention_backward(q, k, v, out, lse, dout, causal=causal,
                                       configs=backward_configs(q.shape[3], split_sums=True),
                                       atomic_dq=name == SPLIT_SUMS_ATOMIC)
    if name in (DV_WALKS_32, DV_WALKS_48):
        dkdv, dq = backward_configs(q.shape[3], split_sums=True, atomic_dq=True)
        dkdv = replace(dkdv, dv_block_cols=int(name.rsplit("_", 1)[1]))
        return tf32_attention_backward(q, k, v, out, lse, dout, causal=causal,
                                       configs=(dkdv, dq), atomic_dq=True)
    if name == ONE_KERNEL:
        return tf32_attention_backward(q, k, v, out, lse, dout, causal=causal,
                                       configs=backward_configs(q.shape[3], split_sums=False))
    dkdv, dq = backward_configs(q.shape[3])
    if name == ROUNDED:
        configs = (replace(dkdv, round_small=True), replace(dq, round_small=True))
    else:
        configs = (replace(dkdv, split_walked=q.shape[3] <= 64), replace(dq, split_walked=True))
    return flash_attention_backward(q, k, v, out, lse, dout, causal=causal, version=6,
                                    config=configs)


def timing(versions=FLOAT32_VERSIONS, invalid=(), variants=V6_VARIANTS, head_dims=None,
           started=None, budget_s=BUDGET_S):
    """The timed shapes (with `head_dims`, those of these head dims): the
    default version, the others of `versions` and version 6's `variants` but
    those in `invalid` (failed the validation), SDPA memory-efficient's
    backward. A shape reached more than `budget_s` seconds after `started`
    (time.perf_counter()) gets one row, status "skipped"."""
    rows = []
    for seq, d, causal in [shape for shape in TIMED if not head_dims or shape[1] in head_dims]:
        if started is not None and time.perf_counter() - started > budget_s:
            print(f"seq {seq} d{d} causal={causal}: skipped, past {budget_s:.0f} s", flush=True)
            rows.append(skipped_row(seq, d, causal))
            continue
        q, k, v, dout = (torch.randn(4, 16, seq, d, device="cuda") for _ in range(4))
        out, lse = A.flash_attention(q, k, v, causal=causal, return_lse=True)
        sdpa_bwd = sdpa_backward(q, k, v, dout, causal)

        calls = {"flash_bwd": lambda: flash_attention_backward(q, k, v, out, lse, dout,
                                                               causal=causal,
                                                               version=DEFAULT_VERSION)}
        for version in (v for v in versions if v != DEFAULT_VERSION):
            if version in invalid:  # its failed rows are in the validation
                continue
            calls[f"flash_bwd_v{version}"] = (lambda n=version: flash_attention_backward(
                q, k, v, out, lse, dout, causal=causal, version=n))
        for name in variants if 6 in versions else ():
            if name not in invalid and ONE_HEAD_DIM.get(name, d) == d:
                calls[f"{name}_bwd"] = (lambda n=name: v6_variant(n, q, k, v, out, lse, dout,
                                                                  causal))
        # Version 4 through Numba's own launches (QUICK_TORCH_PATH off): the
        # same kernels, more Python per call.
        calls["flash_bwd_long"] = lambda: long_way_v4(q, k, v, out, lse, dout, causal)
        calls["sdpa_efficient_bwd"] = sdpa_bwd
        ms = time_in_turns(calls)
        for variant, t in ms.items():
            rows.append(dict(variant=variant, batch=4, heads=16, seq=seq, head_dim=d,
                             causal=causal, ms=t, status="ok"))
        others = ", ".join(f"{name.removeprefix('flash_bwd_')} {t:.3f}"
                           for name, t in ms.items() if name.startswith("flash_bwd_v"))
        ratios = ", ".join(f"{name.removeprefix('flash_bwd_')} "
                           f"{t / ms['sdpa_efficient_bwd']:.2f}" for name, t in ms.items()
                           if name.startswith(("flash_bwd_v",) + V6_VARIANTS))
        print(f"seq {seq} d{d} causal={causal}: flash_bwd (v{DEFAULT_VERSION}) "
              f"{ms['flash_bwd']:.3f} ms ({others}), sdpa_efficient_bwd "
              f"{ms['sdpa_efficient_bwd']:.3f} ms, ratio "
              f"{ms['flash_bwd'] / ms['sdpa_efficient_bwd']:.2f} ({ratios})", flush=True)
        del calls
        del sdpa_bwd
        torch.cuda.empty_cache()
    return rows


def sweep(version=3):
    """Version 3's or 4's tile candidates (attention_backward.V3_SWEEP, those that
    fit version 4's shared memory for version 4): each checked against float64
    autograd on a ragged causal shape, then timed in turns with SDPA
    memory-efficient's backward at B4 H16, N 1024 and 4096, causal and not."""
    from gpucourse.kernels.attention.backward_v34 import V3_SWEEP, check_tiled_config_v3

    def fits(d, config):
        try:
            return check_tiled_config_v3(d, config, version=version) == config
        except ValueError:
            return False

    rows = []
    for d, configs in V3_SWEEP.items():
        configs = [c for c in configs if fits(d, c)]
        g = torch.Generator(device="cuda").manual_seed(d)
        q, k, v, dout = (torch.randn(1, 2, 300, d, device="cuda", generator=g) for _ in range(4))
        out, lse = A.flash_attention(q, k, v, causal=True, return_lse=True)
        want = autograd64(q, k, v, dout, True)
        valid = []
        for config in configs:
            try:
                got = flash_attention_backward(q, k, v, out, lse, dout, causal=True,
                                               version=version, config=config)
                error = max(float((o.double() - w).abs().max() / w.abs().max())
                            for o, w in zip(got, want))
            except Exception as failure:  # a candidate this GPU cannot run
                print(f"sweep d{d} {config}: {type(failure).__name__}: {failure}", flush=True)
                continue
            print(f"sweep d{d} {config}: error {error:.1e}", flush=True)
            if error < 1e-4:
                valid.append(config)
        for seq in (1024, 4096):
            for causal in (False, True):
                q, k, v, dout = (torch.randn(4, 16, seq, d, device="cuda") for _ in range(4))
                out, lse = A.flash_attention(q, k, v, causal=causal, return_lse=True)
                calls = {"sdpa_efficient_bwd": sdpa_backward(q, k, v, dout, causal)}
                for config in valid:
                    calls[str(config)] = (lambda c=config: flash_attention_backward(
                        q, k, v, out, lse, dout, causal=causal, version=version, config=c))
                ms = time_in_turns(calls, rounds=3)
                for name, t in ms.items():
                    rows.append(dict(variant=f"flash_bwd_v{version}" if name != "sdpa_efficient_bwd"
                                     else name, config=None if name == "sdpa_efficient_bwd"
                                     else name, batch=4, heads=16, seq=seq, head_dim=d,
                                     causal=causal, ms=t))
                best = min((t, name) for name, t in ms.items() if name != "sdpa_efficient_bwd")
                print(f"sweep seq {seq} d{d} causal={causal}: SDPA {ms['sdpa_efficient_bwd']:.3f} "
                      f"ms; best v{version} {best[1]} {best[0]:.3f} ms "
                      f"({best[0] / ms['sdpa_efficient_bwd']:.2f}x); "
                      + ", ".join(f"{n} {t:.3f}" for n, t in ms.items()
                                  if n != "sdpa_efficient_bwd"), flush=True)
                del calls
                torch.cuda.empty_cache()
    return rows


def skipped_row(seq, head_dim, causal) -> dict:
    """The row of a shape left untimed (past --budget-s)."""
    return dict(variant="flash_bwd", batch=4, heads=16, seq=seq, head_dim=head_dim,
                causal=causal, status="skipped")


def long_sequence():
    seq, d = LONG_SEQ, 64
    q, k, v, dout = (torch.randn(4, 16, seq, d, device="cuda") for _ in range(4))
    out, lse = A.flash_attention(q, k, v, causal=True, return_lse=True)
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    ms = time_in_turns({"flash_bwd": lambda: flash_attention_backward(
        q, k, v, out, lse, dout, causal=True)}, rounds=1)["flash_bwd"]
    extra = torch.cuda.max_memory_allocated() - before
    print(f"seq {seq} d{d} causal: flash_bwd {ms:.1f} ms, peak extra memory {extra / 2**20:.0f} MiB",
          flush=True)
    return dict(variant="flash_bwd", batch=4, heads=16, seq=seq, head_dim=d, causal=True, ms=ms,
                peak_extra_bytes=int(extra), status="ok")


def main():
    parser = benchmark_parser(__doc__)
    parser.add_argument("--sweep-v3", action="store_true",
                        help="only the tile sweep of version 3 (V3_SWEEP), written as "
                             "attention_backward_sweep-<gpu>-<date>.json")
    parser.add_argument("--sweep-v4", action="store_true",
                        help="only the tile sweep of version 4 (V3_SWEEP's candidates that "
                             "fit it), written as attention_backward_sweep_v4-<gpu>-<date>.json")
    parser.add_argument("--versions", default=",".join(map(str, FLOAT32_VERSIONS)),
                        help="the float32 versions to validate and time besides the default "
                             "(comma-separated; default all: %(default)s); "
                             "--versions 6 for version 6 alone, the quickest run")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                        help="version 6's variants to validate and time beside it "
                             "(comma-separated, of " + ", ".join(V6_VARIANTS) + "; or 'none'; "
                             "default %(default)s)")
    parser.add_argument("--head-dims", default="",
                        help="only these head dims (comma-separated, of 64 and 128): a shorter "
                             "run (the long sequence, at 64, only where 64 is among them)")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S,
                        help="leave the shapes still waiting after this many seconds untimed "
                             "(default %(default)s)")
    parser.add_argument("--merge", nargs="+", metavar="PART",
                        help="join partial runs (one per head dim) into the full results file "
                             "in --out, and exit (no GPU)")
    if "--merge" in sys.argv[1:]:
        args = parser.parse_args()
        try:
            merged = merge_partials(args.merge)
        except (ValueError, OSError) as problem:
            parser.error(str(problem))
        path = write_record(merged, args.out)
        print(f"wrote {path}")
        return
    args, started = start(parser)
    variants = () if args.variants == "none" else tuple(args.variants.split(","))
    if not set(variants) <= set(V6_VARIANTS):
        parser.error(f"--variants takes some of {V6_VARIANTS} or 'none', got {args.variants}")
    head_dims = tuple(d.strip() for d in args.head_dims.split(",") if d.strip())
    if not set(head_dims) <= {"64", "128"}:
        parser.error(f"--head-dims takes some of 64 and 128, got {args.head_dims}")
    try:
        chosen = tuple(int(v) for v in args.versions.split(","))
    except ValueError:
        chosen = ()
    if not chosen or not set(chosen) <= set(FLOAT32_VERSIONS):
        parser.error(f"--versions takes some of {FLOAT32_VERSIONS}, got {args.versions}")
    report = record_start("attention_backward", torch.cuda.get_device_name(), short_versions(),
                          __doc__.split("\n\n", 1)[1].strip(), default_version=DEFAULT_VERSION)
    if args.sweep_v3:
        report["benchmark"] = "attention_backward_sweep"
        report["results"] = sweep(3)
    elif args.sweep_v4:
        report["benchmark"] = "attention_backward_sweep_v4"
        report["results"] = sweep(4)
    else:
        versions = tuple(v for v in FLOAT32_VERSIONS if v in chosen or v == DEFAULT_VERSION)
        head_dims = tuple(map(int, head_dims))
        report["validation"] = validate(versions, variants, head_dims)
        invalid = {row["version"] for row in report["validation"]
                   if not row["ok"] and "version" in row}
        report["results"] = timing(versions, invalid, variants, head_dims, started,
                                   args.budget_s)
        if not head_dims or 64 in head_dims:
            report["results"].append(
                long_sequence() if time.perf_counter() - started <= args.budget_s else
                skipped_row(LONG_SEQ, 64, True))
        report["variants"] = list(variants)
        skipped = [row for row in report["results"] if row["status"] == "skipped"]
        if head_dims or skipped:  # not the chapters' full table
            report["benchmark"] = "attention_backward_partial"
            report["restricted_to"] = {"head_dims": list(head_dims or (64, 128)),
                                       "variants": list(variants),
                                       "skipped": [(r["seq"], r["head_dim"], r["causal"])
                                                   for r in skipped]}
    path = write_record(report, args.out)
    print(f"wrote {path}")


def merge_partials(paths) -> dict:
    """The full record from partial ones (``--head-dims`` runs): the same
    benchmark, GPU, day, default version and variants, their head dims
    together 64 and 128, each once, nothing left untimed, the long sequence
    among them. Raises ValueError saying which condition a part breaks."""
    parts = [(Path(p).name, json.loads(Path(p).read_text())) for p in paths]
    first = parts[0][1]
    dims = []
    for name, part in parts:
        if part.get("benchmark") != "attention_backward_partial":
            raise ValueError(f"{name} is not a partial run of attention_backward.py "
                             f"(benchmark {part.get('benchmark')!r})")
        for key in ("gpu", "date", "default_version", "variants"):
            if part.get(key) != first.get(key):
                raise ValueError(f"{name}'s {key} {part.get(key)!r} is not "
                                 f"{parts[0][0]}'s {first.get(key)!r}")
        if part["restricted_to"].get("skipped"):
            raise ValueError(f"{name} left shapes untimed: {part['restricted_to']['skipped']}")
        dims += part["restricted_to"]["head_dims"]
    if sorted(dims) != [64, 128]:
        raise ValueError(f"the parts' head dims must be 64 and 128, each once; got {sorted(dims)}")
    results = [row for _, part in parts for row in part["results"]]
    if not any(row["seq"] == LONG_SEQ for row in results):
        raise ValueError("no part timed the long sequence (the run with head dim 64 does)")
    merged = {key: value for key, value in first.items() if key != "restricted_to"}
    merged.update(benchmark="attention_backward",
                  validation=[row for _, part in parts for row in part["validation"]],
                  results=results, merged_from=[name for name, _ in parts],
                  method=first["method"] + "\n\nMerged from one process per head dim "
                  "(--head-dims), on the same GPU the same day (--merge).")
    return merged


if __name__ == "__main__":
    main()
