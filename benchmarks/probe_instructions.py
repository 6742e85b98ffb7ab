"""SpeedProbe's cost a step in instructions, beside SimpleProfiler's: a count a noisy machine
cannot move.

Wall time on a shared virtual machine drifts by more than the microseconds being measured (see
``probe_overhead.py``, whose A/A control alone spans +-10 us). Here the same zero-cost step (the
known-cost model without busy-waiting, on tensors in memory) trains under valgrind's callgrind,
which counts the instructions the process runs: instrumentation is switched on only around each
fit, and each arm's cost a step is the slope between fits of 100 and 600 steps, so the fit's
set-up and tear-down cancel; each fit starts from a collected heap, so a garbage collection of
the arms before it (millions of instructions) does not land in its count. The count is split
where the fit's training ends (``on_train_end`` of a first callback): the training path, which
every step waits for, and what runs after it (the probe building its records, a profiler's
summary), which grows with the steps too but delays no step. An inert callback (per-step hooks
None, as SpeedProbe's) is the control: its figure is the measure's noise. Needs valgrind; takes
about 12 minutes.

    .venv/bin/python benchmarks/probe_instructions.py
"""

from __future__ import annotations

import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ARMS = ("bare", "speedprobe", "simpleprofiler", "inert callback")
LENGTHS = (100, 600)
PARTS = ("path", "after")  # the training path's count, and what runs after training ends


def fit_under_callgrind() -> None:
    """In the process callgrind runs: each arm's two fits, each dumped in two parts, as
    ``arm-steps-path`` as its training ends and ``arm-steps-after`` as the fit returns."""
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.profilers import SimpleProfiler
    from torch.utils.data import DataLoader, TensorDataset

    from speedlab.labs import QUIET_TRAINER, KnownCostModel
    from speedlab.measure.probe import SpeedProbe

    class Inert(pl.Callback):
        state_key = "Inert"
        on_train_batch_start = on_train_batch_end = on_before_backward = None
        on_after_backward = on_before_optimizer_step = on_before_zero_grad = None

    class TrainingEnds(Inert):
        """First in every arm's callbacks: dumps the training path's count as training ends."""

        state_key = "TrainingEnds"

        def __init__(self, dump: str | None) -> None:
            self.dump = dump  # None: a warm-up fit, counted by no one

        def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            if self.dump is not None:
                control("-d", self.dump)

    torch.set_num_threads(1)
    samples = TensorDataset(torch.randn(8 * 700, 8), torch.randint(0, 2, (8 * 700,)))

    def trainer(arm: str, steps: int) -> pl.Trainer:
        callbacks = {"speedprobe": [SpeedProbe(sample_system=False)], "inert callback": [Inert()]}
        ends = TrainingEnds(f"{arm}-{steps}-path" if steps in LENGTHS else None)
        profiler = SimpleProfiler(dirpath=tempfile.gettempdir(), filename="speedlab-simple")
        return pl.Trainer(
            max_steps=steps,
            accelerator="cpu",
            devices=1,
            callbacks=[ends, *callbacks.get(arm, [])],
            profiler=profiler if arm == "simpleprofiler" else None,
            **QUIET_TRAINER,
            limit_val_batches=0,
        )

    def control(*args: str) -> None:
        subprocess.run(
            ["callgrind_control", *args, str(os.getpid())], check=True, capture_output=True
        )

    for arm in ARMS:  # first calls, imports and the CPU's peak (measured once) out of the counts
        trainer(arm, 20).fit(KnownCostModel(step_s=0.0), DataLoader(samples, batch_size=8))
    for arm in ARMS:
        for steps in LENGTHS:
            t, model = trainer(arm, steps), KnownCostModel(step_s=0.0)
            loader = DataLoader(samples, batch_size=8)
            gc.collect()
            control("-i", "on")
            t.fit(model, loader)
            control("-i", "off")
            control("-d", f"{arm}-{steps}-after")


def total(dump: Path) -> tuple[str, int]:
    """The dump's trigger (``arm-steps-part``) and the instructions it counted."""
    text = dump.read_text()
    trigger = re.search(r"^desc: Trigger: dump (.+)$", text, re.M).group(1)
    return trigger, int(re.search(r"^totals: (\d+)", text, re.M).group(1))


def main() -> None:
    if sys.argv[1:] == ["--in-callgrind"]:
        fit_under_callgrind()
        return
    if shutil.which("valgrind") is None:
        sys.exit("needs valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={folder}/cg.out",
                sys.executable,
                __file__,
                "--in-callgrind",
            ],
            check=True,
            capture_output=True,
        )
        counts = dict(total(dump) for dump in Path(folder).glob("cg.out.*"))
    short, long = LENGTHS
    slope = {
        (arm, part): (counts[f"{arm}-{long}-{part}"] - counts[f"{arm}-{short}-{part}"])
        / (long - short)
        for arm in ARMS
        for part in PARTS
    }
    added = {(arm, part): slope[arm, part] - slope["bare", part] for arm in ARMS for part in PARTS}
    print(f"instructions a step, zero-cost step, slope over fits of {short} and {long} steps:")
    print(f"  {'':15s} {'training path':>14s} {'after training':>15s}")
    print(
        f"  {'bare':15s} {slope['bare', 'path'] / 1e6:12.3f} M {slope['bare', 'after'] / 1e3:13.1f} k"
    )
    for arm in ARMS[1:]:
        print(
            f"  {arm:15s} {added[arm, 'path'] / 1e3:+12.1f} k {added[arm, 'after'] / 1e3:+13.1f} k"
        )
    for part, name in zip(PARTS, ("on the training path", "after training"), strict=True):
        ratio = added["speedprobe", part] / added["simpleprofiler", part]
        print(f"SpeedProbe / SimpleProfiler, added instructions {name}: {ratio:.2f}")


if __name__ == "__main__":
    main()
