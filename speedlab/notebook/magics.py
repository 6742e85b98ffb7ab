"""IPython glue: ``%%profile_train`` and ``%speedlab``.

The magic parses its options into ``speedlab.profile_train``'s keyword arguments and goes the
same way into a sweep (speedlab.notebook.entry); the work happens in speedlab.run.sweep.
"""

from __future__ import annotations

from argparse import Action, ArgumentError, ArgumentParser, Namespace
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from speedlab.results.knobs import (
    KNOBS,
    KnobError,
    explain,
    literal,
    parse_list,
    parse_trainer_option,
)

_SUBCOMMANDS = ("panel", "doctor", "history [N]", "load SWEEP", "explain KNOB", "system")
AUTOTUNE_BUDGET_S = 120.0

#: Options that say how this front end shows or uses the result, not how the sweep runs; every
#: other option is a keyword of ``speedlab.profile_train`` (``sweep_options``; a test checks it).
FRONT_END_OPTIONS = ("output", "panel", "autotune")


class _Once(Action):
    """Store an option's value, refusing a second one: argparse would keep the last silently
    (``--workers 0 --workers 2``, or ``--work 0 --workers 2`` by its abbreviations)."""

    def __call__(self, parser: ArgumentParser, namespace: Namespace, values: Any, *_: Any) -> None:
        if getattr(namespace, self.dest) is not self.default:
            raise ArgumentError(
                self,
                "given twice. Give it once, with the values to compare as one comma-separated "
                "list (--workers 0,2).",
            )
        setattr(namespace, self.dest, values)


