"""What SpeedProbe's taps cost a step where Lightning's step has left the caches cold, beside
the least any wrapper of the training batch can cost: two clock stamps.

``probe_overhead.py`` times whole fits; at its size a run of it tells a cost to about 8 us either
way. This one isolates the probe's step path. Inside a real fit (the zero-cost step's Trainer,
set up by Lightning), each step calls the loop's fetch edges and its training batch the way the
epoch loop does, with Lightning's own run of the batch replaced by one that returns a fresh loss
(so no step's own work is timed); between steps the process walks ``--evict`` MB of objects, as a
real step's work would, so that what the taps touch is no longer in the core's caches. Arms in a
shuffled order each round, ``--block`` steps each (the first ``SETTLE`` dropped: the probe's
warm-up); per round, each arm's median step less bare's:

- bare: Lightning's own fetch edges (the default profiler's start and stop) and the batch;
- speedprobe: attached as a fit attaches it (system sampler off: its thread is not on the path);
- two stamps: Lightning's fetch edges, and a wrapper of the batch that appends two clock stamps
  to a list and does nothing else.

Each run is a process of its own: as in ``probe_overhead.py``, a process's memory layout shifts
an arm's figure for its whole life (runs of one process each read the probe at +7.0 to +18.5
us), so the interval resamples the runs and then the rounds within each.

On 2026-11-29, four runs of this design (8 x 40, 6 x 30, 8 x 30 and 8 x 30 rounds) read the probe
at +13.2, +7.8, +17.2 and +12.1 us a step, and the two-stamp wrapper at +5.3, +1.7, +4.0 and
+4.2: the probe's path costs 6 to 13 us more than the least a wrapper costs. Probes changed in
one place each, run as further arms, leave most of that unexplained: with a wrapper that only
stamps twice the probe read +19.8 (against +17.2), without the warm-up's FLOP count +17.8, with
Lightning's own fetch edges in place of the probe's stamps +10.0 (against +12.1), with its
wrapper cut to one frame, no outputs kept, no ``fetcher.done`` and no activity check +6.5
(against +7.8). Callback dispatch is not on this path (the probe's per-step hooks are
None; ``probe_instructions.py``'s inert callback is that control).

    .venv/bin/python benchmarks/probe_step_path.py [--repeats 8] [--rounds 40] [--block 50]
        [--evict 8]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import torch
from probe_overhead import bootstrap_median, in_a_process
from torch.utils.data import DataLoader, TensorDataset

from speedlab.labs import QUIET_TRAINER, KnownCostModel
from speedlab.measure.probe import SpeedProbe
from speedlab.measure.taps import Taps

ARMS = ("bare", "speedprobe", "two stamps")
SETTLE = SpeedProbe().warmup + 10  # steps dropped at each block's start

_perf = time.perf_counter


def two_stamps(original: Any) -> Callable[..., Any]:
    """The least a wrapper of the training batch can do: a stamp on each side of it."""
    add = [].append

    def trains(*args: Any) -> Any:
        add(_perf())
        outputs = original(*args)
        add(_perf())
        return outputs

    return trains


class StepPath(pl.Callback):
    """As the fit starts, times the rounds of arms over the loop's per-step calls."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.added: dict[str, list[float]] = {arm: [] for arm in ARMS[1:]}
        self.bare: list[float] = []

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        args, loop = self.args, trainer.fit_loop.epoch_loop
        batches, optimizer = loop.automatic_optimization, trainer.optimizers[0]
        batch = (torch.zeros(8, 8), torch.zeros(8, dtype=torch.long))
        kwargs = {"batch": batch, "batch_idx": 0}
        batches.run = lambda optimizer, batch_idx, kwargs: {"loss": torch.zeros(())}
        walk = [bytearray(64) for _ in range(int(args.evict * 1e6 / 120))]
        random.Random(1).shuffle(walk)  # scattered over the heap, as a step's objects are

        def step() -> None:
            loop._on_before_fetch()
            loop._on_after_fetch()
            batches.run(optimizer, 0, kwargs)

        def block() -> float:
            times = []
            for _ in range(args.block):
                sum(b[0] for b in walk)
                start = _perf()
                step()
                times.append(_perf() - start)
            return statistics.median(times[SETTLE:])

        rng = random.Random(args.seed)  # each process its own orders
        for _ in range(args.rounds):
            medians = {}
            for arm in rng.sample(ARMS, len(ARMS)):
                if arm == "speedprobe":
                    probe = SpeedProbe(sample_system=False)
                    trainer.callbacks.append(probe)
                    probe.setup(trainer, pl_module, "fit")
                    probe.on_train_start(trainer, pl_module)  # where it puts its taps on
                    medians[arm] = block()
                    probe.teardown(trainer, pl_module, "fit")
                    trainer.callbacks.remove(probe)
                elif arm == "two stamps":
                    taps = Taps()
                    taps.put(batches, "run", two_stamps)
                    medians[arm] = block()
                    taps.remove()
                else:
                    medians[arm] = block()
            self.bare.append(medians["bare"])
            for arm in self.added:
                self.added[arm].append(medians[arm] - medians["bare"])
        del batches.run


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """One process's rounds: bare's step path and each arm's added seconds, per round."""
    torch.set_num_threads(1)
    timer = StepPath(args)
    samples = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    trainer = pl.Trainer(
        max_steps=1, accelerator="cpu", devices=1, callbacks=[timer], **QUIET_TRAINER
    )
    trainer.fit(KnownCostModel(step_s=0.0), DataLoader(samples, batch_size=8))
    return {"bare": timer.bare, **timer.added}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--evict", type=float, default=8, help="MB walked between steps")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # as JSON
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args)))
        return
    runs = [in_a_process(__file__, "--one", "--seed", str(seed)) for seed in range(args.repeats)]
    bare = statistics.median(x for run in runs for x in run["bare"])
    print(
        f"{args.repeats} runs x {args.rounds} rounds of {args.block}-step blocks, "
        f"{args.evict:g} MB walked between steps; the step path, bare: {bare * 1e6:.1f} us"
    )
    rng = random.Random(0)
    for arm in ARMS[1:]:
        per_run = [run[arm] for run in runs]
        low, high = (x * 1e6 for x in bootstrap_median(per_run, rng))
        added = statistics.median(x for run in per_run for x in run)
        each = " ".join(f"{statistics.median(x) * 1e6:+.0f}" for x in per_run)
        print(
            f"  {arm:11s} {added * 1e6:+6.1f} us a step over bare "
            f"(95% interval {low:+.1f} to {high:+.1f}; runs {each})"
        )


if __name__ == "__main__":
    main()
