"""Measuring real sharded training: a small transformer trained on several
processes under DDP, ZeRO-1 and FSDP2, and exact predictions of what each
process holds.

The formulas assume that every rank holds an equal share; real wrappers
split tensors by rows (FSDP2) or assign whole tensors to ranks (ZeRO-1), so
the shares are uneven. This module predicts those uneven splits byte for
byte, trains a tiny model on processes (spawned afresh, or forked from a
warmed-up process as the graded cells do) and compares. torch is imported
inside the functions that train.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from gpucourse.checks import count as _count, real as _real
from gpucourse.memory.model_states import _dp, model_states_per_gpu


# -----------------------------------------------------------------------------
# Measuring real sharded training: predictions of the uneven splits


def fsdp2_shard_rows(rows, world_size, rank) -> int:
    """Rows of a tensor that FSDP2's `fully_shard` gives `rank` (its local,
    unpadded shard).

    FSDP2 splits every parameter along dim 0 with `torch.chunk`: chunks of
    ceil(rows / world_size) rows, the last ones shorter or empty. Each rank
    allocates a padded chunk of ceil(rows / world_size) rows, so that the
    all-gather moves equal pieces; `to_local()` shows only the real rows.
    """
    rows = _count("rows", rows)
    world_size = _dp("world_size", world_size)
    rank = _real("rank", rank)
    if not (rank.is_integer() and 0 <= rank < world_size):
        raise ValueError(f"rank must be a whole number in [0, {world_size - 1}], got {rank!r}")
    chunk = -(-rows // world_size)
    return int(min(chunk, max(0, rows - int(rank) * chunk)))


def fsdp2_local_numel(shape, world_size, rank, padded=False) -> int:
    """Elements of one parameter that FSDP2 keeps on `rank` (padded: allocated)."""
    shape = _shape(shape)
    per_row = math.prod(shape[1:])
    rows = -(-shape[0] // _dp("world_size", world_size)) if padded else \
        fsdp2_shard_rows(shape[0], world_size, rank)
    return rows * per_row


def _shape(shape) -> tuple:
    if not isinstance(shape, (tuple, list)) or not shape:
        raise ValueError(f"shape must be a non-empty tuple of whole numbers >= 1, got {shape!r}")
    return tuple(_count("shape", n) for n in shape)


def zero1_partition(numels, world_size) -> list[list[int]]:
    """Which parameters `ZeroRedundancyOptimizer` gives each rank (indices into `numels`).

    PyTorch sorts the parameters by size, largest first (a stable sort), and
    gives each whole tensor to the rank with the fewest elements so far,
    the lowest rank on a tie. Ranks then keep Adam states only for their own
    tensors, so the split is even only when the sizes allow it.
    """
    world_size = _dp("world_size", world_size)
    sizes = [_count("numels", n) for n in numels]
    owned = [[] for _ in range(world_size)]
    load = [0] * world_size
    for i in sorted(range(len(sizes)), key=lambda j: -sizes[j]):
        rank = load.index(min(load))
        owned[rank].append(i)
        load[rank] += sizes[i]
    return owned


# -----------------------------------------------------------------------------
# A small transformer, trained on several processes


@dataclass(frozen=True)
class TinyConfig:
    """A small GPT-style model. vocab = 0 means no embedding and no final
    LayerNorm: the blocks read float features (the "even" model, whose every
    tensor splits evenly over 2 and 4 ranks)."""

    name: str
    hidden: int
    heads: int
    n_layers: int
    vocab: int = 0
    seq_len: int = 16
    batch: int = 4


# Every tensor of EVEN has a multiple of 4 rows, and every size appears a
# multiple of 4 times, so FSDP2 and ZeRO-1 both split it exactly over 2 or 4
# ranks. ODD has 3 layers and a 517-row embedding: neither splits evenly.
EVEN = TinyConfig("even", hidden=64, heads=4, n_layers=4)
ODD = TinyConfig("odd", hidden=48, heads=4, n_layers=3, vocab=517)


def tiny_param_shapes(config) -> list[tuple]:
    """The parameter shapes of `config`'s model, in `model.parameters()` order,
    worked out without torch."""
    h = config.hidden
    block = [(h,), (h,), (3 * h, h), (3 * h,), (h, h), (h,), (h,), (h,),
             (4 * h, h), (4 * h,), (h, 4 * h), (h,)]
    shapes = [(config.vocab, h)] if config.vocab else []
    shapes += block * config.n_layers
    if config.vocab:
        shapes += [(h,), (h,)]
    return shapes


@lru_cache(maxsize=None)
def _tiny_model_class():
    import torch
    from torch import nn
    from torch.nn import functional as F

    from gpucourse.training import transformer_block_class

    Block = transformer_block_class()  # the same block as the week-6 step

    class Tiny(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            if config.vocab:
                self.embed = nn.Embedding(config.vocab, config.hidden)
            self.blocks = nn.ModuleList(Block(config.hidden, config.heads)
                                        for _ in range(config.n_layers))
            if config.vocab:
                self.ln_f = nn.LayerNorm(config.hidden)

        def forward(self, x):
            h = self.embed(x) if self.config.vocab else x
            for block in self.blocks:
                h = block(h)
            if self.config.vocab:  # the output layer reuses the embedding (tied weights)
                return F.cross_entropy((self.ln_f(h) @ self.embed.weight.T).flatten(0, 1),
                                       x.roll(-1, dims=1).flatten())
            return h.pow(2).mean()

    return Tiny, torch


def _local(t):
    """The part of a tensor this process holds: a DTensor's local shard, or itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def _train_and_measure(config, wrapper, rank, world_size, steps=2, *, device=None,
                       on_phase=None):
    """Train `config`'s model under `wrapper` and count what this rank holds.

    By default everything stays on the CPU. `device` (a torch.device, e.g.
    cuda:1 under NCCL) moves the model there before it is wrapped and each
    batch after it is drawn (the batches are drawn on the CPU either way, so
    they are the same numbers on every device). `on_phase(phase, step)`, if
    given, is called after "setup" (model wrapped, optimizer made; step -1)
    and after each step's "forward", "backward" and "optimizer": the GPU
    benchmark reads the CUDA allocator there.
    """
    Tiny, torch = _tiny_model_class()
    torch.manual_seed(0)  # the same initial model on every rank
    model = Tiny(config)
    shapes = [tuple(p.shape) for p in model.parameters()]
    cuda = device is not None and torch.device(device).type == "cuda"
    if device is not None:
        model.to(device)
    phase = on_phase if on_phase is not None else (lambda name, step: None)
    adam = dict(lr=1e-3)
    if wrapper == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        optimizer = torch.optim.Adam(model.parameters(), **adam)
        states = optimizer.state
    else:
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model, device_ids=[torch.device(device)] if cuda else None)
        if wrapper == "ddp":
            optimizer = torch.optim.Adam(model.parameters(), **adam)
            states = optimizer.state
        else:
            from torch.distributed.optim import ZeroRedundancyOptimizer
            optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam,
                                                **adam)
            states = optimizer.optim.state  # only the states of this rank's tensors

    phase("setup", -1)
    generator = torch.Generator().manual_seed(1 + rank)  # each rank its own batch
    shape = (config.batch, config.seq_len)
    for step in range(steps):
        optimizer.zero_grad()
        x = (torch.randint(config.vocab, shape, generator=generator) if config.vocab
             else torch.randn(*shape, config.hidden, generator=generator))
        if device is not None:
            x = x.to(device)
        loss = model(x)
        phase("forward", step)
        loss.backward()
        phase("backward", step)
        optimizer.step()
        phase("optimizer", step)

    params = [_local(p) for p in model.parameters()]
    grads = [_local(p.grad) for p in model.parameters() if p.grad is not None]
    moments = [_local(v) for state in states.values() for k, v in state.items()
               if k in ("exp_avg", "exp_avg_sq")]
    return dict(
        model=config.name, wrapper=wrapper, rank=rank, world_size=world_size,
        shapes=shapes,
        local_numels=[p.numel() for p in params],
        params_bytes=sum(p.numel() * p.element_size() for p in params),
        grads_bytes=sum(g.numel() * g.element_size() for g in grads),
        optimizer_bytes=sum(m.numel() * m.element_size() for m in moments),
        # FSDP2 allocates a padded shard; its storage shows the padding.
        params_allocated_bytes=sum(p.untyped_storage().nbytes() for p in params),
    )


