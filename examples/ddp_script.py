"""Profile DDP training from a script: per-rank data_time and batch_time with SpeedProbe.

Trains speedlab's MLP lab with Lightning's ``ddp`` strategy on CPU processes (gloo)::

    python examples/ddp_script.py --devices 2 --steps 60
    python examples/ddp_script.py --devices 2 --steps 60 --slow-rank 1   # make a straggler

``ddp`` starts this script again for every rank but the first (the process you started is
rank 0), so every rank builds its own Trainer and its own SpeedProbe. Keep the ``__main__``
guard: the ranks import this file. SpeedProbe then:

- times each rank's steps (data_time, batch_time) and, with DDP, the gradient all-reduce
  (sync_time) through a DDP communication hook;
- every ``log_every_n_steps`` logs ``speedlab/rank_<r>/data_time``, ``batch_time`` and
  ``sync_time`` of every rank, and ``speedlab/data_time``/``batch_time`` of the slowest rank, to
  the Trainer's loggers (here a CSVLogger: ``<logdir>/ddp_script/version_<n>/metrics.csv``;
  TensorBoard, W&B and the others get the same keys);
- at the end of training gathers every rank's records over the strategy's process group and
  prints a summary on rank 0: one row per rank, the job's figures (samples/s summed over the
  ranks, times from the slowest rank), and findings such as a straggler rank or a large share
  of time in gradient synchronisation. ``probe.result()`` on rank 0 is that job's RunResult,
  with one entry per rank in ``result.ranks``.

Several machines: start the script on every node with the launcher of your cluster, for
example torchrun (Lightning reads the ranks from the environment it sets)::

    # on node 0 (node 1 the same with --node-rank 1)
    torchrun --nnodes 2 --node-rank 0 --nproc-per-node 4 --master-addr node0 \\
        examples/ddp_script.py --devices 4 --nodes 2 --accelerator gpu

With GPUs the strategy uses NCCL; the summary is printed once, by global rank 0.

Options: ``--devices``, ``--nodes``, ``--accelerator``, ``--steps``, ``--batch-size``,
``--slow-rank R`` (rank R reads its samples ``--delay-ms`` later, like a slow disk),
``--logdir`` (CSVLogger folder), ``--json PATH`` (rank 0 writes ``probe.result()`` there).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import Dataset

from speedlab import SpeedProbe
from speedlab.labs import TabularDataModule, tabular_lab


class Delayed(Dataset):
    """Another dataset whose every sample arrives ``delay_s`` later (storage that is slow)."""

    def __init__(self, dataset: Dataset, delay_s: float) -> None:
        self.dataset, self.delay_s = dataset, delay_s

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> Any:
        time.sleep(self.delay_s)
        return self.dataset[i]


class SlowRankData(TabularDataModule):
    """The tabular lab's data, with training samples delayed on one rank."""

    def __init__(self, slow_rank: int | None, delay_s: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.slow_rank, self.delay_s = slow_rank, delay_s

    def setup(self, stage: str) -> None:
        super().setup(stage)
        if self.trainer is not None and self.trainer.global_rank == self.slow_rank:
            self.train_set = Delayed(self.train_set, self.delay_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--slow-rank", type=int, default=None)
    parser.add_argument("--delay-ms", type=float, default=0.5)
    parser.add_argument("--logdir", default="logs")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    model, _ = tabular_lab()
    data = SlowRankData(args.slow_rank, args.delay_ms / 1e3, batch_size=args.batch_size)
    probe = SpeedProbe(warmup=5, log_every_n_steps=10)
    trainer = pl.Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        num_nodes=args.nodes,
        strategy="ddp",
        max_steps=args.steps,
        limit_val_batches=0,
        callbacks=[probe],
        logger=CSVLogger(args.logdir, name="ddp_script"),
        log_every_n_steps=10,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, data)
    if trainer.is_global_zero and args.json is not None:
        args.json.write_text(json.dumps(probe.result().to_dict()))


if __name__ == "__main__":
    main()
