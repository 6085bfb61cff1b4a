"""The published numbers, as data: ZeRO's Table 1 and Figure 1 and the
Ultra-Scale Playbook's model-state table.

The formulas of ``model_states`` are tested against these cell by cell,
including how each paper rounded or truncated what it printed.
"""

from __future__ import annotations

from decimal import ROUND_FLOOR, ROUND_HALF_UP, Decimal

from gpucourse.checks import real as _real
from gpucourse.memory.model_states import GB, model_states_per_gpu


# -----------------------------------------------------------------------------
# The published numbers


# ZeRO, Table 1: per-device memory (GB) of model states for Ψ = 7.5B, 128B and
# 1T parameters, K = 12, under P_os (stage 1), P_os+g (2) and P_os+g+p (3),
# DP = 1 to 1024 (Rajbhandari et al., 2020). Transcribed as printed, as
# strings, so that the printed precision is kept: (model, dp) -> stages 1, 2, 3.
# Checked cell by cell against the paper's text (SC '20 version, Table I;
# arXiv:1910.02054, https://arxiv.org/abs/1910.02054).
ZERO_TABLE1_PARAMS = {"7.5B": 7.5e9, "128B": 128e9, "1T": 1e12}
ZERO_TABLE1_DP = (1, 4, 16, 64, 256, 1024)
ZERO_TABLE1 = {
    ("7.5B", 1): ("120", "120", "120"),
    ("7.5B", 4): ("52.5", "41.3", "30"),
    ("7.5B", 16): ("35.6", "21.6", "7.5"),
    ("7.5B", 64): ("31.4", "16.6", "1.88"),
    ("7.5B", 256): ("30.4", "15.4", "0.47"),
    ("7.5B", 1024): ("30.1", "15.1", "0.12"),
    ("128B", 1): ("2048", "2048", "2048"),
    ("128B", 4): ("896", "704", "512"),
    ("128B", 16): ("608", "368", "128"),
    ("128B", 64): ("536", "284", "32"),
    ("128B", 256): ("518", "263", "8"),
    ("128B", 1024): ("513", "257", "2"),
    ("1T", 1): ("16000", "16000", "16000"),
    ("1T", 4): ("7000", "5500", "4000"),
    ("1T", 16): ("4750", "2875", "1000"),
    ("1T", 64): ("4187", "2218", "250"),
    ("1T", 256): ("4046", "2054", "62.5"),
    ("1T", 1024): ("4011", "2013", "15.6"),
}
# The cells the paper truncates rather than rounds (model, dp, stage): 4187.5
# is printed 4187, 513.5 is printed 513. Every other cell is the exact value
# rounded half up to the digits printed (41.25 -> 41.3, 1.875 -> 1.88).
ZERO_TABLE1_TRUNCATED = frozenset({
    ("128B", 1024, 1), ("128B", 1024, 2),
    ("1T", 64, 1), ("1T", 256, 1), ("1T", 1024, 1),
    ("1T", 64, 2), ("1T", 256, 2), ("1T", 1024, 2),
})

# ZeRO, Figure 1: Ψ = 7.5B, N_d = 64, K = 12: the baseline and the three stages, GB.
# The paper's §V quotes the same example: 120 GB with standard DP, 31.4 GB
# with P_os, 16.6 GB with P_os+g and 1.9 GB with P_os+g+p.
ZERO_FIGURE1_PARAMS = 7.5e9
ZERO_FIGURE1_DP = 64
ZERO_FIGURE1_GB = {0: "120", 1: "31.4", 2: "16.6", 3: "1.9"}

# The Ultra-Scale Playbook's table of model-state memory (Tazi et al., 2025,
# "Memory usage in Transformers"), in GB: parameters -> (fp32 or bf16 mixed
# precision without fp32 gradient accumulation, bf16 with fp32 gradient
# accumulation). No sharding: 16 and 20 bytes per parameter. Checked against
# the Playbook's text (https://huggingface.co/spaces/nanotron/ultrascale-playbook).
PLAYBOOK_MODEL_STATES_GB = {
    1e9: ("16", "20"),
    7e9: ("112", "140"),
    70e9: ("1120", "1400"),
    405e9: ("6480", "8100"),
}


def as_printed(value, printed, truncate=False) -> str:
    """`value` written with as many decimals as the string `printed` has,
    rounded half up (or truncated), the way a table prints it."""
    x = _real("value", value)
    if not isinstance(printed, str) or not printed.replace(".", "", 1).isdigit():
        raise ValueError(f"printed must be a number written as a string such as '41.3', got {printed!r}")
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    quantum = Decimal(1).scaleb(-decimals)
    mode = ROUND_FLOOR if truncate else ROUND_HALF_UP
    return str(Decimal(repr(x)).quantize(quantum, rounding=mode))


def how_printed(value, printed) -> str | None:
    """"rounded" if `value` rounds half up to the string `printed`, else
    "truncated" if it truncates to it, else None (the value disagrees)."""
    if as_printed(value, printed) == printed:
        return "rounded"
    if as_printed(value, printed, truncate=True) == printed:
        return "truncated"
    return None


def zero_table1_computed() -> dict:
    """Table 1 computed by `model_states_per_gpu`, in GB, same keys as `ZERO_TABLE1`."""
    return {(model, dp): tuple(model_states_per_gpu(ZERO_TABLE1_PARAMS[model], stage, dp).total / GB
                               for stage in (1, 2, 3))
            for model, dp in ZERO_TABLE1}


def zero_table1_rows():
    """One row per cell: (model, dp, stage, computed GB, printed, how it is printed)."""
    computed = zero_table1_computed()
    rows = []
    for (model, dp), printed in ZERO_TABLE1.items():
        for stage, text, value in zip((1, 2, 3), printed, computed[(model, dp)]):
            rows.append((model, dp, stage, value, text, how_printed(value, text)))
    return rows
