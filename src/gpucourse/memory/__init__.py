"""Week 5: the memory arithmetic of training, from ZeRO to FSDP.

"Will it fit?" is the first question of every large training run. This
package answers it, and checks its answers two ways. Its modules:

* ``model_states``: model states per GPU (parameters, gradients, optimizer
  states) under data parallelism and ZeRO stages 0-3, for several precision
  recipes and for FSDP's sharding strategies;
* ``published``: the published tables (ZeRO's Table 1 and Figure 1, the
  Ultra-Scale Playbook's model-state table) as data, to compare the formulas
  against;
* ``sizing``: the parameter count of a GPT-style transformer and the
  activation memory of one of its layers, with tensor and sequence
  parallelism and activation recomputation; and a planner, the smallest
  data-parallel degree at which each ZeRO stage fits a GPU;
* ``measure``: worker functions that train a small transformer on several
  processes under DDP, ZeRO-1 (`ZeroRedundancyOptimizer`) and FSDP2
  (`fully_shard`) and measure what each process really holds, with exact
  predictions of the uneven splits; the processes are spawned afresh, or
  forked from a warmed-up process, as week 5's graded test cells do
  (`measure`, `warm_up_training`, `rank_states`).

The chapter's figures, tables, its calculator and the readers of the GPU
measurements in ``benchmarks/results`` live in ``gpucourse.chapters.memory``;
every name is still importable from here, as ``gpucourse.memory.NAME``.

Byte counts are bytes; "GB" in the papers' tables means 10^9 bytes, and so it
does here (`GB`). Every public function checks its arguments and raises
``ValueError`` naming the argument and what it accepts.

Only numpy is imported at the top. torch is imported inside the functions
that train (the spawned workers), matplotlib inside the plotting functions and
ipywidgets inside the calculator.
"""

from gpucourse.memory.model_states import (  # noqa: F401 (re-exported)
    GB, ZERO_STAGES, _stage, _dp, _bytes_per, ModelStates, model_states_per_gpu, Precision,
    PRECISIONS, _precision, model_states, FSDP_STRATEGIES, fsdp_model_states_per_gpu,
)
from gpucourse.memory.published import (  # noqa: F401 (re-exported)
    ZERO_TABLE1_PARAMS, ZERO_TABLE1_DP, ZERO_TABLE1, ZERO_TABLE1_TRUNCATED, ZERO_FIGURE1_PARAMS,
    ZERO_FIGURE1_DP, ZERO_FIGURE1_GB, PLAYBOOK_MODEL_STATES_GB, as_printed, how_printed,
    zero_table1_computed, zero_table1_rows,
)
from gpucourse.memory.sizing import (  # noqa: F401 (re-exported)
    gpt_params, RECOMPUTE, activation_bytes_per_layer, activation_bytes, Plan, plan, GPT3_VOCAB,
    GPT3_MODELS, memory_breakdown,
)
from gpucourse.memory.measure import (  # noqa: F401 (re-exported)
    fsdp2_shard_rows, fsdp2_local_numel, _shape, zero1_partition, TinyConfig, EVEN, ODD,
    tiny_param_shapes, _tiny_model_class, _local, _train_and_measure, WRAPPERS, CONFIGS,
    measure_worker, STARTS, _one_process_step, warm_up_training, measure, rank_states, _STAGE_OF,
    FP32_ADAM, predict, compare, _gpu_rows, _config_of,
)
from gpucourse.moved import publish, served_from

# The functions answer to the package's name (gpucourse.memory.NAME), the address
# students call them by and the one the grader names in its messages.
publish(__name__, globals())

# The figures, the tables, the calculator and the readers of benchmarks/results/memory_gpu*.json
# live with chapter 5 (gpucourse.chapters.memory), which imports the models above;
# they are served from here for old imports.
__getattr__ = served_from(__name__, "gpucourse.chapters.memory", (
    'WRAPPER_NAMES', 'gpu_compare', '_gpu_rank_rows', '_phase_label', 'gpu_phases', 'gpu_peaks',
    'gpu_runs', '_checked_runs', 'gpu_scaling', 'gpu_rank_differences', 'format_gb', '_PARTS',
    '_COLOURS', '_stacked', 'plot_breakdown', 'plot_zero_scaling', 'plot_activations',
    'plot_measured', 'compare_table', 'gpu_peak_table', 'gpu_scaling_table', '_WRAPPER_COLOURS',
    'plot_gpu_phases', 'plot_gpu_scaling', 'calculator',
))
