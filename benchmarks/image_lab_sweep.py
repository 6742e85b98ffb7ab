"""The best configuration's speedup over the baseline on the image lab, measured in one sweep.

.venv/bin/python benchmarks/image_lab_sweep.py [--steps 40] [--repeat 2]
"""

from __future__ import annotations

import argparse

import lightning.pytorch as pl

from speedlab.api import profile_train
from speedlab.labs import QUIET_TRAINER, image_lab


def train() -> None:
    model, data = image_lab()
    trainer = pl.Trainer(
        max_epochs=-1,
        limit_val_batches=0,
        **QUIET_TRAINER,
    )
    trainer.fit(model, data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    sweep = profile_train(
        train,
        workers=[0, 1, 2],
        preload=["off", "ram"],
        steps=args.steps,
        repeat=args.repeat,
        live=False,
        store=False,
    )
    print(sweep.table())
    best = sweep.best
    print(
        f"best: {best.label(sweep.baseline)} at {best.samples_per_s:.0f} samples/s, "
        f"{best.speedup:.2f}x the baseline ({sweep.baseline.samples_per_s:.0f} samples/s)"
    )


if __name__ == "__main__":
    main()
