"""Benchmark: a knob that cannot act is never called faster or slower.

``--matmul high`` on a CPU without TF32 (every x86 CPU) computes exactly what ``highest``
does. The script profiles the known-cost model with ``--matmul highest,high`` ``--rounds``
times, quiet and then beside a busy loop on one core, and prints how often the sweep's
comparison says ``within noise``, ``faster`` or ``slower``, next to what the spread of the
measurements alone would have said (the same comparison without the rule that knobs which
changed nothing are never credited). Acceptance: within noise in at least 9 of 10 quiet
comparisons, and never faster or slower under load.

Usage::

    python benchmarks/inert_knob.py [--rounds 10] [--steps 30]

Exits with 1 when the acceptance fails, with 2 when the level acts on this machine's CPU.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
from dataclasses import replace

import lightning.pytorch as pl

import speedlab
from speedlab.analysis.compare import compare
from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader
from speedlab.measure.numerics import cpu_matmul_changes


def train() -> None:
    pl.seed_everything(0, verbose=False)  # both runs train the same weights on the same batches
    loader = known_cost_loader(n=4000, batch_size=32, features=256)
    pl.Trainer(accelerator="cpu", max_epochs=1, **QUIET_TRAINER).fit(
        KnownCostModel(step_s=0.004, features=256), loader
    )


def verdicts(rounds: int, steps: int) -> tuple[collections.Counter, collections.Counter, bool]:
    """Verdicts of ``rounds`` sweeps: by the rule, by the spread alone; identical losses."""
    ruled, spread, same = collections.Counter(), collections.Counter(), True
    for _ in range(rounds):
        sweep = speedlab.profile_train(
            train, matmul=["highest", "high"], steps=steps, live=False, store=False
        )
        base, high = sweep.runs
        ruled[compare(base, high).verdict] += 1
        unruled = [replace(r, workload={}) for r in (base, high)]
        spread[compare(*unruled).verdict] += 1
        same = same and base.final_loss == high.final_loss
    return ruled, spread, same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    if cpu_matmul_changes("high"):
        print("matmul=high changes float32 matmuls on this CPU: it is not inert here.")
        return 2
    quiet = verdicts(args.rounds, args.steps)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        loaded = verdicts(args.rounds, args.steps)
    finally:
        hog.kill()
        hog.wait()
    for name, (ruled, spread, same) in (("quiet", quiet), ("one core busy", loaded)):
        print(
            f"{name:14s} by the rule: {dict(ruled)}  by the spread alone: {dict(spread)}  "
            f"identical final losses: {same}"
        )
    ok = quiet[0]["within noise"] >= 0.9 * args.rounds and not (
        loaded[0]["faster"] or loaded[0]["slower"]
    )
    return 0 if ok and quiet[2] and loaded[2] else 1


if __name__ == "__main__":
    sys.exit(main())
