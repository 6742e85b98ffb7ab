"""The faster-pipeline assignment's material: the slow pipeline and the untouched reference."""

from __future__ import annotations

import math
from typing import Any

#: Slow storage of the assignment: every image waits this long before its first byte.
LATENCY_S = 0.008


def slow_pipeline() -> tuple[Any, Any]:
    """The assignment's model and data: the image lab on slow storage, loading in the main process."""
    from speedlab.labs import ThrottledOpener, image_lab

    return image_lab(
        throttle=ThrottledOpener(bytes_per_s=math.inf, latency_s=LATENCY_S), num_workers=0
    )


def reference_train() -> None:
    """The untouched pipeline: what the student's version is measured against."""
    import lightning.pytorch as pl

    from speedlab.labs import QUIET_TRAINER

    model, data = slow_pipeline()
    trainer = pl.Trainer(max_epochs=1, limit_val_batches=0, **QUIET_TRAINER)
    trainer.fit(model, data)
