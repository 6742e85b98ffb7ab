"""A run that speedlab ends on purpose ends as complete in Lightning's progress bar.

``--steps``, ``--time`` and the panel's Stop end training part-way through an epoch. Lightning's
TQDM bar then closes with fewer steps than the epoch has, and in a notebook tqdm paints such a
bar red ("danger"), as it does for a crash. When speedlab itself ended the epoch early, the bar's
total is set to the steps it ran just before Lightning closes it, so it closes as finished. An
epoch ended by anything else (the user's own error, ``max_steps`` or callbacks) is left as
Lightning draws it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from typing_extensions import override

from speedlab.measure.compat import callback_bases, lightning_packages
from speedlab.measure.unlisted import UnlistedInSteps


def complete_progress_bar(trainer: Any) -> None:
    """Make the training bar's count and total the steps this epoch ran, so that closing it
    reads as done (a bar refreshed every N steps may lag behind the last ones)."""
    try:
        bar = trainer.progress_bar_callback.train_progress_bar
    except (AttributeError, TypeError):  # no TQDM bar, or none started yet
        return
    ran = trainer.fit_loop.epoch_loop.batch_progress.current.completed  # this epoch's batches
    if not getattr(bar, "disable", True) and bar.total and ran < bar.total:
        bar.n = bar.total = ran


def time_is_up(trainer: Any) -> bool:
    """Whether the Trainer's ``max_time`` (Lightning's Timer callback) has run out."""
    timers = tuple(pkg.callbacks.Timer for pkg in lightning_packages())
    for callback in trainer.callbacks:
        if isinstance(callback, timers):
            remaining = callback.time_remaining()
            if remaining is not None and remaining <= 0:
                return True
    return False


class PlannedStop(UnlistedInSteps, *callback_bases()):  # type: ignore[misc]
    """Lightning Callback: when ``planned(trainer)`` says speedlab ended the epoch, the
    progress bar closes as complete. It must come before the progress bar among the Trainer's
    callbacks (its hook runs first).

    A stop asked for (the panel's Stop) also ends a validation pass at its next batch, as the
    end of its data would: skipping the passes still to come (``Intercept.stop``) left one under
    way to run to its end, 5 s for 20 batches in the audit of 2026-12-01.

    Args:
        asked: tells whether a stop was asked for.
        planned: tells, at the end of an epoch, whether speedlab's own stop ended it; by
            default, whether a stop was asked for (a Trainer built before the run keeps its own
            ``max_steps`` and ``max_time``).
    """

    # Only the end of an epoch and validation matter: the per-step hooks are not dispatched
    # (Lightning skips a hook that is not callable), and while a probe's fit trains its steps
    # this callback is not listed (speedlab.measure.unlisted).
    on_train_batch_start = on_train_batch_end = None  # type: ignore[assignment]
    on_before_backward = on_after_backward = None  # type: ignore[assignment]
    on_before_optimizer_step = on_before_zero_grad = None  # type: ignore[assignment]
    on_validation_batch_end = None  # type: ignore[assignment]

    def __init__(
        self, asked: Callable[[], bool], planned: Callable[[Any], bool] | None = None
    ) -> None:
        super().__init__()
        self.asked = asked
        self.planned = planned or (lambda _trainer: asked())

    @override
    def on_validation_batch_start(self, *args: Any, **kwargs: Any) -> None:
        if self.asked():  # Lightning's evaluation loop ends the pass on StopIteration
            raise StopIteration

    @override
    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        # Lightning closes the bar at this epoch's end (leave=True) or at the end of training,
        # which comes right after the last epoch's end: either way after this hook.
        if self.planned(trainer):
            complete_progress_bar(trainer)
