"""Validate and benchmark gpucourse's FlashAttention kernel on a real GPU.

    PYTHONPATH=src GPUCOURSE_DEVICE=gpu python3 benchmarks/attention.py [--out DIR]

1. A validation grid: batch 1, 2, 4, 8 x heads 8, 16,
   32 x seq 512, 1024, 2048 x head_dim 64, 128 (causal and not), each checked
   against PyTorch's fp32 attention with TF32 off: maximum absolute error < 1e-4
   and mean relative error (mean |ours - torch| / mean |torch|) < 1e-3.
2. The benchmark at batch 4, 16 heads, head_dim 64 for seq 512 ... 32768, and
   head_dim 128 for seq 512 ... 4096, causal and not: ours (flash), the Numba
   naive pipeline, PyTorch's naive softmax(Q K^T) V, scaled_dot_product_attention with the math backend, the
   memory-efficient backend in fp32 and the flash backend in fp16 (context).
   All variants of one case get the same inputs and are timed in turns
   (ROUNDS rounds; a call is timed after warm-up of at least 0.1 s, with CUDA
   events, and the median taken), so that the GPU's clocks and temperature,
   which drift over a run, fall on all of them alike; peak extra memory is torch.cuda.max_memory_allocated during one call, less
   what was allocated before it (the output included); out-of-memory is
   recorded as such. For our kernel the time of the kernel alone (arguments
   prepared once) is recorded too: what the Python work around a launch costs.

Before both, a few candidate tile shapes (TUNING_CANDIDATES) are timed at the
target size and at seq 4096 (in turns, likewise), and the fastest correct one is used for the rest
of the run; the table, with registers and shared memory per kernel, is saved too. Then
tile shapes for a causal mask at seq 512, 1024 and 2048 (CAUSAL_CANDIDATES) are
timed the same way beside SDPA memory-efficient, and the fastest correct one at
each length is used up to it (`causal_tuning`, `causal_flash_configs`). Writes
results/attention-<gpu-slug>-<date>.json (shape: CONVENTIONS.md) under --out
(default: benchmarks/results). ``--quick`` runs a small part of each phase (a
smoke test of this script).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("GPUCOURSE_DEVICE", "gpu")
from gpucourse import device  # noqa: E402 (chooses the GPU before numba.cuda loads)

device.mode()
import numpy as np  # noqa: E402
import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402

from gpucourse.kernels import attention as A  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

MAX_ABS_ERR = 1e-4
MEAN_REL_ERR = 1e-3
GRID = dict(batch=(1, 2, 4, 8), heads=(8, 16, 32), seq=(512, 1024, 2048), head_dim=(64, 128))
BENCH = dict(batch=4, heads=16, head_dim=64)
BENCH_SEQS = (512, 1024, 2048, 4096, 8192, 16384, 32768)
D128_SEQS = (512, 1024, 2048, 4096)  # head_dim 128 (issue 17), every variant
VARIANTS = ("flash", "flash_cuda_cores", "naive_numba", "torch_naive", "sdpa_math", "sdpa_efficient",
            "sdpa_flash_fp16")
NAIVE_VARIANTS = ("naive_numba", "torch_naive", "sdpa_math")  # they hold seq x seq scores
CUDA_CORES_LONGEST = 4096  # flash_cuda_cores (ours without tensor cores) is timed up to here
SLOW_CALL_S = 1.0  # past this, a variant is not run at longer sequences
ROUNDS = 5  # the variants of one case are timed in turns, this many times


# -----------------------------------------------------------------------------
# The contenders, each taking (q, k, v) fp32 CUDA tensors


def torch_naive(q, k, v, causal):
    scores = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    if causal:
        n = q.shape[-2]
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _sdpa(backend):
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    def run(q, k, v, causal):
        with sdpa_kernel(backend):
            return scaled_dot_product_attention(q, k, v, is_causal=causal)

    return run


def contenders():
    from torch.nn.attention import SDPBackend

    return {
        "flash": lambda q, k, v, causal: A.flash_attention(q, k, v, causal=causal),
        "flash_cuda_cores": lambda q, k, v, causal: A.flash_attention(q, k, v, causal=causal,
                                                                      tensor_cores=False),
        "naive_numba": lambda q, k, v, causal: A.naive_attention(q, k, v, causal=causal),
        "torch_naive": torch_naive,
        "sdpa_math": _sdpa(SDPBackend.MATH),
        "sdpa_efficient": _sdpa(SDPBackend.EFFICIENT_ATTENTION),
        "sdpa_flash_fp16": _sdpa(SDPBackend.FLASH_ATTENTION),
    }


def reference(q, k, v, causal):
    """PyTorch fp32 attention (TF32 off), a few heads at a time to bound memory."""
    out = torch.empty_like(q)
    n = q.shape[-2]
    heads_at_once = max(1, int(2**31 // (n * n * 4 * 3)))
    for b in range(q.shape[0]):
        for h in range(0, q.shape[1], heads_at_once):
            sl = (b, slice(h, h + heads_at_once))
            out[sl] = torch_naive(q[sl], k[sl], v[sl], causal)
    return out


def errors(out, ref):
    out = out.float()
    if not torch.isfinite(out).all():
        return float("inf"), float("inf")
    diff = (out - ref).abs()
    return float(diff.max()), float(diff.mean() / ref.abs().mean())


# -----------------------------------------------------------------------------
# Timing


def time_ms(function, warmup=2, repeats=10, warm_s=0.1):
    """Median of CUDA-event timings, after warm-up; fewer of both for slow calls.
    Warm-up lasts at least warm_s seconds of calls, so that a short call is not
    timed while the GPU's clocks are still ramping up after a pause."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed():
        start.record()
        function()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end)

    first_ms = timed()  # the first warm-up (it may include compiling)
    for _ in range(warmup - 1):
        if first_ms > 200:  # one warm-up is enough for a call this slow
            break
        first_ms = timed()
    warm_until = time.perf_counter() + warm_s
    while time.perf_counter() < warm_until:
        timed()
    times = [timed()]
    repeats = max(1, min(repeats, int(2000 / max(times[0], 1e-3))))  # about 2 s at most
    times += [timed() for _ in range(repeats - 1)]
    return statistics.median(times)


