"""Weeks 2 and 3: splitting one model over many GPUs, after the seminal papers.

Four ideas, each small enough to run on a laptop, each in its own module:

* ``tensor`` and ``tensor_processes``: tensor parallelism (Megatron-LM,
  Shoeybi et al. 2019). The weight matrices of an MLP block and of the
  attention projections are split by columns and by rows over `world_size`
  ranks, first as explicit shards in one process (NumPy), then on real
  processes with real all-reduces over ``torch.distributed``; the split layer
  must give the unsplit layer's output and gradients, and we count the
  all-reduces it needs;
* ``pipeline``: pipeline parallelism (GPipe, Huang et al. 2019; 1F1B,
  Narayanan et al. 2021). A schedule simulator for `stages` stages and
  `micro_batches` micro-batches, with its idle ("bubble") fraction and the
  micro-batches each stage holds in flight;
* ``experts``: mixture of experts (GShard, Lepikhin et al. 2020; Switch
  Transformers, Fedus et al. 2022). A top-k router with a capacity factor,
  the tokens each expert receives and drops, and Switch's load-balancing loss;
* ``zero``: ZeRO (Rajbhandari et al. 2020), which training states each stage
  shards (the memory arithmetic lives in ``gpucourse.memory``).

The chapters' figures (the split MLP, the Gantt chart of a schedule, the
tokens per expert, the ZeRO stages) live in ``gpucourse.chapters.parallelism``;
every name is still importable from here, as ``gpucourse.parallelism.NAME``.

Conventions: a linear layer computes ``y = x @ weight + bias`` with ``weight``
of shape (in_features, out_features). Times in the pipeline simulator are in
seconds (any consistent unit works; only ratios matter). Every public function
checks its arguments and raises ``ValueError`` naming the argument and what it
accepts.

Only numpy is imported here. torch is imported inside the functions that run
processes, and matplotlib inside the plotting functions.
"""

from gpucourse.parallelism.tensor import (  # noqa: F401 (re-exported)
    _array, _divides, shard_columns, shard_rows, column_parallel_linear, row_parallel_linear, gelu,
    init_mlp_weights, init_attention_weights, _whole_seed, mlp_reference, attention_reference,
    _attention_numpy,
)
from gpucourse.parallelism.tensor_processes import (  # noqa: F401 (re-exported)
    MEGATRON_ALLREDUCES_PER_LAYER, MEGATRON_8B, tensor_parallel_allreduce_bytes, _torch_layers,
    tensor_parallel_shards, _tensor_parallel_worker, TensorParallelRun, run_tensor_parallel,
)
from gpucourse.parallelism.pipeline import (  # noqa: F401 (re-exported)
    SCHEDULES, partition_layers, pipeline_order, PipelineOp, PipelineRun, simulate_pipeline,
    gpipe_bubble_fraction,
)
from gpucourse.parallelism.experts import (  # noqa: F401 (re-exported)
    expert_capacity, softmax, load_balancing_loss, Routing, route_tokens, synthetic_router_logits,
    dropped_fractions,
)
from gpucourse.parallelism.zero import (  # noqa: F401 (re-exported)
    TRAINING_STATES, ZERO_SHARDED, ZERO_FIGURE_BYTES_PER_PARAM, zero_sharded_states,
)
from gpucourse.moved import publish, served_from

# The functions answer to the package's name (gpucourse.parallelism.NAME), the address
# students call them by and the one the grader names in its messages.
publish(__name__, globals())

# The figures live with chapters 2 and 3 (gpucourse.chapters.parallelism), which
# imports the models above; they are served from here for old imports.
__getattr__ = served_from(__name__, "gpucourse.chapters.parallelism", (
    'plot_megatron_mlp', 'plot_pipeline', 'plot_bubble_fraction', 'plot_in_flight',
    'plot_tokens_per_expert', 'plot_capacity_sweep', 'plot_zero_stages',
))
