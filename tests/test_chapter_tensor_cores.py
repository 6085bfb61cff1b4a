"""Chapter 11's tables and figures (gpucourse.chapters.tensor_cores), against references of their own.

The formats against IEEE 754's binary16 and binary32 (through NumPy) and
PyTorch's bfloat16; the fragment map against the places the PTX ISA states
for a few lanes; the bank conflicts against counts worked out by hand; the
roofline and the HGEMM ladder against the committed results files read
directly; the half-precision attention model against float64 and the error
bound that rounding P allows; the epilogue's rounding against the bound of
rounding to nearest, and the bf16 tiny GPT's table against a record made here
and the committed run. All NumPy, a few seconds in all.
"""

from __future__ import annotations

import json
import math

import matplotlib
import numpy as np
import pytest
import torch

from gpucourse import results
from gpucourse.chapters import mixed_precision as MP
from gpucourse.chapters import tensor_cores as TC

matplotlib.use("Agg")

H100 = "NVIDIA H100 80GB HBM3"


# -- the roofs -----------------------------------------------------------------

def test_the_h100_rates_are_the_printed_ones():
    peaks = TC.peaks_of(H100)
    assert peaks["fp16"].flops_per_s == 989.4e12 and "989.4" in peaks["fp16"].printed
    assert peaks["tf32"].flops_per_s == 494.7e12 and "494.7" in peaks["tf32"].printed
    assert peaks["fp32"].flops_per_s == 67e12 and "67" in peaks["fp32"].printed
    assert peaks["bandwidth"].flops_per_s == 3.35e12
    assert TC.peaks_of("h200")["fp16"].flops_per_s == pytest.approx(989.5e12)
    with pytest.raises(ValueError, match="gpu must be one of"):
        TC.peaks_of("NVIDIA A100-SXM4-80GB")


def _committed_row(name, **fields):
    record = json.loads((results.results_dir() / name).read_text())
    return next(r for r in record["results"] if all(r[k] == v for k, v in fields.items()))


def test_the_roofline_points_are_the_committed_rows_at_their_ideal_intensity():
    points = {p["label"]: p for p in TC.roofline_points(H100)}
    assert len(points) == 7
    half = points["half_matmul, ours (fp16)"]
    assert half["intensity"] == pytest.approx(2 * 4096 / (2 * 3))  # 2n^3 / (2 bytes x 3n^2)
    assert points["SGEMM, ours (fp32)"]["intensity"] == pytest.approx(2 * 4096 / (4 * 3))
    # attention: 4 N^2 d FLOPs over Q, K, V and O once, 4 N d elements of 2 bytes: N / 2
    assert points["FlashAttention-2, ours (fp16)"]["intensity"] == pytest.approx(4096 / 2)
    assert half["tflops"] == _committed_row("hgemm-h100-2026-11-28.json", variant="half_matmul",
                                            dtype="fp16", m=4096, n=4096, k=4096)["tflops"]
    assert {p["family"] for p in points.values()} == {"fp32", "half"}
    assert results.gpu_slug(TC.roofline_gpu()) in TC.PEAKS


# -- the formats -----------------------------------------------------------------

def test_the_formats_match_ieee_754_and_torch():
    fp16, bf16, fp32 = TC.FORMATS["fp16"], TC.FORMATS["bf16"], TC.FORMATS["fp32"]
    assert fp16.epsilon == 2.0 ** -10 == np.finfo(np.float16).eps  # binary16: 10 fraction bits
    assert fp16.largest == 65504.0 == np.finfo(np.float16).max
    assert fp16.smallest_normal == np.finfo(np.float16).smallest_normal
    assert fp32.largest == np.finfo(np.float32).max and fp32.epsilon == np.finfo(np.float32).eps
    assert bf16.epsilon == torch.finfo(torch.bfloat16).eps
    assert bf16.largest == torch.finfo(torch.bfloat16).max
    assert TC.FORMATS["tf32"].epsilon == fp16.epsilon
    for name, fmt in TC.FORMATS.items():
        assert TC.measured_epsilon(name) == fmt.epsilon
    assert "| fp16 | 5 | 10 |" in TC.format_table()