def kernel_only_call(q, k, v, causal):
    """The flash kernel alone, its arguments prepared once: timed beside a
    flash_attention call, it shows what the Python work around the launch costs
    (checking the inputs, allocating the outputs). None if it cannot run."""
    try:
        batch, heads, seq, head_dim = (int(n) for n in q.shape)
        config = A._config_for(head_dim, causal=causal, seq=seq)
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[:3], dtype=q.dtype, device=q.device)
        buffers = [x.data_ptr() for x in (q, k, v, out, lse)]
        scale2 = head_dim ** -0.5 / np.log(2.0)

        def launch(out=out, lse=lse):  # holds out and lse while it is timed
            A._launch_flash(config, causal, A.FAST_MATH, buffers, batch, heads, seq, seq,
                            scale2)

        launch()
        return launch
    except Exception as error:  # a nicety beside the main timing, never fatal
        print(f"kernel-only timing failed: {type(error).__name__}: {error}", flush=True)
        return None


def peak_extra_bytes(function):
    """Run function once; return (peak extra bytes allocated during it, its result)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    result = function()
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated() - before), result


def random_qkv(batch, heads, seq, head_dim, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    shape = (batch, heads, seq, head_dim)
    return tuple(torch.randn(shape, generator=g, device="cuda") for _ in range(3))


# -----------------------------------------------------------------------------
# Phases


def validate(quick):
    grid = dict(GRID)
    if quick:
        grid = dict(batch=(1, 8), heads=(8,), seq=(512, 2048), head_dim=(64, 128))
    configs = [(b, h, n, d, c) for b in grid["batch"] for h in grid["heads"]
               for n in grid["seq"] for d in grid["head_dim"] for c in (False, True)]
    rows = []
    for i, (b, h, n, d, causal) in enumerate(tqdm(configs, desc="validation grid",
                                                   mininterval=5)):
        q, k, v = random_qkv(b, h, n, d, seed=i)
        out = A.flash_attention(q, k, v, causal=causal)
        max_abs, mean_rel = errors(out, reference(q, k, v, causal))
        ms = time_ms(lambda: A.flash_attention(q, k, v, causal=causal), warmup=1, repeats=5)
        rows.append(dict(variant="flash", batch=b, heads=h, seq=n, head_dim=d, causal=causal,
                         ms=round(ms, 4),
                         tflops=round(A.attention_flops(b, h, n, d, causal) / ms / 1e9, 3),
                         max_abs_err=max_abs, mean_rel_err=mean_rel,
                         passed=bool(max_abs < MAX_ABS_ERR and mean_rel < MEAN_REL_ERR)))
        del q, k, v, out
    return rows


def interleaved_ms(calls, rounds=ROUNDS, slow_ms=50.0):
    """The median time of each call, the calls timed in turns: every round
    times each of them (time_ms) once, so that a change of clocks or
    temperature during the run falls on all of them alike rather than on
    whichever happened to be timed at that moment. A call slower than slow_ms
    is timed in the first round only."""
    samples = {name: [] for name in calls}
    for round_index in range(rounds):
        for name, call in calls.items():
            if round_index and samples[name][0] > slow_ms:
                continue
            samples[name].append(time_ms(call, repeats=10))
    return {name: statistics.median(times) for name, times in samples.items()}


def benchmark(quick, head_dim=None, seqs=None):
    """For each seq (causal and not): every variant on the same inputs, once
    for its peak memory and its errors, then all of them timed in turns.
    head_dim defaults to BENCH's, seqs to BENCH_SEQS (or D128_SEQS at 128)."""
    head_dim = BENCH["head_dim"] if head_dim is None else head_dim
    if seqs is None:
        seqs = BENCH_SEQS if head_dim == BENCH["head_dim"] else D128_SEQS
    if quick:
        seqs = (1024, 4096)
    runs = contenders()
    too_slow = set()
    rows = []
    b, h, d = BENCH["batch"], BENCH["heads"], head_dim
    total_memory = torch.cuda.get_device_properties(0).total_memory
    cases = [(n, causal) for causal in (False, True) for n in seqs]
    progress = tqdm(total=len(cases) * len(VARIANTS), desc=f"benchmark d{d}", mininterval=5)
    for case_index, (n, causal) in enumerate(cases):
        torch.cuda.empty_cache()
        fp32_inputs = random_qkv(b, h, n, d, seed=1000 + case_index)
        calls = {}  # variant -> what to time, for the variants that ran
        for name in VARIANTS:
            progress.update()
            row = dict(variant=name, batch=b, heads=h, seq=n, head_dim=d, causal=causal,
                       ms=None, tflops=None, peak_mem_bytes=None, max_abs_err=None,
                       mean_rel_err=None, status="ok")
            rows.append(row)
            fits = A.extra_memory_bytes(b, h, n, "naive") < total_memory
            if (name, causal) in too_slow and not (name in NAIVE_VARIANTS and not fits):
                # Too slow to time again; a naive variant whose score matrix cannot
                # fit is still tried, since it fails at once with out-of-memory.
                row["status"] = "skipped (slower than %.1f s a call at a shorter seq)" % SLOW_CALL_S
                continue
            if name == "flash_cuda_cores" and n > CUDA_CORES_LONGEST:
                row["status"] = f"skipped (timed up to seq {CUDA_CORES_LONGEST})"
                continue
            torch.cuda.empty_cache()
            inputs = fp32_inputs
            if name == "sdpa_flash_fp16":
                inputs = tuple(x.half() for x in fp32_inputs)
            call = (lambda run=runs[name], inputs=inputs: run(*inputs, causal))
            try:
                row["peak_mem_bytes"], out = peak_extra_bytes(call)
            except torch.cuda.OutOfMemoryError:
                row["status"] = "oom"
                out = None
                torch.cuda.empty_cache()
                continue
            except Exception as error:
                out = None
                if "out of memory" in str(error).lower():  # numba's own allocation failure
                    row["status"] = "oom"
                elif name.startswith("flash"):
                    raise  # our kernel failing is a bug, not a data point
                else:  # a backend PyTorch cannot run here, say
                    row["status"] = f"error: {type(error).__name__}: {str(error)[:120]}"
                torch.cuda.empty_cache()
                continue
            if n <= 8192:  # the fp32 reference itself needs chunks of the score matrix
                ref = reference(*(x.float() for x in inputs), causal)
                row["max_abs_err"], row["mean_rel_err"] = errors(out, ref)
                del ref
            del out
            calls[name] = call
            if name == "flash":
                kernel_call = kernel_only_call(*fp32_inputs, causal)
                if kernel_call is not None:
                    calls["flash_kernel"] = kernel_call
        times = interleaved_ms(calls)
        for row in rows[-len(VARIANTS):]:
            ms = times.get(row["variant"])
            if ms is None:
                continue
            row["ms"] = round(ms, 4)
            row["tflops"] = round(A.attention_flops(b, h, n, d, causal) / ms / 1e9, 3)
            if row["variant"] == "flash" and "flash_kernel" in times:
                row["kernel_ms"] = round(times["flash_kernel"], 4)
            if ms / 1e3 > SLOW_CALL_S:
                too_slow.add((row["variant"], causal))
        del calls, fp32_inputs
    progress.close()
    return rows


