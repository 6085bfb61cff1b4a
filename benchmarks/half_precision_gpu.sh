#!/usr/bin/env bash
# Everything issue 29's half-precision work needs from a GPU, in parts that each
# fit one call of the device tool (at most 10 minutes), from the repository's root:
#
#     bash benchmarks/half_precision_gpu.sh OUT PART [PART ...]
#
# PART is one of
#   tests      the tests that only run on a GPU: the HGEMM ladder, tf32_matmul,
#              attention in half precision (forward; the backward's version 5),
#              the fp32 backward on tensor cores (version 6; its kernels' local memory),
#              the tiny GPT;
#   hgemm      benchmarks/hgemm.py (half_matmul and tf32_matmul against cuBLAS);
#              hgemm_sweep, the same with --sweep (level 7's other tiles);
#   attention  benchmarks/attention_half.py (forward and backward against SDPA flash);
#   attention_sweep benchmarks/attention_half_sweep.py (version 5's tiles at head
#              dim 64 other than its default, against SDPA flash's backward);
#   causal_order benchmarks/causal_order.py (under a causal mask, the heads in groups
#              against all heads at once: the same kernels, two processes);
#   attention_fp32  benchmarks/attention_backward.py --versions 6 (the fp32 backward
#              on 3xTF32 beside version 4 and SDPA memory-efficient); attention_fp32_64
#              and attention_fp32_128, the same at one head dim, a call each, with
#              version 6's variants V6_VARIANTS (default the script's own; each
#              writes attention_backward_partial; `attention_backward.py --merge A B`
#              joins the two into the full attention_backward file, on any machine);
#   tinygpt    benchmarks/tinygpt.py's bf16 runs (seed 0); tinygpt_full, the same
#              with every character scored (final losses comparable, issue 29's 1%);
#   sgemm_calibrate  benchmarks/sgemm_grid.py --calibrate (issue 33: every plan of
#              the shape model's menu off the grid; writes the model's JSON in src/
#              too: copy it back with the results);
#   sgemm_rates benchmarks/sgemm_grid.py --rates (issue 33: each menu tile's time
#              at 1-8 blocks an SM and four depths of K; writes the model's JSON
#              in src/ too: copy it back with the results);
#   sgemm_rates_variants benchmarks/sgemm_grid.py --rates-variants (issue 33: each
#              tile of the rates at K 4096 in two slices of K beside K whole, and
#              with its grid of tiles turned; about 2 minutes; writes each tile's
#              split share into the model's JSON in src/ too: copy it back with
#              the results, keep it only if a grid run with it is no worse);
#   sgemm_rates_tiles the same as sgemm_rates and then sgemm_rates_variants for the tiles
#              in TILES alone (BMxBNxBKxTMxTN[sS], comma-separated; sS a cp.async ring),
#              their rates and split shares joining the others in the model's JSON in
#              src/ (copy it back with the results; add the tiles to the GPU's menu
#              there, and keep them only if a grid run with them is no worse);
#   sgemm_padding benchmarks/sgemm_grid.py --padding (issue 33: auto at the grid's
#              ragged shapes with its operands copied into padded buffers and not;
#              where padding won as the model says, writes a "padding" block into
#              the model's JSON in src/ too: copy it back, keep it only if the grid
#              with it is no worse);
#   sgemm_explore benchmarks/sgemm_grid.py --explore (issue 33: the model's cheapest
#              plans timed at the grid's shapes under their target);
#              sgemm_explore_off_grid, the same at shapes off the grid;
#              sgemm_explore_deep, the same at the five shapes under 85% alone
#              (the 32-deep candidate tiles among the plans; about 2 minutes);
#   sgemm_grid benchmarks/sgemm_grid.py (auto and level 7 on the grid, beside cuBLAS);
#   grad_check benchmarks/tinygpt_grad_check.py (the tiny GPT's gradients in each
#              precision and kernel mix against float64);
#   ncu        Nsight Compute profiles of half_matmul, tf32_matmul, half-precision
#              attention and its backward's two kernels (benchmarks/ncu_targets.py),
#              reduced by benchmarks/ncu_summary.py (the details pages, and each
#              kernel's SASS with its stall samples per instruction, in a .tgz);
#   sgemm_padding_parts benchmarks/sgemm_padding_parts.py (issue 33: a padded ragged
#              product's copies and multiply timed alone, beside the unpadded one);
#   sgemm_fragments benchmarks/sgemm_fragments.py (issue 33: auto's plan with one and
#              with two copies of the fragments, vectorized.FRAGMENT_COPIES, at the
#              grid's shapes under 85%, beside cuBLAS; about a minute);
#   sgemm_stream benchmarks/sgemm_stream.py (issue 33: stream-K, matmul's splits="stream",
#              beside auto's plan at the grid's shapes under 85%, beside cuBLAS; about
#              two minutes);
#   sgemm_pipelined benchmarks/sgemm_pipelined.py (issue 33: level 6's kernel with the walk
#              along K by cp.async, with the knobs pipelined.COPY_ADDRESSES and
#              vectorized.RING_FMA_ORDER, beside auto's plan and cuBLAS; about four minutes);
#   sgemm_ring_copy benchmarks/sgemm_ring_copy.py --write-model (issue 33: the copy of a
#              ragged B into rows of a multiple of 4 before a cp.async ring, timed
#              and fitted; writes the model's JSON in src/ too, copied back; 20 s);
#   cublas_kernels benchmarks/cublas_kernels.py (issue 33: the kernels torch.mm runs for fp32
#              products, their tiles, stages, grids and registers; about 20 seconds);
#   sgemm_split_tests  the split-K, stream-K and cp.async ring tests on the GPU (their
#              atomic adds into C, and the ring's copies racing other warps' reads,
#              on real hardware);
#   attention_fp32_ncu the same for version 6's split dV and dK kernels at head dim 128,
#              N 4096, not causal: backward_fp32_128_ncu-*.json;
#   sgemm_ncu  the same for matmul's kernel (issue 33) at 1537 x 1023 x 771 (ragged),
#              its plan at 1536 x 1024 x 768 (aligned) and 1000^3: sgemm_ragged_ncu-*.json.
# Results files land in OUT with a log of the whole run (OUT/gpu_log-PARTS.txt);
# copy them into benchmarks/results to commit them. The raw Nsight reports stay
# in /tmp (the device tool returns at most 8 files).
set -u
OUT=$(mkdir -p "$1" && cd "$1" && pwd); shift
export PYTHONPATH=$PWD/src GPUCOURSE_DEVICE=gpu PYTHONWARNINGS=ignore
mkdir -p "$OUT"
LOG="$OUT/gpu_log-$(echo "$@" | tr ' ' '-').txt"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
SLUG=$(python3 -c "import sys; sys.path.insert(0, 'src'); from gpucourse.results import gpu_slug; print(gpu_slug('$GPU'))")
TODAY=$(date +%F)
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for part in "$@"; do
    echo "=== $part $(date +%T)"
    case "$part" in
    tests)
        timeout 420 python3 -m pytest -q -p no:cacheprovider -n 4 --tb=short -rfE tests/test_hgemm.py \
            tests/test_attention_backward.py tests/test_attention_half.py \
            tests/test_attention_backward_tf32.py tests/test_attention_backward_tf32_split.py \
            tests/test_tensor_cores.py tests/test_tinygpt.py 2>&1 | tail -150 ;;
    hgemm)
        (cd benchmarks && timeout 400 python3 hgemm.py --out "$OUT" 2>&1 | grep -v Warning | tail -60) ;;
    hgemm_sweep)  # the same, with level 7 at other tiles (K = 768 among the shapes)
        (cd benchmarks && timeout 560 python3 hgemm.py --sweep --out "$OUT" 2>&1 \
            | grep -v Warning | grep -v "^fp16\|^bf16" | tail -40) ;;
    attention)
        (cd benchmarks && timeout 500 python3 attention_half.py --out "$OUT" 2>&1 \
            | grep -v Warning | tail -60) ;;
    attention_sweep)
        (cd benchmarks && timeout 500 python3 attention_half_sweep.py --out "$OUT" 2>&1 \
            | grep -v Warning | tail -20) ;;
    causal_order)
        (cd benchmarks && timeout 400 python3 causal_order.py --out "$OUT" 2>&1 \
            | grep -v Warning | tail -30) ;;
    attention_fp32)  # the fp32 backward: version 6 (3xTF32 tensor cores) beside version 4
        (cd benchmarks && timeout 550 python3 attention_backward.py --versions 6 --out "$OUT" 2>&1 \
            | grep -v Warning | tail -40) ;;
    attention_fp32_64|attention_fp32_128)  # the same, one head dim: one call each, then --merge
        (cd benchmarks && timeout 560 python3 attention_backward.py --versions 6 \
            --head-dims "${part#attention_fp32_}" ${V6_VARIANTS:+--variants "$V6_VARIANTS"} \
            --budget-s 480 --out "$OUT" 2>&1 | grep -v Warning | tail -40) ;;
    tinygpt)
        (cd benchmarks && timeout 550 python3 tinygpt.py --runs pytorch_bf16,course_bf16 --seeds 0 \
            --out "$OUT" 2>&1 | tail -12) ;;
    tinygpt_full)  # every character scored: losses with a floor, comparable to 1%
        (cd benchmarks && timeout 550 python3 tinygpt.py --runs pytorch_bf16,course_bf16 --seeds 0 \
            --all-characters --out "$OUT" 2>&1 | tail -12) ;;
    sgemm_calibrate)
        timeout 560 python3 benchmarks/sgemm_grid.py --calibrate --out "$OUT" 2>&1 \
            | grep -v Warning | tail -20
        cp src/gpucourse/kernels/sgemm/sgemm_shape_model.json "$OUT/" ;;
    sgemm_rates)  # writes the model's JSON in src/ too: copy it back with the results
        timeout 500 python3 benchmarks/sgemm_grid.py --rates --out "$OUT" 2>&1 | grep -v Warning | tail -20
        cp src/gpucourse/kernels/sgemm/sgemm_shape_model.json "$OUT/" ;;
    sgemm_rates_tiles)  # TILES=...: writes the model's JSON in src/ too: copy it back
        timeout 330 python3 benchmarks/sgemm_grid.py --rates --tiles "$TILES" --out "$OUT" 2>&1 \
            | grep -v Warning | tail -12
        timeout 200 python3 benchmarks/sgemm_grid.py --rates-variants --tiles "$TILES" \
            --out "$OUT" 2>&1 | grep -v Warning | tail -8
        cp src/gpucourse/kernels/sgemm/sgemm_shape_model.json "$OUT/" ;;
    sgemm_rates_variants)  # writes the model's JSON in src/ too: copy it back with the results
        timeout 300 python3 benchmarks/sgemm_grid.py --rates-variants --out "$OUT" 2>&1 \
            | grep -v Warning | tail -20
        cp src/gpucourse/kernels/sgemm/sgemm_shape_model.json "$OUT/" ;;
    cublas_kernels)
        timeout 200 python3 benchmarks/cublas_kernels.py --out "$OUT" 2>&1 | grep -v Warning | tail -16 ;;
    sgemm_split_tests)
        timeout 300 python3 -m pytest -q -p no:cacheprovider -n 4 --tb=short -rfE \
            tests/test_sgemm_split_k.py tests/test_sgemm_stream_k.py tests/test_sgemm_pipelined.py \
            2>&1 | tail -40 ;;
    sgemm_ring_copy)  # writes the model's JSON in src/ too: copy it back with the results
        timeout 120 python3 benchmarks/sgemm_ring_copy.py --write-model --out "$OUT" 2>&1 \
            | grep -v Warning | tail -20
        cp src/gpucourse/kernels/sgemm/sgemm_shape_model.json "$OUT/" ;;
    sgemm_pipelined)
        timeout 570 python3 benchmarks/sgemm_pipelined.py --out "$OUT" 2>&1 | grep -v Warning | tail -20 ;;
    sgemm_stream)
        timeout 400 python3 benchmarks/sgemm_stream.py --out "$OUT" 2>&1 | grep -v Warning | tail -20 ;;
    sgemm_fragments)
        timeout 300 python3 benchmarks/sgemm_fragments.py --out "$OUT" 2>&1 | grep -v Warning | tail -20 ;;
    sgemm_padding_parts)
        timeout 300 python3 benchmarks/sgemm_padding_parts.py --out "$OUT" 2>&1 | grep -v Warning | tail -20 ;;
    sgemm_padding)
        timeout 300 python3 benchmarks/sgemm_grid.py --padding --out "$OUT" 2>&1 | grep -v Warning | tail -20
        cp src/gpucourse/kernels/sgemm/sgemm_shape_model.json "$OUT/sgemm_shape_model-after-padding.json" ;;
    sgemm_explore)
        timeout 500 python3 benchmarks/sgemm_grid.py --explore --out "$OUT" 2>&1 | grep -v Warning | tail -20 ;;
    sgemm_explore_deep)  # --explore at the five shapes under 85%, with DEEP_STEP_CANDIDATES
        timeout 500 python3 benchmarks/sgemm_grid.py --explore --out "$OUT" \
            --shapes 1000x1000x1000,1537x1023x771,3001x2999x1009,1024x1024x16384,512x512x512 2>&1 \
            | grep -v Warning | tail -20 ;;
    sgemm_explore_off_grid)
        timeout 500 python3 benchmarks/sgemm_grid.py --explore-off-grid --out "$OUT" 2>&1 \
            | grep -v Warning | tail -20 ;;
    sgemm_grid)
        timeout 560 python3 benchmarks/sgemm_grid.py --out "$OUT" 2>&1 | grep -v Warning | tail -50 ;;
    grad_check)
        (cd benchmarks && timeout 300 python3 tinygpt_grad_check.py --out "$OUT" 2>&1 \
            | grep -v Warn | tail -40) ;;
    attention_fp32_ncu)  # then the ncu part below, with these jobs (LABEL:TARGET:KERNEL:SKIP)
        NCU_NAME=backward_fp32_128_ncu NCU_TIMEOUT=280  # each job compiles three large kernels
        NCU_JOBS="dv128:backward_fp32_128:_build_dkdv_kernel:6 dk128:backward_fp32_128:_build_dkdv_kernel:7"
        NCU_NOTE="float32 backward, version 6 at B4 H16 N4096 d128 not causal: its split sums' dV kernel and dK kernel (which adds dQ atomically)" ;&
    sgemm_ncu)  # then the ncu part below, with these jobs
        NCU_NAME=${NCU_NAME:-sgemm_ragged_ncu}  # not sgemm_ncu: chapter 8 reads that one (4096^3)
        NCU_JOBS=${NCU_JOBS:-"ragged:sgemm_ragged:sgemm_vectorized aligned:sgemm_aligned:sgemm_vectorized
                  k1000:sgemm_1000:sgemm_vectorized"}
        NCU_NOTE=${NCU_NOTE:-"float32 matmul: auto at 1537x1023x771 (ragged: loads of one float, edges checked); auto's plan for it at 1536x1024x768 (128-bit loads, no edges); auto at 1000^3"} ;&
    ncu)
        rm -rf /tmp/ncu && mkdir -p /tmp/ncu  # this part's reports alone in its .tgz
        labels=()
        for job in ${NCU_JOBS:-hgemm:hgemm:make_hgemm_kernel tf32:tf32:make_tf32_kernel \
                   attention:attention:make_flash_half_kernel \
                   dkdv:backward:make_dkdv_kernel dq:backward:make_dq_kernel}; do
            IFS=: read -r label target kernel skip <<< "$job"
            timeout "${NCU_TIMEOUT:-150}" ncu --clock-control none --kernel-name-base mangled -k "regex:$kernel" \
                --launch-skip "${skip:-3}" -c 1 --set full -f -o "/tmp/ncu/$label" \
                python3 benchmarks/ncu_targets.py "$target" \
                > "/tmp/ncu/$label.log" 2>&1 || echo "ncu $label failed"
            grep "==PROF==\|==ERROR==\|==WARNING==" "/tmp/ncu/$label.log" | tail -4
            ncu -i "/tmp/ncu/$label.ncu-rep" --page details > "/tmp/ncu/$label.txt" 2>&1
            ncu -i "/tmp/ncu/$label.ncu-rep" --page source --csv --print-source sass \
                > "/tmp/ncu/${label}_sass.csv" 2>&1
            labels+=("$label=/tmp/ncu/$label")
        done
        tar czf "$OUT/${NCU_NAME:-half_precision_ncu}_details-$SLUG-$TODAY.tgz" -C /tmp/ncu \
            $(cd /tmp/ncu && ls *.txt *_sass.csv)
        python3 benchmarks/ncu_summary.py "$OUT/${NCU_NAME:-half_precision_ncu}-$SLUG-$TODAY.json" \
            "${labels[@]}" --date "$TODAY" --gpu "$GPU" \
            --note "${NCU_NOTE:-fp16 unless named: half_matmul level 7 at 4096^3; tf32_matmul one pass at 4096^3; flash_attention B4 H16 N4096 d64 causal; its backward (version 5) B4 H16 N4096 d64 not causal, dK/dV and dQ kernels}"
        unset NCU_NAME NCU_JOBS NCU_NOTE NCU_TIMEOUT ;;  # a later profiling part sets its own
    *) echo "unknown part $part" ;;
    esac
done
echo "=== done $(date +%T)"
} 2>&1 | tee "$LOG"
