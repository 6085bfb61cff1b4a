"""Week 1: the arithmetic of high-performance computing.

Everything the first chapter computes lives in this package, so that the
prose, the figures, the tests and the exercises all read the same numbers.
It holds three short modules, one per question the chapter asks:

* ``speedup``: how much faster do more workers make a job? The speed-up laws
  of Amdahl and Gustafson, a small real workload that measures speed-ups on
  processes, and the laws fitted to what it measured;
* ``roofline``: is a kernel limited by arithmetic or by memory? The roofline
  model, a datasheet table of four GPUs, and the arithmetic intensity of
  matrix multiplication and of attention;
* ``scale``: how big is big? The compute bill of training GPT-3, fifty years
  of the fastest supercomputers and their exponential trend, and the energy
  of arithmetic versus the energy of moving data.

The chapter's figures and the formatters that write these numbers for the
prose ("1.102 EFLOP/s") live in ``gpucourse.chapters.hpc``; every name is
still importable from here, as ``gpucourse.hpc.NAME``.

Units are in the names: ``_s`` is seconds, ``_bytes`` is bytes,
``flops_per_s`` is floating-point operations per second, ``_pj`` is
picojoules. Every public function checks its arguments and raises
``ValueError`` naming the argument and what it accepts.

Only numpy is imported here; matplotlib is imported inside the plotting
functions, and nothing of Numba or torch is touched.
"""

from gpucourse.hpc.speedup import (  # noqa: F401 (re-exported)
    amdahl_speedup, amdahl_limit, amdahl_workers_needed, gustafson_speedup, SPEEDUP_RECORD,
    SCALINGS, lcg_chain, _lcg_chunk, _split, time_scaling_job, SpeedupMeasurement,
    _machine_description, measure_speedups, speedup_record, recorded_speedups, _scaling_data,
    fit_amdahl, fit_gustafson, karp_flatt,
)
from gpucourse.hpc.roofline import (  # noqa: F401 (re-exported)
    roofline, ridge_point, peak_flops_per_s, memory_bandwidth_bytes_per_s, GPU, RTX_2050_CUDA_CORES,
    RTX_2050_BOOST_CLOCK_HZ, RTX_2050_BUS_WIDTH_BITS, RTX_2050_DATA_RATE_BITS_PER_S, GPUS,
    matmul_intensity, KERNELS, kernel_counts, RooflinePlacement, place_on_roofline, _numpy_kernel,
    time_numpy_kernel, attention_flops, standard_attention_intensity, flash_attention_intensity,
    Workload, example_workloads,
)
from gpucourse.hpc.scale import (  # noqa: F401 (re-exported)
    SECONDS_PER_DAY, SECONDS_PER_YEAR, GPT3_PARAMS, GPT3_TOKENS, GPT3_REPORTED_TRAIN_FLOPS,
    GPT3_REPORTED_PF_DAYS, V100_LAMBDA_FLOPS_PER_S, OPENAI_2020_GPUS, PALM_MODEL_FLOPS_UTILIZATION,
    training_flops, training_time_s, EXASCALE_FLOPS_PER_S, ZETTASCALE_FLOPS_PER_S, Supercomputer,
    TOP500_NUMBER_ONE, CRAY_1_YEAR, CRAY_1_CLOCK_HZ, CRAY_1_PEAK_FLOPS_PER_S, ExponentialTrend,
    fit_exponential_trend, top500_trend, zettascale_year, ENERGY_45NM_PJ, energy_ratio,
    dram_energy_share, energy_break_even_intensity,
)
from gpucourse.moved import publish, served_from

# The functions answer to the package's name (gpucourse.hpc.NAME), the address
# students call them by and the one the grader names in its messages.
publish(__name__, globals())

# The figures and the number formatters live with chapter 1 (gpucourse.chapters.hpc),
# which imports the models above; they are served from here for old imports.
__getattr__ = served_from(__name__, "gpucourse.chapters.hpc", (
    '_SI_PREFIXES', '_SUPERSCRIPTS', 'format_si', 'format_flops', 'format_sci', '_plain_log2_ticks',
    'plot_amdahl', 'plot_gustafson', 'plot_roofline', 'plot_top500', 'plot_energy',
))
