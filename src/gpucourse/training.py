"""Week 6: one training step, seen from the inside; and the input pipeline.

Three things live here:

* **The anatomy of a step.** A small GPT-style model trains on the CPU while
  we keep books on every byte it holds: parameters, gradients, optimizer
  states and the activations autograd saves for the backward pass. The
  activations are counted as they are saved and as they are freed (through
  ``torch.autograd.graph.saved_tensors_hooks``, one entry per storage, so a
  tensor saved twice counts once), which makes the timeline exact and
  repeatable rather than a reading of a noisy allocator. The same step runs
  with bf16 autocast (mixed precision; Micikevicius et al., 2018), with
  gradient accumulation over micro-batches, and with activation
  recomputation (``torch.utils.checkpoint``; Chen et al., 2016), so that
  each technique's effect is measured, not asserted.
* **The FLOPs and bytes of one transformer layer**, operation by operation,
  and the share of the attention core (QK^T, softmax, PV) against the
  projections and the MLP as the sequence grows; which parallelism splits
  which operation.
* **The GPU/CPU bottleneck.** An input pipeline with a slow per-item Python
  transform starves a (stand-in) accelerator; a vectorized transform and a
  prefetching thread feed it. Throughputs are measured.

The chapter's tables and figures of these measurements live in
``gpucourse.chapters.training``; they are still importable from here, as
``gpucourse.training.NAME``.

Only numpy is imported at the top; torch is imported inside the functions
that train. Every public function
checks its arguments and raises ``ValueError`` naming the argument and what
it accepts. Bytes are bytes, times seconds.
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from gpucourse.checks import at_least as _at_least, count as _count, positive as _positive
from gpucourse.moved import served_from

# -----------------------------------------------------------------------------
# A small GPT-style model (built on demand: torch is imported inside)

PRECISIONS = ("fp32", "bf16")


@dataclass(frozen=True)
class TinyGPT:
    """The shape of the model whose step we dissect."""

    vocab: int = 256
    hidden: int = 64
    heads: int = 4
    layers: int = 4
    seq_len: int = 32

    def __post_init__(self):
        for name in ("vocab", "hidden", "heads", "layers", "seq_len"):
            _count(name, getattr(self, name))
        if self.hidden % self.heads:
            raise ValueError(f"heads must divide hidden ({self.hidden}), got heads={self.heads}")


@lru_cache(maxsize=None)
def transformer_block_class():
    """The pre-LayerNorm transformer block of the course's small models.

    This chapter's step and the memory chapter's sharded training both build
    their models from it. Attention is written out (scores, mask, softmax)
    rather than fused, so that the activation ledger sees the score matrix.
    """
    import torch
    from torch import nn

    class Block(nn.Module):
        """Pre-LayerNorm transformer block: causal self-attention, then a 4h MLP."""

        def __init__(self, hidden, heads):
            super().__init__()
            self.heads = heads
            self.ln1 = nn.LayerNorm(hidden)
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.proj = nn.Linear(hidden, hidden)
            self.ln2 = nn.LayerNorm(hidden)
            self.up = nn.Linear(hidden, 4 * hidden)
            self.down = nn.Linear(4 * hidden, hidden)

        def forward(self, x):
            b, s, h = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
            q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
            scores = q @ k.transpose(-2, -1) / (h // self.heads) ** 0.5
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            attention = scores.masked_fill(mask, float("-inf")).softmax(dim=-1)
            y = (attention @ v).transpose(1, 2).reshape(b, s, h)
            x = x + self.proj(y)
            return x + self.down(torch.nn.functional.gelu(self.up(self.ln2(x))))

    return Block


def _model_classes():
    import torch
    from torch import nn

    Block = transformer_block_class()

    class Model(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.embed = nn.Embedding(config.vocab, config.hidden)
            self.position = nn.Parameter(torch.zeros(config.seq_len, config.hidden))
            self.blocks = nn.ModuleList(Block(config.hidden, config.heads)
                                        for _ in range(config.layers))
            self.ln = nn.LayerNorm(config.hidden)
            self.head = nn.Linear(config.hidden, config.vocab, bias=False)

        def forward(self, tokens, recompute=False, on_block=None):
            from torch.utils.checkpoint import checkpoint

            x = self.embed(tokens) + self.position[: tokens.shape[1]]
            for i, block in enumerate(self.blocks):
                x = checkpoint(block, x, use_reentrant=False) if recompute else block(x)
                if on_block is not None:
                    on_block(i, x)
            return self.head(self.ln(x))

    return Model


def build_model(config=TinyGPT(), seed=0):
    """The model for `config`, with weights drawn from a fixed seed."""
    import torch

    if not isinstance(config, TinyGPT):
        raise ValueError(f"config must be a TinyGPT, got {config!r}")
    torch.manual_seed(int(_at_least("seed", seed, 0)))
    return _model_classes()(config)


def make_batch(config=TinyGPT(), batch=8, seed=0):
    """Random token ids and their next-token targets, from a fixed seed."""
    import torch

    batch = _count("batch", batch)
    generator = torch.Generator().manual_seed(int(seed))
    tokens = torch.randint(0, config.vocab, (batch, config.seq_len + 1), generator=generator)
    return tokens[:, :-1], tokens[:, 1:]


def param_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


# -----------------------------------------------------------------------------
# Keeping books on memory


@dataclass(frozen=True)
class MemoryPoint:
    """What the step holds at one moment, in bytes."""

    label: str
    phase: str  # "start", "forward", "backward", "optimizer"
    params: int
    grads: int
    optimizer: int
    activations: int  # saved for the backward pass, not counting the parameters

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer + self.activations


@dataclass
class StepRecord:
    """The memory timeline of one optimizer step and what it produced."""

    precision: str
    accumulation_steps: int
    recompute: bool
    batch: int
    points: list = field(default_factory=list)
    loss: float = float("nan")
    step_s: float = float("nan")
    grads: dict = field(default_factory=dict)  # name -> gradient (a float64 numpy copy)

    @property
    def peak_bytes(self) -> int:
        return max(p.total for p in self.points)

    @property
    def peak_activation_bytes(self) -> int:
        return max(p.activations for p in self.points)

    def peak_point(self) -> MemoryPoint:
        return max(self.points, key=lambda p: p.total)


class _Saved:
    """What autograd keeps instead of a saved tensor, so that we see it freed."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor):
        self.tensor = tensor