def _knob_arguments(func: Any) -> Any:
    """One ``--option`` per knob, help from the knob table (so ``%%profile_train?`` lists them)."""
    for spec in reversed(KNOBS.values()):
        func = argument(
            f"--{spec.option}",
            dest=spec.name,
            action=_Once,
            metavar="V1,V2",
            help=f"{spec.allowed}.",
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
    @argument("--steps", action=_Once, help="Stop each run after N training steps.")
    @argument("--time", action=_Once, help="Stop each run after S seconds.")
    @argument(
        "--warmup", default=5, action=_Once, help="Steps left out of the steady state (default 5)."
    )
    @argument(
        "--repeat", default=1, action=_Once, help="Run every combination R times (median, spread)."
    )
    @argument("--name", action=_Once, help="A label stored with the sweep.")
    @argument("--no-live", action="store_true", help="No live view while training.")
    @argument(
        "--predict",
        action="store_true",
        help="Before each run after the baseline, ask for your guess of it (faster, same, "
        "slower or a speedup such as 2), shown beside speedlab's prediction.",
    )
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

        Each option is a keyword of ``speedlab.profile_train`` (``--batch-size 32,64`` is
        ``batch_size=[32, 64]``, ``--no-live`` is ``live=False``), and the cell runs the same
        way as that call would; ``-o``, ``--panel`` and ``--autotune`` say what this cell does
        with it. ``--predict`` asks for your guess of each run after the baseline before it
        runs (a notebook run without input, as nbconvert runs it, skips the questions). ``%speedlab history`` gives each stored sweep's number and ``%speedlab load N``
        shows it again.

        Example::

            In [1]: %load_ext speedlab

            In [2]: %%profile_train --workers 0,2 --preload off,ram --steps 30
               ...: model, data = speedlab.labs.image_lab()
               ...: trainer = L.Trainer(max_epochs=1)
               ...: trainer.fit(model, data)
        """
        from speedlab.notebook.entry import plan, profile
        from speedlab.run.tracebacks import user_traceback

        args = parse_argstring(self.profile_train, line)
        if not cell.strip():
            raise UsageError(
                "%%profile_train needs a cell that builds a Trainer and calls trainer.fit(...)."
            )
        try:
            options = sweep_options(args)
            live, predict = options.pop("live"), options.pop("predict")
            if predict and args.autotune:
                raise UsageError(
                    "--predict: not with --autotune, which picks each run from the last one's "
                    "result: there is no plan to guess ahead of."
                )
            spec = plan(**options)
            start = _autotune_start(options) if args.autotune else {}
        except KnobError as err:  # refused in one line, before anything runs
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
            sweep = _autotune(train, options, start, live=live)
        else:
            sweep = profile(
                train, live=live, predict=predict, source=cell, show_error=show_error, **options
            )
        if args.output:
            return sweep
        from IPython.display import display

        display(sweep)
        return None

    @line_magic
    def speedlab(self, line: str) -> Any:
        """``%speedlab panel`` · ``doctor`` · ``history [N]`` · ``load SWEEP`` · ``explain KNOB``
        · ``system``.

        - ``panel``: the widget panel for the last profiled cell.
        - ``doctor``: the findings for the last sweep and the ``%%profile_train`` line to run
          next.
        - ``history [N]``: the last N stored runs (default 20); the sweep column is the number
          that ``load`` takes.
        - ``load SWEEP``: a stored sweep, shown as it was when it ran; it becomes
          ``speedlab.last`` (so ``%speedlab doctor`` reads it). In Python: ``speedlab.load(SWEEP)``.
        - ``explain KNOB``: what a knob does, when it helps and when it does not.
        - ``system``: cores, the CPU's bf16/AMX/AVX-512, RAM, /dev/shm, GPU and its compute
          capability, torch and Lightning versions.

        Example::

            In [1]: %speedlab history 3
            run  sweep  when              samples/s  ...

            In [2]: %speedlab load 2
        """
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
            from speedlab.results.history import format_history, history
            from speedlab.results.store import StoreError

            if rest and not rest.isdigit():
                raise UsageError(f"%speedlab history {rest}: expected a number of runs, e.g. 20.")
            try:
                print(format_history(history(int(rest) if rest else 20)))
            except StoreError as err:
                raise UsageError(str(err)) from None
        elif command == "load":
            _show_stored(rest)
        elif command == "doctor" and not rest:
            from speedlab.notebook.session import last
            from speedlab.run.next_step import next_experiment

            if last is None:
                raise UsageError(
                    "%speedlab doctor: nothing profiled yet. Run a %%profile_train cell first."
                )
            for finding in last.diagnosis:  # judged when the sweep was assembled
                print(finding, end="\n\n")
            print("Try next:\n" + next_experiment(last))
        elif command == "system":
            from speedlab.measure.machine import format_system_info, system_info

            print(format_system_info(system_info()))
        else:
            raise UsageError(
                f"%speedlab {line.strip()}: expected one of " + ", ".join(_SUBCOMMANDS) + "."
            )


def _show_stored(text: str) -> None:
    """``%speedlab load SWEEP``: display the stored sweep as ``%%profile_train`` displays its
    result, and keep it as ``speedlab.last``."""
    from IPython.display import display

    from speedlab.notebook.session import remember
    from speedlab.results.store import NotStored, StoreError
    from speedlab.run.stored import load

    if not text.isdigit():
        given = f"%speedlab load {text}".rstrip()
        raise UsageError(
            f"{given}: expected a sweep's number, as the sweep column of %speedlab history "
            "shows it (e.g. %speedlab load 3)."
        )
    try:
        sweep = load(int(text))
    except (NotStored, StoreError) as err:
        raise UsageError(str(err)) from None
    display(remember(sweep))


def sweep_options(args: Namespace) -> dict[str, Any]:
    """The parsed options of ``%%profile_train`` as ``speedlab.profile_train``'s keyword
    arguments: each knob's list checked (``KnobError``), ``--trainer`` as a dict (each argument
    once), the run controls' numbers read as Python literals (``plan`` checks them), ``--no-live``
    as ``live``. ``FRONT_END_OPTIONS`` are left out; every other option has its keyword."""
    options: dict[str, Any] = {}
    for option, value in vars(args).items():
        if option in FRONT_END_OPTIONS:
            continue
        if option in KNOBS:
            if value is not None:
                options[option] = parse_list(option, value)
        elif option == "trainer":
            options["trainer"] = _trainer_option(value)
        elif option == "no_live":
            options["live"] = not value
        elif option in ("steps", "time", "warmup", "repeat") and isinstance(value, str):
            options[option] = literal(value)
        else:
            options[option] = value
    return options


def _trainer_option(texts: list[str]) -> dict[str, list[Any]]:
    """The ``--trainer KEY=V1,V2`` options as a dict, each Trainer argument given once."""
    trainer: dict[str, list[Any]] = {}
    for text in texts:
        key, values = parse_trainer_option(text)
        if key in trainer:
            raise KnobError("trainer", text, f"{key} once: --trainer {key}=V1,V2 sweeps it")
        trainer[key] = values
    return trainer


def _autotune_start(options: dict[str, Any]) -> dict[str, Any]:
    """The configuration ``--autotune`` starts from: the knob values given, one each (a list of
    values is refused with a ``KnobError``)."""
    from speedlab.run.autotuner import start_knobs

    given = {name: options[name] for name in KNOBS if name in options}
    trainer = {f"trainer.{k}": v for k, v in options["trainer"].items()}
    return start_knobs(given | trainer)


def _autotune(train: Any, options: dict[str, Any], start: dict[str, Any], *, live: bool) -> Any:
    """``--autotune``: the doctor's search from ``start``, within AUTOTUNE_BUDGET_S."""
    from speedlab.notebook.live import choose_view
    from speedlab.notebook.session import remember
    from speedlab.run.autotuner import autotune

    return remember(
        autotune(
            train,
            budget_s=AUTOTUNE_BUDGET_S,
            steps=options["steps"],
            time=options["time"],
            start=start,
            repeat=options["repeat"],
            warmup=options["warmup"],
            view=choose_view(live),
            name=options["name"] or "autotune",
        )
    )


def _show_panel(train: Any, spec: Any) -> None:
    """The widget panel for a cell, its controls set to the first combination of its options."""
    from speedlab.notebook.panel import show_panel

    show_panel(train, knobs=spec.plan[0], controls=spec.controls, name=spec.name)
