"""Overhead of SpeedProbe (with its system sampler) on the MLP lab, beside Lightning's SimpleProfiler.

A shared virtual machine drifts by 10-20% from one second to the next, far more than the 2%
being measured, so whole runs compared one after another cannot resolve it. Here the arms are
interleaved inside each training run instead: every `--block` steps the run switches, bare
in every other block and in the blocks between, in a shuffled order, bare again (an A/A
control: the noise floor), SpeedProbe attached (its own setup/teardown hooks, sampler
included), SimpleProfiler installed as the Trainer's profiler, and a known answer: bare with
10 us of busy-waiting added to each step, which shows how the rotation reads a known cost of
the target's size. A clock callback present throughout times every step. The first 40 steps
after each switch are left out of the per-step figures and printed apart, as what an arm's
start costs once: the probe starts anew at each switch, so they hold its warm-up (whose
watches count FLOPs and syncs; no figure of a run counts them) and the tail its FLOP count
leaves. The median step time at each place in a block
showed that tail on the zero-cost step (``--places`` prints it; on 2026-11-30, 12 runs of 40
cycles of 80-step blocks, the probe without its sampler): +112 us on the step after the counted
one, about +10 us twenty steps on, +5 to +6 us from the fortieth, where a probe that counted no
FLOPs read the same. Until then this benchmark left out 8 steps after the warm-up, and its
40-step blocks' medians lay in that tail. Each block of an arm gives a ratio to the mean of
the bare blocks either side of it (``Rotation``; until 2026-11-30 each cycle of shuffled arms
had one bare block, against which an arm's blocks spread twice as far), each block's figure
its mean step: what a probe does every so many steps is a cost a step as much as what it does
every step, and a block's median step leaves it out (it was the median until 2026-11-30, when
a device timeline's readings, every 8 steps then, were timed inside a zero-cost fit at 18 us a
step).

Even so, one median ratio on the MLP lab is known only to about +-2% (see the A/A arm). So the
same rotation also runs a zero-cost step (the known-cost model without busy-waiting, on
tensors in memory: little but Lightning's own per-step work), where each arm's added
microseconds are a few percent of the step. Each rotation runs in a process of its own: one
process's memory layout shifts an arm's step by several microseconds for its whole life (the
runs' own medians, printed, differ by more than one run's blocks do), so the 95% interval of
the median resamples the runs and then the blocks within each. As that spread between runs
dominates, many shorter runs pin the figure better than a few long ones in the same time: on
the zero-cost step, 12 runs of 75 cycles of four arms gave an interval of +8.6 to +14.4 us
where 6 runs of 150 had given +5.5 to +22.6 (on 2026-11-29 and 2026-11-28, each in about 12
minutes; 60 cycles of the five arms take as long). The headline figures are that cost (target:
at most 10 us a step, and below SimpleProfiler's) and the same over the MLP lab's bare step
(target: SpeedProbe <= 1.02).

Readings: on 2026-11-29, 12 runs of 60 cycles of 40-step blocks (8 steps left out after the
warm-up) read the known 10 us as +13.2 (interval +4.9 to +20.9) and SpeedProbe as +16.7 (+12.3
to +24.8). On 2026-11-30, two runs of 12 x 20 cycles of 120-step blocks read the known 10 us as
+9.2 (+1.6 to +24.9) and +12.4 (+4.0 to +20.4), SpeedProbe as +14.2 (+3.3 to +27.4) and +16.7
(+7.3 to +26.4), the A/A control as +3.4 and -4.6: leaving the tail out moved SpeedProbe's
figure by less than a run tells (on a machine that noisy, about 10 us either way), and its
first 40 steps cost +3.1 and +4.4 ms once over bare's. On 2026-11-30 again, the machine quieter
(bare's zero-cost step 0.905 and 0.916 ms, against 1.355 ms then) and the probe's code the same,
two runs read SpeedProbe +7.1 (+3.9 to +11.5) and +5.6 (+3.7 to +6.9), the known 10 us +10.8
and +11.5, SimpleProfiler +23.3 and +22.8, the A/A control -0.5 and +0.6.
With each block read against the bare blocks either side (12 runs of 12 cycles of 120-step
blocks, 144 blocks an arm; a noisy day, bare's zero-cost step 1.216 ms): SpeedProbe +5.1 (-23.3
to +37.4), SimpleProfiler +31.7 (+8.8 to +66.1), the known 10 us +4.7 (-11.1 to +39.2), the A/A
control -2.9, in 11.5 minutes. The default run then (12 runs of 14 cycles of 106-step blocks,
168 blocks an arm, bare's zero-cost step 1.068 ms): SpeedProbe +3.9 (-14.4 to +15.2),
SimpleProfiler +20.6 (+9.2 to +36.6), the known 10 us +9.8 (-4.0 to +18.6), the A/A control
-0.9, in 10.6 minutes.

``--timeline`` adds an arm on an asynchronous device's path: SpeedProbe with a device timeline
whose events the host's clock stamps as they are recorded (``TimelineProbe``), so it costs what
the timeline's own Python costs on a GPU, its event calls aside; a GPU is lent too rarely to
tune that path on one. On 2026-11-30 the timeline was reworked to record four events a step
and to work out which step each belongs to only when reading them (it had kept marks per step,
five a step). Runs of the code before and after, alternating, each a rotation with such an arm
(eight runs of each, then ten): the arm read +35.0 and +38.0 us a step before, +23.9 and +23.8
after, where SpeedProbe on the host's clock read +9.7 and +8.0 before, +10.3 and +8.4 after.
The full run with ``--timeline`` then read the path at +25.5 us, +17.5 over the host's clock
(SpeedProbe +8.1, the known 10 us +15.4). Later that day the timeline was read every 64 steps
(or 0.25 s) instead of every 8, and blocks were timed by their mean step: the path read +15.9
(+13.8 to +23.7), +8.7 over the host's clock, SpeedProbe +7.2 (+1.5 to +15.8), SimpleProfiler
+26.1, the known 10 us +13.1, the A/A control +1.8 (12 runs of 20 cycles, ``--threads 1``).
A 120-step block counted 78 steps with one reading in them, where a fit reads once in 64: the
path's figure left out about a fifth of its readings' cost (a fit of zero-cost steps spends 7 us
a step in them). The default block is now 106 steps, whose 64 counted steps hold one reading,
as a fit's do: the readings count whole, and a drifting machine is read closer in shorter
blocks (four fits each of 106- and 170-step blocks, in turn, on 2026-11-30: a standard error of
26 against 41 us in as many steps).

    .venv/bin/python benchmarks/probe_overhead.py [--repeats 12] [--cycles 14] [--block 106]
        [--threads N] [--clock wall|cpu] [--places] [--timeline]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import lightning.pytorch as pl
import torch
from lightning.pytorch.profilers import SimpleProfiler
from torch.utils.data import DataLoader, TensorDataset

from speedlab.labs import QUIET_TRAINER, KnownCostModel, busy_wait, tabular_lab
from speedlab.measure.devices.events import READ_EVERY_STEPS, EventTimeline
from speedlab.measure.probe import SpeedProbe

KNOWN = "known-10us"
ARMS = ("bare", "bare-again", "speedprobe", "simpleprofiler", KNOWN)
LABS = ("MLP lab", "zero-cost step")
PROBE_WARMUP = 5  # SpeedProbe's warm-up in its arms: its steady steps start at this place
SETTLE = 40  # steps left out after each switch: the probe's warm-up and what its FLOP count leaves
TARGET_US = 10.0
KNOWN_S = TARGET_US * 1e-6  # what the known arm adds to each step


class Paired(NamedTuple):
    """One block of an arm beside the bare blocks either side of it (``Rotation.paired``)."""

    step: float  # the block's mean step, the steps next to a switch left out
    bare: float  # the same, the mean of the two bare blocks either side
    start: float  # the time the block's first SETTLE steps took
    bare_start: float  # the same, the mean of the two bare blocks either side


class Rotation(pl.Callback):
    """Times every step and switches the arm every `block` steps: bare in every other block,
    the other arms in the blocks between, each once a cycle in a shuffled order. The arms are
    ``ARMS``, with ``more`` probes (name: callback) beside SpeedProbe. Each arm's block is read
    against the mean of the bare blocks either side of it (``paired``), so a machine's drift
    from one block to the next cancels where it is even: on 2026-11-30, on a 2-core machine
    whose zero-cost steps moved by 300 us from one block to the next, five fits of each design
    run in turn read an arm's added time a block with a standard deviation of 128 us against
    its bare neighbours, 295 us against the one bare block of a cycle of shuffled arms, for a
    standard error of the mean of 34 against 60 us in as many blocks."""

    def __init__(
        self,
        block: int,
        rng: random.Random,
        clock: Callable[[], float],
        more: dict[str, pl.Callback] | None = None,
    ) -> None:
        self.block, self.rng, self.clock = block, rng, clock
        self.probes = {"speedprobe": SpeedProbe(warmup=PROBE_WARMUP), **(more or {})}
        self.arms = (*ARMS, *(more or {}))
        self.simple = SimpleProfiler(dirpath=tempfile.gettempdir(), filename="speedlab-simple")
        self.arm = "bare"  # block 0: the run's warm-up, not counted
        self.block_no = 0
        self.cycle: list[str] = []
        # (arm, block number, the clock) at each step's start
        self.steps: list[tuple[str, int, float]] = []

    @property
    def blocks_a_cycle(self) -> int:
        """Blocks in a cycle: each arm but bare once, each after a bare block."""
        return 2 * (len(self.arms) - 1)

    def fit_steps(self, cycles: int) -> int:
        """The steps of a fit of ``cycles`` cycles: a warm-up block first, and a bare block
        after the last cycle's last arm."""
        return (1 + cycles * self.blocks_a_cycle + 1) * self.block

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, i: int) -> None:
        self.steps.append((self.arm, self.block_no, self.clock()))
        if self.arm == KNOWN:  # the comparison itself runs in every arm
            busy_wait(KNOWN_S)

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, out: Any, batch: Any, i: int
    ) -> None:
        if trainer.global_step % self.block:
            return
        if self.block_no % self.blocks_a_cycle == 0:  # a new cycle: each arm once, in a new order
            order = self.rng.sample(self.arms[1:], len(self.arms) - 1)
            self.cycle = [arm for other in order for arm in ("bare", other)]
        self._switch(trainer, pl_module, self.cycle[self.block_no % self.blocks_a_cycle])
        self.block_no += 1

    def _switch(self, trainer: Any, pl_module: Any, arm: str) -> None:
        if self.arm in self.probes:
            self.probes[self.arm].teardown(trainer, pl_module, "fit")
            trainer.callbacks.remove(self.probes[self.arm])
        elif self.arm == "simpleprofiler":
            trainer.profiler = self.passthrough
        if arm in self.probes:
            probe = self.probes[arm]
            trainer.callbacks.append(probe)  # after this callback: its hooks count
            probe.setup(trainer, pl_module, "fit")
            probe.on_train_start(trainer, pl_module)  # where it puts its taps on
        elif arm == "simpleprofiler":
            self.passthrough, trainer.profiler = trainer.profiler, self.simple
        self.arm = arm

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._switch(trainer, pl_module, "bare")

    def blocks(self, at: list[float] | None = None) -> dict[int, tuple[str, list[float]]]:
        """Each counted block's arm and step times (the step before a switch left out); ``at``:
        the steps' stamps on another clock than the rotation's, one a step."""
        stamps = at if at is not None else [step[2] for step in self.steps]
        blocks: dict[int, tuple[str, list[float]]] = {}
        for (step, start), (following, end) in itertools.pairwise(zip(self.steps, stamps)):
            arm, block = step[:2]
            if block == following[1] and block > 0:
                blocks.setdefault(block, (arm, []))[1].append(end - start)
        return blocks

    def whole(self, at: list[float] | None = None) -> dict[int, tuple[str, list[float]]]:
        """Each block that ran whole: its arm and its counted steps' times (from place SETTLE,
        the step before the switch left out); ``at`` as ``blocks``'. A block cut short (the
        last, where a fit ends early) counts none."""
        return {
            block: (arm, times[SETTLE:-1])
            for block, (arm, times) in self.blocks(at).items()
            if len(times) > 2 * SETTLE
        }

    def paired(self, at: list[float] | None = None) -> dict[str, list[Paired]]:
        """Per arm but bare, each of its blocks against the bare blocks either side of it,
        where all three ran whole; ``at`` as ``blocks``'."""
        starts = {block: sum(times[:SETTLE]) for block, (_, times) in self.blocks(at).items()}
        # block: (arm, its mean counted step, its start)
        whole = {
            block: (arm, statistics.fmean(counted), starts[block])
            for block, (arm, counted) in self.whole(at).items()
        }
        paired: dict[str, list[Paired]] = {arm: [] for arm in self.arms[1:]}
        for block, (arm, step, start) in whole.items():
            before, after = whole.get(block - 1), whole.get(block + 1)
            if arm == "bare" or before is None or after is None:
                continue
            bare, bare_start = ((a + b) / 2 for a, b in zip(before[1:], after[1:], strict=True))
            paired[arm].append(Paired(step, bare, start, bare_start))
        return paired

    def places(self) -> dict[str, list[float]]:
        """Per arm, the median step time at each place in its blocks (``--places``)."""
        at: dict[str, list[list[float]]] = {}
        for arm, times in self.blocks().values():
            for place, seconds in enumerate(times):
                column = at.setdefault(arm, [])
                column.extend([] for _ in range(place + 1 - len(column)))
                column[place].append(seconds)
        return {arm: [statistics.median(c) for c in columns] for arm, columns in at.items()}


