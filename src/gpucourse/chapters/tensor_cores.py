"""What chapter 11 shows: the tensor cores' roofs, the number formats measured, the fragment map, bank conflicts, the HGEMM ladder, half-precision attention and a tiny GPT in bf16.

Chapter 11 takes the course's kernels onto the tensor cores. This module
holds what its pages compute and draw, in the chapter's order:

* **the roofs**: the H100's fp32 and dense fp16 rates as printed by NVIDIA
  (``PEAKS``, each with its source), and the course's own kernels placed
  under them from the committed results (``roofline_points``,
  ``plot_two_roofs``);
* **the formats**: fp16, bf16, TF32 and fp32 by their bits
  (``FORMATS``, ``format_table``), rounding to each in NumPy
  (``round_to_format``; ``round_to_bf16`` is here because NumPy has no
  bfloat16), and what the rounding costs, measured: a dot product of length K
  summed in fp32 or in fp16 (``dot_product_errors``), a matrix product in
  each format and in 3xTF32 (``matmul_error``);
* **the instruction**: which lane holds which element of A, B and C of
  ``mma.sync.m16n8k16`` (``fragment_owners``, ``plot_fragments``), read from
  ``kernels.tensor_cores.fragments``;
* **bank conflicts** of an ``ldmatrix`` read, plain and with the HGEMM's XOR
  swizzle (``ldmatrix_row_addresses``, ``ldmatrix_conflict_ways``, counted by
  ``kernels.tensor_cores.banks``; ``plot_bank_conflicts``);
* **the HGEMM ladder** read from the committed results
  (``hgemm_ladder_rows``, ``hgemm_ladder_markdown``, ``plot_hgemm_ladder``);
* **FlashAttention-2 in half precision**: a NumPy model of its rounding
  (``half_attention_model``), its error against float64 with P kept in
  fp32 or rounded to half (``p_rounding_errors``), and the committed forward
  times against SDPA's flash backend (``plot_half_attention``);
* **a tiny GPT in bf16**: in ``chapters.mixed_precision``.

Presentation and small NumPy models only: nothing here runs a kernel. Plots
take ``ax=None`` (or ``axes``) and return what they drew on; matplotlib is
imported inside them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpucourse import hpc, results
from gpucourse.kernels.tensor_cores.banks import BANK_BYTES, BANKS, CHUNK_BYTES, wavefronts
from gpucourse.kernels.tensor_cores.fragments import (A_FRAGMENT, B_FRAGMENT, C_FRAGMENT, WARP,
                                                     K, M, N)
from gpucourse.kernels.tensor_cores.intrinsics import round_to_tf32

# -----------------------------------------------------------------------------
# The roofs: what NVIDIA prints for the H100 (and the H200), with the source


@dataclass(frozen=True)
class Peak:
    """One printed rate of a GPU, with where it is printed."""

    label: str
    flops_per_s: float
    source: str  # bib key in book/references.bib
    printed: str  # the words of the source


# The H100 SXM5's rates. fp32 and the bandwidth are hpc.GPUS["H100"]'s (the
# datasheet); the dense tensor-core rates are printed in NVIDIA's Hopper
# architecture whitepaper (its table comparing A100 and H100; the datasheet
# prints the same rates with sparsity, twice as high).
_H100 = hpc.GPUS["H100"]
PEAKS = {
    "h100": {
        "fp32": Peak("fp32 FMA (CUDA cores)", _H100.fp32_flops_per_s, _H100.source,
                     "FP32 67 teraFLOPS (H100 SXM)"),
        "fp16": Peak("fp16/bf16 tensor cores, dense", 989.4e12, "nvidia_h100_whitepaper",
                     "Peak FP16 Tensor TFLOPS with FP32 Accumulate: 989.4 (H100 SXM5; "
                     "1978.9 with sparsity); BF16 the same"),
        "tf32": Peak("TF32 tensor cores, dense", 494.7e12, "nvidia_h100_whitepaper",
                     "Peak TF32 Tensor TFLOPS: 494.7 (H100 SXM5; 989.4 with sparsity)"),
        "bandwidth": Peak("HBM3", _H100.bandwidth_bytes_per_s, _H100.source,
                          "GPU memory bandwidth 3.35 TB/s"),
    },
    "h200": {
        "fp32": Peak("fp32 FMA (CUDA cores)", 67e12, "nvidia_h200_datasheet",
                     "FP32 67 TFLOPS (H200 SXM)"),
        "fp16": Peak("fp16/bf16 tensor cores, dense", 1979e12 / 2, "nvidia_h200_datasheet",
                     "FP16 Tensor Core 1,979 TFLOPS, shown with sparsity; specifications "
                     "one-half lower without sparsity"),
        "tf32": Peak("TF32 tensor cores, dense", 989e12 / 2, "nvidia_h200_datasheet",
                     "TF32 Tensor Core 989 TFLOPS, shown with sparsity; one-half lower "
                     "without"),
        "bandwidth": Peak("HBM3e", 4.8e12, "nvidia_h200_datasheet",
                          "GPU memory bandwidth 4.8 TB/s"),
    },
}


def peaks_of(gpu: str) -> dict:
    """PEAKS of a GPU named as a results file names it ('NVIDIA H100 80GB HBM3')
    or by its slug ('h100'); ValueError naming the GPUs with printed rates."""
    slug = results.gpu_slug(gpu)
    if slug not in PEAKS:
        raise ValueError(f"gpu must be one of {sorted(PEAKS)} (the GPUs whose rates are "
                         f"printed here), got {gpu!r}")
    return PEAKS[slug]


def _newest_of_gpu(benchmark: str, slug: str):
    """The newest results file of `benchmark` measured on the GPU `slug`, or None."""
    return results.newest_by(benchmark, key=lambda path, record: results.gpu_slug(
        record["gpu"])).get(slug)


ROOFLINE_RUNS = ("tensor_cores", "hgemm", "attention", "attention_half")


def roofline_gpu() -> str:
    """The GPU whose runs the roofline shows: of the GPUs with printed rates
    (PEAKS) and a committed run of every benchmark in ROOFLINE_RUNS, the one
    whose newest hgemm run is newest. ValueError if there is none."""
    complete = None
    for benchmark in ROOFLINE_RUNS:
        slugs = set(results.newest_by(benchmark, key=lambda path, record: results.gpu_slug(
            record["gpu"])))
        complete = slugs if complete is None else complete & slugs
    hgemm_runs = [(record["date"], slug, record["gpu"]) for slug, record in results.newest_by(
        "hgemm", key=lambda path, record: results.gpu_slug(record["gpu"])).items()
        if slug in complete & set(PEAKS)]
    if not hgemm_runs:
        raise ValueError(f"benchmarks/results must hold runs of {ROOFLINE_RUNS} on one GPU of "
                         f"{sorted(PEAKS)}; none has them all")
    return max(hgemm_runs)[2]


def _row(record, **fields):
    """The first row of a results record whose fields equal `fields`; ValueError if none."""
    for row in record["results"]:
        if all(row.get(name) == value for name, value in fields.items()):
            return row
    raise ValueError(f"the {record['benchmark']} results of {record['date']} hold no row "
                     f"with {fields}")


def roofline_points(gpu: str | None = None, size: int = 4096, seq: int = 4096,
                    head_dim: int = 64) -> list[dict]:
    """The course's kernels and their peers at one GPU's newest committed runs.

    Each point: label, family ("fp32" on the CUDA cores, "half" on the
    tensor cores), whose ("ours" or "peer"), kind ("matmul" or "attention"), intensity (FLOP per byte, each
    operand crossing device memory once: ``hpc.matmul_intensity`` at
    size^3, ``hpc.flash_attention_intensity`` at seq and head_dim, not
    causal), tflops (measured) and source (the results file's benchmark and
    date). `gpu` defaults to roofline_gpu(). Matrix products
    in fp32 come from the tensor_cores run (ours: the SGEMM ladder's best,
    on the CUDA cores), in half precision from the hgemm run; attention in
    fp32 from the attention run (ours on the CUDA cores), in half precision
    from the attention_half run. A run not made on that GPU is left out."""
    slug = results.gpu_slug(gpu if gpu is not None else roofline_gpu())
    peaks_of(slug)
    wanted = [
        ("tensor_cores", dict(variant="sgemm", m=size, n=size, k=size),
         "SGEMM, ours (fp32)", "fp32", "ours", 4, "matmul"),
        ("tensor_cores", dict(variant="cublas_fp32", m=size, n=size, k=size),
         "cuBLAS fp32", "fp32", "peer", 4, "matmul"),
        ("hgemm", dict(variant="half_matmul", dtype="fp16", m=size, n=size, k=size),
         "half_matmul, ours (fp16)", "half", "ours", 2, "matmul"),
        ("hgemm", dict(variant="cublas", dtype="fp16", m=size, n=size, k=size),
         "cuBLAS fp16", "half", "peer", 2, "matmul"),
        ("attention", dict(variant="flash_cuda_cores", seq=seq, head_dim=head_dim, causal=False),
         "FlashAttention, ours (fp32)", "fp32", "ours", 4, "attention"),
        ("attention_half", dict(variant="flash_fp16", seq=seq, head_dim=head_dim, causal=False),
         "FlashAttention-2, ours (fp16)", "half", "ours", 2, "attention"),
        ("attention_half", dict(variant="sdpa_flash_fp16", seq=seq, head_dim=head_dim,
                                causal=False),
         "SDPA flash (fp16)", "half", "peer", 2, "attention"),
    ]
    points = []
    for benchmark, fields, label, family, whose, element_bytes, kind in wanted:
        record = _newest_of_gpu(benchmark, slug)
        if record is None:
            continue
        row = _row(record, **fields)
        intensity = (hpc.matmul_intensity(size, size, size, element_bytes) if kind == "matmul"
                     else hpc.flash_attention_intensity(seq, head_dim, element_bytes))
        points.append(dict(label=label, family=family, whose=whose, kind=kind,
                           intensity=intensity,
                           tflops=row["tflops"], source=f"{benchmark}, {record['date']}"))
    return points


def plot_two_roofs(points: list[dict], gpu: str = "h100", ax=None):
    """The roofline of `gpu` with two compute roofs (fp32 on the CUDA cores,
    dense fp16 on the tensor cores) over one memory slope, and `points`
    (roofline_points) under them: blue for fp32, red for half precision,
    squares for matrix products, circles for attention, filled for the
    course's kernels, open for their peers; the points named in a legend of
    their own."""
    import matplotlib.pyplot as plt

    peaks = peaks_of(gpu)
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.5))
    bandwidth = peaks["bandwidth"].flops_per_s
    x = np.logspace(0, 4.3, 300)
    roofs = [ax.plot(x, hpc.roofline(peaks[name].flops_per_s, bandwidth, x) / 1e12, color=color,
                     lw=1.5, label=f"{peaks[name].label}: {peaks[name].flops_per_s / 1e12:.0f} "
                                   "TFLOP/s")[0]
             for name, color in (("fp16", "tab:red"), ("fp32", "tab:blue"))]
    marks = []
    for point in points:
        color = "tab:blue" if point["family"] == "fp32" else "tab:red"
        marks += ax.plot(point["intensity"], point["tflops"], "s" if point["kind"] == "matmul"
                         else "o", ms=8, color=color, ls="none", mew=1.5, label=point["label"],
                         mfc=color if point["whose"] == "ours" else "white")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of device memory, each operand once)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"Two roofs, {bandwidth / 1e12:.2f} TB/s of memory; squares: matrix "
                 "products, circles: attention", fontsize=9)
    ax.add_artist(ax.legend(handles=roofs, fontsize=8, loc="lower right"))
    ax.legend(handles=marks, fontsize=7, loc="upper left")
    ax.grid(alpha=0.3, which="both")
    return ax


# -----------------------------------------------------------------------------
# The number formats: bits, rounding, and what rounding costs


@dataclass(frozen=True)
class Format:
    """A binary floating-point format by its bits (IEEE 754's parameters)."""

    name: str
    exponent_bits: int
    fraction_bits: int  # stored bits of the significand, the leading 1 not counted

    @property
    def epsilon(self) -> float:
        """The gap between 1 and the next number: 2^-fraction_bits."""
        return 2.0 ** -self.fraction_bits

    @property
    def unit_roundoff(self) -> float:
        """The largest relative error of rounding to nearest: half of epsilon."""
        return self.epsilon / 2

    @property
    def max_exponent(self) -> int:
        """The exponent of the largest finite numbers (the all-ones field is inf and NaN)."""
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def largest(self) -> float:
        """The largest finite number: (2 - epsilon) * 2^max_exponent."""
        return (2 - self.epsilon) * 2.0 ** self.max_exponent

    @property
    def smallest_normal(self) -> float:
        """The smallest number with the full precision: 2^(1 - max_exponent)."""
        return 2.0 ** (1 - self.max_exponent)


# fp16 and fp32 are IEEE 754's binary16 and binary32; bf16 keeps binary32's
# exponent and 7 fraction bits (its top 16 bits); TF32 keeps the exponent and
# 10 fraction bits, fp16's precision with fp32's range (the PTX ISA's .tf32).
FORMATS = {
    "fp16": Format("fp16", 5, 10),
    "bf16": Format("bf16", 8, 7),
    "tf32": Format("tf32", 8, 10),
    "fp32": Format("fp32", 8, 23),
}


def _format(name: str) -> Format:
    if name not in FORMATS:
        raise ValueError(f"format must be one of {list(FORMATS)}, got {name!r}")
    return FORMATS[name]


def round_to_bf16(x):
    """Each float32 of `x` rounded to bf16 (to nearest, ties to even, as
    cvt.rn.bf16.f32 does), returned as float32 with the low 16 bits zero;
    values past bf16's largest become infinity, NaN stays NaN. Raises
    ValueError for anything but float32."""
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise ValueError(f"x must be float32 (what cvt.rn.bf16.f32 takes), got {x.dtype}")
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16  # to nearest, ties to even
    quiet_nan = ((bits >> 16) | 0x40) << 16  # a NaN stays a NaN, not an infinity
    return np.where(np.isnan(x), quiet_nan, rounded).astype(np.uint32).view(np.float32)


def round_to_format(x, name: str):
    """The values of `x` (any real array) rounded to the format `name` (fp16,
    bf16, tf32 or fp32), as float64: first to float32 (but for fp16, which
    NumPy rounds to directly), then to bf16 or TF32 by their rules."""
    fmt = _format(name)
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        if fmt.name == "fp16":
            return x.astype(np.float16).astype(np.float64)
        single = x.astype(np.float32)
    if fmt.name == "bf16":
        single = round_to_bf16(single)
    elif fmt.name == "tf32":
        single = round_to_tf32(single)
    return single.astype(np.float64)


def measured_epsilon(name: str) -> float:
    """The gap between 1 and the next number of format `name`, found by
    rounding: the smallest 2^-j for which 1 + 2^-j survives round_to_format
    unchanged."""
    gap = 1.0
    while round_to_format(1.0 + gap / 2, name) == 1.0 + gap / 2:
        gap /= 2
    return gap


def format_table() -> str:
    """A markdown table of FORMATS: bits, epsilon (from the bits and as
    measured by rounding), decimal digits, largest number, smallest normal."""
    rows = ["| format | exponent bits | fraction bits | epsilon | measured by rounding "
            "| decimal digits | largest | smallest normal |",
            "|---|---|---|---|---|---|---|---|"]
    for fmt in FORMATS.values():
        rows.append(f"| {fmt.name} | {fmt.exponent_bits} | {fmt.fraction_bits} | "
                    f"2^-{fmt.fraction_bits} = {fmt.epsilon:.3g} | "
                    f"{measured_epsilon(fmt.name):.3g} | {-math.log10(fmt.unit_roundoff):.1f} | "
                    f"{fmt.largest:.5g} | {fmt.smallest_normal:.3g} |")
    return "\n".join(rows)


def dot_product_errors(lengths, name: str, accumulate: str = "fp32", trials: int = 16,
                       seed: int = 0) -> np.ndarray:
    """Median relative error, over `trials` pairs of vectors with entries
    uniform in [0, 1), of their dot product with the inputs rounded to `name`
    and the products summed one after the other in `accumulate` ("fp32", as
    the tensor cores do, or "fp16"), against the dot product of the unrounded
    inputs in float64. One error per length of `lengths`."""
    if accumulate not in ("fp32", "fp16"):
        raise ValueError(f"accumulate must be 'fp32' or 'fp16', got {accumulate!r}")
    lengths = [int(k) for k in lengths]
    if not lengths or min(lengths) < 1 or trials < 1:
        raise ValueError(f"lengths must be whole numbers of at least 1 and trials at least 1, "
                         f"got {lengths} and {trials}")
    rng = np.random.default_rng(seed)
    sum_type = np.float32 if accumulate == "fp32" else np.float16
    errors = []
    for k in lengths:
        a, b = rng.random((2, trials, k))
        exact = np.einsum("tk,tk->t", a, b)
        # Products of two rounded inputs are exact in float32 (at most 2 x 11
        # significant bits), and then each partial sum is rounded: sequential
        # accumulation, one rounding per step, as a single chain of mma sums.
        products = (round_to_format(a, name) * round_to_format(b, name)).astype(sum_type)
        computed = np.add.accumulate(products, axis=1, dtype=sum_type)[:, -1]
        errors.append(np.median(np.abs(computed.astype(np.float64) - exact) / exact))
    return np.array(errors)


def plot_dot_product_errors(lengths=(16, 64, 256, 1024, 4096, 16384), trials: int = 16,
                            ax=None):
    """dot_product_errors against the length K, for inputs in each format
    summed in fp32 (solid) and for fp16 inputs summed in fp16 (dashed), with
    each format's unit roundoff as a dotted line. Returns (axes, errors),
    errors {(format, accumulate): array over lengths}."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.2))
    errors = {(name, "fp32"): dot_product_errors(lengths, name, "fp32", trials)
              for name in FORMATS}
    errors[("fp16", "fp16")] = dot_product_errors(lengths, "fp16", "fp16", trials)
    for i, ((name, accumulate), values) in enumerate(errors.items()):
        color = f"C{i % len(FORMATS)}"
        ax.plot(lengths, values, marker="x" if name == "tf32" else "o", color=color,
                ls="-" if accumulate == "fp32" else "--", label=f"{name} inputs, {accumulate} sums")
        if accumulate == "fp32":
            ax.axhline(FORMATS[name].unit_roundoff, color=color, ls=":", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("length K of the dot product")
    ax.set_ylabel("relative error against float64 (median)")
    ax.set_title("dotted: each format's unit roundoff (fp16's and TF32's are one)", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return ax, errors


def split_tf32(x):
    """(big, small) TF32 parts of the float32 array `x`: big = tf32(x),
    small = tf32(x - big), as 3xTF32 splits its inputs."""
    x = np.asarray(x, dtype=np.float32)
    big = round_to_tf32(x)
    return big, round_to_tf32(x - big)


def matmul_error(a, b, method: str) -> float:
    """max |C - C_exact| / max |C_exact| of A B computed by `method`, against
    float64 on the given (float64) inputs. Methods: "fp32" (inputs and sums in
    float32), "fp16", "bf16", "tf32" (inputs rounded to that format, exact
    products, float32 sums: what one tensor-core pass does) and "3xtf32"
    (a_big b_big + a_big b_small + a_small b_big, each in float32)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"a and b must be matrices with a's columns equal to b's rows, got "
                         f"{a.shape} and {b.shape}")
    exact = a @ b
    if method in ("fp32", "fp16", "bf16", "tf32"):
        computed = (round_to_format(a, method).astype(np.float32)
                    @ round_to_format(b, method).astype(np.float32))
    elif method == "3xtf32":
        (a_big, a_small), (b_big, b_small) = split_tf32(a), split_tf32(b)
        computed = a_big @ b_big + (a_big @ b_small + a_small @ b_big)
    else:
        raise ValueError(f"method must be one of fp32, fp16, bf16, tf32, 3xtf32, got {method!r}")
    return float(np.abs(computed - exact).max() / np.abs(exact).max())


