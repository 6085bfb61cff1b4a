"""Pipeline parallelism: a simulator of the GPipe and 1F1B schedules.

The layers are cut into stages, one per device, and a batch into
micro-batches that flow through them. The simulator plays a schedule op by op
and reports when each forward and backward pass ran, the idle ("bubble")
fraction, and how many micro-batches each stage holds in flight, which is
what 1F1B improves on GPipe.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpucourse.checks import count as _count, positive as _positive


# -----------------------------------------------------------------------------
# Pipeline parallelism: GPipe and 1F1B schedules
#
# The layers are cut into `stages` consecutive groups, one per GPU, and each
# mini-batch into `micro_batches` micro-batches. Stage s can run the forward
# pass of micro-batch i once stage s-1 has finished it, and its backward pass
# once stage s+1 has finished that micro-batch's backward. GPipe runs every
# forward, then every backward; 1F1B (PipeDream-Flush) starts backward passes
# as early as it can, alternating one forward and one backward.

SCHEDULES = ("gpipe", "1f1b")


def partition_layers(layers, stages):
    """Layers per stage when `layers` consecutive layers are cut into `stages`
    groups as evenly as possible (the first stages take the extra layers)."""
    layers, stages = _count("layers", layers), _count("stages", stages)
    if stages > layers:
        raise ValueError(f"stages must be at most the number of layers ({layers}), since every "
                         f"stage needs a layer, got stages={stages}")
    base, extra = divmod(layers, stages)
    return [base + 1 if s < extra else base for s in range(stages)]


def pipeline_order(stages, micro_batches, schedule="gpipe"):
    """The order in which each stage runs its passes.

    Returns one list per stage of ("F", i) and ("B", i) pairs. GPipe: all
    forwards, then all backwards. 1F1B: stage s first runs
    min(stages - s - 1, micro_batches) forwards (the warm-up), then alternates
    one forward and one backward, then runs the backwards left (the
    cool-down).
    """
    stages, m = _count("stages", stages), _count("micro_batches", micro_batches)
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    orders = []
    for s in range(stages):
        if schedule == "gpipe":
            orders.append([("F", i) for i in range(m)] + [("B", i) for i in range(m)])
            continue
        warmup = min(stages - s - 1, m)
        order = [("F", i) for i in range(warmup)]
        for i in range(m - warmup):
            order += [("F", warmup + i), ("B", i)]
        order += [("B", i) for i in range(m - warmup, m)]
        orders.append(order)
    return orders


@dataclass(frozen=True)
class PipelineOp:
    stage: int
    kind: str  # "F" (forward) or "B" (backward)
    micro_batch: int
    start_s: float
    end_s: float


@dataclass
class PipelineRun:
    """A simulated pipeline schedule: every pass with its start and end."""

    schedule: str
    stages: int
    micro_batches: int
    ops: list = field(repr=False)

    @property
    def total_time_s(self) -> float:
        return max(op.end_s for op in self.ops)

    def busy_time_s(self, stage=None) -> float:
        """Time spent computing, on one stage or summed over all."""
        return sum(op.end_s - op.start_s for op in self.ops if stage is None or op.stage == stage)

    @property
    def bubble_fraction(self) -> float:
        """The share of stage-time spent idle: 1 - busy / (stages * total)."""
        return 1 - self.busy_time_s() / (self.stages * self.total_time_s)

    def in_flight(self, stage):
        """(times, counts): how many micro-batches have started their forward
        pass on `stage` and not yet finished their backward pass, as a step
        function. These are the micro-batches whose activations it stores."""
        events = sorted([(op.start_s, 1) for op in self.ops if op.stage == stage and op.kind == "F"]
                        + [(op.end_s, -1) for op in self.ops if op.stage == stage and op.kind == "B"],
                        key=lambda e: (e[0], e[1]))  # at equal times, frees come first
        times, counts, now = [0.0], [0], 0
        for t, change in events:
            now += change
            times.append(t)
            counts.append(now)
        return np.array(times), np.array(counts)

    def peak_in_flight(self, stage=None) -> int:
        """The most micro-batches held at once, on one stage or on the worst one."""
        stages = range(self.stages) if stage is None else [stage]
        return int(max(self.in_flight(s)[1].max() for s in stages))


def simulate_pipeline(stages, micro_batches, schedule="gpipe", forward_time_s=1.0,
                      backward_time_s=2.0, layers=None) -> PipelineRun:
    """Simulate one training step of a pipeline and time every pass.

    Each pass starts as soon as its stage is free and its input is ready. A
    stage's forward pass of one micro-batch takes `forward_time_s` and its
    backward pass `backward_time_s` (a backward pass costs about twice a
    forward). If `layers` is given, the layers are cut into stages with
    `partition_layers`, and those times are per layer, so uneven stages show
    their cost.
    """
    orders = pipeline_order(stages, micro_batches, schedule)
    stages, m = len(orders), _count("micro_batches", micro_batches)
    forward_time_s = _positive("forward_time_s", forward_time_s)
    backward_time_s = _positive("backward_time_s", backward_time_s)
    per_stage = [1] * stages if layers is None else partition_layers(layers, stages)
    duration = {"F": [forward_time_s * n for n in per_stage],
                "B": [backward_time_s * n for n in per_stage]}

    end = {}  # (kind, stage, micro_batch) -> end time
    free_at = [0.0] * stages
    next_op = [0] * stages
    ops = []
    remaining = 2 * m * stages
    while remaining:
        progressed = False
        for s in range(stages):
            # Run this stage's next passes for as long as their inputs are ready.
            while next_op[s] < len(orders[s]):
                kind, i = orders[s][next_op[s]]
                if kind == "F":
                    needs = ("F", s - 1, i) if s > 0 else None
                else:
                    needs = ("B", s + 1, i) if s < stages - 1 else ("F", s, i)
                if needs is not None and needs not in end:
                    break
                start = max(free_at[s], end[needs] if needs else 0.0)
                finish = start + duration[kind][s]
                end[(kind, s, i)] = free_at[s] = finish
                ops.append(PipelineOp(s, kind, i, start, finish))
                next_op[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # cannot happen for these two schedules; guards against a bad order
            raise RuntimeError("the pipeline schedule deadlocked")
    return PipelineRun(schedule, stages, m, ops)


def gpipe_bubble_fraction(stages, micro_batches):
    """The idle share of a balanced pipeline: (p - 1) / (m + p - 1).

    Each stage waits p - 1 slots for the first micro-batch to reach it (and
    as long for the last backward to come back) out of m + p - 1 slots of the
    whole step (Huang et al. 2019; Narayanan et al. 2021 give the same for
    1F1B). `micro_batches` may be an array, for plotting.
    """
    p = _count("stages", stages)
    m = _positive("micro_batches", micro_batches, array_ok=True)
    result = (p - 1) / (m + p - 1)
    return float(result) if np.ndim(result) == 0 else result
