"""What the chapters show: readers of the committed benchmark results, markdown
tables and plots, one module per chapter or topic.

The computing modules (``gpucourse.hpc``, ``gpucourse.kernels.sgemm``, ...)
hold the models and the kernels; a chapter glues their numbers into its prose
through the modules here. Keeping the two apart lets a student read a kernel
without wading through the code that draws its figures, and keeps every
number in the book computed by the package from ``benchmarks/results``.
"""
