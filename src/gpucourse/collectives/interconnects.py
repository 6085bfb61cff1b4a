"""The links between GPUs, from their specifications: NVLink, PCIe,
InfiniBand and Ethernet, as data, with the H100's dense bf16 rate to compare
them against.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gpucourse.checks import count as _count, positive as _positive


# -----------------------------------------------------------------------------
# Interconnects, from their specifications


@dataclass(frozen=True)
class Interconnect:
    """One link's bandwidth in ONE direction, per GPU (or per adapter)."""

    name: str
    kind: str  # "NVLink", "PCIe", "InfiniBand" or "Ethernet"
    bandwidth_bytes_per_s: float
    source: str  # bib key
    note: str  # what the source prints, and what is derived here


def pcie_x16_bytes_per_s(gigatransfers_per_s, lanes=16) -> float:
    """PCIe 3.0 and later: each lane carries `GT/s` bits per second with
    128b/130b encoding, so x16 moves 16 · GT/s · 128/130 / 8 bytes per second
    each way (31.5 GB/s for Gen4, 63.0 GB/s for Gen5)."""
    rate = _positive("gigatransfers_per_s", gigatransfers_per_s)
    lanes = _count("lanes", lanes)
    return lanes * rate * 1e9 * 128 / 130 / 8


# The links themselves are data (data/interconnects.json): each with the rate
# its source prints, in the unit it prints it (bytes/s, bits/s, or a PCIe
# generation's transfers per lane, which pcie_x16_bytes_per_s turns into bytes).
INTERCONNECTS_PATH = Path(__file__).resolve().parents[1] / "data" / "interconnects.json"


def _bandwidth_bytes_per_s(rate: dict) -> float:
    """One direction's bytes per second from a rate as data/interconnects.json gives it."""
    if "pcie_gigatransfers_per_s" in rate:
        return pcie_x16_bytes_per_s(rate["pcie_gigatransfers_per_s"])
    if "bits_per_s" in rate:
        return rate["bits_per_s"] / 8
    return rate["bytes_per_s"]


def _read_interconnects() -> dict[str, Interconnect]:
    rows = json.loads(INTERCONNECTS_PATH.read_text())
    return {row["key"]: Interconnect(row["name"], row["kind"], _bandwidth_bytes_per_s(row["rate"]),
                                     row["source"], row["note"]) for row in rows}


INTERCONNECTS = _read_interconnects()

# The dense BF16 tensor-core peak of the H100 SXM: the datasheet prints
# 1,979 TFLOPS "with sparsity"; dense matrices get half of that.
H100_BF16_DENSE_FLOPS_PER_S = 1979e12 / 2