T = A.TensorCoreConfig
TUNING_CANDIDATES = {
    # Both kernels' shapes, timed in turns: the CUDA-core kernel's (FlashConfig;
    # the committed default first, then the portable one, then the default at
    # one and two steps a pass, which chapter 9 compares) and the tensor-core
    # kernel's (TensorCoreConfig; the probes of 2026-11-26 in NOTES.md chose
    # these: 8 or 4 warps, K and V split in shared memory, registers capped
    # where that lets two blocks share a multiprocessor). The fastest correct
    # one of each kernel over seq 1024 and 4096 is used for the rest of the run.
    64: [A.FlashConfig(64, 128, 32, 8, 8, 4), A.FlashConfig(64, 64, 32, 8, 8),
         A.FlashConfig(64, 128, 32, 8, 8), A.FlashConfig(64, 128, 32, 8, 8, 2),
         T(64, 8, 32, True, True, max_registers=128), T(64, 4, 32, True, True, max_registers=168),
         T(64, 8, 32, True, True), T(64, 4, 64, False, True)],
    128: [A.FlashConfig(128, 128, 64, 4, 8), A.FlashConfig(128, 64, 64, 8, 32, 2),
          T(128, 8, 32, True, True), T(128, 8, 32, False, True), T(128, 4, 32, False, True),
          T(128, 4, 16, False, True)],
}


