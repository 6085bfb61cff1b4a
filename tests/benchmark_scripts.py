"""The scripts of benchmarks/, imported afresh as modules by the tests that
check their logic without a GPU (none of them imports torch or Numba when it
loads)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def benchmark_script(name: str):
    """benchmarks/<name>.py as a module, imported again even if an earlier
    test imported it (so that a test's changes to it do not leak)."""
    sys.path.insert(0, str(BENCHMARKS))
    sys.modules.pop(name, None)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))


def model_before_stepped() -> Path:
    """The committed shape model as it stood before the stepped trial was
    adopted (benchmarks/sgemm_model_json.py's MODEL_BEFORE_STEPPED): the
    model the earlier trials were written on, and whose picks the tests of
    those trials' claims describe."""
    return benchmark_script("sgemm_model_json").MODEL_BEFORE_STEPPED