WRAPPERS = ("ddp", "zero1", "fsdp2")
CONFIGS = {"even": EVEN, "odd": ODD}


def measure_worker(rank, world_size, runs):
    """Worker for `gpucourse.distributed.run_on_processes`: train each
    (config name, wrapper) in `runs` for two Adam steps in fp32 and return,
    per run, the bytes of parameters, gradients and Adam moments this rank
    holds (counted on its local tensors; Adam's scalar step counters are left
    out)."""
    import torch.distributed as dist

    out = []
    for name, wrapper in runs:
        if name not in CONFIGS:
            raise ValueError(f"config must be one of {', '.join(CONFIGS)}, got {name!r}")
        if wrapper not in WRAPPERS:
            raise ValueError(f"wrapper must be one of {', '.join(WRAPPERS)}, got {wrapper!r}")
        out.append(_train_and_measure(CONFIGS[name], wrapper, rank, world_size))
        dist.barrier()
    return out


STARTS = ("spawn", "fork")


@lru_cache(maxsize=None)
def _one_process_step() -> tuple:
    Tiny, torch = _tiny_model_class()
    from torch.distributed.fsdp import fully_shard  # noqa: F401 (loaded for the forks)
    from torch.distributed.optim import ZeroRedundancyOptimizer  # noqa: F401
    from torch.nn.parallel import DistributedDataParallel  # noqa: F401

    torch.manual_seed(0)
    model = Tiny(ODD)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randint(ODD.vocab, (1, ODD.seq_len), generator=torch.Generator().manual_seed(0))
    model(x).backward()
    optimizer.step()
    params = list(model.parameters())
    moments = [v for state in optimizer.state.values() for k, v in state.items()
               if k in ("exp_avg", "exp_avg_sq")]
    return (tuple(tuple(p.shape) for p in params),
            (sum(p.numel() * p.element_size() for p in params),
             sum(p.grad.numel() * p.grad.element_size() for p in params),
             sum(m.numel() * m.element_size() for m in moments)))


