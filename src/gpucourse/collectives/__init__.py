"""Week 4: collective communication, its cost, and the frameworks built on it.

Everything the fourth chapter computes lives in this package, one module per
idea:

* ``ring``: the ring all-reduce written from point-to-point sends and
  receives (a reduce-scatter, then an all-gather), a naive all-reduce for
  contrast, and the ring reduce-scatter and all-gather on their own. They run
  on the processes of a ``torch.distributed`` group: gloo on CPU, NCCL on
  GPUs. Beside them, a pure-NumPy simulation of the same ring, one array per
  rank, for the figures and the exercises (no processes needed);
* ``alpha_beta``: the alpha-beta (latency-bandwidth) cost model of each
  algorithm, and a least-squares fit of latency and bandwidth to measured
  times;
* ``measure``: a timing worker that measures the collectives over message
  sizes on real processes;
* ``volume``: the bytes each parallel strategy sends per step (data
  parallelism, ZeRO, tensor parallelism) and the communication-to-computation
  ratio (CCR);
* ``interconnects``: NVLink, PCIe, InfiniBand and Ethernet, from their
  specifications;
* ``frameworks``: DeepSpeed, PyTorch FSDP and Megatron-LM side by side, as
  data, and a rule of thumb that picks a strategy.

The chapter's figures, its markdown tables and the readers of the GPU
measurements in ``benchmarks/results`` live in ``gpucourse.chapters.collectives``;
every name is still importable from here, as ``gpucourse.collectives.NAME``.

How the chunks are cut. A tensor of ``L`` elements on ``N`` ranks is cut into
``N`` contiguous chunks the way ``numpy.array_split`` cuts it: the first
``L % N`` chunks hold ``ceil(L / N)`` elements and the rest ``floor(L / N)``.
When ``N`` divides ``L`` every chunk has ``L / N`` elements, which is what
``dist.reduce_scatter_tensor`` and ``dist.all_gather_into_tensor`` expect;
otherwise the chunks differ by one element at most, and when ``L < N`` the
last ``N - L`` chunks are empty. Rank ``r`` owns chunk ``r``.

Units are in the names: ``_bytes`` is bytes, ``_s`` seconds,
``_bytes_per_s`` bytes per second (one direction of one link), ``flops_per_s``
floating-point operations per second. Every public function checks its
arguments and raises ``ValueError`` naming the argument and what it accepts.

torch is imported inside the functions that need it, matplotlib inside the
plotting functions; importing this package imports neither (nor Numba).
"""

from gpucourse.collectives.ring import (  # noqa: F401 (re-exported)
    chunk_bounds, _whole_at_least, _group_of, _check_tensor, _exchange, _ring_reduce_scatter_flat,
    _ring_all_gather_flat, ring_all_reduce, naive_all_reduce, ring_reduce_scatter, ring_all_gather,
    simulate_ring_all_reduce,
)
from gpucourse.collectives.alpha_beta import (  # noqa: F401 (re-exported)
    ALGORITHMS, alpha_beta_terms, alpha_beta_time_s, AlphaBetaFit, fit_alpha_beta,
)
from gpucourse.collectives.measure import (  # noqa: F401 (re-exported)
    TIMED, DEFAULT_SIZES_BYTES, time_collectives, measure_collectives, compare_with_builtin,
    check_and_time, run_collectives_lab,
)
from gpucourse.collectives.volume import (  # noqa: F401 (re-exported)
    data_parallel_comm_bytes, tensor_parallel_comm_bytes, transformer_layer_flops, ccr,
    tensor_parallel_ccr, data_parallel_ccr,
)
from gpucourse.collectives.interconnects import (  # noqa: F401 (re-exported)
    Interconnect, pcie_x16_bytes_per_s, INTERCONNECTS, H100_BF16_DENSE_FLOPS_PER_S,
)
from gpucourse.collectives.frameworks import (  # noqa: F401 (re-exported)
    Framework, FRAMEWORKS, TRAINING_BYTES_PER_PARAM, suggest_strategy,
)
from gpucourse.moved import publish, served_from

# The functions answer to the package's name (gpucourse.collectives.NAME), the address
# students call them by and the one the grader names in its messages.
publish(__name__, globals())

# The figures, the tables and the readers of benchmarks/results/collectives_gpu*.json live
# with chapter 4 (gpucourse.chapters.collectives), which imports the models above;
# they are served from here for old imports.
__getattr__ = served_from(__name__, "gpucourse.chapters.collectives", (
    'plot_ring_all_reduce', 'plot_measured_vs_model', 'MEASURED_MODEL', 'MEASURED_LABELS',
    'ALL_REDUCES', 'SCATTER_GATHERS', '_MEASURED_STYLE', '_ROW_FIELDS', 'measured_algorithms',
    '_check_record', '_measured_rows', 'measured_bus_bandwidth', 'measured_checks',
    'bus_bandwidth_ratio', 'bandwidth_bound_bytes', 'fit_measured', 'format_bytes',
    'measured_fits_markdown', 'measured_setup', 'plot_measured_bus_bandwidth', 'plot_measured_fit',
    '_RUN_STYLES', 'measured_world_size', 'measured_runs', '_check_runs', 'small_message_time_s',
    'model_link_share', 'plot_measured_runs', 'plot_ccr', 'plot_comm_volume', 'frameworks_markdown',
))
