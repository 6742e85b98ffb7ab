"""IPython glue: ``%%profile_train`` and ``%speedlab``. The work happens in speedlab.run.sweep."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from speedlab.run.knobs import KNOBS, KnobError, explain, parse_list, parse_trainer_option

_SUBCOMMANDS = ("panel", "doctor", "history [N]", "explain KNOB", "system")
AUTOTUNE_BUDGET_S = 120.0


def _knob_arguments(func: Any) -> Any:
    """One ``--option`` per knob, help from the knob table (so ``%%profile_train?`` lists them)."""
    for spec in reversed(KNOBS.values()):
        func = argument(
            f"--{spec.option}", dest=spec.name, metavar="V1,V2", help=f"{spec.allowed}."
        )(func)
    return func


@magics_class
class SpeedlabMagics(Magics):
    """The speedlab magics; registered by ``%load_ext speedlab``."""

    #: The last profiled cell (its training function and options), for ``%speedlab panel``.
    last_cell: tuple[Any, Any] | None = None

    @magic_arguments()
    @_knob_arguments
    @argument(
        "--trainer",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="Any other Trainer argument, swept like a knob (repeatable).",
    )
    @argument("--steps", type=int, help="Stop each run after N training steps.")
    @argument("--time", type=float, help="Stop each run after S seconds.")
    @argument(
        "--warmup", type=int, default=5, help="Steps left out of the steady state (default 5)."
    )
    @argument(
        "--repeat", type=int, default=1, help="Run every combination R times (median, spread)."
    )
    @argument("--name", help="A label stored with the sweep.")
    @argument("--no-live", action="store_true", help="No live view while training.")
    @argument(
        "--panel",
        action="store_true",
        help="Show the widget panel for this cell instead of running a sweep.",
    )
    @argument(
        "--autotune",
        action="store_true",
        help="Let the doctor search for faster knobs from the cell's own settings and the "
        f"knob values given, one each (within {AUTOTUNE_BUDGET_S:.0f} s; --steps caps each run).",
    )
    @argument("-o", dest="output", action="store_true", help="Return the SweepResult.")
    @cell_magic
    def profile_train(self, line: str, cell: str) -> Any:
        """Run the cell's Lightning training once per combination of knob values and compare.

        Each knob option takes a comma-separated list; the runs are the cartesian product of the
        lists in the order given, and the first combination is the baseline. A knob that is not
        given stays as the cell wrote it. Every Trainer the cell builds gets a SpeedProbe; every
        run is stored in the run history as it ends. The last result is ``speedlab.last``.

        Example::

            In [1]: %load_ext speedlab

            In [2]: %%profile_train --workers 0,2 --preload off,ram --steps 30
               ...: model, data = speedlab.labs.image_lab()
               ...: trainer = L.Trainer(max_epochs=1)
               ...: trainer.fit(model, data)
        """
        from speedlab.notebook.live import choose_view
        from speedlab.notebook.session import remember
        from speedlab.run.autotuner import autotune, start_knobs
        from speedlab.run.intercept import RunControls
        from speedlab.run.sweep import plan_sweep, run_sweep, user_traceback

        args = parse_argstring(self.profile_train, line)
        if not cell.strip():
            raise UsageError(
                "%%profile_train needs a cell that builds a Trainer and calls trainer.fit(...)."
            )
        try:
            knobs = {
                name: parse_list(name, getattr(args, name))
                for name in KNOBS
                if getattr(args, name) is not None
            }
            trainer = dict(parse_trainer_option(text) for text in args.trainer)
            # --autotune starts from one configuration: a list of values is refused here.
            start = (
                start_knobs(knobs | {f"trainer.{k}": v for k, v in trainer.items()})
                if args.autotune
                else {}
            )
            controls = RunControls(steps=args.steps, time=args.time, warmup=args.warmup)
            spec = plan_sweep(
                knobs, trainer=trainer, controls=controls, repeat=args.repeat, name=args.name
            )
        except KnobError as err:
            raise UsageError(str(err)) from None

        shell = self.shell
        filename = shell.compile.cache(cell)
        code = shell.compile(cell, filename, "exec")

        def train() -> None:
            exec(code, shell.user_ns)

        def show_error(err: BaseException) -> None:
            shell.showtraceback((type(err), err, user_traceback(err.__traceback__)))

        self.last_cell = (train, spec)
        if args.panel:
            return _show_panel(train, spec)
        if args.autotune:
            sweep = autotune(
                train,
                budget_s=AUTOTUNE_BUDGET_S,
                steps=args.steps,
                time=args.time,
                start=start,
                repeat=args.repeat,
                warmup=args.warmup,
                view=choose_view(not args.no_live),
                name=args.name or "autotune",
            )
        else:
            sweep = run_sweep(
                train, spec, view=choose_view(not args.no_live), source=cell, show_error=show_error
            )
        remember(sweep)
        if args.output:
            return sweep
        from IPython.display import display

        display(sweep)
        return None

    @line_magic
    def speedlab(self, line: str) -> Any:
        """``%speedlab panel`` · ``doctor`` · ``history [N]`` · ``explain KNOB`` · ``system``."""
        command, _, rest = line.strip().partition(" ")
        rest = rest.strip()
        if command == "panel" and not rest:
            if self.last_cell is None:
                raise UsageError(
                    "%speedlab panel: no cell profiled yet. Run a %%profile_train cell first, "
                    "or add --panel to its options."
                )
            return _show_panel(*self.last_cell)
        if command == "explain" and rest:
            try:
                print(explain(rest))
            except KnobError as err:
                raise UsageError(str(err)) from None
        elif command == "history":
            from speedlab.results.store import format_history, history

            if rest and not rest.isdigit():
                raise UsageError(f"%speedlab history {rest}: expected a number of runs, e.g. 20.")
            print(format_history(history(int(rest) if rest else 20)))
        elif command == "doctor" and not rest:
            from speedlab.analysis.verdict import diagnose_sweep
            from speedlab.notebook.session import last
            from speedlab.run.next_step import next_experiment

            if last is None:
                raise UsageError(
                    "%speedlab doctor: nothing profiled yet. Run a %%profile_train cell first."
                )
            for finding in diagnose_sweep(last):
                print(finding, end="\n\n")
            print("Try next:\n" + next_experiment(last))
        elif command == "system":
            from speedlab.measure.machine import format_system_info, system_info

            print(format_system_info(system_info()))
        else:
            raise UsageError(
                f"%speedlab {line.strip()}: expected one of " + ", ".join(_SUBCOMMANDS) + "."
            )


def _show_panel(train: Any, spec: Any) -> None:
    """The widget panel for a cell, its controls set to the first combination of its options."""
    from speedlab.notebook.panel import show_panel

    show_panel(train, knobs=spec.plan[0], controls=spec.controls, name=spec.name)