class ActivationLedger:
    """Counts the bytes autograd saves for the backward pass, storage by
    storage, and takes them off when autograd frees them.

    Use it as a context manager around the forward pass. Tensors that share
    storage with a parameter (a weight, or its transpose) are not counted:
    the parameters are counted once, as parameters.
    """

    def __init__(self, model):
        self._param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self._users: dict[int, int] = {}
        self._sizes: dict[int, int] = {}
        self._context = None

    @property
    def live_bytes(self) -> int:
        return sum(self._sizes[key] for key in self._users)

    def _release(self, key):
        self._users[key] -= 1
        if self._users[key] == 0:
            del self._users[key]

    def _pack(self, tensor):
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key in self._param_storages:
            return tensor
        holder = _Saved(tensor)
        self._users[key] = self._users.get(key, 0) + 1
        self._sizes[key] = storage.nbytes()
        weakref.finalize(holder, self._release, key)
        return holder

    @staticmethod
    def _unpack(saved):
        return saved.tensor if isinstance(saved, _Saved) else saved

    def __enter__(self):
        import torch

        self._context = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._context.__enter__()
        return self

    def __exit__(self, *exc):
        self._context.__exit__(*exc)


def _tensor_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        key = t.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total


def measure_step(config=TinyGPT(), batch=8, precision="fp32", accumulation_steps=1,
                 recompute=False, seed=0, lr=1e-3) -> StepRecord:
    """Run one Adam step of the model on CPU and record its memory timeline.

    `precision` "bf16" runs forward and loss under ``torch.autocast`` with
    bfloat16 (the weights stay fp32: mixed precision). `accumulation_steps`
    splits the batch into that many micro-batches whose gradients add up
    before the single optimizer step. `recompute` wraps each block in
    ``torch.utils.checkpoint``, which keeps only the block's input and
    recomputes the rest during the backward pass.

    The timeline has a point at the start, after each block's forward, after
    the loss, each time the backward pass reaches a block's output, after the
    backward, after the optimizer step and after zeroing the gradients. It
    counts parameters, gradients, optimizer states and saved activations; the
    short-lived temporaries of each operation are not counted.
    """
    import torch

    if not isinstance(config, TinyGPT):
        raise ValueError(f"config must be a TinyGPT, got {config!r}")
    batch = _count("batch", batch)
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    k = _count("accumulation_steps", accumulation_steps)
    if batch % k:
        raise ValueError(f"accumulation_steps must divide batch ({batch}), got {accumulation_steps!r}")
    if not isinstance(recompute, bool):
        raise ValueError(f"recompute must be True or False, got {recompute!r}")
    lr = _positive("lr", lr)

    model = build_model(config, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    tokens, targets = make_batch(config, batch, seed)
    record = StepRecord(precision, k, recompute, batch)
    ledger = ActivationLedger(model)
    params = list(model.parameters())

    def note(label, phase):
        record.points.append(MemoryPoint(
            label, phase, _tensor_bytes(params),
            _tensor_bytes(p.grad for p in params if p.grad is not None),
            _tensor_bytes(t for s in optimizer.state.values() for t in s.values()
                          if isinstance(t, torch.Tensor)),
            ledger.live_bytes))

    note("start", "start")
    started = time.perf_counter()
    total_loss = 0.0
    micro = batch // k
    for step in range(k):
        prefix = f"micro-batch {step + 1}: " if k > 1 else ""
        hooks = []

        def on_block(i, x, prefix=prefix):
            note(f"{prefix}forward block {i + 1}", "forward")
            if x.requires_grad:
                hooks.append(x.register_hook(
                    lambda grad, i=i: note(f"{prefix}backward reaches block {i + 1}", "backward")))

        rows = slice(step * micro, (step + 1) * micro)
        with ledger, torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = model(tokens[rows], recompute=recompute, on_block=on_block)
            loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1),
                                                     targets[rows].flatten()) / k
        note(f"{prefix}loss", "forward")
        del logits
        loss.backward()
        total_loss += loss.item()
        del loss
        note(f"{prefix}backward done", "backward")
    optimizer.step()
    note("optimizer step", "optimizer")
    record.grads = {name: p.grad.detach().double().numpy().copy()
                    for name, p in model.named_parameters()}
    optimizer.zero_grad(set_to_none=True)
    note("zero_grad", "optimizer")
    record.step_s = time.perf_counter() - started
    record.loss = total_loss
    return record


