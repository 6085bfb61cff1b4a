"""The checks a graded test cell imports: ``from gpucourse.verify import expect_float, ...``.

Kept under this name because every test cell of ``solutions/`` (and so of
``exercises/``) imports its checks from here. The checks live in
:mod:`gpucourse.grader.expect` (values of exact types, compared with the
grader's own arithmetic) and :mod:`gpucourse.grader.own_work` (that the
answer does the work itself).
"""

from gpucourse.grader.expect import (expect_array, expect_equal, expect_float, expect_int,
                                     expect_raises, peak_allocated_bytes)
from gpucourse.grader.own_work import (FORBIDDEN_MODULES, expect_own_work, global_names,
                                       library_uses, visible_names)

__all__ = ["FORBIDDEN_MODULES", "expect_array", "expect_equal", "expect_float", "expect_int",
           "expect_own_work", "expect_raises", "global_names", "library_uses",
           "peak_allocated_bytes", "visible_names"]