def warm_up_training() -> dict:
    """Import torch, the three wrappers and Adam in this process, and train the
    odd model one step of fp32 Adam here, on its own (no process group), so
    that processes forked from this one later (`measure(..., start="fork")`)
    find everything loaded and initialised.

    The first model, backward pass and Adam step of a process cost seconds of
    lazy imports and set-up; done here once, they are not paid again by every
    forked rank (torch resets its thread pools in a forked child). The work is
    done once per process; later calls return at once.

    Returns what that one process held, counted like `measure_worker` counts:
    a dict with `shapes` (the odd model's parameter shapes, in
    `model.parameters()` order) and `measured`, the bytes of (params, grads,
    optimizer): on one process every wrapper would hold all of it.
    """
    shapes, measured = _one_process_step()
    return dict(shapes=list(shapes), measured=measured)


def measure(world_sizes=(2,), configs=("even", "odd"), wrappers=WRAPPERS, timeout_s=120.0,
            progress=True, start="spawn"):
    """Train and measure every config under every wrapper, one launch per
    world size, with a progress bar over the launches when there are several.
    Returns a flat list of per-rank records (see `measure_worker`).

    `start` says how the processes begin:

    * "spawn" (the default): fresh processes, each importing torch itself
      (`gpucourse.distributed.run_on_processes`); each launch costs seconds
      of imports, and `timeout_s` counts from the launch;
    * "fork": copies of this process (`gpucourse.exercise_processes.run_forked`,
      Linux and macOS), after `warm_up_training` here, so that the ranks start
      with torch and the wrappers loaded: what a graded test cell uses, seconds
      faster on a small machine. `timeout_s` counts from when every rank has
      joined the process group, and a failure raises AssertionError with the
      rank's traceback. No process group may be initialised in this process.
    """
    from tqdm.auto import tqdm

    for name in configs:
        if name not in CONFIGS:
            raise ValueError(f"configs must be drawn from {', '.join(CONFIGS)}, got {name!r}")
    for wrapper in wrappers:
        if wrapper not in WRAPPERS:
            raise ValueError(f"wrappers must be drawn from {', '.join(WRAPPERS)}, got {wrapper!r}")
    if start not in STARTS:
        raise ValueError(f"start must be one of {', '.join(STARTS)}, got {start!r}")
    sizes = [_dp("world_sizes", n) for n in world_sizes]
    runs = [(name, wrapper) for name in configs for wrapper in wrappers]
    if start == "fork":
        from gpucourse.exercise_processes import run_forked

        warm_up_training()

        def launch(n):
            return run_forked(lambda rank, world_size: measure_worker(rank, world_size, runs), n,
                              timeout_s=timeout_s, name="measure_worker")
    else:
        from gpucourse.distributed import run_on_processes

        def launch(n):
            return run_on_processes(measure_worker, n, args=(runs,), timeout_s=timeout_s)
    records = []
    for n in tqdm(sizes, desc="process groups", disable=not progress or len(sizes) < 2):
        for per_rank in launch(n):
            records.extend(per_rank)
    return records