def naive_softmax(x, dtype=np.float16):
    """exp(x) / sum(exp(x)) computed in `dtype`, without subtracting the
    maximum first: what overflows (NumPy's warnings silenced)."""
    x = np.asarray(x, dtype=dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x)
        return e / e.sum(dtype=dtype)


# -----------------------------------------------------------------------------
# The instruction: which lane holds which element


_FRAGMENTS = {"A": (A_FRAGMENT, (M, K)), "B": (B_FRAGMENT, (K, N)), "C": (C_FRAGMENT, (M, N))}


def fragment_owners(operand: str) -> tuple[np.ndarray, np.ndarray]:
    """(lane, register) of each element of `operand` ("A" 16 x 16, "B" 16 x 8,
    or "C" 16 x 8) of mma.sync.m16n8k16, as two integer matrices of the
    operand's shape, from kernels.tensor_cores.fragments. Each element has
    exactly one owner; ValueError if the fragment lists say otherwise."""
    if operand not in _FRAGMENTS:
        raise ValueError(f"operand must be one of {list(_FRAGMENTS)}, got {operand!r}")
    places, shape = _FRAGMENTS[operand]
    lane, register = np.full(shape, -1), np.full(shape, -1)
    for who in range(WARP):
        for index, (row, col) in enumerate(places[who]):
            if lane[row, col] != -1:
                raise ValueError(f"{operand}[{row}, {col}] has two owners in the fragment lists")
            lane[row, col], register[row, col] = who, index
    if (lane < 0).any():
        raise ValueError(f"the fragment lists leave elements of {operand} without an owner")
    return lane, register


