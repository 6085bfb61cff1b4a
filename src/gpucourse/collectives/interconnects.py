"""The links between GPUs, from their specifications: NVLink, PCIe,
InfiniBand and Ethernet, as data, with the H100's dense bf16 rate to compare
them against.
"""

from __future__ import annotations

from dataclasses import dataclass

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


# A table of data, one entry per link: its rows look alike by design.
INTERCONNECTS = {
    "NVLink 4 (H100)": Interconnect(
        "NVLink 4 (H100 SXM)", "NVLink", 450e9, "nvidia_h100_datasheet",
        "printed: NVLink 900 GB/s, both directions together; 450 GB/s each way"),
    "NVLink 3 (A100)": Interconnect(
        "NVLink 3 (A100 SXM)", "NVLink", 300e9, "nvidia_a100_datasheet",
        "printed: NVLink 600 GB/s, both directions together; 300 GB/s each way"),
    "PCIe Gen5 x16": Interconnect(
        "PCIe Gen5 x16", "PCIe", pcie_x16_bytes_per_s(32), "pcisig_pcie5",
        "32 GT/s per lane, 128b/130b: 16 x 32 x 128/130 / 8 = 63.0 GB/s each way"),
    "PCIe Gen4 x16": Interconnect(
        "PCIe Gen4 x16", "PCIe", pcie_x16_bytes_per_s(16), "pcisig_pcie4",
        "16 GT/s per lane, 128b/130b: 16 x 16 x 128/130 / 8 = 31.5 GB/s each way"),
    "InfiniBand NDR": Interconnect(
        "InfiniBand NDR (400 Gb/s)", "InfiniBand", 400e9 / 8, "nvidia_connectx7",
        "printed: 400 Gb/s per port; / 8 bits = 50 GB/s each way"),
    "InfiniBand HDR": Interconnect(
        "InfiniBand HDR (200 Gb/s)", "InfiniBand", 200e9 / 8, "nvidia_connectx6",
        "printed: 200 Gb/s per port; / 8 bits = 25 GB/s each way"),
    "400 GbE": Interconnect(
        "Ethernet 400GbE", "Ethernet", 400e9 / 8, "ieee8023bs",
        "400 Gb/s MAC data rate; / 8 bits = 50 GB/s each way"),
    "100 GbE": Interconnect(
        "Ethernet 100GbE", "Ethernet", 100e9 / 8, "ieee8023ba",
        "100 Gb/s MAC data rate; / 8 bits = 12.5 GB/s each way"),
}

# The dense BF16 tensor-core peak of the H100 SXM: the datasheet prints
# 1,979 TFLOPS "with sparsity"; dense matrices get half of that.
H100_BF16_DENSE_FLOPS_PER_S = 1979e12 / 2
