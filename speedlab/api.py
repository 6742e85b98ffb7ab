"""The Python API: ``profile_train`` and ``autotune``, the same engine as ``%%profile_train``.

They check every option, run through speedlab.run with the live view of this front end (a
terminal line, or a chart in a notebook) and keep the result as ``speedlab.last``.
``profile_train`` is the way into a sweep that the magic and the panel take too
(speedlab.notebook.entry): its keywords are the knob table's, and a test checks that they stay
so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from speedlab.notebook.entry import profile
from speedlab.notebook.live import choose_view
from speedlab.notebook.session import remember
from speedlab.results.knobs import KnobError
from speedlab.results.sweep import SweepResult
from speedlab.run import autotuner


def profile_train(
    train_fn: Callable[[], Any],
    *,
    precision: str | Iterable[str] | None = None,
    compile: str | bool | Iterable[str | bool] | None = None,
    workers: int | str | Iterable[int | str] | None = None,
    pin_memory: bool | Iterable[bool] | None = None,
    persistent_workers: bool | Iterable[bool] | None = None,
    matmul: str | Iterable[str] | None = None,
    preload: str | Iterable[str] | None = None,
    batch_size: int | Iterable[int] | None = None,
    devices: int | Iterable[int] | None = None,
    strategy: str | Iterable[str] | None = None,
    trainer: Mapping[str, Any] | None = None,
    steps: int | None = None,
    time: float | None = None,
    warmup: int = 5,
    repeat: int = 1,
    name: str | None = None,
    live: bool = True,
    predict: bool = False,
    store: str | Path | bool | None = None,
) -> SweepResult:
    """Profile ordinary Lightning training under each combination of knob values.

    Args:
        train_fn: a zero-argument callable that builds a Trainer and calls ``fit``.
        precision, compile, workers, pin_memory, persistent_workers, matmul, preload,
            batch_size, devices, strategy: a value or a list of values per knob; the runs are
            the cartesian product, the first combination is the baseline. ``None`` keeps the
            code's own setting.
        trainer: other Trainer arguments, each a value or a list of values.
        steps: stop each run after this many training steps.
        time: stop each run after this many seconds.
        warmup: steps left out of the steady-state figures (default 5).
        repeat: run each combination this many times; figures are medians.
        name: a label stored with the sweep.
        live: show a live view while training.
        predict: before each run after the baseline, ask the learner's guess of its speedup
            (faster, same, slower or a number), shown beside speedlab's own prediction and
            kept as ``run.guess``. Where no one can answer (a notebook run by nbconvert, a
            script without a terminal) the questions are skipped, once said.
        store: the run store path; ``None`` for the default (``$SPEEDLAB_STORE`` or
            ``.speedlab/runs.sqlite``), ``False`` to store nothing. Each run is stored as it
            ends and the whole sweep when it ends: ``speedlab.load(sweep_id)`` gives it back.

    Each knob keyword is a field of ``speedlab.Knobs`` and an option of ``%%profile_train``,
    which runs the same way.

    Example::

        result = speedlab.profile_train(train, workers=[0, 2], steps=40)
        print(result.table())
        again = speedlab.load(speedlab.history(1)[0]["sweep_id"])  # the same text
    """
    if not callable(train_fn):
        raise TypeError(f"profile_train(train_fn={train_fn!r}): expected a zero-argument callable.")
    with keyword_errors():
        return profile(
            train_fn,
            precision=precision,
            compile=compile,
            workers=workers,
            pin_memory=pin_memory,
            persistent_workers=persistent_workers,
            matmul=matmul,
            preload=preload,
            batch_size=batch_size,
            devices=devices,
            strategy=strategy,
            trainer=trainer,
            steps=steps,
            time=time,
            warmup=warmup,
            repeat=repeat,
            name=name,
            live=live,
            predict=predict,
            store=store,
        )


def autotune(
    train_fn: Callable[[], Any],
    *,
    budget_s: float | None = None,
    steps: int | None = None,
    live: bool = False,
    **options: Any,
) -> SweepResult:
    """Search for faster knobs from the cell's own settings, one change at a time.

    ``budget_s``: seconds for the whole search (None: no limit); ``steps``: each run's limit,
    as ``--steps``; ``live`` shows each run in this front end's live view. Every other option
    is ``speedlab.run.autotuner.autotune``'s: ``time`` (each run's limit in seconds, as
    ``--time``), ``start`` (knob
    values to start from, as ``{"workers": 2}``), ``repeat``, ``warmup``, ``store`` and
    ``name``. Its ``notes`` tell each step with the doctor's evidence, and its ``best`` is the
    configuration the search kept.

    Example::

        result = speedlab.autotune(train, budget_s=120, steps=40)
        print("\\n".join(result.notes))
    """
    if not isinstance(live, bool):
        raise KnobError("live", live, "True or False", given=f"live={live!r}")
    view = choose_view(live)
    with keyword_errors():
        return remember(
            autotuner.autotune(train_fn, budget_s=budget_s, steps=steps, view=view, **options)
        )


@contextlib.contextmanager
def keyword_errors() -> Iterator[None]:
    """A refused option in the Python API's words: ``workers=True``, not ``--workers True``."""
    try:
        yield
    except KnobError as err:
        raise err.as_keyword() from None