def pick_configs():
    """Time each candidate tile shape at the target size (seq 1024) and at seq
    4096, the candidates in turns (interleaved_ms); install the correct one
    with the least total time in A.FLASH_CONFIGS for the rest of the run.
    (Judging by seq 1024 alone once picked a shape that was 15% slower at
    longer sequences, on a difference within the noise at 1024.) Returns the
    table."""
    rows = []
    for d, configs in TUNING_CANDIDATES.items():
        q, k, v = random_qkv(4, 16, 1024, d, seed=d)
        q_long, k_long, v_long = random_qkv(4, 16, 4096, d, seed=d + 1)
        ref = reference(q, k, v, False)
        calls, calls_long, ran = {}, {}, {}
        for config in configs:
            A.check_config(config)

            def call(q=q, k=k, v=v, config=config):
                return A._run_flash("torch", q, k, v, config, False, d ** -0.5, A.FAST_MATH)[0]

            try:
                first = call()
                torch.cuda.synchronize()
            except Exception as error:  # e.g. a GPU that cannot give this much shared memory
                rows.append(dict(config=str(config), head_dim=d, threads=config.threads,
                                 tile_bytes=config.shared_bytes, passed=False,
                                 error=f"{type(error).__name__}: {str(error)[:200]}"))
                print(f"failed: {config}: {rows[-1]['error']}", flush=True)
                continue
            max_abs, mean_rel = errors(first, ref)
            kernel = A._flash_kernel(config, False, True, A.FAST_MATH)
            rows.append(dict(config=str(config), head_dim=d, threads=config.threads,
                             tile_bytes=config.shared_bytes,
                             dynamic_shared=config.dynamic_shared,
                             max_abs_err=max_abs, mean_rel_err=mean_rel,
                             passed=bool(max_abs < MAX_ABS_ERR and mean_rel < MEAN_REL_ERR),
                             **kernel_resources(kernel, ptx=True)))
            calls[config] = call
            calls_long[config] = (lambda call=call: call(q_long, k_long, v_long))
            ran[config] = rows[-1]
        times, times_long = interleaved_ms(calls, rounds=3), interleaved_ms(calls_long, rounds=3)
        best = {}  # kernel (the config's type) -> (total ms, config)
        for config, row in ran.items():
            ms, ms_long = times[config], times_long[config]
            row.update(ms=round(ms, 4), ms_seq4096=round(ms_long, 4))
            print(f"{ms:8.3f} ms {ms_long:8.3f} ms  regs {row['registers']:3d}  {config}",
                  flush=True)
            kind = type(config)
            if row["passed"] and (kind not in best or ms + ms_long < best[kind][0]):
                best[kind] = (ms + ms_long, config)
        for kind, table in ((A.FlashConfig, A.FLASH_CONFIGS),
                            (A.TensorCoreConfig, A.TENSOR_CORE_CONFIGS)):
            if kind not in best:
                raise RuntimeError(f"no candidate {kind.__name__} for head_dim {d} passed")
            table[d] = best[kind][1]
    return rows


