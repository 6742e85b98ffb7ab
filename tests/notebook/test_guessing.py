"""The learner's guess (``--predict``): asked through a real kernel's input requests, as a
notebook front end answers them, and skipped, said once, where no one can answer; the line the
live views show before a run."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from speedlab.notebook.guessing import NO_ONE, QUESTION, Asker, said_before, said_line
from speedlab.notebook.live import NotebookView, TerminalView
from speedlab.notebook.panel_runs import PanelRun
from speedlab.results.knobs import Knobs
from speedlab.results.prediction import ALLOWED_GUESSES, Guess, Prediction
from speedlab.run.intercept import RunControls
from speedlab.run.sweep import plan_sweep
from speedlab.run.watch import LiveView
from tests.records import hand_over_runs

SETUP = """\
%load_ext speedlab
import lightning.pytorch as pl
import speedlab
from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader
from speedlab.notebook.guessing import said_line

def train():
    loader = known_cost_loader(n=400, batch_size=8, sleep_s=0.001)
    pl.Trainer(max_epochs=1, accelerator="cpu", **QUIET_TRAINER).fit(KnownCostModel(0.002), loader)
"""
SWEEP = "%%profile_train --workers 0,1,2 --steps 10 --warmup 2 --predict\ntrain()\n"
# What the sweep kept: each run's guess, and the line said before each run after the baseline.
KEPT = """\
print([run.guess.text() if run.guess else None for run in speedlab.last.runs])
base = speedlab.last.runs[0]
for run in speedlab.last.runs[1:]:
    print("SAID", said_line(run.label(base), run.prediction, run.guess))
