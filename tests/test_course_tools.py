"""The assignment in the classroom's own grading tools: nbgrader's and otter-grader's command
lines, on course folders built here from notebooks/assignments/, grade real submissions with
real training. The solution's change and a working change that is not the solution's get full
points; the release with the slow storage switched off gets zero (a submission too slow to pass
fails in the same assertion from the same check: tests/test_assignments.py grades the untouched
release); a check that cannot grade fairly (other processes took the CPU) is an error that says
so, never a zero."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import nbformat
import pytest
from nbgrader.converters import Autograde
from nbgrader.preprocessors import Execute
from otter.run.run_autograder.utils import OtterRuntimeError
from otter.test_files import ExceptionTestFile, GradingResults
from traitlets.config.loader import PyFileConfigLoader
from traitlets.utils.importstring import import_item

from speedlab.assignments import CannotGradeNow, CheckResult, assert_passed
from speedlab.assignments.autograder import GRADE_AGAIN, refuse_ungraded
from speedlab.assignments.otter_plugin import RefuseUngraded
from tests.nbexec import NOTEBOOKS

ASSIGNMENTS = NOTEBOOKS / "assignments"
STUDENT = ASSIGNMENTS / "faster_pipeline_student.ipynb"
SOLUTION = ASSIGNMENTS / "faster_pipeline_solution.ipynb"
NBGRADER_COURSE = ASSIGNMENTS / "nbgrader"
NBGRADER_SOURCE = NBGRADER_COURSE / "source/faster_pipeline/faster_pipeline.ipynb"
OTTER_MASTER = ASSIGNMENTS / "otter/faster_pipeline.ipynb"
POINTS = 10.0

# What each submission puts in place of the release's "# YOUR CHANGES HERE" line of train().
# nbgrader grades a working change that is not the solution's (3 workers also hide the storage
# wait, about 3x on a quiet 2-core machine against a pass mark of at most 2x), otter the
# solution's own (4 workers); both grade the change that switches the slow storage off.
SUBMISSIONS = {
    "working": "data.num_workers = 3",
    "solution": "data.num_workers = 4",
    "storage_off": "data.throttle = None",
}
GRADED = {"nbgrader": ("working", "storage_off"), "otter": ("solution", "storage_off")}
FAILS = {  # how the output of each failing submission begins its verdict
    "storage_off": re.compile(r"FAIL: the data changed: the storage is open_binary, "),
}

# The tools' command lines from this venv, on PATH as an instructor's activated venv puts them:
# nbgrader runs `alembic` from PATH.
TOOLS_ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def tool(*args: str, cwd: Path, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one of the tools' commands in ``cwd``; its stdout and stderr together in ``stdout``."""
    done = subprocess.run(
        args, cwd=cwd, env=TOOLS_ENV, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    if ok:
        assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout[-4000:]}"
    return done


def cells(path: Path) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source) for c in nbformat.read(path, as_version=4).cells]


def submission(released: Path, change: str | None) -> nbformat.NotebookNode:
    """The released notebook with ``change`` in place of its "YOUR CHANGES HERE" line."""
    notebook = nbformat.read(released, as_version=4)
    if change is not None:
        [train] = [c for c in notebook.cells if c.source.startswith("def train():")]
        train.source, n = re.subn(r"# YOUR CHANGES HERE.*", change, train.source)
        assert n == 1, train.source
    return notebook


