"""What chapter 11's section on a tiny GPT in bf16 shows: where a linear layer's bias is added, and the committed bf16 training runs.

Mixed precision, as the course's bf16 tiny GPT trains: fp32 weights and
optimizer, products and attention in bf16 on the tensor cores. This module
holds the section's computations, apart from ``chapters.tensor_cores``
(the rest of chapter 11):

* what rounding a product to bf16 before its bias is added costs, against
  rounding once after it, as cuBLAS's epilogue does
  (``epilogue_rounding_errors``, ``epilogue_rounding_markdown``);
* the committed bf16 training runs, the superseded ones that rounded twice
  included (``tinygpt_bf16_runs``, ``tinygpt_bf16_markdown``,
  ``plot_tinygpt_bf16``).

NumPy models and presentation only: nothing here runs a kernel. The plot
takes ``ax=None`` and returns what it drew on; matplotlib is imported
inside it.
"""

from __future__ import annotations

import math

import numpy as np

from gpucourse.chapters.tensor_cores import FORMATS, round_to_bf16


def epilogue_rounding_errors(cancels=(0.0, 0.5, 0.9, 0.97), rows: int = 256, k: int = 256,
                             cols: int = 64, seed: int = 0) -> list[dict]:
    """What rounding the product before the bias costs, in NumPy.

    x (rows x k) and W (cols x k) are normal random numbers rounded to bf16
    (W scaled by 1/sqrt(k)); p = x W^T is summed in float32, as the tensor
    cores sum it. Each row of x is a trial of its own, with its own bias
    vector b = bf16(-cancel * p_row), so that the result r = p + b is about
    (1 - cancel) of the product. Two epilogues of the same float32 product,
    each against r computed exactly (in float64), so that what is measured is
    the epilogue's rounding alone:

    * rounded once (cuBLAS's epilogue): bf16(p + b), the bias added to the
      float32 sum;
    * rounded twice: bf16(bf16(p) + b), the product rounded to bf16 first.

    One dict per cancel level: cancel; product_over_result (the median of
    |p| / |r|); once_median, once_max, twice_median, twice_max (relative
    errors |computed - r| / |r| over the rows x cols outputs); and
    twice_bound, the largest over the outputs of what rounding twice allows:
    u |p| / |r| (half an ulp of the product, at most, relative to the
    result) plus u (the second rounding), with u = 2^-8, bf16's unit
    roundoff; rounding once allows u alone."""
    cancels = [float(c) for c in np.atleast_1d(cancels)]
    if not cancels or min(cancels) < 0 or max(cancels) >= 1:
        raise ValueError(f"cancels must be shares in [0, 1) (the part of the product the bias "
                         f"cancels), got {cancels}")
    for name, value in (("rows", rows), ("k", k), ("cols", cols)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
    rng = np.random.default_rng(seed)
    x = round_to_bf16(rng.standard_normal((rows, k)).astype(np.float32))
    w = round_to_bf16((rng.standard_normal((cols, k)) / math.sqrt(k)).astype(np.float32))
    product = x @ w.T  # float32 sums of exact products of bf16 numbers, as the tensor cores'
    wide = product.astype(np.float64)
    u = FORMATS["bf16"].unit_roundoff
    found = []
    for cancel in cancels:
        bias = round_to_bf16((-cancel * wide).astype(np.float32))
        exact = wide + bias.astype(np.float64)
        once = round_to_bf16(product + bias)
        twice = round_to_bf16(round_to_bf16(product) + bias)
        size = np.abs(exact)

        def error(computed):
            return np.abs(computed.astype(np.float64) - exact) / size

        ratio = np.abs(wide) / size
        once_error, twice_error = error(once), error(twice)
        found.append(dict(cancel=cancel, product_over_result=float(np.median(ratio)),
                          once_median=float(np.median(once_error)),
                          once_max=float(once_error.max()),
                          twice_median=float(np.median(twice_error)),
                          twice_max=float(twice_error.max()),
                          twice_bound=float((u * ratio * (1 + u) + u).max())))
    return found


def epilogue_rounding_markdown(found: list[dict]) -> str:
    """A markdown table of epilogue_rounding_errors: per cancel level, the
    median |product| / |result|, the errors of rounding once and twice
    (median and largest) and what rounding twice allows."""
    lines = ["| bias cancels | product / result | once, median | once, largest | "
             "twice, median | twice, largest | twice allows |", "|---|---|---|---|---|---|---|"]
    for row in found:
        lines.append(f"| {row['cancel']:.0%} | {row['product_over_result']:.1f} | "
                     f"{row['once_median']:.1e} | {row['once_max']:.1e} | "
                     f"{row['twice_median']:.1e} | {row['twice_max']:.1e} | "
                     f"{row['twice_bound']:.1e} |")
    return "\n".join(lines)


TINYGPT_BF16_LABELS = {
    "pytorch_bf16": "PyTorch, autocast",
    "course_bf16": "course, rounded once",
    "course_bf16_rounded_twice": "course, rounded twice (superseded)",
}


def _tinygpt_bf16_rows(record: dict) -> list[dict]:
    """The rows of a tinygpt_bf16 record, the superseded ones after the others,
    each with superseded True or False; ValueError if it has no loss floor."""
    floor = record.get("loss_floor") if isinstance(record, dict) else None
    if not floor or "results" not in record:
        raise ValueError("record must be a tinygpt_bf16_full results record, with every "
                         "character scored (a loss_floor above zero) and results")
    superseded = record.get("superseded", {}).get("results", [])
    return ([dict(r, superseded=False) for r in record["results"]]
            + [dict(r, superseded=True) for r in superseded])


def tinygpt_bf16_runs(record: dict) -> list[dict]:
    """The runs of a tinygpt_bf16_full record, the superseded ones included,
    as rows for a table: run, label (TINYGPT_BF16_LABELS), seed, superseded,
    final_loss (the mean of the last steps), over_floor (final loss over the
    floor minus one), vs_pytorch (over PyTorch bf16's final loss of the same
    seed), steps_to_learn (None if the loss never came within the record's
    learned_below of the floor), accuracy (held-out problems answered
    exactly) and median_step_ms. Ordered by seed, then PyTorch, the course
    rounded once, rounded twice."""
    floor = record.get("loss_floor") if isinstance(record, dict) else None
    every = _tinygpt_bf16_rows(record)
    pytorch = {r["seed"]: r["final_loss"] for r in every if r["run"] == "pytorch_bf16"}
    order = list(TINYGPT_BF16_LABELS)
    rows = []
    for r in every:
        rows.append(dict(run=r["run"], label=TINYGPT_BF16_LABELS.get(r["run"], r["run"]),
                         seed=r["seed"], superseded=r["superseded"],
                         final_loss=r["final_loss"], over_floor=r["final_loss"] / floor - 1,
                         vs_pytorch=(r["final_loss"] / pytorch[r["seed"]]
                                     if r["seed"] in pytorch else None),
                         steps_to_learn=r["steps_to_learn"], accuracy=r["accuracy"],
                         median_step_ms=r["median_step_ms"]))
    return sorted(rows, key=lambda row: (row["seed"], order.index(row["run"])
                                         if row["run"] in order else len(order)))


def tinygpt_bf16_markdown(rows: list[dict]) -> str:
    """A markdown table of tinygpt_bf16_runs."""
    lines = ["| run | seed | final loss | over the floor | / PyTorch's final loss | "
             "learned at step | held out right | ms a step |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        learned = "never" if row["steps_to_learn"] is None else f"{row['steps_to_learn']:,}"
        versus = "" if row["vs_pytorch"] is None else f"{row['vs_pytorch']:.3f}"
        lines.append(f"| {row['label']} | {row['seed']} | {row['final_loss']:.3f} | "
                     f"{row['over_floor']:.1%} | {versus} | {learned} | {row['accuracy']:.1%} | "
                     f"{row['median_step_ms']:.1f} |")
    return "\n".join(lines)


def plot_tinygpt_bf16(record: dict, window: int = 50, ax=None):
    """The loss curves of a tinygpt_bf16_full record, each a running mean of
    `window` steps: PyTorch bf16 (black), the course rounded once (red) and
    rounded twice (blue, the superseded runs), solid for the first seed and
    dashed for the others; the floor as a dotted line. The y axis is zoomed
    near the floor, where the runs part (the first steps lie above it)."""
    import matplotlib.pyplot as plt

    if int(window) != window or window < 1:
        raise ValueError(f"window must be a whole number of steps of at least 1, got {window!r}")
    floor = record.get("loss_floor") if isinstance(record, dict) else None
    every = _tinygpt_bf16_rows(record)
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.2))
    colors = {"pytorch_bf16": "black", "course_bf16": "tab:red",
              "course_bf16_rounded_twice": "tab:blue"}
    seeds = sorted({r["seed"] for r in every})
    tops = []
    for r in every:
        loss = np.asarray(r["loss"], dtype=np.float64)
        running = np.convolve(loss, np.ones(window) / window, mode="valid")
        steps = np.arange(window, len(loss) + 1)
        ax.plot(steps, running, color=colors.get(r["run"], "tab:gray"), lw=1.2,
                ls="-" if r["seed"] == seeds[0] else "--",
                label=f"{TINYGPT_BF16_LABELS.get(r['run'], r['run'])}, seed {r['seed']}")
        tops.append(running[-len(running) // 2:].max())
    ax.axhline(floor, color="gray", ls=":", lw=1.5, label=f"floor, {floor:.4f}")
    ax.set_ylim(floor - 0.3 * (max(tops) - floor), floor + 3.4 * (max(tops) - floor))
    ax.set_xlabel("step")
    ax.set_ylabel(f"loss, running mean of {window} steps (nats)")
    ax.legend(fontsize=7, ncol=2, loc="upper right")
    ax.grid(alpha=0.3)
    return ax
