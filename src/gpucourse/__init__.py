"""gpucourse: an executable course from HPC theory to GPU kernels in Numba-CUDA.

The theory packages follow the chapters, each split into short modules by
topic:

* ``hpc`` (week 1): speed-up laws and their measurement, the roofline, the
  compute bill, exascale and the energy of data movement;
* ``parallelism`` (weeks 2-3): tensor and pipeline parallelism, mixture of
  experts, ZeRO's stages;
* ``collectives`` (week 4): the ring all-reduce and friends, the alpha-beta
  model and its measurement, communication volumes and CCR, interconnects and
  frameworks;
* ``memory`` (week 5): ZeRO/FSDP memory arithmetic, the published tables,
  activations, measured on real sharded training;
* ``training`` and ``planner`` (week 6): the anatomy of a step, 3D-parallel
  layouts;
* ``network`` and ``economics`` (week 7): flows and bottleneck structures,
  capacity designs, topologies; the cost of a run.

The kernels live in ``kernels``: ``kernels.sgemm`` (week 8),
``kernels.attention`` (weeks 9-10) and ``kernels.tensor_cores``, one package
per family, with the launch machinery they share in ``kernels.launch``;
``tinygpt`` trains a small GPT on them.

``chapters`` holds what the chapters show and nothing they compute: one
module per chapter or topic with its figures, markdown tables and the
readers of ``benchmarks/results``. The old addresses of names that moved
there (``gpucourse.hpc.plot_amdahl``) still work, through ``moved``.

``grader`` is the grader (nbgrader glue, the value and own-work checks, the
multi-process exercise harness, the instructor's command); ``verify``,
``exercise_processes``, ``grading`` and ``instructor`` are kept as the
addresses the test cells and command lines use. ``device`` chooses between a
real GPU and Numba's CUDA simulator; ``distributed`` runs a function on N
processes with a deadline; ``checks`` holds the argument checks; ``results``
finds and reads the benchmark results files; ``course`` the eleven-week map.

Importing the package imports none of Numba or torch, so the theory chapters
run anywhere.
"""

__version__ = "0.1.0"