def plot_fragments(axes=None):
    """A, B and C of mma.sync.m16n8k16 as grids: each element coloured by the
    group of four lanes that holds it (lane // 4, the row group g) and marked
    with its lane and its register index (a0..a7, b0..b3, c0..c3)."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 3, figsize=(13, 5.2),
                               gridspec_kw=dict(width_ratios=[K, N, N]))
    colors = plt.get_cmap("tab10")
    for ax, operand in zip(axes, _FRAGMENTS):
        lane, register = fragment_owners(operand)
        rows, cols = lane.shape
        image = np.array([[colors(g)[:3] for g in line] for line in lane // 4])
        shade = 0.55 + 0.15 * (lane % 4)[..., None]  # t = lane % 4, lighter to darker
        ax.imshow(1 - (1 - image) * shade, extent=(0, cols, rows, 0))
        for r in range(rows):
            for c in range(cols):
                ax.text(c + 0.5, r + 0.5, f"{lane[r, c]}\n{operand.lower()}{register[r, c]}",
                        ha="center", va="center", fontsize=5.2, linespacing=0.9)
        ax.set_xticks(np.arange(cols) + 0.5, [str(c) for c in range(cols)], fontsize=6)
        ax.set_yticks(np.arange(rows) + 0.5, [str(r) for r in range(rows)], fontsize=6)
        ax.set_xticks(np.arange(cols + 1), minor=True)
        ax.set_yticks(np.arange(rows + 1), minor=True)
        ax.grid(which="minor", color="white", lw=0.6)
        ax.tick_params(which="minor", length=0)
        ax.set_title(f"{operand} ({rows} x {cols})")
        ax.set_xlabel("column")
    axes[0].set_ylabel("row")
    return axes


# -----------------------------------------------------------------------------
# Bank conflicts of an ldmatrix read, plain and swizzled


def swizzled_chunk(row: int, chunk: int, chunks_per_row: int) -> int:
    """Where the HGEMM ladder stores 16-byte chunk `chunk` of tile row `row`
    (kernels.tensor_cores.hgemm_ladder's XOR swizzle): chunk ^ ((row // shift) % modulus)."""
    from gpucourse.kernels.tensor_cores.hgemm_ladder import _swizzle

    shift, modulus = _swizzle(chunks_per_row)
    return chunk ^ ((row // shift) % modulus)


def ldmatrix_row_addresses(row_bytes: int, swizzled: bool, chunk: int = 0,
                           first_row: int = 0) -> list[int]:
    """The byte addresses of the 8 rows of one ldmatrix 8 x 8 matrix: rows
    first_row..first_row+7 of a tile of halves whose rows are `row_bytes`
    long, at the 16-byte chunk `chunk`, stored plainly or swizzled."""
    if row_bytes % CHUNK_BYTES or row_bytes < CHUNK_BYTES:
        raise ValueError(f"row_bytes must be a positive multiple of {CHUNK_BYTES}, got "
                         f"{row_bytes}")
    chunks = row_bytes // CHUNK_BYTES
    if not 0 <= chunk < chunks:
        raise ValueError(f"chunk must be in [0, {chunks}) for rows of {row_bytes} bytes, "
                         f"got {chunk}")
    return [row * row_bytes + CHUNK_BYTES * (swizzled_chunk(row, chunk, chunks) if swizzled
                                             else chunk)
            for row in range(first_row, first_row + 8)]


def ldmatrix_conflict_ways(row_bytes: int, swizzled: bool, chunk: int = 0,
                           first_row: int = 0) -> int:
    """How many passes shared memory takes for that matrix (banks.wavefronts
    of its 8 rows of 16 bytes): 1 is no conflict, n an n-way conflict."""
    return wavefronts(ldmatrix_row_addresses(row_bytes, swizzled, chunk, first_row),
                      CHUNK_BYTES)


def plot_bank_conflicts(row_bytes=(64, 256), axes=None):
    """One ldmatrix matrix's 8 rows (up) against the 32 banks (across), for
    tiles with rows of each length in `row_bytes`, plain (left) and swizzled
    (right): a cell is filled where a row reads the bank; a column with more
    than one filled cell is a conflict."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(len(row_bytes), 2, figsize=(11, 1.9 * len(row_bytes) + 0.4),
                               squeeze=False)
    for line, length in zip(axes, row_bytes):
        for ax, swizzled in zip(line, (False, True)):
            grid = np.full((8, BANKS), np.nan)
            for r, address in enumerate(ldmatrix_row_addresses(length, swizzled)):
                first = address // BANK_BYTES
                grid[r, [(first + i) % BANKS for i in range(CHUNK_BYTES // BANK_BYTES)]] = r
            ax.imshow(grid, cmap="tab10", vmin=0, vmax=9, aspect="auto",
                      extent=(0, BANKS, 8, 0))
            ax.set_xticks(range(0, BANKS + 1, 4))
            ax.set_yticks(np.arange(8) + 0.5, [str(r) for r in range(8)], fontsize=7)
            ax.grid(axis="x", alpha=0.4)
            ways = ldmatrix_conflict_ways(length, swizzled)
            ax.set_title(f"rows of {length} bytes, {'swizzled' if swizzled else 'plain'}: "
                         f"{'no conflict' if ways == 1 else f'{ways}-way conflict'}", fontsize=9)
            ax.set_ylabel("row")
        line[0].set_xlabel("bank")
        line[1].set_xlabel("bank")
    return axes


# -----------------------------------------------------------------------------
# The HGEMM ladder, from the committed results

HGEMM_LEVEL_LABELS = {
    1: "1 one warp per tile",
    2: "2 shared-memory tiles",
    3: "3 large block tiles",
    4: "4 ldmatrix, swizzle",
    5: "5 cp.async pipeline",
    6: "6 fragments double-buffered",
    7: "7 tuned tiles and order",
}


def hgemm_ladder_rows(hgemm_record: dict, levels_1_2_record: dict | None = None,
                      dtype: str = "fp16", size: int = 4096) -> list[dict]:
    """The HGEMM levels at size^3, in order, then cuBLAS: each a dict with
    level, label, tflops, vs_cublas (cuBLAS's time over the level's, in the
    level's own run), cublas_tflops and source. Levels 3-7 come from an hgemm
    results record (rows "level3".."level7" of `dtype`), levels 1 and 2 (the
    kernel alone, fp16) from a tensor_cores record where one is given. The
    cuBLAS row is cuBLAS as timed in turns with levels 3-7: the median of
    their tflops / vs_cublas, so that every share in the rows is its own."""
    rows = []
    if levels_1_2_record is not None and dtype == "fp16":
        cublas = _row(levels_1_2_record, variant="cublas_fp16", m=size, n=size, k=size)
        for level in (1, 2):
            row = _row(levels_1_2_record, variant=f"hgemm{level}_kernel", m=size, n=size, k=size)
            rows.append(dict(level=level, label=HGEMM_LEVEL_LABELS[level], tflops=row["tflops"],
                             vs_cublas=row["vs_cublas_fp16"], cublas_tflops=cublas["tflops"],
                             source=f"tensor_cores, {levels_1_2_record['date']}"))
    for level in range(3, 8):
        row = _row(hgemm_record, variant=f"level{level}", dtype=dtype, m=size, n=size, k=size)
        rows.append(dict(level=level, label=HGEMM_LEVEL_LABELS[level], tflops=row["tflops"],
                         vs_cublas=row["vs_cublas"], cublas_tflops=row["tflops"] / row["vs_cublas"],
                         source=f"hgemm, {hgemm_record['date']}"))
    cublas = float(np.median([row["cublas_tflops"] for row in rows if row["level"] >= 3]))
    rows.append(dict(level="cublas", label="cuBLAS", tflops=cublas, vs_cublas=1.0,
                     cublas_tflops=cublas, source=f"hgemm, {hgemm_record['date']}, in turns "
                                                  "with levels 3-7"))
    return rows


def hgemm_ladder_for(gpu: str | None = None, dtype: str = "fp16", size: int = 4096) -> tuple:
    """(rows, gpu name): hgemm_ladder_rows from the newest hgemm run on `gpu`
    (default: roofline_gpu()), with levels 1 and 2 from the newest
    tensor_cores run on the same GPU where there is one."""
    if gpu is None:
        gpu = roofline_gpu()
    slug = results.gpu_slug(gpu)
    hgemm_record = _newest_of_gpu("hgemm", slug)
    if hgemm_record is None:
        raise ValueError(f"gpu must be one with a committed hgemm run, got {gpu!r}")
    rows = hgemm_ladder_rows(hgemm_record, _newest_of_gpu("tensor_cores", slug), dtype, size)
    return rows, hgemm_record["gpu"]


def hgemm_ladder_markdown(rows: list[dict]) -> str:
    """A markdown table of hgemm_ladder_rows: level, TFLOP/s, share of cuBLAS, run."""
    lines = ["| level | TFLOP/s | share of cuBLAS (same run) | run |", "|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['label']} | {row['tflops']:.1f} | {row['vs_cublas']:.1%} | "
                     f"{row['source']} |")
    return "\n".join(lines)


def plot_hgemm_ladder(rows: list[dict], peak_flops_per_s: float | None = None, ax=None):
    """hgemm_ladder_rows as bars of TFLOP/s (log scale), each level's share of
    cuBLAS written on it; a dashed line at the dense tensor-core peak where
    one is given."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4))
    labels = [row["label"] for row in rows]
    colors = ["tab:gray" if row["level"] == "cublas" else "tab:red" for row in rows]
    bars = ax.bar(range(len(rows)), [row["tflops"] for row in rows], color=colors)
    for bar, row in zip(bars, rows):
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height() * 1.08,
                f"{row['tflops']:.0f}\n({row['vs_cublas']:.0%})", ha="center", fontsize=7)
    if peak_flops_per_s is not None:
        ax.axhline(peak_flops_per_s / 1e12, color="black", ls="--", lw=1,
                   label=f"dense fp16 peak, {peak_flops_per_s / 1e12:.0f} TFLOP/s")
        ax.legend(fontsize=8, loc="upper left")
    ax.set_yscale("log")
    ax.set_ylim(top=3 * max([row["tflops"] for row in rows] + [(peak_flops_per_s or 0) / 1e12]))
    ax.set_xticks(range(len(rows)), labels, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("TFLOP/s (share of cuBLAS)")
    return ax


# -----------------------------------------------------------------------------
# FlashAttention-2 in half precision: the rounding of P, modelled and measured


def half_attention_model(q, k, v, name: str = "fp16", round_p: bool = True,
                         round_output: bool = True, block_cols: int = 64,
                         scale: float | None = None) -> np.ndarray:
    """One head of attention as the half-precision forward rounds it, in NumPy.

    q, k, v: (seq, head_dim) and (key_seq, head_dim) arrays, rounded to the
    format `name` first (fp16 or bf16). Tile by tile of `block_cols` keys: the
    scores exact products summed in float32, the running maximum and sum in
    float32, P = exp(S - m) in float32; P rounded to `name` for the product
    with V (if round_p; FlashAttention-2 does, the sum takes P before
    rounding), that product summed in float32; the output divided once and
    rounded to `name` (if round_output, as the kernel stores it). Returns
    float64."""
    if name not in ("fp16", "bf16"):
        raise ValueError(f"name must be 'fp16' or 'bf16', got {name!r}")
    q, k, v = (round_to_format(x, name) for x in (q, k, v))
    if q.ndim != 2 or k.shape != v.shape or k.ndim != 2 or q.shape[1] != k.shape[1]:
        raise ValueError(f"q must be (seq, head_dim) and k, v (key_seq, head_dim), got "
                         f"{q.shape}, {k.shape}, {v.shape}")
    scale = 1 / math.sqrt(q.shape[1]) if scale is None else scale
    f32 = np.float32
    row_max = np.full(q.shape[0], -np.inf, dtype=f32)
    row_sum = np.zeros(q.shape[0], dtype=f32)
    acc = np.zeros(q.shape, dtype=f32)
    for start in range(0, k.shape[0], block_cols):
        keys, values = k[start:start + block_cols], v[start:start + block_cols]
        scores = ((q @ keys.T) * scale).astype(f32)
        new_max = np.maximum(row_max, scores.max(axis=1))
        alpha = np.exp(row_max - new_max)
        p = np.exp(scores - new_max[:, None])
        row_sum = row_sum * alpha + p.sum(axis=1, dtype=f32)
        p_used = round_to_format(p, name).astype(f32) if round_p else p
        acc = acc * alpha[:, None] + p_used @ values.astype(f32)
        row_max = new_max
    out = acc / row_sum[:, None]
    return round_to_format(out, name) if round_output else out.astype(np.float64)


def p_rounding_errors(seqs=(64, 256, 1024), head_dim: int = 64, name: str = "fp16",
                      seed: int = 0) -> list[dict]:
    """The largest error of half_attention_model against float64 attention on
    the same (rounded) inputs, one row per sequence length, the output left in
    float32: with P kept in float32 ("p_fp32") and with P rounded to `name`
    ("p_rounded"); and, for scale, the rounding of the exact output to `name`
    ("output_only") and the whole model as the kernel stores its output
    ("stored"). Inputs N(0, 1)."""
    from gpucourse.kernels.attention import reference_attention

    rng = np.random.default_rng(seed)
    rows = []
    for seq in seqs:
        q, k, v = (round_to_format(rng.standard_normal((seq, head_dim)), name) for _ in range(3))
        exact = reference_attention(q, k, v)

        def error(out):
            return float(np.abs(out - exact).max())

        rows.append(dict(
            seq=seq,
            p_fp32=error(half_attention_model(q, k, v, name, round_p=False, round_output=False)),
            p_rounded=error(half_attention_model(q, k, v, name, round_output=False)),
            output_only=error(round_to_format(exact, name)),
            stored=error(half_attention_model(q, k, v, name))))
    return rows


def half_attention_forward(record: dict, dtype: str = "fp16") -> list[dict]:
    """The forward rows of an attention_half record in `dtype`: for each shape
    (seq, head_dim, causal), ours, SDPA flash and ours in fp32, in ms."""
    cases = {}
    for row in record["results"]:
        shape = (row["seq"], row["head_dim"], row["causal"])
        who = {f"flash_{dtype}": "ours", f"sdpa_flash_{dtype}": "flash",
               "flash_fp32": "ours_fp32"}.get(row["variant"])
        if who is not None:  # flash_fp32 appears once per half type: the first is kept
            cases.setdefault(shape, {}).setdefault(who, row["ms"])
    return [dict(seq=s, head_dim=d, causal=c, **ms) for (s, d, c), ms in sorted(cases.items())
            if {"ours", "flash"} <= set(ms)]


def plot_half_attention(rows: list[dict], ax=None):
    """half_attention_forward's rows as bars: ours over SDPA flash's time per
    shape (1 is a tie), with ours in fp32 over SDPA flash beside it where
    measured."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.8))
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["ours"] / r["flash"] for r in rows], 0.4, color="tab:red",
           label="ours, half precision")
    ax.bar(x + 0.2, [r.get("ours_fp32", np.nan) / r["flash"] for r in rows], 0.4,
           color="tab:blue", label="ours, fp32 (3xTF32)")
    ax.axhline(1, color="black", lw=1)
    ax.set_xticks(x, [f"N={r['seq']}\nd={r['head_dim']}{' causal' if r['causal'] else ''}"
                      for r in rows], fontsize=7)
    ax.set_ylabel("time / SDPA flash's time")
    ax.legend(fontsize=8)
    return ax
