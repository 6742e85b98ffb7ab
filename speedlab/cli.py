"""The ``speedlab`` command: a terminal demo, the run history and stored sweeps, no notebook
needed."""

from __future__ import annotations

import argparse
import sys

from speedlab.results.knobs import KNOBS, explain, option_name


def demo(steps: int, workers: int) -> int:
    """Train the image lab briefly with a live line, then print where the time went and what
    the doctor makes of it."""
    import lightning.pytorch as pl

    from speedlab.api import profile_train
    from speedlab.labs import QUIET_TRAINER, image_lab

    def train() -> None:
        model, data = image_lab(num_workers=workers)
        trainer = pl.Trainer(
            max_epochs=-1,
            accelerator="auto",
            devices=1,
            **QUIET_TRAINER,
            limit_val_batches=0,
        )
        trainer.fit(model, data)

    print(
        f"speedlab demo: the image lab (JPEG shapes, small ConvNet), {steps} steps, {workers} workers"
    )
    sweep = profile_train(train, steps=steps, store=False)
    result = sweep.runs[0]
    print()
    print(result.report())
    print()
    findings = [str(finding) for finding in sweep.diagnosis]
    print("\n".join(findings) or "The doctor found no bottleneck to name in this run.")
    return 1 if result.error else 0


def show_stored(sweep_id: int) -> int:
    """Print a stored sweep as IPython shows a finished one: its table, notes and findings."""
    from speedlab.results.store import NotStored, StoreError
    from speedlab.run.stored import load

    try:
        sweep = load(sweep_id)
    except (NotStored, StoreError) as err:
        print(f"speedlab load: {err}", file=sys.stderr)
        return 1
    print("\n".join([str(sweep), *(str(finding) for finding in sweep.diagnosis)]))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="speedlab", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("demo", help="train the image lab and show where the time goes")
    run.add_argument("--steps", type=int, default=120, help="training steps (default 120)")
    run.add_argument("--workers", type=int, default=0, help="DataLoader workers (default 0)")
    commands.add_parser(
        "system",
        help="cores, the CPU's bf16/AMX/AVX-512, RAM, /dev/shm, GPU and its compute capability, "
        "torch and Lightning versions",
    )
    past = commands.add_parser(
        "history", help="past runs from the run store; the sweep column is what load takes"
    )
    past.add_argument("n", type=int, nargs="?", default=20, help="how many runs (default 20)")
    stored = commands.add_parser("load", help="a stored sweep, shown as it was when it ran")
    stored.add_argument("sweep", type=int, help="the sweep's number, from speedlab history")
    teach = commands.add_parser("explain", help="what a knob does and when it helps")
    teach.add_argument("knob", type=option_name, choices=[spec.option for spec in KNOBS.values()])
    args = parser.parse_args(argv)

    if args.command == "demo":
        if args.steps < 1:
            parser.error(f"demo --steps {args.steps}: not allowed. Expected an integer >= 1.")
        if args.workers < 0:
            parser.error(f"demo --workers {args.workers}: not allowed. Expected an integer >= 0.")
        return demo(args.steps, args.workers)
    if args.command == "system":
        from speedlab.measure.machine import format_system_info, system_info

        print(format_system_info(system_info()))
    elif args.command == "history":
        from speedlab.results.history import format_history, history
        from speedlab.results.store import StoreError

        if args.n < 0:
            parser.error(f"history {args.n}: expected a number of runs >= 0")
        try:
            print(format_history(history(args.n)))
        except StoreError as err:
            print(f"speedlab history: {err}", file=sys.stderr)
            return 1
    elif args.command == "load":
        return show_stored(args.sweep)
    else:
        print(explain(args.knob))
    return 0


if __name__ == "__main__":
    sys.exit(main())
