"""Predictions and guesses as results: what a learner may type, how a prediction reads and
judges a measurement, and that both come back from the run store's JSON."""

from __future__ import annotations

import math

import pytest

from speedlab.results.prediction import (
    ALLOWED_GUESSES,
    Direction,
    Guess,
    GuessError,
    Prediction,
)
from speedlab.results.run import RunResult


@pytest.mark.parametrize(
    ("typed", "direction", "speedup"),
    [
        ("faster", Direction.faster, None),
        ("  Faster ", Direction.faster, None),
        ("the  same", Direction.same, None),
        ("slower", Direction.slower, None),
        ("2", Direction.faster, 2.0),
        ("1.5x", Direction.faster, 1.5),
        ("0.8X", Direction.slower, 0.8),
        ("1.02", Direction.same, 1.02),
    ],
)
def test_a_guess_is_a_direction_or_a_number(typed: str, direction: str, speedup: float) -> None:
    guess = Guess.parse(typed)
    assert (guess.direction, guess.speedup) == (direction, speedup)


@pytest.mark.parametrize("typed", ["", "much faster", "0", "-2", "2x faster", "nan"])
def test_anything_else_is_refused_in_one_line_naming_what_is_allowed(typed: str) -> None:
    with pytest.raises(GuessError) as refused:
        Guess.parse(typed)
    message = str(refused.value)
    assert "\n" not in message and repr(" ".join(typed.split())) in message
    assert message.endswith(f"Expected {ALLOWED_GUESSES}.")


def test_a_guess_holds_by_its_direction_or_within_a_quarter() -> None:
    assert Guess.parse("faster").right(1.8, decided=True)
    assert not Guess.parse("faster").right(1.8, decided=False)  # within noise: the same
    assert Guess.parse("same").right(1.3, decided=False)
    assert Guess.parse("2").right(2.4, decided=True) and not Guess.parse("2").right(1.4, True)
    assert Guess.parse("slower").right(None, decided=False) is None


def test_a_prediction_reads_as_one_figure_or_a_range_and_judges_a_measurement() -> None:
    point = Prediction(3.0, "why", 3.0, 3.0)
    ranged = Prediction(1.5, "why", 1.0, 2.0)
    assert point.text() == "about 3.0x" and ranged.text() == "1.0x to 2.0x"
    assert Prediction(None, "compile=on: cannot").text() == "none"
    assert ranged.off_by(1.7) == 0.0 and ranged.off_by(3.0) == pytest.approx(0.5)
    assert point.off_by(2.0) == pytest.approx(0.5) and point.off_by(3.3) == pytest.approx(0.1)
    assert point.off_by(math.nan) is None and point.off_by(None) is None


def test_both_come_back_from_the_stored_json() -> None:
    run = RunResult(
        prediction=Prediction(1.5, "workers=2: ...", 1.2, 1.8, 0.001, 0.010),
        guess=Guess.parse("2x"),
    )
    back = RunResult.from_dict(run.to_dict())
    assert back.prediction == run.prediction and back.guess == run.guess
    assert isinstance(back.guess.direction, Direction)
    assert RunResult.from_dict(RunResult().to_dict()).prediction is None