# Tile shapes for a causal mask at short sequences (A.CAUSAL_FLASH_CONFIGS),
# head_dim 64: the two committed ones, the tuned shape's and the four- and
# two-step variants of the shapes the d64 sweep ranks highest; none spills in
# ptxas for sm_90 with the mask (benchmarks/NOTES.md, 2026-11-26). Each
# sequence length of CAUSAL_SEQS takes the fastest correct one, in turns with
# SDPA memory-efficient, for sequences up to it; longer ones use FLASH_CONFIGS.
CAUSAL_CANDIDATES = {
    64: [A.FlashConfig(64, 64, 64, 8, 16), A.FlashConfig(64, 128, 32, 8, 8, 4),
         A.FlashConfig(64, 32, 32, 4, 16, 4),
         T(64, 4, 32, True, True, max_registers=168), T(64, 8, 32, True, True, max_registers=128),
         T(64, 4, 64, False, True)],
    128: [A.FlashConfig(128, 128, 64, 4, 8), T(128, 8, 32, True, True),
          T(128, 4, 32, False, True), T(128, 4, 16, False, True)],
}
CAUSAL_SEQS = (512, 1024, 2048)


def pick_causal_configs():
    """Per head dim of CAUSAL_CANDIDATES and sequence length of CAUSAL_SEQS
    (batch 4, 16 heads): each candidate's causal call checked against PyTorch
    and timed in turns with the others and SDPA memory-efficient; the correct
    one with the least time is installed in A.CAUSAL_FLASH_CONFIGS for
    sequences up to that length (the shorter length's shape where two in a row
    agree). Returns the table."""
    rows = []
    for d, configs in CAUSAL_CANDIDATES.items():
        chosen = []
        for seq in CAUSAL_SEQS:
            q, k, v = random_qkv(4, 16, seq, d, seed=seq + d)
            ref = reference(q, k, v, True)
            calls, ran = {}, {}
            for config in configs:
                A.check_config(config)

                def call(config=config):
                    return A._run_flash("torch", q, k, v, config, True, d ** -0.5, A.FAST_MATH)[0]

                max_abs, mean_rel = errors(call(), ref)
                torch.cuda.synchronize()
                ran[config] = dict(config=str(config), head_dim=d, seq=seq, causal=True,
                                   max_abs_err=max_abs, mean_rel_err=mean_rel,
                                   passed=bool(max_abs < MAX_ABS_ERR and mean_rel < MEAN_REL_ERR))
                calls[config] = call
            calls["sdpa_efficient"] = (lambda: contenders()["sdpa_efficient"](q, k, v, True))
            times = interleaved_ms(calls, rounds=3)
            best = {}  # each kernel's fastest correct shape
            for kind in (A.FlashConfig, A.TensorCoreConfig):
                passed = [c for c in configs if ran[c]["passed"] and isinstance(c, kind)]
                if not passed:
                    raise RuntimeError(f"no causal {kind.__name__} for head_dim {d} passed at "
                                       f"seq {seq}")
                best[kind] = min(passed, key=lambda c: times[c])
            for config, row in ran.items():
                row.update(ms=round(times[config], 4),
                           vs_sdpa_efficient=round(times[config] / times["sdpa_efficient"], 4),
                           chosen=config == best[type(config)])
                rows.append(row)
                print(f"causal d{d} seq {seq:5d}: {times[config]:7.3f} ms "
                      f"({row['vs_sdpa_efficient']:.3f} x SDPA)  {config}", flush=True)
            chosen.append((seq, best))
        for kind, table in ((A.FlashConfig, A.CAUSAL_FLASH_CONFIGS),
                            (A.TensorCoreConfig, A.CAUSAL_TENSOR_CORE_CONFIGS)):
            picks = [(seq, best[kind]) for seq, best in chosen]
            table[d] = tuple(pair for i, pair in enumerate(picks)
                             if i + 1 == len(picks) or picks[i + 1][1] != pair[1])
    return rows


