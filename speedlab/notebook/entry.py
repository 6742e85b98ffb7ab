"""One way into a sweep, for every front end: ``speedlab.profile_train``, ``%%profile_train``
and the panel's Run button.

``plan`` reads ``profile_train``'s keyword arguments (each knob a value or a list of values,
the Trainer's other arguments, the run controls), refuses a bad one in one line before anything
runs and builds the sweep's runs. ``profile`` takes the same keywords, runs that plan with the
front end's live view, stores each run as it ends and keeps the result as ``speedlab.last``.
The magic parses its options into these keywords; the panel passes the one configuration its
controls show (``one_run``).

It lives beside the live views and ``speedlab.last`` that it uses: ``speedlab.api`` imports it,
so the magic and the panel, in this package, reach it without importing ``speedlab.api`` (which
would close an import cycle between the two).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from speedlab.notebook.guessing import Asker
from speedlab.notebook.live import choose_view
from speedlab.notebook.session import remember
from speedlab.results.knobs import KNOBS, KnobError, Knobs
from speedlab.results.sweep import SweepResult
from speedlab.run.intercept import RunControls
from speedlab.run.sweep import SweepSpec, plan_sweep, run_sweep
from speedlab.run.tracebacks import print_user_traceback
from speedlab.run.watch import LiveView


def plan(
    *,
    trainer: Mapping[str, Any] | None = None,
    steps: int | None = None,
    time: float | None = None,
    warmup: int = 5,
    repeat: int = 1,
    name: str | None = None,
    **knobs: Any,
) -> SweepSpec:
    """The checked sweep for ``profile_train``'s keywords: one ``Knobs`` per run, baseline first.

    ``knobs`` are the knob keywords (``workers=[0, 2]``); a knob that is None is left as the
    code has it. Raises ``KnobError`` (one line: option, value, what is allowed) for an unknown
    knob or a bad value, before anything runs.
    """
    controls = RunControls(steps=steps, time=time, warmup=warmup)
    return plan_sweep(knobs, trainer=trainer, controls=controls, repeat=repeat, name=name)


def profile(
    train_fn: Callable[[], Any],
    *,
    live: bool = True,
    predict: bool = False,
    store: str | Path | bool | None = None,
    view: LiveView | None = None,
    source: str | None = None,
    show_error: Callable[[BaseException], None] = print_user_traceback,
    **options: Any,
) -> SweepResult:
    """Run ``train_fn`` once per combination of ``options`` (``plan``'s keywords); the result
    is also kept as ``speedlab.last``.

    Args:
        train_fn: a zero-argument callable with ordinary Lightning training.
        live: show this front end's live view (``choose_view``) while training.
        predict: ask the learner's guess before each run after the baseline (``Asker``).
        store: the run store path; None for the default, False to store nothing.
        view: a live view of the caller's own (the panel's), in place of ``live``'s.
        source: the cell's text, whose hash is stored with the sweep.
        show_error: shows the error of a run that failed (the magic shows the user's
            traceback with IPython, the panel in its error area); default: printed to stderr.
        options: ``profile_train``'s knob, Trainer and run-control keywords.
    """
    for option, value in (("live", live), ("predict", predict)):
        if not isinstance(value, bool):
            raise KnobError(option, value, "True or False", given=f"{option}={value!r}")
    if not (store is None or isinstance(store, (bool, str, Path))):
        allowed = "a path, None for the default store, or False to store nothing"
        raise KnobError("store", store, allowed, given=f"store={store!r}")
    spec = plan(**options)
    sweep = run_sweep(
        train_fn,
        spec,
        view=view if view is not None else choose_view(live),
        store=store,
        source=source,
        show_error=show_error,
        ask=Asker() if predict else None,
    )
    return remember(sweep)


def one_run(knobs: Knobs, controls: RunControls, *, name: str | None = None) -> dict[str, Any]:
    """``plan``'s keywords for exactly one run: ``knobs`` under ``controls``."""
    values = {knob: getattr(knobs, knob) for knob in KNOBS}
    return {
        # One value each, in a list: a value that is itself a list is not a sweep of it.
        **{knob: [value] for knob, value in values.items() if value is not None},
        "trainer": {key: [value] for key, value in knobs.trainer.items()},
        "steps": controls.steps,
        "time": controls.time,
        "warmup": controls.warmup,
        "name": name,
    }