def test_round_to_bf16_is_torchs_rounding():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(2000) * 10.0 ** rng.integers(-30, 30, 2000),
                        [1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 3.39e38, -3.4e38, np.inf,
                         0.0, 1e-40]]).astype(np.float32)  # ties both ways, overflow, subnormal
    ours = TC.round_to_bf16(x)
    theirs = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(ours, theirs)
    assert np.isnan(TC.round_to_bf16(np.array([np.nan], dtype=np.float32)))[0]
    with pytest.raises(ValueError, match="float32"):
        TC.round_to_bf16(np.ones(3))
    with pytest.raises(ValueError, match="format must be one of"):
        TC.round_to_format(1.0, "fp8")


def test_dot_products_keep_within_their_error_bounds():
    lengths = (16, 1024, 16384)
    u16, u32 = TC.FORMATS["fp16"].unit_roundoff, TC.FORMATS["fp32"].unit_roundoff
    for k, fp32_inputs, fp16_inputs in zip(lengths, TC.dot_product_errors(lengths, "fp32"),
                                           TC.dot_product_errors(lengths, "fp16")):
        # positive terms: each rounding is relative, (1 + u) per rounding at most
        assert fp32_inputs <= (k + 2) * u32
        assert fp16_inputs <= 2.01 * u16 + (k + 1) * u32
    fp16_sums = TC.dot_product_errors(lengths, "fp16", accumulate="fp16")
    assert fp16_sums[-1] > 0.1  # the sum, near 4096, stalls where fp16's gap is 2 or 4
    with pytest.raises(ValueError, match="accumulate"):
        TC.dot_product_errors(lengths, "fp16", accumulate="bf16")


def test_3xtf32_gives_back_fp32_accuracy_and_one_pass_does_not():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((2, 64, 64))
    errors = {m: TC.matmul_error(a, b, m) for m in ("fp32", "fp16", "bf16", "tf32", "3xtf32")}
    assert errors["3xtf32"] < 2 * errors["fp32"] < errors["tf32"] / 100
    assert errors["tf32"] == pytest.approx(errors["fp16"], rel=0.2)  # both 10 fraction bits
    assert errors["bf16"] > 4 * errors["fp16"]  # 7 bits against 10
    big, small = TC.split_tf32(a.astype(np.float32))
    assert not (big.view(np.uint32) & 0x1FFF).any() and not (small.view(np.uint32) & 0x1FFF).any()
    np.testing.assert_allclose(big.astype(np.float64) + small, a.astype(np.float32), rtol=2.0 ** -21)
    with pytest.raises(ValueError, match="method"):
        TC.matmul_error(a, b, "fp64")


def test_fp16_softmax_overflows_past_log_65504():
    assert math.log(65504) == pytest.approx(11.0898, abs=1e-4)
    assert TC.naive_softmax([11.0])[0] == 1.0
    assert np.isnan(TC.naive_softmax([11.1])[0])
    assert np.isnan(TC.naive_softmax([8.0, 10.0, 12.0])).any()
    assert np.isfinite(TC.naive_softmax([8.0, 10.0, 12.0], dtype=np.float32)).all()


# -- the instruction ---------------------------------------------------------------

# (operand, lane, register) -> (row, column), as the PTX ISA's "Matrix fragments
# for mma.m16n8k16 with floating point type" states them: groupID = lane >> 2,
# threadID_in_group = lane % 4; A: row groupID for a0, a1, a4, a5 and groupID + 8
# for the others, column 2 threadID_in_group + (i & 1), + 8 for a4 to a7; B: row
# 2 threadID_in_group + (i & 1), + 8 for b2, b3, column groupID; C: as A's a0 to a3.
ISA_PLACES = {
    ("A", 0, 0): (0, 0), ("A", 0, 2): (8, 0), ("A", 0, 4): (0, 8), ("A", 5, 0): (1, 2),
    ("A", 5, 3): (9, 3), ("A", 5, 4): (1, 10), ("A", 5, 7): (9, 11), ("A", 31, 6): (15, 14),
    ("B", 5, 0): (2, 1), ("B", 5, 1): (3, 1), ("B", 5, 2): (10, 1), ("B", 31, 3): (15, 7),
    ("C", 5, 0): (1, 2), ("C", 31, 0): (7, 6), ("C", 31, 1): (7, 7), ("C", 31, 2): (15, 6),
    ("C", 31, 3): (15, 7),
}


