"""The Python API's keywords: one per knob of the knob table, the magic's options among them."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from IPython.core.magic_arguments import parse_argstring

import speedlab
from speedlab.notebook.entry import plan
from speedlab.notebook.magics import FRONT_END_OPTIONS, SpeedlabMagics, sweep_options
from speedlab.results.knobs import KNOBS, KnobError, Knobs

KEYWORDS = inspect.signature(speedlab.profile_train).parameters
#: A value for each knob whose spec lists no choices (a new one needs its example here).
EXAMPLES = {"workers": "0", "batch_size": "8", "devices": "1", "strategy": "auto"}


def test_every_knob_is_a_keyword_of_profile_train() -> None:
    for field in dataclasses.fields(Knobs):
        assert field.name in KEYWORDS, f"Knobs.{field.name} is no keyword of profile_train"
        assert KEYWORDS[field.name].kind is inspect.Parameter.KEYWORD_ONLY
        assert KEYWORDS[field.name].default is None  # None: as the cell wrote it
    assert set(KNOBS) <= {f.name for f in dataclasses.fields(Knobs)}


def test_every_option_of_the_magic_is_a_keyword_of_profile_train() -> None:
    parser = SpeedlabMagics.profile_train.parser
    words = []
    for action in parser._actions:
        if not action.option_strings or action.dest in ("help", *FRONT_END_OPTIONS):
            continue
        flag = action.option_strings[-1]
        if action.nargs == 0:  # --no-live
            words.append(flag)
        elif action.dest in KNOBS:
            spec = KNOBS[action.dest]
            words += [flag, spec.choices[0] if spec.choices else EXAMPLES[action.dest]]
        elif action.dest == "trainer":
            words += [flag, "limit_val_batches=0"]
        else:
            words += [flag, "3"]
    line = " ".join(words)
    args = parse_argstring(SpeedlabMagics.profile_train, line)
    options = sweep_options(args)
    given = {a.dest for a in parser._actions if a.option_strings} - {"help", *FRONT_END_OPTIONS}
    assert set(options) <= set(KEYWORDS) - {"train_fn"}, set(options) - set(KEYWORDS)
    assert {"live" if dest == "no_live" else dest for dest in given} == set(options)
    assert set(KNOBS) <= set(options)  # the line set every knob, and each reached a keyword
    assert options["live"] is False and options["trainer"] == {"limit_val_batches": [0]}


def test_profile_train_hands_every_keyword_to_the_sweep() -> None:
    """A cell that never trains still runs once per combination, with the knobs it was given."""
    knobs = {
        name: spec.check(spec.choices[0] if spec.choices else EXAMPLES[name])
        for name, spec in KNOBS.items()
    }
    sweep = speedlab.profile_train(
        lambda: None,
        **knobs,
        trainer={"limit_val_batches": [0]},
        steps=3,
        time=60,
        warmup=1,
        repeat=1,
        name="every keyword",
        live=False,
        store=False,
    )
    [run] = sweep.runs
    assert run.knobs == Knobs(**knobs, trainer={"limit_val_batches": 0})
    assert sweep.name == "every keyword" and speedlab.last is sweep
    assert "never called trainer.fit" in run.error


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"workers": -1}, "workers=-1: not allowed. Expected an integer >= 0 or auto."),
        ({"precision": ["32-true", "12"]}, "precision='12': not allowed. Expected one of"),
        ({"pin_memory": 2}, "pin_memory=2: not allowed. Expected on or off."),
        ({"steps": 0}, "steps=0: not allowed. Expected an integer >= 1."),
        ({"repeat": 0}, "repeat=0: not allowed. Expected an integer >= 1."),
        ({"predict": "yes"}, "predict='yes': not allowed. Expected True or False."),
        ({"live": "no"}, "live='no': not allowed. Expected True or False."),
        ({"store": 5}, "store=5: not allowed. Expected a path, None for the default store"),
        ({"name": 3}, "name=3: not allowed. Expected a text label."),
        ({"trainer": [("max_epochs", 1)]}, "trainer=[('max_epochs', 1)]: not allowed. Expected a"),
        (
            {"trainer": {"max_epoch": 1}},
            "--trainer max_epoch=1: not allowed. Expected an argument of Lightning's Trainer",
        ),
        # a knob's own Trainer argument: the knob's value would win over it, or it over the knob
        (
            {"trainer": {"precision": "bf16-mixed"}},
            "--trainer precision=bf16-mixed: not allowed. Expected a Trainer argument no knob "
            "sets: use --precision.",
        ),
        # every run would stop at --steps, labelled max_steps=2 and 6
        (
            {"trainer": {"max_steps": [2, 6]}, "steps": 4},
            "--trainer max_steps=2,6: not allowed. Expected max_steps or --steps 4, not both",
        ),
        (
            {"trainer": {"max_time": "00:00:01:00"}, "time": 30},
            "--trainer max_time=00:00:01:00: not allowed. Expected max_time or --time 30.0",
        ),
    ],
)
def test_a_bad_keyword_is_refused_in_one_line_before_anything_runs(options, message) -> None:
    calls = []
    with pytest.raises(KnobError) as caught:
        speedlab.profile_train(
            lambda: calls.append(1), **{"live": False, "store": False, **options}
        )
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    assert calls == []


def test_the_plan_refuses_a_knob_the_table_does_not_have() -> None:
    with pytest.raises(KnobError) as caught:
        plan(warp=9)
    assert str(caught.value).startswith("--warp 9: not allowed. Expected a known knob: precision")
