"""Chapter 9's timings of the exercise kernels: the committed H100 rows, a table and a plot.

Without a GPU, :func:`committed_rows` reads the figures the course measured
on an H100 (``benchmarks/results``), in the shape that
:func:`gpucourse.kernels.timing_attention.time_attention` returns on a GPU;
:func:`format_table` and :func:`plot_rows` show either. Presentation only:
nothing here measures or grades.
"""

from __future__ import annotations

from gpucourse.grader.attention import _head_dim
from gpucourse.chapters.tflops_plot import plot_tflops_lines
from gpucourse.grader.launches import _whole
from gpucourse.kernels.timing_attention import TIMED_SEQS

# The library's variants in the committed results that a student's kernel is shown beside.
COMMITTED_VARIANTS = ("flash", "sdpa_efficient")
_ROW_FIELDS = ("variant", "batch", "heads", "seq", "head_dim", "causal", "ms", "tflops",
               "max_abs_err")


def committed_rows(path=None, *, batch: int = 4, heads: int = 16, head_dim: int = 64,
                   seqs=TIMED_SEQS, variants=COMMITTED_VARIANTS) -> tuple[dict, list[dict]]:
    """(record, rows): the newest committed attention results file (``path``: a file or a
    folder; default benchmarks/results) and its rows of ``variants`` at batch, heads,
    head_dim and the sequence lengths ``seqs``, causal and not, in the shape
    :func:`time_attention` returns."""
    from gpucourse import results

    batch, heads, head_dim = _whole("batch", batch), _whole("heads", heads), _head_dim(head_dim)
    if not isinstance(seqs, (list, tuple)) or not seqs:
        raise ValueError(f"seqs must be a non-empty list of sequence lengths, got {seqs!r}")
    wanted = {_whole("seqs", s) for s in seqs}
    if isinstance(variants, str) or not variants:
        raise ValueError(f"variants must be a list of variant names, got {variants!r}")
    record = results.load_results("attention", path)
    rows = [{f: r.get(f) for f in _ROW_FIELDS} for r in record["results"]
            if r["variant"] in variants and r["seq"] in wanted and r["batch"] == batch
            and r["heads"] == heads and r["head_dim"] == head_dim]
    if not rows:
        raise ValueError(f"the results file holds no rows of {list(variants)} at batch={batch}, "
                         f"heads={heads}, head_dim={head_dim} and seqs {sorted(wanted)}")
    return record, rows


def _check_rows(rows) -> list[dict]:
    if not isinstance(rows, list) or not rows or not all(
            isinstance(r, dict) and {"variant", "seq", "causal", "ms", "tflops"} <= set(r)
            for r in rows):
        raise ValueError("rows must be a non-empty list of rows from time_attention or "
                         "committed_rows")
    return rows


def _label(row) -> str:
    return f"{row['variant']}{' (causal)' if row['causal'] else ''}"


def format_table(rows) -> str:
    """A text table: milliseconds and TFLOP/s of each variant (causal apart) at each
    sequence length; "wrong" where a result failed its check."""
    rows = _check_rows(rows)
    seqs = sorted({r["seq"] for r in rows})
    labels = list(dict.fromkeys(_label(r) for r in sorted(rows, key=lambda r: r["causal"])))
    by = {(_label(r), r["seq"]): r for r in rows}
    width = max(len(label) for label in labels) + 2
    lines = [f"{'ms | TFLOP/s':<{width}}" + "".join(f"{'seq ' + str(s):>18}" for s in seqs)]
    for label in labels:
        cells = []
        for seq in seqs:
            row = by.get((label, seq))
            cells.append(f"{'':>18}" if row is None else f"{'wrong':>18}" if row["ms"] is None
                         else f"{row['ms']:9.3f} |{row['tflops']:6.1f}")
        lines.append(f"{label:<{width}}" + "".join(cells))
    return "\n".join(lines)


def plot_rows(rows, ax=None, title: str | None = None):
    """TFLOP/s against the sequence length, one line per variant (causal dashed);
    returns the axes."""
    return plot_tflops_lines(_check_rows(rows), "seq", _label,
                             lambda label: label.endswith("(causal)"),
                             xlabel="sequence length N", ylabel="TFLOP/s (fp32)", ax=ax,
                             title=title)
