"""A kernel's Nsight Compute profile, reduced to what the chapters cite.

    # on the GPU machine (Nsight Compute; clocks left alone):
    ncu --clock-control none -k regex:NAME -c 1 --set full -o RUN python3 SCRIPT
    ncu -i RUN.ncu-rep --page details > RUN.txt
    ncu -i RUN.ncu-rep --page source --csv --print-source sass > RUN_sass.csv
    # anywhere:
    python3 benchmarks/ncu_summary.py OUT.json LABEL=RUN [LABEL=RUN ...] [--note TEXT]

For each profile it keeps the kernel's name, its duration, registers per
thread, block size, warps per SM, issue-slot use, the executed warp
instructions and their mix by opcode (share of the total), and the warp stall
reasons sampled over the kernel (share of the samples). The profiles behind
benchmarks/results/sgemm_ncu-h100-2026-11-25.json were level 6 (64 x 256 x 16
tiles, two steps of the dot loop per pass, as it was before the whole tile was
written out) and cuBLAS, one 4096^3 product each, TF32 off, on an H100, and the
backward pass (version 4, B4 H16 N4096 d64) in attention_backward_ncu-*.json.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import re
import sys
from pathlib import Path

# Metrics of the details page: (name in the file, key in the summary).
DETAILS = [("Duration", "duration_ms"), ("Registers Per Thread", "registers_per_thread"),
           ("Block Size", "block_size"), ("Grid Size", "grid_size"),
           ("Achieved Active Warps Per SM", "warps_per_sm"),
           ("Issue Slots Busy", "issue_slots_busy_percent"),
           ("One or More Eligible", "one_or_more_eligible_percent"),
           ("Executed Ipc Active", "executed_ipc_active"),
           ("Executed Instructions", "executed_warp_instructions"),
           ("Dynamic Shared Memory Per Block", "dynamic_shared_kb_per_block"),
           ("Static Shared Memory Per Block", "static_shared_per_block")]

TO_MS = {"ns": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0, "s": 1e3,
         "second": 1e3}


def details(path: Path) -> dict:
    """Kernel name and the DETAILS metrics of an `ncu --page details` text."""
    lines = path.read_text().splitlines()
    found = {"kernel": next(line.strip().split("(")[0].strip() for line in lines
                            if line.startswith("  ") and not line.startswith("    "))}
    for line in lines:
        for name, key in DETAILS:
            match = re.match(rf"\s+{re.escape(name)}\s+(\S+)?\s+([\d,.]+)\s*$", line)
            if match and key not in found:
                value = float(match.group(2).replace(",", ""))
                if key == "duration_ms":  # Nsight Compute picks the unit: ns, us, ms or s
                    value = round(value * TO_MS.get(match.group(1), 1.0), 6)
                found[key] = int(value) if value.is_integer() else value
    return found


def source(path: Path) -> dict:
    """Opcode mix of executed instructions and stall-reason shares, from the
    SASS source page in CSV."""
    rows = list(csv.reader(path.open()))
    header_at = next(i for i, row in enumerate(rows) if "Source" in row)
    header, data = rows[header_at], rows[header_at + 1:]
    text, executed = header.index("Source"), header.index("Instructions Executed")
    stalls = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    opcodes, reasons, total = collections.Counter(), collections.Counter(), 0
    for row in data:
        try:
            count = int(row[executed])
        except (ValueError, IndexError):
            continue
        words = row[text].split()
        if not words:
            continue
        opcode = (words[1] if words[0].startswith("@") else words[0]).split(".")[0]
        opcodes[opcode] += count
        total += count
        for name in stalls:
            reasons[name[len("stall_"):]] += int(row[header.index(name)] or 0)
    samples = sum(reasons.values()) or 1
    return {"instruction_mix": {op: n / total for op, n in opcodes.most_common(12)},
            "stall_reasons": {r: n / samples for r, n in reasons.most_common(10)}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("runs", nargs="+", help="LABEL=RUN: RUN.txt and RUN_sass.csv exist")
    parser.add_argument("--note", default="")
    parser.add_argument("--gpu", default="NVIDIA H100 80GB HBM3")
    parser.add_argument("--date", required=True)
    args = parser.parse_args(argv)
    record = {"benchmark": "ncu_summary", "gpu": args.gpu, "date": args.date,
              "method": "Nsight Compute --set full, --clock-control none, one launch; "
                        "instruction_mix: share of executed warp instructions by opcode; "
                        "stall_reasons: share of the warp-state samples",
              "note": args.note, "profiles": {}}
    for run in args.runs:
        label, stem = run.split("=", 1)
        record["profiles"][label] = {**details(Path(stem + ".txt")),
                                     **source(Path(stem + "_sass.csv"))}
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
