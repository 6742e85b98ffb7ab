"""nbgrader settings for speedlab's assignments (copy them into your course's nbgrader_config.py)."""

from nbgrader.converters import Autograde
from nbgrader.preprocessors import Execute

c = get_config()  # noqa: F821 (nbgrader's config loader provides it)

# The student's notebook as the plain one reads: the solution region becomes this line.
c.ClearSolutions.code_stub = {
    "python": "# YOUR CHANGES HERE: how the data reaches the model (not the model, the data or "
    "the steps)"
}

# check() takes about a minute and stops itself at its time limit (240 s); nbgrader's default
# limit for a cell is 30 s.
c.ExecutePreprocessor.timeout = 360

# A check that could not grade fairly (other processes took the CPU) fails the autograding of
# that submission, with its reason, instead of scoring a zero that reads as a fail; the next
# `nbgrader autograde` grades it again.
_steps = Autograde().autograde_preprocessors
_after_run = _steps.index(Execute) + 1
c.Autograde.autograde_preprocessors = [
    *_steps[:_after_run],
    "speedlab.assignments.autograder.refuse_ungraded",
    *_steps[_after_run:],
]
