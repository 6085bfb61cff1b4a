"""A tiny GPT that learns to add, trained on the course's own kernels.

The course ends where its kernels meet training: a character-level GPT in the
shape of GPT-2 (pre-norm blocks, causal self-attention, a 4x MLP, tied input
and output embeddings) whose attention runs on the FlashAttention forward and
backward kernels of ``gpucourse.kernels.attention`` (its ``flash_attention_autograd``),
and whose linear layers can run on the SGEMM of ``gpucourse.kernels.sgemm``.
The same model with PyTorch's own operations, the same seed and the same
batches is the reference: where the two loss curves agree, our kernels train.

The corpus is made here, so that what the model learns can be checked: lines
``a+b=c`` of two three-digit numbers, zero-padded, with the sum written
backwards (lowest digit first), the order in which the carries are worked out.
Small transformers learn addition far more easily that way (Lee et al., 2023,
"Teaching Arithmetic to Small Transformers", arXiv:2307.03381). A trained
model is scored on problems it has not seen: greedy decoding of the sum after
``a+b=``.

On a GPU everything runs on CUDA tensors. Without one, the model trains on CPU
tensors and the course's kernels run on Numba's simulator, at tiny sizes only:
that is what the tests do.

The readers of the committed GPU run are here; the chapter's figure and table
of it live in ``gpucourse.chapters.tinygpt`` (still importable from here, as
``gpucourse.tinygpt.NAME``).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

from gpucourse.checks import at_least, count, positive
from gpucourse.moved import served_from

VOCAB = "0123456789+=\n"
DIGITS = 3
# "123+456=" then the four digits of the sum, lowest first, then a newline.
LINE_LENGTH = 2 * DIGITS + 2 + (DIGITS + 1) + 1
ATTENTIONS = ("torch", "course")
LINEARS = ("torch", "course")
PRECISIONS = ("fp32", "bf16")


# -----------------------------------------------------------------------------
# The corpus


def addition_line(a: int, b: int) -> str:
    """One line of the corpus: "a+b=" with a and b zero-padded to three digits,
    then the four digits of a + b written backwards, then a newline."""
    for name, x in (("a", a), ("b", b)):
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 0 <= x < 10**DIGITS:
            raise ValueError(f"{name} must be a whole number in [0, {10**DIGITS - 1}], got {x!r}")
    total = f"{a + b:0{DIGITS + 1}d}"[::-1]
    return f"{a:0{DIGITS}d}+{b:0{DIGITS}d}={total}\n"


def problems(n: int, seed: int) -> np.ndarray:
    """n pairs (a, b) of three-digit operands drawn uniformly, as an (n, 2) int64 array."""
    n = count("n", n)
    return np.random.default_rng(seed).integers(0, 10**DIGITS, size=(n, 2))


def corpus(n_lines: int, seed: int = 0) -> str:
    """n_lines addition lines, one after the other."""
    return "".join(addition_line(int(a), int(b)) for a, b in problems(n_lines, seed))


def encode(text: str) -> np.ndarray:
    """Characters to token ids (int64); a character outside VOCAB is an error."""
    index = {c: i for i, c in enumerate(VOCAB)}
    try:
        return np.fromiter((index[c] for c in text), dtype=np.int64, count=len(text))
    except KeyError as error:
        raise ValueError(f"text may hold only the characters {VOCAB!r}, got {error.args[0]!r}") from None


def decode(ids) -> str:
    return "".join(VOCAB[int(i)] for i in ids)


def held_out_problems(n: int, train_config: "TrainConfig", seed: int = 12345) -> np.ndarray:
    """n problems, as an (n, 2) int64 array, none of which is a line of the
    training corpus of `train_config`: the score measures adding, not memory."""
    n = count("n", n)
    seen = {(int(a), int(b)) for a, b in problems(train_config.corpus_lines, train_config.seed)}
    if 10 ** (2 * DIGITS) - len(seen) < n:
        raise ValueError(f"only {10 ** (2 * DIGITS) - len(seen)} problems are left outside the "
                         f"corpus, asked for {n}")
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        a, b = (int(x) for x in rng.integers(0, 10**DIGITS, size=2))
        if (a, b) not in seen:
            seen.add((a, b))
            out.append((a, b))
    return np.array(out, dtype=np.int64)


# -----------------------------------------------------------------------------
# The model


@dataclass(frozen=True)
class GPTConfig:
    """The model's shape and which kernels it runs on.

    attention: "torch" (PyTorch's scaled_dot_product_attention, causal) or
    "course" (the course's FlashAttention forward and backward kernels).
    linear: "torch" (torch.nn.functional.linear) or "course" (the course's
    SGEMM for each linear layer's forward and backward products; in bf16, its
    half_matmul on the tensor cores).
    precision: "fp32" or "bf16", mixed precision as torch.autocast does it:
    the weights and the optimizer in float32, the linear layers' products and
    attention in bfloat16 (the course's kernels or PyTorch's under autocast),
    layer norms, softmax of the loss and the sums of products in float32.
    """

    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 256
    block_size: int = 3 * LINE_LENGTH
    attention: str = "torch"
    linear: str = "torch"
    precision: str = "fp32"

    def __post_init__(self):
        for name in ("n_layer", "n_head", "n_embd", "block_size"):
            count(name, getattr(self, name))
        if self.n_embd % self.n_head:
            raise ValueError(f"n_head must divide n_embd, got n_embd={self.n_embd}, "
                             f"n_head={self.n_head}")
        head_dim = self.n_embd // self.n_head
        if self.attention == "course":
            from gpucourse.kernels.attention import SUPPORTED_HEAD_DIMS

            if head_dim not in SUPPORTED_HEAD_DIMS:
                raise ValueError(f"the course's attention takes head dims "
                                 f"{SUPPORTED_HEAD_DIMS}; n_embd / n_head = {head_dim}")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS}, got {self.attention!r}")
        if self.linear not in LINEARS:
            raise ValueError(f"linear must be one of {LINEARS}, got {self.linear!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


def parameter_count(config: GPTConfig) -> int:
    """Parameters of the model (embeddings counted once: they are tied)."""
    c, v, t = config.n_embd, len(VOCAB), config.block_size
    per_layer = 2 * 2 * c + (3 * c * c + 3 * c) + (c * c + c) + (4 * c * c + 4 * c) + (4 * c * c + c)
    return v * c + t * c + config.n_layer * per_layer + 2 * c


@lru_cache(maxsize=None)
def _classes():
    import torch
    from torch import nn
    from torch.nn import functional as F

    from gpucourse.kernels import sgemm
    from gpucourse.kernels.attention import flash_attention_autograd
    from gpucourse.kernels.tensor_cores.half_matmul import half_matmul

    def course_matmul(a, b):
        """a @ b on the course's kernels: half_matmul for fp16 and bf16 (on the
        tensor cores; CPU tensors on the simulator), the SGEMM for float32
        (CUDA tensors directly, CPU tensors through numpy)."""
        if a.dtype in (torch.float16, torch.bfloat16):
            return half_matmul(a.contiguous(), b.contiguous())
        if a.is_cuda:
            return sgemm.matmul(a.contiguous(), b.contiguous())
        return torch.from_numpy(sgemm.matmul(a.contiguous().numpy(), b.contiguous().numpy()))

    class CourseLinear(torch.autograd.Function):
        """y = x w^T + bias with all three products of the forward and backward
        pass (y, dx = dy w, dw = dy^T x) on the course's SGEMM."""

        @staticmethod
        def forward(ctx, x, weight, bias):
            ctx.save_for_backward(x, weight)
            ctx.has_bias = bias is not None
            flat = x.detach().reshape(-1, x.shape[-1])
            if flat.dtype in (torch.float16, torch.bfloat16):
                # The weight read as it is. With a bias, the product stays in
                # float32 and is rounded once, after the bias is added, as
                # cuBLAS's epilogue does for F.linear: rounding the product and
                # then the sum again made bf16 training measurably worse.
                y = half_matmul(flat.contiguous(), weight.detach().contiguous(), b_transposed=True,
                                out_dtype=None if bias is None else torch.float32)
                if bias is not None:
                    y = (y + bias.detach().float()).to(flat.dtype)
            else:
                y = course_matmul(flat, weight.detach().t())
                if bias is not None:
                    y = y + bias.detach()
            return y.reshape(*x.shape[:-1], weight.shape[0])

        @staticmethod
        def backward(ctx, dy):
            x, weight = ctx.saved_tensors
            dy = dy.reshape(-1, weight.shape[0])
            dx = course_matmul(dy, weight.detach()).reshape(x.shape)
            flat = x.detach().reshape(-1, x.shape[-1])
            if dy.dtype in (torch.float16, torch.bfloat16):  # dy^T read as it is
                dw = half_matmul(dy.contiguous(), flat.contiguous(), a_transposed=True)
            else:
                dw = course_matmul(dy.t(), flat)
            db = dy.sum(dim=0) if ctx.has_bias else None
            return dx, dw, db

    def linear(config, x, weight, bias=None):
        if config.linear == "course":
            if config.precision == "bf16":  # as autocast casts F.linear's inputs
                x, weight = x.to(torch.bfloat16), weight.to(torch.bfloat16)
                bias = None if bias is None else bias.to(torch.bfloat16)
            return CourseLinear.apply(x, weight, bias)
        return F.linear(x, weight, bias)

    class Linear(nn.Linear):
        def __init__(self, config, n_in, n_out):
            super().__init__(n_in, n_out)
            self.config = config

        def forward(self, x):
            return linear(self.config, x, self.weight, self.bias)

    class SelfAttention(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.qkv = Linear(config, config.n_embd, 3 * config.n_embd)
            self.proj = Linear(config, config.n_embd, config.n_embd)

        def forward(self, x):
            batch, seq, width = x.shape
            heads = self.config.n_head
            q, k, v = (t.reshape(batch, seq, heads, width // heads).transpose(1, 2).contiguous()
                       for t in self.qkv(x).split(width, dim=2))
            if self.config.attention == "course":
                y = flash_attention_autograd(q, k, v, causal=True)
            else:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(batch, seq, width))

    class Block(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.ln_1 = nn.LayerNorm(config.n_embd)
            self.attn = SelfAttention(config)
            self.ln_2 = nn.LayerNorm(config.n_embd)
            self.fc = Linear(config, config.n_embd, 4 * config.n_embd)
            self.fc_out = Linear(config, 4 * config.n_embd, config.n_embd)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.fc_out(F.gelu(self.fc(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.token = nn.Embedding(len(VOCAB), config.n_embd)
            self.position = nn.Embedding(config.block_size, config.n_embd)
            self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
            self.ln_f = nn.LayerNorm(config.n_embd)
            self.apply(self._init)
            for name, p in self.named_parameters():  # GPT-2's scaled residual projections
                if name.endswith(("proj.weight", "fc_out.weight")):
                    nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

        @staticmethod
        def _init(module):
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, ids, targets=None):
            seq = ids.shape[1]
            if seq > self.config.block_size:
                raise ValueError(f"sequences may be at most block_size = "
                                 f"{self.config.block_size} tokens, got {seq}")
            positions = torch.arange(seq, device=ids.device)
            x = self.token(ids) + self.position(positions)
            for block in self.blocks:
                x = block(x)
            logits = linear(self.config, self.ln_f(x), self.token.weight)  # tied embeddings
            if targets is None:
                return logits
            return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                           ignore_index=-1)

    return GPT, CourseLinear, torch


def build(config: GPTConfig, seed: int = 0, device="cpu"):
    """The model with the weights that `seed` gives, on `device`: the same seed
    gives the same weights whatever kernels the config names."""
    GPT, _, torch = _classes()
    torch.manual_seed(seed)
    return GPT(config).to(device)


def course_linear(x, weight, bias=None):
    """x @ weight^T + bias, differentiable, with every product on the course's SGEMM."""
    _, CourseLinear, _ = _classes()
    return CourseLinear.apply(x, weight, bias)


# -----------------------------------------------------------------------------
# Training


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 3000
    batch_size: int = 256
    learning_rate: float = 1e-3
    warmup_steps: int = 100
    weight_decay: float = 0.1
    corpus_lines: int = 100_000
    answers_only: bool = True
    seed: int = 0

    def __post_init__(self):
        for name in ("steps", "batch_size", "corpus_lines"):
            count(name, getattr(self, name))
        if not float(at_least("warmup_steps", self.warmup_steps, 0)).is_integer():
            raise ValueError(f"warmup_steps must be a whole number >= 0, got {self.warmup_steps!r}")
        positive("learning_rate", self.learning_rate)


def learning_rate(step: int, train: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak at the last step."""
    if step < train.warmup_steps:
        return train.learning_rate * (step + 1) / train.warmup_steps
    span = max(1, train.steps - 1 - train.warmup_steps)
    progress = min(1.0, (step - train.warmup_steps) / span)
    return train.learning_rate * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


ANSWER_FROM = 2 * DIGITS + 2  # a line's characters from here on (the sum, the newline) are scored


def batches(tokens: np.ndarray, block_size: int, batch_size: int, seed: int, answers_only=True):
    """Endless (inputs, targets) pairs of windows of the token stream that start
    at the beginning of a random line, the targets one token ahead: the same
    seed gives the same windows. With `answers_only`, the targets of the
    operands, which are random and cannot be predicted, are -1 (left out of the
    loss): the model is scored on the sums and the line ends only."""
    import torch

    tokens = torch.from_numpy(np.ascontiguousarray(tokens))
    lines = (len(tokens) - block_size - 1) // LINE_LENGTH
    if lines < 1:
        raise ValueError(f"the corpus must be longer than block_size + 1 = {block_size + 1} "
                         f"tokens and a line, got {len(tokens)}")
    generator = torch.Generator().manual_seed(seed)
    offsets = torch.arange(block_size)
    scored = (offsets + 1) % LINE_LENGTH >= ANSWER_FROM  # where the next token is the sum's
    while True:
        starts = LINE_LENGTH * torch.randint(lines, (batch_size,), generator=generator)
        windows = starts[:, None] + offsets
        targets = tokens[windows + 1]
        if answers_only:
            targets = torch.where(scored, targets, torch.full_like(targets, -1))
        yield tokens[windows], targets


OPERAND_OFFSETS = tuple(range(DIGITS)) + tuple(range(DIGITS + 1, 2 * DIGITS + 1))  # a line's random digits


def loss_floor(block_size: int = 3 * LINE_LENGTH, answers_only: bool = True) -> float:
    """The lowest mean loss (nats per scored character) any model can reach on
    `batches`' windows: the operands' digits are uniform and independent, so
    each costs ln 10 however well the model adds; every other character (the
    signs, the sum, the newline) follows from what came before. With
    `answers_only` only the sums and line ends are scored: the floor is 0.
    Otherwise it is ln 10 times the share of a window's targets (the tokens
    1 .. block_size after a line start) that are operand digits."""
    block_size = count("block_size", block_size)
    if not isinstance(answers_only, (bool, np.bool_)):
        raise ValueError(f"answers_only must be True or False, got {answers_only!r}")
    if answers_only:
        return 0.0
    random = sum(1 for t in range(1, block_size + 1) if t % LINE_LENGTH in OPERAND_OFFSETS)
    return random / block_size * math.log(10)


def precision_context(config: GPTConfig, device):
    """torch.autocast to bfloat16 for a bf16 model (on the device's type), a
    context that does nothing for fp32."""
    import contextlib

    import torch

    if config.precision == "bf16":
        return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _synchronize(device):
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def train(config: GPTConfig, train_config: TrainConfig = TrainConfig(), device="cpu",
          progress=True, on_step=None):
    """Train a fresh model (weights from train_config.seed) and return
    (model, history): history["loss"] is the loss of every step, history["step_ms"]
    its wall-clock time (the GPU synchronised after each step, so the time is the
    step's own). The batches depend only on the seed, not on the kernels, so two
    configs that differ only in kernels see the same data in the same order."""
    from tqdm.auto import tqdm

    _, _, torch = _classes()
    model = build(config, train_config.seed, device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([dict(params=decay, weight_decay=train_config.weight_decay),
                                   dict(params=no_decay, weight_decay=0.0)],
                                  lr=train_config.learning_rate, betas=(0.9, 0.95))
    data = batches(encode(corpus(train_config.corpus_lines, train_config.seed)),
                   config.block_size, train_config.batch_size, train_config.seed + 1,
                   train_config.answers_only)
    history = dict(loss=[], step_ms=[])
    bar = tqdm(range(train_config.steps), desc=f"training ({config.attention} attention, "
               f"{config.linear} linear, {config.precision})",
               disable=None if progress is None else not progress)  # None: only on a terminal
    for step in bar:
        x, y = next(data)
        x, y = x.to(device), y.to(device)
        _synchronize(device)
        start = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, train_config)
        with precision_context(config, device):
            _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        _synchronize(device)
        history["step_ms"].append(1e3 * (time.perf_counter() - start))
        history["loss"].append(float(loss.detach()))
        if step % 50 == 0:
            bar.set_postfix(loss=f"{history['loss'][-1]:.3f}")
        if on_step is not None:
            on_step(step, history)
    return model, history


# -----------------------------------------------------------------------------
# What the model learned


def complete(model, prompts, new_tokens: int) -> list[str]:
    """Greedy continuation of each prompt (all prompts the same length) by
    `new_tokens` characters."""
    _, _, torch = _classes()
    if len({len(p) for p in prompts}) != 1:
        raise ValueError("prompts must all have the same length")
    device = next(model.parameters()).device
    ids = torch.from_numpy(np.stack([encode(p) for p in prompts])).to(device)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for _ in range(new_tokens):
            window = ids[:, -model.config.block_size:]
            logits = model(window)
            ids = torch.cat([ids, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
    model.train(was_training)
    return [decode(row[-new_tokens:].tolist()) for row in ids.cpu()]


def addition_accuracy(model, pairs) -> dict:
    """Greedy answers to "a+b=" for each (a, b) in `pairs`, each prompt preceded
    by one solved line as context. Returns the share answered exactly and a few
    examples (prompt, answer given, answer expected)."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    context = addition_line(1, 2)
    prompts = [context + addition_line(int(a), int(b))[: 2 * DIGITS + 2] for a, b in pairs]
    answers = complete(model, prompts, DIGITS + 1)
    expected = [addition_line(int(a), int(b))[2 * DIGITS + 2: -1] for a, b in pairs]
    right = [got == want for got, want in zip(answers, expected)]
    examples = [dict(problem=f"{int(a)}+{int(b)}", answer=int(got[::-1]) if got.isdigit() else got,
                     expected=int(a + b))
                for (a, b), got in list(zip(pairs, answers))[:8]]
    return dict(accuracy=float(np.mean(right)), n=len(right), examples=examples)


def describe(config: GPTConfig, train_config: TrainConfig) -> dict:
    return dict(model=asdict(config), training=asdict(train_config),
                parameters=parameter_count(config), vocab=VOCAB, line_length=LINE_LENGTH)


# -----------------------------------------------------------------------------
# The committed GPU run (benchmarks/tinygpt.py), as the chapter shows it

LEARNED_WINDOW = 50  # steps in the running mean of the loss that says a run has learned


def steps_to_learn(losses, below: float, window: int = LEARNED_WINDOW):
    """The first step at which the mean loss of the last `window` steps is below
    `below`, or None if it never is."""
    losses = np.asarray(losses, dtype=np.float64)
    if len(losses) < window:
        return None
    running = np.convolve(losses, np.ones(window) / window, mode="valid")
    hits = np.flatnonzero(running < below)
    return int(hits[0] + window - 1) if len(hits) else None


RUN_LABELS = {"pytorch": "PyTorch's kernels", "pytorch_math": "PyTorch, SDPA's math backend",
              "course_attention": "the course's attention",
              "course": "the course's attention and SGEMM"}


def run_summary(record) -> list[dict]:
    """One row per run of a tinygpt results file (``results.load_results("tinygpt")``):
    run, seed, the step at which it learned to add, final loss, held-out accuracy,
    median step time and that time over PyTorch's run of the same seed."""
    rows = []
    for r in record["results"]:
        reference = next(x for x in record["results"]
                         if x["seed"] == r["seed"] and x["run"] == "pytorch")
        rows.append(dict(run=r["run"], label=RUN_LABELS.get(r["run"], r["run"]), seed=r["seed"],
                         steps_to_learn=r["steps_to_learn"], final_loss=r["final_loss"],
                         accuracy=r["accuracy"], median_step_ms=r["median_step_ms"],
                         step_time_vs_pytorch=r["median_step_ms"] / reference["median_step_ms"]))
    return rows


def final_loss_comparison(record) -> list[dict]:
    """For each run of a results file with every character scored
    (``results.load_results("tinygpt_full")``): its final loss, the loss
    floor, how far above the floor it ended (as a share of the floor), and
    its final loss over PyTorch's run of the same seed and precision minus
    one (the share by which the two differ: issue 17's "within 2%", issue
    29's "within 1%" in bf16)."""
    floor = record.get("loss_floor")
    if not floor:
        raise ValueError("this results file has no loss floor above zero: it scored the sums "
                         "alone (load 'tinygpt_full', written by --all-characters)")
    rows = []
    for r in record["results"]:
        # bf16 runs are compared with PyTorch's bf16 run, the others with its fp32 one.
        peer = "pytorch_bf16" if r.get("precision") == "bf16" else "pytorch"
        reference = next((x for x in record["results"]
                          if x["seed"] == r["seed"] and x["run"] == peer), None)
        if reference is None:
            raise ValueError(f"seed {r['seed']} has no {peer!r} run to compare with")
        rows.append(dict(run=r["run"], label=RUN_LABELS.get(r["run"], r["run"]), seed=r["seed"],
                         final_loss=r["final_loss"], floor=floor,
                         above_floor=r["final_loss"] / floor - 1,
                         vs_pytorch=r["final_loss"] / reference["final_loss"] - 1,
                         accuracy=r["accuracy"]))
    return rows


def curves_part(record, seed: int, run: str, against: str = "pytorch", tolerance=1e-3):
    """The first step at which run's loss differs from `against`'s (same seed) by
    more than `tolerance`, and the largest difference before it; (None, largest)
    if the curves never part."""
    by_name = {(r["run"], r["seed"]): np.asarray(r["loss"]) for r in record["results"]}
    for key in ((run, seed), (against, seed)):
        if key not in by_name:
            raise ValueError(f"no run {key[0]!r} with seed {key[1]} in this results file; "
                             f"it has {sorted(by_name)}")
    gap = np.abs(by_name[run, seed] - by_name[against, seed])
    parted = np.flatnonzero(gap > tolerance)
    if not len(parted):
        return None, float(gap.max())
    step = int(parted[0])
    return step, float(gap[:step].max()) if step else 0.0


# The figure and the table of the committed run live with chapter 10
# (gpucourse.chapters.tinygpt), which imports the readers above; served from here for old imports.
__getattr__ = served_from(__name__, "gpucourse.chapters.tinygpt", (
    'plot_runs', 'summary_markdown',
))
