"""Train the tiny GPT on PyTorch's kernels and on the course's own, on a real GPU.

    PYTHONPATH=src GPUCOURSE_DEVICE=gpu python3 benchmarks/tinygpt.py [--steps N] [--out DIR]

The model is gpucourse.tinygpt's character-level GPT (4 layers, 4 heads of 64,
width 256, about 3.2 million parameters) learning three-digit addition with
the sum written backwards. Runs from each seed (the same initial weights, the same batches in the
same order), fp32 with TF32 off unless named bf16:

* "pytorch": scaled_dot_product_attention (causal) and torch's linear layers;
* "pytorch_math" (the control): the same, with SDPA held to its math backend,
  which adds the same products in another order;
* "course_attention": the course's FlashAttention forward and backward kernels
  (attention.flash_attention_autograd), torch's linear layers;
* "course": the course's attention and every linear layer's three products
  (forward, input gradient, weight gradient) on the course's SGEMM
  (tinygpt.course_linear over sgemm.matmul, level auto);
* "pytorch_bf16" and "course_bf16": the same model in mixed precision,
  bfloat16 products and attention under torch.autocast, float32 weights and
  optimizer; PyTorch's kernels, and the course's (half_matmul on the tensor
  cores, FlashAttention-2 in half precision with its backward, version 5).
  Each bf16 run's final loss is compared with pytorch_bf16's.

Training: 3000 steps (TrainConfig's default) of 256 windows of three lines, AdamW (peak learning rate
1e-3, 100 warm-up steps, cosine decay), the loss scored on the sums' digits and
the line ends only (the operands are random). Recorded per run: the loss of
every step, the step at which the mean loss of 50 steps first falls below
0.01 (the model has learned to add), each step's wall-clock time (the GPU
synchronised before and after, so host work is included), the final loss (the
mean of the last 100 steps), the share of 1000 held-out problems (none in the
corpus) answered exactly by greedy decoding, and the first eight of them with
the model's answers.

With --all-characters every character is scored, the operands too: the loss
then cannot fall below tinygpt.loss_floor (about 1.06 nats, the entropy of the
random operand digits), so final losses are comparable between runs (within
2%, issue 17 asks), "learned" means within 0.01 of the floor, and the file is
results/tinygpt_full-<gpu-slug>-<date>.json.

Writes results/tinygpt-<gpu-slug>-<date>.json under --out (default
benchmarks/results); runs in bf16 alone (they may not be mixed with fp32 ones
in one call) write tinygpt_bf16-<gpu-slug>-<date>.json (tinygpt_bf16_full
with --all-characters), so that they never stand in for chapter 10's fp32 runs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from gpucourse import tinygpt as T

from _common import (add_out_argument, record_start, results_path, short_versions, tf32_off,
                     write_json)

RUNS = {"pytorch": dict(attention="torch", linear="torch"),
        # PyTorch against itself: the same model on SDPA's math backend, a
        # different order of the same sums (the control for the comparison).
        "pytorch_math": dict(attention="torch", linear="torch"),
        "course_attention": dict(attention="course", linear="torch"),
        "course": dict(attention="course", linear="course"),
        # Mixed precision in bfloat16 (tinygpt.GPTConfig's precision: weights and
        # optimizer in float32, products and attention in bf16): PyTorch under
        # torch.autocast, and the course's half_matmul and FlashAttention-2 in
        # half precision, each compared with the other.
        "pytorch_bf16": dict(attention="torch", linear="torch", precision="bf16"),
        "course_bf16": dict(attention="course", linear="course", precision="bf16")}
HELD_OUT = 1000
FINAL_WINDOW = 100
LEARNED_BELOW = 0.01


def run(name, train_config):
    config = T.GPTConfig(**RUNS[name])
    floor = T.loss_floor(config.block_size, train_config.answers_only)
    backend = SDPBackend.MATH if name == "pytorch_math" else None
    with sdpa_kernel(backend) if backend else contextlib.nullcontext():
        model, history = T.train(config, train_config, device="cuda", progress=None)
    score = T.addition_accuracy(model, T.held_out_problems(HELD_OUT, train_config))
    final = statistics.fmean(history["loss"][-FINAL_WINDOW:])
    step_ms = statistics.median(history["step_ms"][10:])
    learned = T.steps_to_learn(history["loss"], floor + LEARNED_BELOW)
    print(f"{name}, seed {train_config.seed}: learned at step {learned}, final loss {final:.2e}, "
          f"{step_ms:.2f} ms a step, held-out accuracy {score['accuracy']:.3f}", flush=True)
    print("  ", "; ".join(f"{e['problem']}={e['answer']}" for e in score["examples"]), flush=True)
    return dict(run=name, seed=train_config.seed, **RUNS[name], steps_to_learn=learned,
                final_loss_over_floor=final / floor if floor else None,
                loss=history["loss"], step_ms=history["step_ms"],
                final_loss=final, median_step_ms=step_ms, accuracy=score["accuracy"],
                held_out=score["n"], examples=score["examples"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=T.TrainConfig().steps)
    parser.add_argument("--runs", default=",".join(RUNS))
    parser.add_argument("--seeds", default="0,1,2")
    add_out_argument(parser)
    parser.add_argument("--all-characters", action="store_true",
                        help="score every character, operands included (the loss then has a "
                             "floor, tinygpt.loss_floor, and final losses can be compared); "
                             "writes tinygpt_full-<gpu>-<date>.json")
    parser.add_argument("--append", action="store_true",
                        help="keep the runs of today's results file that this call does not redo "
                             "(the file is written again after every run either way)")
    args = parser.parse_args()
    tf32_off()
    train_config = T.TrainConfig(steps=args.steps, answers_only=not args.all_characters)
    names = args.runs.split(",")
    unknown = [r for r in names if r not in RUNS]
    if unknown:
        parser.error(f"--runs: unknown {unknown}; choose from {list(RUNS)}")
    # Runs in bf16 alone go to a file of their own (tinygpt_bf16[_full]), so
    # that they never stand in for the fp32 runs chapter 10 reads.
    bf16 = {r for r in names if RUNS[r].get("precision") == "bf16"}
    if bf16 and len(bf16) != len(names):
        parser.error("--runs: run the bf16 runs apart from the fp32 ones (they have a file "
                     "of their own)")
    benchmark = "tinygpt" + ("_bf16" if bf16 else "") + ("_full" if args.all_characters else "")
    seeds = [int(x) for x in args.seeds.split(",")]
    report = record_start(
        benchmark, torch.cuda.get_device_name(), short_versions(),
        __doc__.split("\n\n", 1)[1].strip(),
        configuration=T.describe(T.GPTConfig(), train_config),
        final_window=FINAL_WINDOW, learned_below=LEARNED_BELOW, seeds=seeds,
        loss_floor=T.loss_floor(T.GPTConfig().block_size, train_config.answers_only))
    path = results_path(args.out, report)
    kept = []
    if args.append and path.exists():
        kept = json.loads(path.read_text())["results"]
    path.parent.mkdir(parents=True, exist_ok=True)
    done = []
    for seed in seeds:
        for r in names:
            done.append(run(r, dataclasses.replace(train_config, seed=seed)))
            # The file after every run: a run cut short by a time limit loses
            # only itself.
            write(report, kept, done, path)
    print(f"wrote {path}")


def write(report, kept, done, path):
    """The report with the runs done now and those kept from the file (the
    ones not done again), ordered by seed and run; each run's final loss over
    PyTorch's run of its seed where that run exists."""
    again = {(r["run"], r["seed"]) for r in done}
    order = list(RUNS)
    rows = sorted([r for r in kept if (r["run"], r["seed"]) not in again] + done,
                  key=lambda r: (r["seed"], order.index(r["run"])))
    for row in rows:
        peer = "pytorch_bf16" if row.get("precision") == "bf16" else "pytorch"
        reference = next((r for r in rows if r["seed"] == row["seed"] and r["run"] == peer),
                         None)
        row["final_loss_vs_pytorch"] = (row["final_loss"] / reference["final_loss"]
                                        if reference else None)
    write_json(path, {**report, "seeds": sorted({r["seed"] for r in rows}), "results": rows})


if __name__ == "__main__":
    main()
