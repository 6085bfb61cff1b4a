"""Tests of gpucourse.planner: rank placement by hand, a layout's estimate
worked by hand, properties of every listed layout, the rule of thumb, and
the errors bad input gets."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucourse import planner
from gpucourse.planner import Cluster, Model


def small_cluster(nodes=2, gpus_per_node=4, **kw):
    # Round numbers for hand arithmetic: 100 GB/s inside a node, 10 GB/s
    # between nodes, 1e15 FLOP/s per GPU at MFU 0.5.
    args = dict(nodes=nodes, gpus_per_node=gpus_per_node, intra_node_bytes_per_s=100e9,
                inter_node_bytes_per_s=10e9, gpu_memory_bytes=80e9, gpu_flops_per_s=1e15, mfu=0.5)
    args.update(kw)
    return Cluster(**args)


SMALL = Model(layers=8, hidden=1024, heads=8, seq_len=1024, global_batch=16, micro_batch=1,
              vocab=32000)


def test_group_strides_and_nodes_by_hand():
    assert planner.group_strides(2, 4, 2, "tp-pp-dp") == {"tp": 1, "pp": 4, "dp": 8}
    assert planner.group_strides(2, 4, 2, "dp-tp-pp") == {"dp": 1, "tp": 2, "pp": 8}
    # 8 GPUs per node: a tp group of 8 neighbours fits; of 16 it spans two nodes.
    assert planner.group_within_node(8, 1, 8)
    assert not planner.group_within_node(16, 1, 8)
    # 4 ranks 2 apart span 8 ranks: one node of 8.
    assert planner.group_within_node(4, 2, 8)
    # 2 ranks 8 apart always sit in different nodes.
    assert not planner.group_within_node(2, 8, 8)
    # A span of 3 does not tile a node of 8: some group would straddle a boundary.
    assert not planner.group_within_node(3, 1, 8)
    assert planner.group_within_node(1, 64, 8)  # a group of one needs no link


def test_one_layout_by_hand():
    c, m = small_cluster(), SMALL
    layout = planner.evaluate_layout(c, m, dp=2, tp=2, pp=2, order="tp-pp-dp")
    # Placement: tp stride 1 (span 2, in a node), pp stride 2 (span 4, in a node
    # of 4), dp stride 4 (span 8: across the two nodes).
    assert layout.within_node == {"tp": True, "pp": True, "dp": False}
    assert layout.micro_batches == 8  # 16 sequences / (dp 2 x micro-batch 1)
    assert layout.bubble_ratio == pytest.approx(1 / 8)  # (pp - 1) / m
    # Compute: per layer 24 b s h^2 (1 + s/6h) x 3 with b = 16, s = 1024, h = 1024:
    # 24 x 16 x 1024^3 x (1 + 1/6) x 3 = 1.44310e12 per layer, x 8 layers
    # = 1.15448e13, plus logits 6 x 16 x 1024 x 1024 x 32000 = 3.22123e12:
    # 1.47660e13 FLOPs over 8 GPUs x 1e15 x 0.5 = 3.69150 ms, x (1 + 1/8) = 4.15294 ms.
    assert m.step_flops == pytest.approx(1.47660e13, rel=1e-5)
    assert layout.compute_s == pytest.approx(4.15294e-3, rel=1e-5)
    # TP: one activation is 1 x 1024 x 1024 x 2 bytes = 2,097,152; a ring of 2
    # moves 2(2-1)/2 = 1 of it at 100 GB/s: 20.97 us; x 4 per layer x 4 layers
    # per stage x 8 micro-batches = 128 all-reduces = 2.6844 ms.
    assert layout.tp_comm_s == pytest.approx(128 * 2_097_152 / 100e9)
    # PP: one activation forward and one back per micro-batch: 16 x 20.97 us.
    assert layout.pp_comm_s == pytest.approx(16 * 2_097_152 / 100e9)
    # DP: 2 bytes x params / 4 per GPU, ring of 2 sends 2(1)/2 = 1 x that, at 10 GB/s.
    params = 1024 * 32000 + 8 * (12 * 1024**2 + 13 * 1024) + 2 * 1024
    assert SMALL.params == params == 133_539_840  # 32,768,000 + 8 x 12,596,224 + 2,048
    assert layout.dp_comm_s == pytest.approx(2 * params / 4 / 10e9)
    # Memory: 16 bytes per parameter over tp x pp = 4, plus activations
    # (selective recompute, Korthikanti Table 2): s b h (10 + 24/t) = 1024 x 1024
    # x 22 bytes per layer, 4 layers per stage, 2 micro-batches in flight.
    assert layout.memory_per_gpu_bytes == pytest.approx(16 * params / 4 + 1024 * 1024 * 22 * 4 * 2)
    assert layout.fits


@settings(max_examples=40, deadline=None)
@given(nodes=st.integers(1, 6), per_node=st.sampled_from([1, 2, 4, 6, 8]),
       heads=st.sampled_from([4, 6, 8, 12, 16]), layers=st.sampled_from([4, 6, 12, 24]),
       batch=st.sampled_from([8, 12, 32, 48]), use_all=st.booleans())
def test_every_layout_is_valid(nodes, per_node, heads, layers, batch, use_all):
    c = small_cluster(nodes, per_node)
    m = Model(layers=layers, hidden=64 * heads, heads=heads, seq_len=256, global_batch=batch)
    layouts = planner.plan_layouts(c, m, use_all_gpus=use_all)
    for x in layouts:
        assert x.dp * x.tp * x.pp == x.gpus <= c.gpus  # never more GPUs than the cluster
        if use_all:
            assert x.gpus == c.gpus
        assert heads % x.tp == 0 and layers % x.pp == 0 and batch % x.dp == 0
        assert x.step_s >= x.compute_s > 0 and x.memory_per_gpu_bytes > 0
    # Ranked: fitting layouts first, then by step time.
    keys = [(not x.fits, x.step_s) for x in layouts]
    assert keys == sorted(keys)
    # The plain one-GPU-per-replica layout is always listed when it is valid.
    if use_all and batch % c.gpus == 0:
        assert any((x.dp, x.tp, x.pp) == (c.gpus, 1, 1) for x in layouts)


def test_rule_of_thumb_wins_on_an_h100_cluster():
    c = planner.h100_cluster(nodes=16, mfu=0.462)
    layouts = planner.plan_layouts(c, planner.GPT3_175B)
    best = layouts[0]
    assert best.fits
    assert best.tp <= 8 and best.within_node["tp"]  # TP inside a node
    assert planner.follows_rule_of_thumb(best, c)
    # The same (dp, tp, pp) with tp outermost (across nodes) is much slower.
    swapped = planner.evaluate_layout(c, planner.GPT3_175B, best.dp, best.tp, best.pp, "pp-dp-tp")
    assert not swapped.within_node["tp"]
    assert swapped.step_s > 1.2 * best.step_s
    # Pure data parallelism does not fit: 175e9 x 16 bytes on one 80 GB GPU.
    plain = planner.evaluate_layout(c, planner.GPT3_175B, 128, 1, 1)
    assert not plain.fits


def test_zero3_shrinks_memory_and_adds_traffic():
    c, m = small_cluster(), SMALL
    zero0 = planner.evaluate_layout(c, m, 8, 1, 1, zero_stage=0)
    zero3 = planner.evaluate_layout(c, m, 8, 1, 1, zero_stage=3)
    assert zero3.memory_per_gpu_bytes < zero0.memory_per_gpu_bytes
    assert zero3.dp_comm_s == pytest.approx(1.5 * zero0.dp_comm_s)


def test_markdown_and_plot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layouts = planner.plan_layouts(small_cluster(), SMALL)
    table = planner.layouts_markdown(layouts, top=3)
    assert table.count("\n") == 4
    ax = planner.plot_layouts(layouts, top=5)
    assert len(ax.get_yticklabels()) == 5
    plt.close("all")


@pytest.mark.parametrize("call, message", [
    (lambda: small_cluster(nodes=0), "nodes must be a whole number >= 1"),
    (lambda: small_cluster(nodes=-2), "nodes must be a whole number >= 1"),
    (lambda: small_cluster(gpus_per_node=0), "gpus_per_node must be a whole number >= 1"),
    (lambda: small_cluster(mfu=0), r"mfu must be in \(0, 1\]"),
    (lambda: small_cluster(mfu=1.5), r"mfu must be in \(0, 1\]"),
    (lambda: small_cluster(inter_node_bytes_per_s=0), "inter_node_bytes_per_s must be > 0"),
    (lambda: Model(layers=8, hidden=1000, heads=3, seq_len=8, global_batch=8),
     r"heads must divide hidden \(1000\), got heads=3"),
    (lambda: planner.evaluate_layout(small_cluster(), SMALL, 1, 3, 1),
     r"tp must divide heads \(8\), got tp=3"),
    (lambda: planner.evaluate_layout(small_cluster(), SMALL, 1, 1, 3),
     r"pp must divide layers \(8\), got pp=3"),
    (lambda: planner.evaluate_layout(small_cluster(), SMALL, 3, 1, 1),
     r"dp x micro_batch must divide global_batch \(16\)"),
    (lambda: planner.evaluate_layout(small_cluster(), SMALL, 4, 2, 2),
     r"dp x tp x pp must be at most the cluster's GPUs \(8\), got 4 x 2 x 2 = 16"),
    (lambda: planner.evaluate_layout(small_cluster(), SMALL, 0, 1, 1), "dp must be a whole number >= 1"),
    (lambda: planner.evaluate_layout(small_cluster(), SMALL, 2, 2, 2, order="tp-dp"), "order must be one of"),
    (lambda: planner.evaluate_layout(small_cluster(), SMALL, 2, 2, 2, recompute="some"), "recompute must be one of"),
    (lambda: planner.plan_layouts("8 GPUs", SMALL), "cluster must be a Cluster"),
    (lambda: planner.plan_layouts(small_cluster(), SMALL, orders=()), "orders must name at least one"),
])
def test_bad_input_is_refused_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call()
