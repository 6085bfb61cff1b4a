"""Shared test set-up: how tests are spread over processes by pytest-xdist.

`make test` runs `pytest -n auto --dist loadgroup --no-loadscope-reorder`. Expensive session or
module fixtures must be built once, so the tests that share one run in the
same worker: the book's tests together, each chapter's grading round trip
together, and each other test file together.
"""

import os

# One thread per BLAS / OpenMP pool, set before numpy loads: the two workers
# already share the two cores, and a pool of busy-waiting BLAS threads is slow
# when another process holds them (chapter 07_network, 11 s alone, took more
# than 120 s beside two busy processes with the default pool; 11 s with one
# thread). The book build and the notebooks it runs inherit these.
for _pool in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_pool, "1")

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# Tests check behaviour, not speed: Hypothesis's default deadline (200 ms per
# example) would turn a busy 2-core CI machine into random failures.
settings.register_profile("course", deadline=None)
settings.load_profile("course")


# tryfirst: xdist reads the groups in its own collection hook, which must see them.
# (pytest is pinned below 9: with pytest 9, xdist 3.8 cannot tag the tests' ids
# with their group, and every group is silently spread over all workers.)
#
# xdist hands the groups out in collection order (`make test` passes
# --no-loadscope-reorder, or it would sort them by their number of tests), a
# free worker taking the next one. The long groups go first, so that no worker
# is left running one of them alone at the end while the other idles: on 2
# cores that tail cost more than a minute.
#
# Among the long groups, those that mostly wait alternate with those that keep
# a core busy. Each chapter's grading round trip waits out two cells that hang
# until their time limit (40 s of its 45) and its kernels' start-up; the grading
# run of test_parallel_grading waits on its own hanging cell. Handed out one
# after the other, they had the three workers all waiting for minutes while
# the CPU-bound groups queued behind them (the two cores two-thirds idle for
# two and a half minutes of an 11-minute run, 2026-11-30); alternated, a
# waiting worker's core goes to the compiling and simulating ones. Each list
# is longest first (their wall times on the 2-core machine, 2026-11-30).
FIRST_GROUPS = ("test_book",)
WAITING_GROUPS = ("grading-05_memory", "grading-07_network",
                  "grading-02_tensor_and_pipeline_parallelism", "test_parallel_grading",
                  "grading-08_gpu_puzzles", "grading-08_sgemm", "grading-06_training_playbook",
                  "grading-10_tiny_gpt", "grading-04_frameworks_and_communication",
                  "grading-01_hpc_foundations", "grading-11_tensor_cores",
                  "grading-09_flash_attention", "grading-07_infrastructure_and_cost",
                  "grading-03_experts_and_zero", "grading-")
BUSY_GROUPS = ("test_attention_backward", "test_attention_backward_tf32_split",
               "test_early_cheats", "test_hgemm", "test_instructor", "test_attention_half",
               "test_sgemm_pipelined", "test_sgemm", "test_sgemm_padding",
               "test_attention_tensor_cores", "test_attention_backward_tf32",
               "test_distributed", "test_attention", "test_puzzle_cheats", "test_tensor_cores",
               "test_sgemm_stream_k", "test_sgemm_level7", "test_collectives",
               "test_sgemm_cheats", "test_sgemm_split_k", "test_feedback",
               "test_attention_cheats", "test_tensor_cores_cheats", "test_collective_cheats")
# The queue: FIRST_GROUPS, then one waiting and one busy group in turn.
LONG_GROUPS_FIRST = FIRST_GROUPS + tuple(
    name for pair in zip(WAITING_GROUPS, BUSY_GROUPS) for name in pair) + tuple(
    BUSY_GROUPS[len(WAITING_GROUPS):])


def _rank(group: str) -> int:
    """Where a group goes in the queue: by LONG_GROUPS_FIRST (the whole name, or
    "grading-" for a chapter not named there), the rest after."""
    if group in LONG_GROUPS_FIRST:
        return LONG_GROUPS_FIRST.index(group)
    return next((i for i, prefix in enumerate(LONG_GROUPS_FIRST)
                 if prefix.endswith("-") and group.startswith(prefix)), len(LONG_GROUPS_FIRST))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    groups = {}
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1]
        group = module
        if module == "test_grading":
            params = getattr(item, "callspec", None)
            chapter = (params.params.get("chapter") or params.params.get("autograded")
                       if params else None)
            if chapter:
                group = f"grading-{chapter}"
        item.add_marker(pytest.mark.xdist_group(group))
        groups[item.nodeid] = group
    items.sort(key=lambda item: _rank(groups[item.nodeid]))  # stable: each group keeps its order