@pytest.fixture(scope="module")
def nbgrader_course(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The course folder, as shipped, with the assignment generated (`release/`)."""
    course = tmp_path_factory.mktemp("course") / "course"
    shutil.copytree(NBGRADER_COURSE, course, ignore=shutil.ignore_patterns("__pycache__"))
    tool("nbgrader", "generate_assignment", "faster_pipeline", cwd=course)
    return course


@pytest.fixture(scope="module")
def otter_dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`otter assign`'s output for the master notebook (its own run of the solution skipped:
    the graded submissions below cover more than it)."""
    dist = tmp_path_factory.mktemp("otter") / "dist"
    tool("otter", "assign", "--no-run-tests", str(OTTER_MASTER), str(dist), cwd=dist.parent)
    return dist


def without_lines(source: str, *markers: str) -> str:
    return "\n".join(line for line in source.split("\n") if line.strip() not in markers)


def otter_solution(source: str) -> str:
    """An otter solution cell as the solution reads: no markers, no prompt for students."""
    kept, in_prompt = [], False
    for line in source.split("\n"):
        if line.endswith("# BEGIN PROMPT") or line.endswith("# END PROMPT"):
            in_prompt = line.endswith("# BEGIN PROMPT")
        elif not in_prompt and line.strip() not in ("# BEGIN SOLUTION NO PROMPT", "# END SOLUTION"):
            kept.append(line)
    return "\n".join(kept)


def test_every_version_of_the_assignment_says_the_same(
    nbgrader_course: Path, otter_dist: Path
) -> None:
    """One assignment in four files: nbgrader's release is the student notebook, its source
    without markers the solution; otter's student notebook is the student notebook with otter's
    cells, its test the autograded cell's code, its solution the solution's."""
    student, solution = cells(STUDENT), cells(SOLUTION)
    *teaching, (_, check_cell) = student
    assert cells(nbgrader_course / "release/faster_pipeline/faster_pipeline.ipynb") == student
    source = cells(NBGRADER_SOURCE)
    markers = ("### BEGIN SOLUTION", "### END SOLUTION")
    assert [(kind, without_lines(text, *markers)) for kind, text in source] == solution

    otter_student = cells(otter_dist / "student/faster_pipeline.ipynb")
    init, *rest, (_, otter_check) = otter_student
    assert (
        "grader = otter.Notebook(" in init[1] and otter_check == 'grader.check("faster_pipeline")'
    )
    assert rest == teaching
    master = nbformat.read(OTTER_MASTER, as_version=4).cells
    [test] = [c.source for c in master if c.source.startswith("def test_faster_pipeline(train):")]
    assert textwrap.dedent(test.split("\n", 1)[1]) == check_cell
    [train] = [otter_solution(c.source) for c in master if c.source.startswith("def train():")]
    assert train == solution[2][1]

    for path in (STUDENT, SOLUTION, NBGRADER_SOURCE, OTTER_MASTER):
        notebook = nbformat.read(path, as_version=4)
        assert all(not c.get("outputs") for c in notebook.cells if c.cell_type == "code"), path


def verdict(passed: bool, graded: bool) -> CheckResult:
    return CheckResult(passed, 2.5 if passed else 1.1, "1.10x (2.00x needed)", graded=graded)


def test_a_pass_is_full_points_a_fail_an_assertion_with_its_figures() -> None:
    assert_passed(verdict(passed=True, graded=True))
    with pytest.raises(AssertionError) as fail:
        assert_passed(verdict(passed=False, graded=True))
    assert str(fail.value) == "FAIL: 1.10x (2.00x needed)"
    assert not isinstance(fail.value, CannotGradeNow)


def test_cannot_grade_now_is_an_error_that_says_grade_again() -> None:
    with pytest.raises(CannotGradeNow) as declined:
        assert_passed(verdict(passed=False, graded=False))
    assert str(declined.value) == f"CANNOT GRADE NOW: 1.10x (2.00x needed) {GRADE_AGAIN}"
    assert not isinstance(declined.value, AssertionError)


def executed(ename: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell("assert_passed(check(train))")
    cell.outputs = [
        nbformat.v4.new_output("error", ename=ename, evalue="the verdict", traceback=[])
    ]
    return nbformat.v4.new_notebook(cells=[cell])


def test_nbgrader_autograde_refuses_a_check_that_could_not_grade() -> None:
    """The course's config runs refuse_ungraded right after autograde runs the notebook."""
    config = PyFileConfigLoader("nbgrader_config.py", str(NBGRADER_COURSE)).load_config()
    steps = Autograde(config=config).autograde_preprocessors
    assert import_item(steps[steps.index(Execute) + 1]) is refuse_ungraded
    failed = executed("AssertionError")
    assert refuse_ungraded(failed, {}) == (failed, {})
    with pytest.raises(CannotGradeNow, match=r"^the verdict This submission was not autograded"):
        refuse_ungraded(executed("CannotGradeNow"), {})


def otter_results(raised: str) -> GradingResults:
    """Otter's results of an exception-based test that raised ``raised``("the verdict")."""
    test_file = ExceptionTestFile.from_string(
        "from otter.test_files import test_case\n"
        "from speedlab.assignments import CannotGradeNow\n"
        'name = "faster_pipeline"\n'
        "@test_case(points=10)\n"
        "def test_faster_pipeline():\n"
        f'    raise {raised}("the verdict")\n'
    )
    test_file.run({})
    return GradingResults([test_file])


def test_otter_grading_refuses_a_check_that_could_not_grade(otter_dist: Path) -> None:
    [autograder] = (otter_dist / "autograder").glob("*.zip")
    config = json.loads(zipfile.ZipFile(autograder).read("otter_config.json"))
    assert config["plugins"] == [f"{RefuseUngraded.__module__}.{RefuseUngraded.__name__}"]
    plugin = RefuseUngraded("faster_pipeline.ipynb", {}, {})
    failed = otter_results("AssertionError")
    assert plugin.after_grading(failed) is None and failed.total == 0
    with pytest.raises(OtterRuntimeError, match=r"^CannotGradeNow: the verdict$"):
        plugin.after_grading(otter_results("CannotGradeNow"))


def submit(course: Path, students: dict[str, str | None]) -> None:
    """Put each student's submission where `nbgrader collect` puts it."""
    released = course / "release/faster_pipeline/faster_pipeline.ipynb"
    for student, change in students.items():
        folder = course / "submitted" / student / "faster_pipeline"
        folder.mkdir(parents=True)
        nbformat.write(submission(released, change), folder / "faster_pipeline.ipynb")


def refusals(log: str) -> dict[str, str]:
    """The students whose grading nbgrader autograde refused, and why, as its log says."""
    failed = re.findall(r"error processing assignment 'faster_pipeline' for student '(\w+)'", log)
    why = re.findall(r"/submitted/(\w+)/faster_pipeline\n.*?\bCannotGradeNow: ([^\n]+)", log, re.S)
    assert sorted(failed) == sorted(student for student, _ in why), log[-6000:]
    return dict(why)


def check_output(course: Path, student: str) -> str:
    """What the autograded notebook's check cell printed and raised; nothing on stderr, which
    nbgrader scores as a fail."""
    path = course / "autograded" / student / "faster_pipeline/faster_pipeline.ipynb"
    cells = nbformat.read(path, as_version=4).cells
    [check] = [c for c in cells if c.cell_type == "code" and "check(train)" in c.source]
    assert not [o for o in check.outputs if o.get("name") == "stderr"], check.outputs
    return "".join(o.get("text", "") + o.get("evalue", "") for o in check.outputs)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_nbgrader_autograde_scores_the_submissions(nbgrader_course: Path) -> None:
    submit(nbgrader_course, {student: SUBMISSIONS[student] for student in GRADED["nbgrader"]})
    graded = tool("nbgrader", "autograde", "faster_pipeline", cwd=nbgrader_course, ok=False)
    refused = refusals(graded.stdout)
    assert (graded.returncode != 0) == bool(refused), graded.stdout[-6000:]
    tool("nbgrader", "export", cwd=nbgrader_course)
    with open(nbgrader_course / "grades.csv") as f:
        scores = {row["student_id"]: float(row["score"]) for row in csv.DictReader(f)}
    for student in set(GRADED["nbgrader"]) - set(refused):
        output = check_output(nbgrader_course, student)
        if student in FAILS:
            assert FAILS[student].search(output), output
            assert scores[student] == 0.0
        else:
            assert output.startswith("PASS: "), output
            assert scores[student] == POINTS, output
    if refused:
        pytest.skip(f"nbgrader autograde refused to grade {refused}")


def otter_run(dist: Path, student: str, change: str | None) -> dict | str:
    """`otter run` on one submission: its results.json's test, or why it refused to grade."""
    folder = dist.parent / student
    folder.mkdir()
    released = dist / "student/faster_pipeline.ipynb"
    nbformat.write(submission(released, change), folder / "faster_pipeline.ipynb")
    [autograder] = (dist / "autograder").glob("*.zip")
    grade = ["otter", "run", "-a", str(autograder), "-o", ".", "faster_pipeline.ipynb"]
    graded = tool(*grade, cwd=folder, ok=False)
    if graded.returncode != 0:
        refused = re.search(r"OtterRuntimeError: CannotGradeNow: ([^\n]+)", graded.stdout)
        assert refused, graded.stdout[-6000:]
        assert GRADE_AGAIN in refused[1] and not (folder / "results.json").exists()
        return refused[1]
    results = json.loads((folder / "results.json").read_text())
    [test] = [t for t in results["tests"] if t["name"] == "faster_pipeline"]
    return test


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_otter_run_scores_the_submissions(otter_dist: Path) -> None:
    refused = {}
    for student in GRADED["otter"]:
        change = SUBMISSIONS[student]
        test = otter_run(otter_dist, student, change)
        if isinstance(test, str):
            refused[student] = test
            continue
        assert test["max_score"] == POINTS
        if student in FAILS:
            assert FAILS[student].search(test["output"]), test["output"]
            assert test["score"] == 0
        else:
            assert test["score"] == POINTS, test["output"]
    if refused:
        pytest.skip(f"otter run refused to grade {refused}")