def rank_states(records) -> list[dict]:
    """Each rank's measured model states beside the shapes of its model, from
    either kind of measurement: the list of records `measure` returns, or one
    GPU run (a results file as `gpu_runs` gives it, a dict). One dict per
    record, with `model`, `wrapper`, `world_size`, `rank`, `shapes` (the
    model's parameter shapes as tuples, in `model.parameters()` order),
    `measured`: the bytes of (params, grads, optimizer) the rank held, as
    ints, and `params_allocated_bytes`: the storage its parameters took
    (FSDP2's padded shards)."""
    if isinstance(records, dict):
        return [dict(model=r["model"], wrapper=r["wrapper"], world_size=r["world_size"],
                     rank=r["rank"],
                     shapes=tiny_param_shapes(_config_of(records, r["model"])),
                     measured=tuple(int(r["measured_bytes"][k])
                                    for k in ("params", "grads", "optimizer")),
                     params_allocated_bytes=int(r["params_allocated_bytes"]))
                for r in _gpu_rows(records)]
    keys = ("model", "wrapper", "world_size", "rank", "shapes", "params_bytes", "grads_bytes",
            "optimizer_bytes", "params_allocated_bytes")
    if not isinstance(records, (list, tuple)) or not records or any(
            not isinstance(r, dict) or any(k not in r for k in keys) for r in records):
        raise ValueError("records must be the non-empty list of records measure() returns "
                         f"(keys {', '.join(keys)}) or one GPU run as gpu_runs() gives it, "
                         f"got {records!r:.80}")
    return [dict(model=r["model"], wrapper=r["wrapper"], world_size=r["world_size"],
                 rank=r["rank"], shapes=[tuple(s) for s in r["shapes"]],
                 measured=(int(r["params_bytes"]), int(r["grads_bytes"]),
                           int(r["optimizer_bytes"])),
                 params_allocated_bytes=int(r["params_allocated_bytes"]))
            for r in records]


_STAGE_OF = {"ddp": 0, "zero1": 1, "fsdp2": 3}
FP32_ADAM = dict(optimizer_multiplier=8, param_bytes=4, grad_bytes=4)  # 4 + 4 + 8 bytes per parameter


def predict(config, wrapper, world_size, rank):
    """Two predictions of one rank's bytes (params, grads, optimizer) in fp32 Adam:

    * "formula": `model_states_per_gpu` with 4 + 4 + 8 bytes per parameter
      and the wrapper's ZeRO stage (DDP 0, ZeRO-1 1, FSDP2 3): the ideal,
      perfectly even split;
    * "layout": the split PyTorch really makes, tensor by tensor: FSDP2's
      row chunks (`fsdp2_shard_rows`) and ZeroRedundancyOptimizer's whole
      tensors (`zero1_partition`).

    For evenly dividing sizes the two agree.
    """
    if wrapper not in WRAPPERS:
        raise ValueError(f"wrapper must be one of {', '.join(WRAPPERS)}, got {wrapper!r}")
    shapes = tiny_param_shapes(config)
    numels = [math.prod(s) for s in shapes]
    n = sum(numels)
    ideal = model_states_per_gpu(n, _STAGE_OF[wrapper], world_size, **FP32_ADAM)
    if wrapper == "ddp":
        layout = (4 * n, 4 * n, 8 * n)
    elif wrapper == "zero1":
        mine = sum(numels[i] for i in zero1_partition(numels, world_size)[rank])
        layout = (4 * n, 4 * n, 8 * mine)
    else:
        mine = sum(fsdp2_local_numel(s, world_size, rank) for s in shapes)
        layout = (4 * mine, 4 * mine, 8 * mine)
    return {"formula": (ideal.params, ideal.grads, ideal.optimizer), "layout": layout}


def compare(records):
    """Measured against predicted, one row per record: a list of dicts with
    the measured and both predicted (params, grads, optimizer) byte triples."""
    rows = []
    for r in records:
        p = predict(CONFIGS[r["model"]], r["wrapper"], r["world_size"], r["rank"])
        measured = (r["params_bytes"], r["grads_bytes"], r["optimizer_bytes"])
        rows.append(dict(model=r["model"], wrapper=r["wrapper"], world_size=r["world_size"],
                         rank=r["rank"], measured=measured, formula=p["formula"],
                         layout=p["layout"]))
    return rows


def _gpu_rows(record) -> list:
    """The rows of a memory results record, after checking its shape."""
    if (not isinstance(record, dict) or record.get("benchmark") != "memory"
            or not isinstance(record.get("configs"), dict)
            or not isinstance(record.get("results"), list) or not record["results"]):
        raise ValueError("record must be a memory results file as results.load_results('memory') "
                         "returns it (benchmark 'memory', 'configs' and a non-empty 'results' "
                         f"list), got {type(record).__name__}"
                         + (f" with keys {sorted(record)}" if isinstance(record, dict) else ""))
    for r in record["results"]:
        if r.get("model") not in record["configs"]:
            raise ValueError(f"record's row for model {r.get('model')!r} has no entry in its "
                             f"configs ({', '.join(record['configs'])})")
        if r.get("wrapper") not in WRAPPERS:
            raise ValueError(f"record's rows must have wrapper one of {', '.join(WRAPPERS)}, "
                             f"got {r.get('wrapper')!r}")
    return record["results"]


def _config_of(record, model) -> TinyConfig:
    try:
        return TinyConfig(**record["configs"][model])
    except TypeError as error:
        raise ValueError(f"record's configs[{model!r}] must hold TinyConfig's fields "
                         f"(name, hidden, heads, n_layers, vocab, seq_len, batch): {error}"
                         ) from None