class HostEvent:
    """An event the host's clock stamps as it is recorded: a device with nothing to run."""

    __slots__ = ("stamp",)

    def record(self, *stream: Any) -> None:
        self.stamp = time.perf_counter()

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: HostEvent) -> float:
        return (end.stamp - self.stamp) * 1e3


class TimelineProbe(SpeedProbe):
    """SpeedProbe on an asynchronous device's path (its timeline's stamps and their reading),
    with events that cost nothing (``HostEvent``): what the timeline's own Python adds a step
    on a GPU, beside the GPU's event calls, measured where no GPU is."""

    def _attach_taps(self, trainer: Any, device: Any) -> None:
        self._timeline = EventTimeline(HostEvent, lambda: None)
        self.records.update(host_data_time=[], copy_time=[])
        super()._attach_taps(trainer, device)


TIMELINE = "timeline path"


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
"""wall: the step's wall time. cpu: the CPU seconds the whole process (the probe's sampler
thread included) spent in it, which leaves out the time a shared machine's other tenants took
the core from it."""


def run(
    lab: str,
    cycles: int,
    block: int,
    rng: random.Random,
    clock: str,
    more: dict[str, pl.Callback] | None = None,
) -> Rotation:
    """One training run of `cycles` cycles on one of LABS, timed by one of CLOCKS, with
    ``more`` arms (``Rotation``)."""
    rotation = Rotation(block, rng, CLOCKS[clock], more)
    if lab == "MLP lab":
        model, data = tabular_lab()
    else:
        n = 8 * rotation.fit_steps(cycles)  # one epoch: none starts in a block
        samples = TensorDataset(torch.randn(n, 8), torch.randint(0, 2, (n,)))
        model, data = KnownCostModel(step_s=0.0), DataLoader(samples, batch_size=8)
    trainer = pl.Trainer(
        max_steps=rotation.fit_steps(cycles),
        accelerator="cpu",
        devices=1,
        callbacks=[rotation],
        **QUIET_TRAINER,
        limit_val_batches=0,
    )
    trainer.fit(model, data)
    return rotation