"""
BAD = "guess 'sooner': not allowed. Expected " + ALLOWED_GUESSES + "."


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory, lab_cache: Path) -> Iterator[object]:
    """A real kernel, working and storing its runs in a folder of its own, speedlab loaded."""
    from jupyter_client.manager import start_new_kernel

    folder = tmp_path_factory.mktemp("kernel")
    env = os.environ | {
        "SPEEDLAB_STORE": str(folder / "runs.sqlite"),
        "SPEEDLAB_CACHE": str(lab_cache),
    }
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(folder), env=env)
    run(client, SETUP)
    yield client
    client.stop_channels()
    manager.shutdown_kernel(now=True)


def run(client, code: str, answers: list[str] | None = None) -> tuple[list[str], str, list[str]]:
    """Run ``code`` in the kernel; where ``answers`` are given, the front end answers its
    input requests with them in turn (else it runs as nbconvert does, ``allow_stdin=False``).
    The prompts asked, what the cell printed, and the text of each of its displays and their
    updates, in order."""
    prompts: list[str] = []
    messages: list[dict] = []

    def answer(message: dict) -> None:
        prompts.append(message["content"]["prompt"])
        client.input(answers.pop(0))

    reply = client.execute_interactive(
        code,
        allow_stdin=answers is not None,
        stdin_hook=answer,
        output_hook=messages.append,
        timeout=180,
    )
    assert reply["content"]["status"] == "ok", reply["content"]
    printed = "".join(
        m["content"]["text"]
        for m in messages
        if m["msg_type"] == "stream" and m["content"]["name"] == "stdout"
    )
    shown = [
        m["content"]["data"].get("text/plain", "")
        for m in messages
        if m["msg_type"] in ("display_data", "update_display_data")
    ]
    return prompts, printed, shown


def question(label: str) -> str:
    return QUESTION.format(label=label, allowed=ALLOWED_GUESSES)


def test_the_notebook_asks_each_run_refuses_a_bad_guess_and_takes_a_blank_as_none(kernel) -> None:
    answers = ["sooner", "faster", ""]
    prompts, printed, shown = run(kernel, SWEEP, answers)
    assert answers == []  # every question answered, and no more asked
    assert prompts == [question("workers=1"), question("workers=1"), question("workers=2")]
    assert printed.count(BAD) == 1 and NO_ONE[:20] not in printed
    _, kept, _ = run(kernel, KEPT)
    guesses, *said = kept.splitlines()
    assert guesses == "[None, 'faster', None]"
    assert said[0].startswith("SAID workers=1: your guess faster; speedlab predicts ")
    assert said[1].startswith("SAID workers=2: speedlab predicts ")
    for line in said:  # each run's output starts with its line, kept when the run ended
        assert any(text.startswith(line[5:] + "\n") for text in shown)


def test_a_notebook_run_without_input_skips_every_question_and_says_so_once(kernel) -> None:
    prompts, printed, shown = run(kernel, SWEEP)  # as nbconvert, papermill and CI run it
    assert prompts == []
    assert printed.count("--predict: ") == 1
    assert NO_ONE.format(why="the notebook runs without input") in printed
    _, kept, _ = run(kernel, KEPT)
    guesses, *said = kept.splitlines()
    assert guesses == "[None, None, None]"
    for line in said:
        assert "your guess" not in line and any(t.startswith(line[5:] + "\n") for t in shown)


def test_a_terminal_is_asked_again_after_a_bad_guess(monkeypatch, capsys) -> None:
    main, secondary = os.openpty()
    with os.fdopen(secondary, "r") as terminal:
        monkeypatch.setattr(sys, "stdin", terminal)
        os.write(main, b"sooner\n1.5x\n\n")
        asker = Asker()
        assert asker("workers=2") == Guess.parse("1.5x")
        assert asker("workers=4") is None  # a blank answer: no guess, and the next is asked
        os.write(main, b"slower\n")
        assert asker("workers=8") == Guess.parse("slower")
    os.close(main)
    out = capsys.readouterr().out
    assert out.count(BAD) == 1 and out.count("Your guess for ") == 4


def test_a_script_without_a_terminal_never_waits_and_says_so_once(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("faster\n"))  # piped in: not a learner
    asker = Asker()
    assert asker("workers=1") is None and asker("workers=2") is None
    assert capsys.readouterr().out == NO_ONE.format(why="stdin is not a terminal") + "\n"


MADE = Prediction(2.0, "workers=2: loading spread over 2 workers, so about 2.0x", 2.0, 2.0)
NOT_MADE = Prediction(None, "compile=on: the split of a step does not show what fusing saves")


@pytest.mark.parametrize(
    ("label", "prediction", "guess", "line"),
    [
        (
            "workers=2",
            MADE,
            Guess.parse("faster"),
            "workers=2: your guess faster; speedlab predicts about 2.0x (loading spread over 2 "
            "workers, so about 2.0x)",
        ),
        (
            "workers=2",
            MADE,
            None,
            "workers=2: speedlab predicts about 2.0x (loading spread over 2 workers, so about 2.0x)",
        ),
        (
            "compile=on",
            NOT_MADE,
            Guess.parse("3"),
            "compile=on: your guess 3.0x; speedlab makes no prediction: the split of a step does "
            "not show what fusing saves",
        ),
        ("workers=1", None, None, "workers=1: speedlab makes no prediction"),
    ],
)
def test_the_line_said_before_a_run_labels_each_prediction(label, prediction, guess, line) -> None:
    assert said_line(label, prediction, guess) == line


def test_the_live_views_show_the_line_before_the_run_it_is_of() -> None:
    stream = io.StringIO()
    TerminalView(stream).predicted("workers=2", MADE, None)
    assert stream.getvalue() == said_line("workers=2", MADE, None) + "\n"

    bundles: list[dict] = []
    view = NotebookView(publish=lambda bundle: bundles.append(bundle), timeline=False)
    view.start_sweep(plan_sweep({"workers": [0, 2, 4]}, controls=RunControls(steps=1)))
    view.start_run(Knobs(workers=0), 0)
    view.predicted("workers=2", MADE, Guess.parse("same"))
    view.start_run(Knobs(workers=2), 0)
    view.start_run(Knobs(workers=4), 0)  # nothing said of it
    first, second, third = bundles
    line = said_line("workers=2", MADE, Guess.parse("same"))
    assert second["text/plain"] == f"{line}\nrun 2/3 workers=2"
    assert second["text/html"].startswith(f'<div class="speedlab-said">{line}</div><code>')
    assert line not in first["text/plain"] + third["text/plain"]


def test_a_panel_run_is_predicted_with_the_latest_rows_hand_over() -> None:
    """As a sweep's: the reading taken as the row before it ended, not the baseline's."""
    base, later = hand_over_runs()
    rows = [PanelRun(base, baseline=True, stopped=False)]
    knobs, view = Knobs(workers=3), LiveView()
    first = said_before(rows, knobs, None, view, baseline=False).predictions[None]
    rows.append(PanelRun(later, baseline=False, stopped=False))
    then = said_before(rows, knobs, None, view, baseline=False).predictions[None]
    assert (first.data_time, then.data_time) == pytest.approx((0.001, 0.004))
