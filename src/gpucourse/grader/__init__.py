"""The grader: everything that decides whether a student's answer earns its points.

The course is graded by nbgrader; this package is what the course adds around
it. Its modules run in three different places, and that is why they are apart:

* **In a student's notebook**, under a graded test cell:
  ``expect`` (the value checks, ``expect_float``, ``expect_array``, ...,
  written so that a submission cannot fake them), ``own_work`` (reading
  which names a function's code refers to, to fail an answer that calls the
  course's own implementation) and ``runtime`` (watching what the answer
  runs as the test calls it, which no hidden name escapes). The test cells
  import them as ``gpucourse.verify``. ``captured`` holds the built-ins and NumPy
  functions they compare with, taken before any student code runs.
* **Also in the notebook, for the kernel exercises** of chapters 8 and 9:
  ``tracing`` runs a kernel on the simulator and counts what each thread
  reads and writes; ``ptx`` compiles it for a real GPU, on the CPU, and
  checks what its PTX shows (shared memory, barriers, 128-bit loads,
  accumulators), with ``ptx_compiler``, the compiler process it starts
  (the simulator and a real compiler cannot share one process). On these
  stand the checks of each set of exercises, one module each, since each
  knows its own contract: ``puzzles`` (the GPU puzzles), ``sgemm`` (the
  SGEMM ladder and its tile search), ``attention`` (the FlashAttention
  kernels and their memory traffic) and ``tensor_cores`` (week 11: the mma
  fragment map, a warp's mma, the HGEMM, the swizzle, the precision lab).
* **In processes the grader starts**, for week 4's collectives:
  ``ring_rules`` (what a ring may call, and the guards that refuse the rest),
  ``forked_ranks`` (starting N gloo processes by fork and always stopping
  them) and ``collective_exercises`` (the checks of the results, of the
  messages and of the alpha-beta fit; the test cells import it as
  ``gpucourse.exercise_processes``).
* **On a command line**: ``release`` (nbgrader's command line, and
  ``exercises/`` generated from ``solutions/``), ``self_check`` (the
  students' self-check), ``submissions``, ``instructor``, ``workers`` and
  ``gradebooks`` (the instructor's ``grade`` and ``merge`` commands: find the
  submissions, grade them with nbgrader in worker processes or in shares,
  merge their gradebooks, report) and ``commands`` (the arguments of both command lines, which keep their
  old names: ``python -m gpucourse.grading`` and ``python -m gpucourse.instructor``).

This file imports none of them, so that a test cell that imports the checks
loads nothing of the instructor's tools.
"""
