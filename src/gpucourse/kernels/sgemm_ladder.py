"""Kept for old imports: chapter 8's readers of the SGEMM benchmark results,
and the plots it draws from them, now live in :mod:`gpucourse.chapters.sgemm`
(the ladder of levels 1 to 6, occupancy, the timing tables) and
:mod:`gpucourse.chapters.sgemm_gap` (level 7, the instruction counts, the
edge-free kernels, every shape). ``from gpucourse.kernels import sgemm_ladder
as ladder`` still gives every name of both.
"""

from gpucourse.chapters.sgemm import *  # noqa: F401,F403
from gpucourse.chapters.sgemm import _check_rows, _variants  # noqa: F401
from gpucourse.chapters.sgemm_gap import *  # noqa: F401,F403
from gpucourse.chapters.sgemm_gap import (_kernel_shared_bytes, _level7_record,  # noqa: F401
                                          _ncu_record, _resources, _shapes_record, _threads,
                                          _tiles_label, _timed, _wm_iter)
