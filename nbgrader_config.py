"""nbgrader configuration for this repository (the course root).

Source notebooks, with solutions and hidden tests, live in solutions/<chapter>/;
the student versions that nbgrader generates live in exercises/<chapter>/.
Regenerate them with `make exercises`; grade with `nbgrader autograde` (see README).
"""

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

c.CourseDirectory.course_id = "gpucourse"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"

# What a student sees in place of a solution region.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# A submission that loops forever loses the points of the cell that hangs, not
# the whole notebook: the cell is interrupted after this many seconds and the
# grader moves on.
c.Execute.timeout = 60
c.Execute.interrupt_on_timeout = True

# After a cell finishes, the grader waits this long for the cell's last output
# messages before it counts the cell as failed (nbgrader raises where nbconvert
# would only warn). The default, 4 seconds, is too short on a busy machine when
# a cell runs kernels on Numba's simulator, whose threads keep the kernel's
# message thread waiting: a correct answer must not lose its points for that.
c.Execute.iopub_timeout = 30