def measure(lab: str, args: argparse.Namespace) -> dict[str, Any]:
    """One rotation of one lab, in this process: per arm, each block's mean step and start
    beside its bare neighbours' (``Rotation.paired``), and its step at each place in a block."""
    torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    more = {TIMELINE: TimelineProbe(warmup=PROBE_WARMUP)} if args.timeline else None
    rotation = run(lab, args.cycles, args.block, rng, args.clock, more)
    return {"paired": rotation.paired(), "places": rotation.places()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=12)
    parser.add_argument("--cycles", type=int, default=14)
    parser.add_argument("--block", type=int, default=SETTLE + 2 + READ_EVERY_STEPS)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--clock", choices=CLOCKS, default="wall")
    parser.add_argument("--places", action="store_true", help="each place in a block, by arm")
    parser.add_argument(
        "--timeline", action="store_true", help="an arm on a GPU's path, its events costless"
    )
    parser.add_argument("--lab", choices=LABS, help=argparse.SUPPRESS)  # one rotation, as JSON
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.lab:
        print(json.dumps(measure(args.lab, args)))
        return
    print(
        f"{args.repeats} runs x {args.cycles} cycles of {args.block}-step blocks per lab, "
        f"{args.threads} torch thread(s), {args.clock} time a step; each run in a process of "
        "its own (a process's memory layout shifts its arms' step times by several us, so the "
        "interval is over runs as well as blocks)"
    )
    rng = random.Random(0)
    bare_step, added = {}, {}
    arms = (*ARMS, TIMELINE) if args.timeline else ARMS
    for lab in LABS:
        rotations = [rotation(lab, seed) for seed in range(args.repeats)]
        runs = [
            {arm: [Paired(*p) for p in ps] for arm, ps in r["paired"].items()} for r in rotations
        ]
        every = {arm: [p for r in runs for p in r[arm]] for arm in arms[1:]}
        bare_step[lab] = statistics.median(p.bare for ps in every.values() for p in ps)
        print(
            f"{lab}, mean step {args.clock} time, bare {bare_step[lab] * 1e3:.3f} ms; each arm's "
            "blocks against the bare blocks either side:"
        )
        for arm, pairs in every.items():
            q1, median, q3 = statistics.quantiles([p.step / p.bare for p in pairs], n=4)
            per_run = [[p.step - p.bare for p in r[arm]] for r in runs]
            added[lab, arm] = statistics.median(p.step - p.bare for p in pairs)
            low, high = (x * 1e6 for x in bootstrap_median(per_run, rng))
            each = " ".join(f"{statistics.median(x) * 1e6:+.0f}" for x in per_run)
            print(
                f"  {arm:15s} {statistics.median(p.step for p in pairs) * 1e3:6.3f} ms   "
                f"ratio to bare {median:.3f} (IQR {q1:.3f}-{q3:.3f})   "
                f"added {added[lab, arm] * 1e6:+6.1f} us ({low:+.1f} to {high:+.1f} over "
                f"{len(pairs)} blocks; runs {each})"
            )
        start = {
            arm: statistics.median(p.start - p.bare_start for p in pairs)
            for arm, pairs in every.items()
        }
        print(
            f"  the first {SETTLE} steps after a switch, left out above, over bare's: "
            + ", ".join(f"{arm} {start[arm] * 1e3:+.2f} ms" for arm in arms[1:])
        )
        added_at = {arm: places_added(rotations, arm) for arm in arms[1:]}
        first = added_at["speedprobe"][PROBE_WARMUP : PROBE_WARMUP + 4]
        print(
            f"  SpeedProbe's first steady steps after a switch (places {PROBE_WARMUP} to "
            f"{PROBE_WARMUP + 3}, the median over runs) over bare's: "
            + " ".join(f"{x:+.0f}" for x in first)
            + " us (its FLOP count, at place 1, slows places 2 to 4: these show what else of "
            "an attach lasts into the steady steps)"
        )
        if args.places:
            print("  each place in a block after a switch, the median over runs, over bare's (us):")
            for arm, added_here in added_at.items():
                print(f"    {arm:15s}", " ".join(f"{x:+.0f}" for x in added_here))
    mlp, zero = LABS
    print(
        f"Per-step cost measured on the {zero}, over the {mlp}'s {bare_step[mlp] * 1e3:.3f} ms step:"
    )
    for arm in arms[1:]:
        ratio = 1 + added[zero, arm] / bare_step[mlp]
        print(f"  {arm:15s} {added[zero, arm] * 1e6:+6.1f} us a step: ratio {ratio:.3f}")
    ratio = 1 + added[zero, "speedprobe"] / bare_step[mlp]
    print(f"SpeedProbe overhead ratio on the {mlp}: {ratio:.3f} (target <= 1.02)")
    probe, simple, known = (
        added[zero, arm] * 1e6 for arm in ("speedprobe", "simpleprofiler", KNOWN)
    )
    missed = known_missed(known)
    held = not missed and probe <= TARGET_US and probe < simple
    print(
        f"{'PASS' if held else 'FAIL'} SpeedProbe {probe:+.1f} us a step (target <= "
        f"{TARGET_US:.0f}, and below SimpleProfiler's {simple:+.1f}; the known "
        f"{KNOWN_S * 1e6:.0f} us read {known:+.1f}{missed})"
    )
    if args.timeline:
        path = added[zero, TIMELINE] * 1e6
        print(
            f"INFO the timeline path {path:+.1f} us a step, {path - probe:+.1f} over the host's "
            "clock: a GPU's path less its event calls (four records a step, and their reading)"
        )