def compare_techniques(config=TinyGPT(), batch=8, accumulation_steps=4, seed=0) -> dict:
    """The same step four ways: fp32; bf16 autocast; gradient accumulation
    over `accumulation_steps` micro-batches; activation recomputation.

    Each way runs twice and the second run is kept, so that the times do not
    include torch's one-off start-up work (the bytes are the same both times).
    """
    ways = {
        "fp32": ("fp32", 1, False),
        "bf16 autocast": ("bf16", 1, False),
        f"accumulation x{accumulation_steps}": ("fp32", accumulation_steps, False),
        "recomputation": ("fp32", 1, True),
    }
    records = {}
    for name, (precision, k, recompute) in ways.items():
        measure_step(config, batch, precision, k, recompute, seed)  # warm-up
        records[name] = measure_step(config, batch, precision, k, recompute, seed)
    return records


# -----------------------------------------------------------------------------
# FLOPs and bytes of one transformer layer

ATTENTION_CORE = ("QK^T", "softmax", "PV")
SOFTMAX_FLOPS_PER_ELEMENT = 5  # max, subtract, exp, sum, divide: one each, by convention


@dataclass(frozen=True)
class Op:
    """One operation of a layer's forward pass and what it costs, unfused."""

    name: str
    kind: str  # "matmul" or "elementwise"
    group: str  # "projections and MLP" or "attention core"
    flops: float
    bytes: float  # read and written once each, from and to DRAM

    @property
    def intensity_flop_per_byte(self) -> float:
        return self.flops / self.bytes