def profile_one():
    """One launch of the default head_dim-64 kernel at the target size (for ncu)."""
    q, k, v = random_qkv(4, 16, 1024, 64, seed=0)
    A.flash_attention(q, k, v)
    torch.cuda.synchronize()


def kernel_resources(kernel, ptx=False):
    """Registers, shared and local memory of a compiled kernel, and (ptx=True)
    counts of the PTX instructions that matter: vector or scalar shared loads,
    fused multiply-adds, local-memory traffic (spills), exponentials."""
    signature, overload = next(iter(kernel.overloads.items()))
    found = dict(registers=overload.regs_per_thread, shared_bytes=overload.shared_mem_per_block,
                 local_bytes=overload.local_mem_per_thread)
    if ptx:
        text = kernel.inspect_asm(signature)
        for key, pattern in (("ld_shared_f32", "ld.shared.f32"), ("ld_shared_v2", "ld.shared.v2"),
                             ("ld_shared_v4", "ld.shared.v4"), ("fma", "fma.rn.f32"),
                             ("ld_local", "ld.local"), ("st_local", "st.local"),
                             ("ex2", "ex2.approx"), ("shfl", "shfl.sync"),
                             ("bar", "bar.sync")):
            found["ptx_" + key] = text.count(pattern)
        try:  # SASS needs nvdisasm, which the machine may lack
            sass = overload.inspect_sass()
            for key in ("LDS.128", "LDS.64", "LDS ", "FFMA", "LDL", "STL", "MUFU.EX2", "SHFL"):
                found["sass_" + key.strip()] = sass.count(key)
        except Exception as error:
            found["sass"] = f"unavailable: {type(error).__name__}"
    return found


def versions():
    import numba
    from importlib.metadata import PackageNotFoundError, version

    try:
        numba_cuda_version = version("numba-cuda")
    except PackageNotFoundError:
        numba_cuda_version = "unknown"
    try:
        from numba import cuda as numba_cuda

        driver = ".".join(str(x) for x in numba_cuda.cudadrv.driver.driver.get_version())
    except Exception:  # the driver's version is a nicety, not a requirement
        driver = "unknown"
    return {"python": platform.python_version(), "numba": numba.__version__,
            "numba_cuda": numba_cuda_version, "torch": torch.__version__,
            "numpy": np.__version__, "cuda_runtime": torch.version.cuda, "cuda_driver": driver}


