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
# free worker taking the next one. The few long groups go first, so that no
# worker is left running one of them alone at the end while the other idles:
# on 2 cores that tail cost more than a minute.
LONG_GROUPS_FIRST = ("test_book", "test_instructor", "test_parallel_grading",
                     "grading-08_sgemm", "grading-08_gpu_puzzles", "grading-", "test_early_cheats",
                     "test_puzzle_cheats", "test_sgemm_cheats", "test_attention_cheats",
                     "test_collective_cheats")


def _rank(group: str) -> int:
    """Where a group goes in the queue: by LONG_GROUPS_FIRST (a prefix), the rest after."""
    return next((i for i, prefix in enumerate(LONG_GROUPS_FIRST) if group.startswith(prefix)),
                len(LONG_GROUPS_FIRST))


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
