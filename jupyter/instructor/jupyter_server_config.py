"""The instructor's JupyterLab keeps its checkpoints outside the course: ../lab_state.py
says where. Its extensions and news are set in the JSON file beside this one."""

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).parents[1] / "lab_state.py"))["configure"](c, "instructor")  # noqa: F821