def gpu_slug(name: str) -> str:
    name = name.lower()
    for model in ("h200", "h100", "a100", "l40s", "a6000", "rtx 2050", "t4"):
        if model in name:
            return model.replace(" ", "")
    return "".join(c if c.isalnum() else "-" for c in name).strip("-")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(Path(__file__).with_name("results")))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--profile-one", action="store_true")
    args = parser.parse_args(argv)
    if not device.on_gpu():
        sys.exit("benchmarks/attention.py needs a GPU (GPUCOURSE_DEVICE=gpu)")
    gpu = torch.cuda.get_device_name(0)
    started = time.time()
    if args.profile_one:
        profile_one()
        return
    date = datetime.date.today().isoformat()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"attention-{gpu_slug(gpu)}-{date}.json"
    report = {
        "benchmark": "attention",
        "gpu": gpu,
        "date": date,
        "versions": versions(),
        "method": ("CUDA events, one call at a time; the variants of one case (and the "
                   "tuning candidates) on the same inputs, timed in turns: "
                   f"{ROUNDS} rounds (3 for tuning; one for calls over 50 ms), each "
                   "a warm-up of at least 0.1 s of calls then 10 timed calls (fewer for "
                   "slow calls, about 2 s at most); ms = median over the rounds of each "
                   "round's median; TF32 off; errors "
                   "against PyTorch fp32 softmax(QK^T)V; "
                   "mean_rel_err = mean|ours - torch| / mean|torch|; peak_mem_bytes = "
                   "torch.cuda.max_memory_allocated during one call minus what was "
                   "allocated before it (inputs excluded, output included); TFLOP/s count "
                   "4 B H N^2 d, halved when causal; kernel_ms (flash rows) = the kernel "
                   "alone, launched with arguments prepared once, i.e. without the Python "
                   "work of a flash_attention call"),
        "acceptance": {"max_abs_err": MAX_ABS_ERR, "mean_rel_err": MEAN_REL_ERR},
        "quick": args.quick,
    }

    def save():
        path.write_text(json.dumps(report, indent=1) + "\n")

    report["tuning"] = pick_configs()
    report["causal_tuning"] = pick_causal_configs()
    report["flash_configs"] = {str(d): str(c) for d, c in A.FLASH_CONFIGS.items()}
    report["causal_flash_configs"] = {str(d): [[longest, str(c)] for longest, c in shapes]
                                      for d, shapes in A.CAUSAL_FLASH_CONFIGS.items()}
    report["tensor_core_configs"] = {str(d): str(c) for d, c in A.TENSOR_CORE_CONFIGS.items()}
    report["causal_tensor_core_configs"] = {
        str(d): [[longest, str(c)] for longest, c in shapes]
        for d, shapes in A.CAUSAL_TENSOR_CORE_CONFIGS.items()}
    report["fast_math"] = A.FAST_MATH
    save()
    validation = validate(args.quick)
    report["validation"] = validation
    save()
    results = benchmark(args.quick)
    report["results"] = results
    save()
    results += benchmark(args.quick, head_dim=128)
    report["results"] = results
    resources = {}
    for d, cfg in [*A.FLASH_CONFIGS.items(), *A.TENSOR_CORE_CONFIGS.items()]:
        for causal in (False, True):
            kernel = A._flash_kernel(cfg, causal, True, A.FAST_MATH)
            if kernel.overloads:
                kernel_name = "tensor_cores" if isinstance(cfg, A.TensorCoreConfig) else "cuda_cores"
                resources[f"head_dim={d},causal={causal},{kernel_name}"] = dict(
                    config=str(cfg), threads=cfg.threads,
                    dynamic_shared_bytes=cfg.shared_bytes if cfg.dynamic_shared else 0,
                    **kernel_resources(kernel))
    report["resources"] = resources
    save()

    passed = sum(r["passed"] for r in validation)
    print(f"\nvalidation: {passed}/{len(validation)} configurations pass "
          f"(worst max abs {max(r['max_abs_err'] for r in validation):.2e}, "
          f"worst mean rel {max(r['mean_rel_err'] for r in validation):.2e})")
    print(f"{'variant':16} {'d':>4} {'causal':6} {'seq':>6} {'ms':>10} {'TFLOP/s':>8} {'peak MB':>9} status")
    for r in results:
        ms = f"{r['ms']:.3f}" if r["ms"] is not None else "-"
        if r.get("kernel_ms") is not None:
            ms = f"{ms} ({r['kernel_ms']:.3f} kernel)"
        tf = f"{r['tflops']:.1f}" if r["tflops"] is not None else "-"
        mb = f"{r['peak_mem_bytes'] / 1e6:.0f}" if r["peak_mem_bytes"] is not None else "-"
        print(f"{r['variant']:16} {r['head_dim']:>4} {str(r['causal']):6} {r['seq']:>6} {ms:>10} {tf:>8} {mb:>9} "
              f"{r['status']}")
    print(f"wrote {path} in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
