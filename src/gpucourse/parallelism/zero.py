"""ZeRO's stages as data: which training states each stage shards.

Only the picture of chapter 3 needs this; the memory arithmetic of the
stages lives in ``gpucourse.memory``.
"""

from __future__ import annotations


# -----------------------------------------------------------------------------
# ZeRO: which training states each stage shards
#
# Data parallelism keeps a full copy of the parameters, the gradients and the
# optimizer states on every GPU. ZeRO's stages shard them over the N GPUs of
# the data-parallel group one kind at a time (Rajbhandari et al. 2020):
# stage 1 the optimizer states (P_os), stage 2 also the gradients (P_os+g),
# stage 3 also the parameters (P_os+g+p).

TRAINING_STATES = ("parameters", "gradients", "optimizer states")
ZERO_SHARDED = {0: (), 1: ("optimizer states",), 2: ("optimizer states", "gradients"),
                3: ("optimizer states", "gradients", "parameters")}
# Bytes per parameter with mixed-precision Adam, as in the ZeRO paper's
# Figure 1: fp16 parameters (2) and gradients (2), and K = 12 bytes of fp32
# master parameters, momentum and variance. Used only to size the picture.
ZERO_FIGURE_BYTES_PER_PARAM = {"parameters": 2, "gradients": 2, "optimizer states": 12}


def zero_sharded_states(stage):
    """The training states that ZeRO stage `stage` (0 = plain data parallel,
    1, 2 or 3) shards across the GPUs."""
    if isinstance(stage, bool) or stage not in ZERO_SHARDED:
        raise ValueError(f"stage must be 0, 1, 2 or 3, got {stage!r}")
    return ZERO_SHARDED[stage]