def layer_ops(seq_len, hidden, heads, batch=1, bytes_per_element=2, ffn_multiplier=4) -> list[Op]:
    """The FLOPs and DRAM bytes of one transformer layer's forward pass.

    With b = batch, s = seq_len, h = hidden, a = heads, f = ffn_multiplier and
    e = bytes_per_element, a matmul of (m x k) by (k x n) costs 2mkn FLOPs
    and reads and writes its operands once:

    * QKV projection: 2bs·h·3h; reads x and W_qkv, writes Q, K, V;
    * QK^T: 2·b·a·s²·(h/a) = 2bs²h; reads Q and K, writes the b·a·s² scores;
    * softmax: 5 FLOPs per score; reads the scores, writes P;
    * PV: 2bs²h; reads P and V, writes the output;
    * output projection: 2bsh²;
    * MLP: 2bs·h·fh up and 2bs·fh·h down.

    Layer norms, the activation function and residual additions are left
    out (they are element-wise and small). The forward FLOPs without the
    softmax are 24bsh² + 4bs²h for f = 4 (Narayanan et al., 2021).
    """
    s, h, a = _count("seq_len", seq_len), _count("hidden", hidden), _count("heads", heads)
    b, f = _count("batch", batch), _count("ffn_multiplier", ffn_multiplier)
    e = _positive("bytes_per_element", bytes_per_element)
    if h % a:
        raise ValueError(f"heads must divide hidden ({h}), got heads={a}")
    bsh, scores = b * s * h, b * a * s * s
    dense, core = "projections and MLP", "attention core"
    return [
        Op("QKV projection", "matmul", dense, 2 * bsh * 3 * h, e * (bsh + 3 * h * h + 3 * bsh)),
        Op("QK^T", "matmul", core, 2 * b * s * s * h, e * (2 * bsh + scores)),
        Op("softmax", "elementwise", core, SOFTMAX_FLOPS_PER_ELEMENT * scores, e * 2 * scores),
        Op("PV", "matmul", core, 2 * b * s * s * h, e * (scores + bsh + bsh)),
        Op("output projection", "matmul", dense, 2 * bsh * h, e * (bsh + h * h + bsh)),
        Op("MLP up", "matmul", dense, 2 * bsh * f * h, e * (bsh + f * h * h + f * bsh)),
        Op("MLP down", "matmul", dense, 2 * bsh * f * h, e * (f * bsh + f * h * h + bsh)),
    ]


def attention_share(seq_len, hidden, heads, batch=1, bytes_per_element=2) -> dict:
    """Shares of the attention core (QK^T, softmax, PV) in a layer's forward
    FLOPs and DRAM bytes, and the share of FLOPs done in matmuls."""
    ops = layer_ops(seq_len, hidden, heads, batch, bytes_per_element)
    flops = sum(o.flops for o in ops)
    moved = sum(o.bytes for o in ops)
    return {
        "attention_flops": sum(o.flops for o in ops if o.group == "attention core") / flops,
        "attention_bytes": sum(o.bytes for o in ops if o.group == "attention core") / moved,
        "matmul_flops": sum(o.flops for o in ops if o.kind == "matmul") / flops,
    }


def crossover_seq_len(hidden) -> int:
    """The sequence length at which the attention matmuls (4bs²h) equal the
    projections and MLP (24bsh²): s = 6h."""
    return 6 * _count("hidden", hidden)


# -----------------------------------------------------------------------------
# The GPU/CPU bottleneck: an input pipeline that starves the accelerator

IMAGE_MEAN, IMAGE_STD = 127.5, 64.0


def make_images(n_images=256, size=16, seed=0):
    """Random uint8 images, shape (n, size, size, 3), from a fixed seed."""
    n, size = _count("n_images", n_images), _count("size", size)
    return np.random.default_rng(int(seed)).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def slow_transform(image):
    """Flip left-right and normalize, one pixel at a time in Python: the
    kind of per-item transform that starves an accelerator."""
    height, width, channels = image.shape
    out = np.empty((channels, height, width), dtype=np.float32)
    for y in range(height):
        for x in range(width):
            for c in range(channels):
                out[c, y, x] = (float(image[y, width - 1 - x, c]) - IMAGE_MEAN) / IMAGE_STD
    return out


def fast_transform(images):
    """The same flip and normalization for a whole batch, vectorized."""
    images = np.asarray(images)
    if images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(f"images must have shape (n, height, width, 3), got {images.shape}")
    flipped = images[:, :, ::-1, :].transpose(0, 3, 1, 2)
    return ((flipped.astype(np.float32) - IMAGE_MEAN) / IMAGE_STD)


