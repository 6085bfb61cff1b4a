"""Week 4's collectives graded on real processes; kept for old imports.

The test cells of week 4 import ``check_collective`` and its companions from
here. They live in :mod:`gpucourse.grader.collective_exercises` (the checks),
:mod:`gpucourse.grader.forked_ranks` (``run_forked``) and
:mod:`gpucourse.grader.ring_rules` (what a ring may call).
"""

from gpucourse.grader.collective_exercises import (COLLECTIVES, DTYPES,
                                                   EXAMPLE_BANDWIDTH_BYTES_PER_S,
                                                   EXAMPLE_LATENCY_S, TIMED_SIZES_BYTES,
                                                   check_collective, example_timings,
                                                   expect_alpha_beta_fit, expected_messages,
                                                   least_squares_alpha_beta, time_all_reduce)
from gpucourse.grader.forked_ranks import JOIN_TIMEOUT_S, run_forked
from gpucourse.grader.own_work import expect_no_names, referenced_names
from gpucourse.grader.ring_rules import COLLECTIVE_NAMES, POINT_TO_POINT, check_point_to_point_only

__all__ = ["COLLECTIVES", "COLLECTIVE_NAMES", "DTYPES", "EXAMPLE_BANDWIDTH_BYTES_PER_S",
           "EXAMPLE_LATENCY_S", "JOIN_TIMEOUT_S", "POINT_TO_POINT", "TIMED_SIZES_BYTES",
           "check_collective", "example_timings", "expect_alpha_beta_fit",
           "check_point_to_point_only", "expect_no_names", "expected_messages",
           "least_squares_alpha_beta", "referenced_names", "run_forked", "time_all_reduce"]
