"""The learner's guess of a run, taken before it runs, and the line that shows it.

Students who predict a demonstration's outcome before they watch it understand it better than
those who only watch (Crouch, Fagen, Callan and Mazur, Am. J. Phys. 72, 835, 2004). So
``%%profile_train --predict`` (``profile_train(predict=True)``) asks for a guess before each run
after the baseline, and the panel takes one from its "your guess" field. The guess is taken
before speedlab's prediction is shown, so that the figure cannot sway it
(speedlab.run.sweep.before_run); the live views then show both in one line, each labelled.

A notebook run with no one to answer (nbconvert, papermill, CI: the kernel refuses input) or a
script without a terminal never waits: it skips the questions and says so once.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from speedlab.results.knobs import Knobs
from speedlab.results.prediction import ALLOWED_GUESSES, Guess, GuessError, Prediction
from speedlab.run.watch import LiveView

if TYPE_CHECKING:
    from speedlab.run.sweep import Before

QUESTION = "Your guess for {label} against the baseline ({allowed}; Enter for none): "
NO_ONE = "--predict: no one to ask here ({why}): speedlab's predictions only."


class Asker:
    """Asks the learner's guess for a run with ``input()``: the notebook's input box in a
    kernel, the terminal elsewhere (``speedlab.run.sweep.Ask``).

    A guess that cannot be read is refused in its one line and asked again; an empty answer
    gives none. Where no one can answer, it stops asking and says so once.
    """

    def __init__(self) -> None:
        self.alone = False

    def __call__(self, label: str) -> Guess | None:
        if self.alone:
            return None
        from IPython.core.error import StdinNotImplementedError

        why = None if _in_kernel() or _isatty(sys.stdin) else "stdin is not a terminal"
        while why is None:
            try:
                said = input(QUESTION.format(label=label, allowed=ALLOWED_GUESSES))
            except StdinNotImplementedError:  # the kernel's input without a front end to answer
                why = "the notebook runs without input"
            except EOFError:
                why = "the input ended"
            else:
                if not said.strip():
                    return None
                try:
                    return Guess.parse(said)
                except GuessError as err:
                    print(err)
        self.alone = True
        print(NO_ONE.format(why=why))
        return None


def _in_kernel() -> bool:
    """Whether this runs in a Jupyter kernel, whose ``input`` asks the front end."""
    ipython = sys.modules.get("IPython")
    return ipython is not None and getattr(ipython.get_ipython(), "kernel", None) is not None


def _isatty(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def said_line(label: str, prediction: Prediction | None, guess: Guess | None) -> str:
    """The line a live view shows before a run: the learner's guess, if any, and speedlab's
    prediction with its reason, or why it makes none; each labelled, never as a measurement."""
    parts = [f"your guess {guess.text()}"] if guess is not None else []
    reason = prediction.reason.removeprefix(f"{label}: ") if prediction is not None else ""
    if prediction is not None and prediction.made:
        parts.append(f"speedlab predicts {prediction.text()} ({reason})")
    else:
        parts.append("speedlab makes no prediction" + (f": {reason}" if reason else ""))
    return f"{label}: " + "; ".join(parts)


def guess_field() -> Any:
    """The panel's "your guess" field, usable once there is a baseline to guess against."""
    import ipywidgets as widgets

    return widgets.Text(
        placeholder="faster, same, slower, 2",
        description="your guess",
        tooltip=f"Before Run: how will this run compare with the baseline? ({ALLOWED_GUESSES})",
        disabled=True,
        layout=widgets.Layout(width="260px"),
    )


def typed_guess(field: Any) -> Guess | None:
    """The guess typed in the panel's field, which is then cleared (a guess is for one run);
    None where it is empty. Raises ``GuessError`` (one line) for one that cannot be read."""
    if not field.value.strip():
        return None
    guess = Guess.parse(field.value)
    field.value = ""
    return guess


def said_before(
    rows: Sequence[Any], knobs: Knobs, guess: Guess | None, view: LiveView, *, baseline: bool
) -> Before:
    """What is said of a panel run before it runs, as a sweep says it of its runs
    (``before_run``): nothing of a ``baseline`` run (it is what the others are judged by); of
    another, speedlab's prediction from the first baseline result of each fit of ``rows`` (the
    panel's ``PanelRun``s so far), shown by ``view`` beside ``guess``, with the latest run's
    hand-over reading. The engine is imported here, not with the module: the live views use
    this module and run without torch."""
    from speedlab.run.sweep import Before, before_run

    if baseline:
        return Before({}, None)
    first: dict[int | None, Any] = {}
    for row in rows:
        if row.baseline and row.measured:  # a failed first run is no baseline
            first.setdefault(row.result.fit, row.result)
    latest = [row.result for row in rows[-1:]]  # its hand-over reading: the nearest
    return before_run(list(first.values()), knobs, ask=lambda _: guess, view=view, latest=latest)
