#!/usr/bin/env bash
# Everything issue 29's half-precision work needs from a GPU, in one call of the
# device tool (about 10 minutes on an H100), from the repository's root:
#
#     bash benchmarks/half_precision_gpu.sh [OUT]
#
# 1. the tests that only run on a GPU: the HGEMM ladder, tf32_matmul, attention
#    in half precision (forward; the backward's version 5), the tiny GPT;
# 2. benchmarks/hgemm.py (half_matmul and tf32_matmul against cuBLAS),
#    benchmarks/attention_half.py (forward and backward against SDPA flash),
#    benchmarks/tinygpt.py's bf16 runs (seed 0);
# 3. Nsight Compute profiles of half_matmul and of half-precision attention
#    (benchmarks/ncu_targets.py), reduced by benchmarks/ncu_summary.py.
# Results files land in OUT (default $OUT, the device tool's folder, else
# benchmarks/results); copy them into benchmarks/results to commit them.
set -u
OUT="${1:-${OUT:-benchmarks/results}}"
export PYTHONPATH=src GPUCOURSE_DEVICE=gpu PYTHONWARNINGS=ignore
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 300 python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_hgemm.py \
    tests/test_attention.py tests/test_attention_backward.py tests/test_attention_half.py \
    tests/test_tensor_cores.py tests/test_tinygpt.py 2>&1 | tail -15
(cd benchmarks && timeout 420 python3 hgemm.py --out "../$OUT" 2>&1 | grep -v Warning | tail -45)
(cd benchmarks && timeout 600 python3 attention_half.py --out "../$OUT" 2>&1 | grep -v Warning | tail -40)
(cd benchmarks && timeout 900 python3 tinygpt.py --runs pytorch_bf16,course_bf16 --seeds 0 \
    --out "../$OUT" 2>&1 | tail -8)
if command -v ncu > /dev/null; then
    for target in hgemm attention; do
        kernel=$([ "$target" = hgemm ] && echo make_hgemm_kernel || echo make_flash_half_kernel)
        timeout 300 ncu --clock-control none -k "regex:$kernel" --launch-skip 3 -c 1 --set full \
            -f -o "$OUT/ncu_$target" python3 benchmarks/ncu_targets.py "$target" > /dev/null 2>&1
        ncu -i "$OUT/ncu_$target.ncu-rep" --page details > "$OUT/ncu_$target.txt" 2>&1
        ncu -i "$OUT/ncu_$target.ncu-rep" --page source --csv --print-source sass \
            > "$OUT/ncu_${target}_sass.csv" 2>&1
    done
    python3 benchmarks/ncu_summary.py "$OUT/half_precision_ncu-h100-$(date +%F).json" \
        "hgemm=$OUT/ncu_hgemm" "attention=$OUT/ncu_attention" --date "$(date +%F)" \
        --note "half_matmul level 7 at 4096^3 fp16; flash_attention fp16 B4 H16 N4096 d64 causal"
fi
