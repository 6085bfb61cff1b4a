"""Gradients of the tiny GPT's loss in each precision and kernel mix against float64.

    PYTHONPATH=src python3 benchmarks/tinygpt_grad_check.py [--train-steps N] [--out DIR]

Trains PyTorch's fp32 model for N steps on every character (answers_only off),
then, at those weights and at the initial ones, takes one batch's loss and
gradients with each config and prints each parameter's relative gradient error
against the same model in float64 (median and worst over the parameters).
A kernel mix whose errors are far above pytorch_bf16's has a precision bug;
errors like it mean a training run that differs is chance, not a bug.
Writes tinygpt_grad_check-<gpu>-<date>.json under --out (default
benchmarks/results): one row per weights, batch and config (loss, its error,
the median and worst relative gradient errors, the worst parameters).
(The first run, 2026-11-28, predates the file: benchmarks/NOTES.md quotes it.)
"""
import copy

from _common import benchmark_parser, record_start, short_versions, start, write_record

from gpucourse import tinygpt as T

CONFIGS = {
    "pytorch_fp32": dict(attention="torch", linear="torch", precision="fp32"),
    "course_fp32": dict(attention="course", linear="course", precision="fp32"),
    "pytorch_bf16": dict(attention="torch", linear="torch", precision="bf16"),
    "course_bf16": dict(attention="course", linear="course", precision="bf16"),
    "course_attention_bf16": dict(attention="course", linear="torch", precision="bf16"),
    "course_linear_bf16": dict(attention="torch", linear="course", precision="bf16"),
}


def grads(config, state, x, y, double=False):
    model = T.build(config, 0, "cuda")
    model.load_state_dict(state)
    if double:
        model = model.double()
    with T.precision_context(config, "cuda"):
        _, loss = model(x, y)
    loss.backward()
    return float(loss), {n: p.grad.double() for n, p in model.named_parameters()}


def main():
    import torch

    parser = benchmark_parser(__doc__)
    parser.add_argument("--train-steps", type=int, default=1500)
    args, _ = start(parser)
    record = record_start("tinygpt_grad_check", torch.cuda.get_device_name(), short_versions(),
                          __doc__.split("\n\n", 1)[1].strip(), train_steps=args.train_steps)
    rows = []
    train = T.TrainConfig(steps=args.train_steps, answers_only=False)
    trained, history = T.train(T.GPTConfig(), train, device="cuda", progress=False)
    print(f"trained pytorch_fp32 {args.train_steps} steps, last loss {history['loss'][-1]:.4f}")
    fresh = T.build(T.GPTConfig(), 0, "cuda")
    data = T.batches(T.encode(T.corpus(20_000, 7)), T.GPTConfig().block_size, 256, 8, False)
    for label, model in (("initial", fresh), ("trained", trained)):
        state = copy.deepcopy(model.state_dict())
        for batch in range(2):
            x, y = (t.cuda() for t in next(data))
            ref_loss, ref = grads(T.GPTConfig(), state, x, y, double=True)
            print(f"--- {label} weights, batch {batch}: float64 loss {ref_loss:.6f}")
            for name, kw in CONFIGS.items():
                loss, g = grads(T.GPTConfig(**kw), state, x, y)
                errors = {n: float((g[n] - ref[n]).norm() / ref[n].norm().clamp_min(1e-30)) for n in ref}
                ranked = sorted(errors.items(), key=lambda kv: kv[1])
                median = ranked[len(ranked) // 2][1]
                worst = ", ".join(f"{n} {e:.1e}" for n, e in ranked[-3:][::-1])
                print(f"{name:24s} loss {loss:.6f} (err {abs(loss - ref_loss):.1e}); grad rel err "
                      f"median {median:.1e}; worst {worst}")
                rows.append(dict(weights=label, batch=batch, config=name, loss=loss,
                                 float64_loss=ref_loss, median_rel_err=median,
                                 worst=[[n, e] for n, e in ranked[-3:][::-1]]))
    record["results"] = rows
    print(f"wrote {write_record(record, args.out)}")


if __name__ == "__main__":
    main()