def batches(images, batch_size, transform="slow"):
    """Yield transformed batches, in order; `transform` is "slow" (per item,
    in Python) or "fast" (vectorized over the batch)."""
    batch_size = _count("batch_size", batch_size)
    if transform not in ("slow", "fast"):
        raise ValueError(f"transform must be 'slow' or 'fast', got {transform!r}")
    for start in range(0, len(images), batch_size):
        chunk = images[start:start + batch_size]
        if transform == "slow":
            yield np.stack([slow_transform(image) for image in chunk])
        else:
            yield fast_transform(chunk)


def prefetch(iterable, depth=2):
    """Produce the items of `iterable` on a background thread, up to `depth`
    ahead, so that loading overlaps with computing. Errors are re-raised."""
    depth = _count("depth", depth)
    items: queue.Queue = queue.Queue(maxsize=depth)
    done = object()

    def produce():
        try:
            for item in iterable:
                items.put(item)
        except BaseException as error:  # hand it to the consumer
            items.put(error)
        items.put(done)

    threading.Thread(target=produce, daemon=True).start()
    while True:
        item = items.get()
        if item is done:
            return
        if isinstance(item, BaseException):
            raise item
        yield item


@dataclass(frozen=True)
class PipelineRun:
    name: str
    samples: int
    seconds: float
    waiting_s: float  # time the accelerator sat idle, waiting for data

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds

    @property
    def busy_fraction(self) -> float:
        return 1 - self.waiting_s / self.seconds


def run_pipeline(images, batch_size=32, step_s=0.01, transform="slow", prefetch_depth=0,
                 name=None) -> PipelineRun:
    """Feed a stand-in accelerator and measure the throughput.

    The accelerator is simulated by sleeping `step_s` per batch: a GPU
    computes while the CPU is free, and a sleeping thread leaves the CPU
    free in the same way. The input pipeline is real work on the CPU.
    `prefetch_depth` 0 loads in line; 1 or more loads on a background thread.
    """
    step_s = _at_least("step_s", step_s, 0)
    depth = int(_at_least("prefetch_depth", prefetch_depth, 0))
    source = batches(images, batch_size, transform)
    if depth:
        source = prefetch(source, depth)
    samples, waiting = 0, 0.0
    started = time.perf_counter()
    while True:
        asked = time.perf_counter()
        batch = next(source, None)
        waiting += time.perf_counter() - asked
        if batch is None:
            break
        samples += len(batch)
        time.sleep(step_s)  # the accelerator's step
    seconds = time.perf_counter() - started
    label = name or f"{transform} transform{', prefetch' if depth else ''}"
    return PipelineRun(label, samples, seconds, waiting)


def bottleneck_demo(n_images=256, batch_size=32, step_s=0.01, size=32, seed=0) -> list[PipelineRun]:
    """Three pipelines over the same images: slow transform in line (the
    accelerator starves), slow transform prefetched (overlapped, still
    starving), vectorized transform prefetched (the accelerator is the
    bottleneck again)."""
    images = make_images(n_images, size, seed)
    return [
        run_pipeline(images, batch_size, step_s, "slow", 0, "per-item Python transform"),
        run_pipeline(images, batch_size, step_s, "slow", 2, "per-item transform + prefetch thread"),
        run_pipeline(images, batch_size, step_s, "fast", 2, "vectorized transform + prefetch thread"),
    ]


def pipeline_throughput(load_s, step_s, batch_size, overlap) -> float:
    """Samples per second of a loader feeding an accelerator, per batch
    `load_s` to load and `step_s` to compute: in line they add up; overlapped
    (prefetching) the slower of the two sets the pace."""
    load = _at_least("load_s", load_s, 0)
    step = _at_least("step_s", step_s, 0)
    b = _count("batch_size", batch_size)
    if not isinstance(overlap, bool):
        raise ValueError(f"overlap must be True or False, got {overlap!r}")
    per_batch = max(load, step) if overlap else load + step
    if per_batch == 0:
        raise ValueError("load_s and step_s must not both be 0")
    return b / per_batch


# The tables and figures live with chapter 6 (gpucourse.chapters.training), which
# imports the measurements above; they are served from here for old imports.
__getattr__ = served_from(__name__, "gpucourse.chapters.training", (
    'techniques_markdown', '_PART_COLOURS', 'plot_timeline', '_finish_bar_chart',
    'plot_techniques', 'layer_ops_markdown', 'plot_attention_share', 'PARALLELISM_MAP',
    'parallelism_markdown', 'plot_pipelines',
))