def known_missed(read_us: float) -> str:
    """Where the known arm read its cost outside 0 to 2 times itself, the words that say so:
    the method missed its known answer and none of its figures stand; else ''."""
    times = read_us / (KNOWN_S * 1e6)
    return (
        ""
        if 0 <= times <= 2
        else f"; the known cost read {times:.1f} times itself (allowed 0 to 2)"
    )


def places_added(rotations: list[dict[str, Any]], arm: str) -> list[float]:
    """``arm``'s step at each place in its blocks less bare's, in us: the median over runs."""
    places = min(len(r["places"][arm]) for r in rotations)
    return [
        statistics.median((r["places"][arm][i] - r["places"]["bare"][i]) * 1e6 for r in rotations)
        for i in range(places)
    ]


def rotation(lab: str, seed: int) -> dict[str, Any]:
    """One rotation of ``lab`` in a fresh process (this script with ``--lab``): ``measure``'s."""
    return in_a_process(__file__, "--lab", lab, "--seed", str(seed))


def in_a_process(script: str, *flags: str) -> Any:
    """What a fresh process of ``script``, given this run's arguments and ``flags``, prints as
    JSON on its last line: a process's memory layout shifts an arm's figure for its whole life,
    so each run is a process of its own."""
    out = subprocess.run(
        [sys.executable, script, *sys.argv[1:], *flags], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def bootstrap_median(runs: list[list[float]], rng: random.Random) -> tuple[float, float]:
    """A 95% interval of the median of all runs' values, by resampling 1000 times the runs and
    then the values within each drawn run."""
    medians = sorted(
        statistics.median(
            x for run in rng.choices(runs, k=len(runs)) for x in rng.choices(run, k=len(run))
        )
        for _ in range(1000)
    )
    return medians[25], medians[974]


if __name__ == "__main__":
    main()