def test_the_fragment_owners_are_the_ptx_isas():
    owners = {operand: TC.fragment_owners(operand) for operand in "ABC"}
    for (operand, lane, register), (row, col) in ISA_PLACES.items():
        lanes, registers = owners[operand]
        assert (lanes[row, col], registers[row, col]) == (lane, register)
    for operand, per_lane in (("A", 8), ("B", 4), ("C", 4)):
        assert (np.bincount(owners[operand][0].ravel()) == per_lane).all()
    with pytest.raises(ValueError, match="operand"):
        TC.fragment_owners("D")


# -- bank conflicts ------------------------------------------------------------------

def test_plain_rows_conflict_as_counted_by_hand_and_swizzled_rows_do_not():
    # rows of L bytes start at bank (L / 4) r mod 32: 32-byte rows share a bank
    # every 4 rows (2-way over 8), 64-byte every 2 (4-way), 128 and 256 always (8-way)
    for row_bytes, ways in ((32, 2), (64, 4), (128, 8), (256, 8)):
        assert TC.ldmatrix_conflict_ways(row_bytes, swizzled=False) == ways
        for chunk in range(row_bytes // 16):
            for first in range(0, 64, 8):
                assert TC.ldmatrix_conflict_ways(row_bytes, True, chunk, first) == 1
                addresses = TC.ldmatrix_row_addresses(row_bytes, True, chunk, first)
                assert [a // row_bytes for a in addresses] == list(range(first, first + 8))
        for row in range(16):  # the swizzle permutes a row's chunks
            chunks = row_bytes // 16
            assert sorted(TC.swizzled_chunk(row, c, chunks) for c in range(chunks)) == \
                list(range(chunks))
    with pytest.raises(ValueError, match="row_bytes"):
        TC.ldmatrix_row_addresses(40, True)


# -- the committed runs ----------------------------------------------------------------

def test_the_hgemm_ladder_is_the_committed_rows_in_order():
    rows, gpu = TC.hgemm_ladder_for(H100)
    assert gpu == H100
    assert [r["level"] for r in rows] == [1, 2, 3, 4, 5, 6, 7, "cublas"]
    level5 = _committed_row("hgemm-h100-2026-11-28.json", variant="level5", dtype="fp16")
    assert rows[4]["tflops"] == level5["tflops"] and rows[4]["vs_cublas"] == level5["vs_cublas"]
    level1 = _committed_row("tensor_cores-h100-2026-11-26.json", variant="hgemm1_kernel", m=4096)
    assert rows[0]["tflops"] == level1["tflops"]
    assert rows[-1]["vs_cublas"] == 1.0  # cuBLAS timed in turns with level 5, as level 5 saw it:
    assert rows[-1]["tflops"] == pytest.approx(level5["tflops"] / level5["vs_cublas"], rel=0.02)
    assert "| 5 cp.async pipeline |" in TC.hgemm_ladder_markdown(rows)
    with pytest.raises(ValueError, match="no row"):
        TC.hgemm_ladder_rows(results.load_results("hgemm"), dtype="fp8")


def test_the_half_attention_forward_rows_pair_ours_with_sdpa_flash():
    record = results.load_results("attention_half",
                                  results.results_dir() / "attention_half-h100-2026-11-28.json")
    rows = TC.half_attention_forward(record, "bf16")
    assert len(rows) == 8 and all({"ours", "flash", "ours_fp32"} <= set(r) for r in rows)
    first = _committed_row("attention_half-h100-2026-11-28.json", variant="flash_bf16", seq=1024,
                           head_dim=64, causal=False)
    assert rows[0]["ours"] == first["ms"]


# -- FlashAttention-2's rounding -------------------------------------------------------------

def _softmax_attention(q, k, v):
    s = q @ k.T / math.sqrt(q.shape[1])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return p @ v / p.sum(axis=1, keepdims=True)


def test_the_half_attention_model_errs_as_rounding_allows():
    rng = np.random.default_rng(3)
    q, k, v = (TC.round_to_format(rng.standard_normal((48, 32)), "fp16") for _ in range(3))
    exact = _softmax_attention(q, k, v)
    unrounded = TC.half_attention_model(q, k, v, round_p=False, round_output=False, block_cols=16)
    assert np.abs(unrounded - exact).max() < 1e-5  # fp32 throughout
    rounded_p = TC.half_attention_model(q, k, v, round_output=False, block_cols=16)
    # |sum_j dp_j v_j| / l <= u sum_j p_j |v_j| / l <= u max |v|, plus fp32's share
    bound = TC.FORMATS["fp16"].unit_roundoff * np.abs(v).max() + 1e-5
    assert 1e-5 < np.abs(rounded_p - exact).max() <= bound
    stored = TC.half_attention_model(q, k, v, block_cols=16)
    np.testing.assert_array_equal(stored, stored.astype(np.float16))
    for row in TC.p_rounding_errors(seqs=(32,), head_dim=16, name="bf16"):
        assert row["p_fp32"] < 1e-5 < row["p_rounded"]
        assert row["output_only"] <= TC.FORMATS["bf16"].unit_roundoff * 5  # |out| <= max |v| < 5
    with pytest.raises(ValueError, match="name"):
        TC.half_attention_model(q, k, v, "tf32")


def test_the_figures_draw():
    import matplotlib.pyplot as plt

    plt.close("all")  # figures another test of this worker left open are not this test's

    TC.plot_two_roofs(TC.roofline_points(H100), H100)
    TC.plot_fragments()
    TC.plot_bank_conflicts()
    TC.plot_hgemm_ladder(TC.hgemm_ladder_for(H100)[0], 989.4e12)
    TC.plot_dot_product_errors((16, 64), trials=2)
    record = results.load_results("attention_half",
                                  results.results_dir() / "attention_half-h100-2026-11-28.json")
    TC.plot_half_attention(TC.half_attention_forward(record))
    assert len(plt.get_fignums()) == 6
    plt.close("all")


# -- a tiny GPT in bf16: where the bias is added ------------------------------------------------

def test_rounding_once_keeps_rounding_to_nearests_bound_and_twice_does_not():
    u = 2.0 ** -8  # bf16's unit roundoff: 7 fraction bits, half of epsilon
    assert TC.FORMATS["bf16"].unit_roundoff == u
    found = {r["cancel"]: r for r in MP.epilogue_rounding_errors(cancels=(0, 0.5, 0.9, 0.97, 0.99),
                                                                 rows=64, k=128, cols=32)}
    for cancel, r in found.items():
        assert r["once_median"] <= r["once_max"] <= u  # one rounding to nearest, whatever cancels
        assert r["twice_max"] <= r["twice_bound"] * (1 + 1e-6)  # half an ulp of the product, + u
        assert r["product_over_result"] == pytest.approx(1 / (1 - cancel), rel=0.05)
    assert found[0]["twice_max"] == found[0]["once_max"]  # no bias: the same single rounding
    for cancel in (0.9, 0.97, 0.99):
        r = found[cancel]
        assert r["twice_max"] > u and r["twice_median"] > u
        assert r["twice_median"] > 4 * r["once_median"] and r["twice_max"] > 4 * r["once_max"]
    assert found[0.99]["twice_median"] > found[0.97]["twice_median"] > found[0.9]["twice_median"]
    assert "| 97% |" in MP.epilogue_rounding_markdown([found[0.97]])
    with pytest.raises(ValueError, match="cancels"):
        MP.epilogue_rounding_errors(cancels=(0.5, 1.0))
    with pytest.raises(ValueError, match="rows"):
        MP.epilogue_rounding_errors(rows=0)


def _fake_bf16_record(floor=1.0):
    def run(name, seed, final, learned, accuracy, ms, level):
        loss = list(np.linspace(2.0, level, 120))
        return dict(run=name, seed=seed, final_loss=final, steps_to_learn=learned,
                    accuracy=accuracy, median_step_ms=ms, loss=loss)

    return {"benchmark": "tinygpt_bf16_full", "gpu": "test", "date": "2026-01-01",
            "versions": {}, "loss_floor": floor, "learned_below": 0.01,
            "results": [run("course_bf16", 0, 1.001, 80, 1.0, 12.0, 1.0),
                        run("pytorch_bf16", 0, 1.002, 90, 0.99, 10.0, 1.0),
                        run("pytorch_bf16", 1, 1.0, 70, 1.0, 11.0, 1.0)],
            "superseded": {"about": "rounded twice",
                           "results": [run("course_bf16_rounded_twice", 0, 1.2, None, 0.1, 13.0,
                                           1.2)]}}


def test_the_bf16_runs_table_reads_a_record_made_here(tmp_path):
    path = tmp_path / "tinygpt_bf16_full-test-2026-01-01.json"
    path.write_text(json.dumps(_fake_bf16_record(floor=1.0)))
    rows = MP.tinygpt_bf16_runs(results.load_results("tinygpt_bf16_full", path))
    assert [(r["run"], r["seed"]) for r in rows] == [
        ("pytorch_bf16", 0), ("course_bf16", 0), ("course_bf16_rounded_twice", 0),
        ("pytorch_bf16", 1)]
    twice = rows[2]
    assert twice["superseded"] and not any(r["superseded"] for r in rows[:2])
    assert twice["over_floor"] == pytest.approx(0.2)
    assert twice["vs_pytorch"] == pytest.approx(1.2 / 1.002)
    assert rows[1]["vs_pytorch"] == pytest.approx(1.001 / 1.002) and rows[0]["vs_pytorch"] == 1.0
    table = MP.tinygpt_bf16_markdown(rows)
    assert ("| course, rounded twice (superseded) | 0 | 1.200 | 20.0% | 1.198 | never | 10.0% "
            "| 13.0 |") in table
    no_floor = _fake_bf16_record(floor=0.0)
    with pytest.raises(ValueError, match="loss_floor"):
        MP.tinygpt_bf16_runs(no_floor)


def test_the_committed_bf16_runs_learn_once_the_course_rounds_once():
    name = "tinygpt_bf16_full-h200-2026-11-28.json"
    record = results.load_results("tinygpt_bf16_full", results.results_dir() / name)
    rows = MP.tinygpt_bf16_runs(record)
    raw = json.loads((results.results_dir() / name).read_text())
    assert len(rows) == len(raw["results"]) + len(raw["superseded"]["results"]) == 6
    fixed = [r for r in rows if r["run"] == "course_bf16"]
    twice = [r for r in rows if r["run"] == "course_bf16_rounded_twice"]
    assert len(fixed) == len(twice) == 2 and all(r["superseded"] for r in twice)
    assert all(r["over_floor"] < 0.01 and r["accuracy"] == 1.0 for r in fixed)
    assert all(r["over_floor"] > 0.01 and r["steps_to_learn"] is None for r in twice)
    assert all(r["final_loss"] > max(f["final_loss"] for f in fixed) for r in twice)
    for r in rows:  # the table's ratios are the file's own
        row = next(x for x in raw["results"] + raw["superseded"]["results"]
                   if (x["run"], x["seed"]) == (r["run"], r["seed"]))
        assert r["vs_pytorch"] == pytest.approx(row["final_loss_vs_pytorch"])
        assert r["over_floor"] == pytest.approx(row["final_loss_over_floor"] - 1)


def test_the_bf16_loss_figure_draws_one_line_per_run_and_seed():
    import matplotlib.pyplot as plt

    record = _fake_bf16_record()
    ax = MP.plot_tinygpt_bf16(record, window=10)
    runs = len(record["results"]) + len(record["superseded"]["results"])
    assert len(ax.lines) == runs + 1  # and the floor
    assert sum(line.get_linestyle() == ":" for line in ax.lines) == 1
    assert len(ax.lines[0].get_xdata()) == 120 - 10 + 1
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="window"):
        MP.plot_tinygpt_bf16(record, window=0)
