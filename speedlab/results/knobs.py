"""The speed knobs: their allowed values, validation, sweep plans and teaching texts.

One table (``KNOBS``) drives everything a knob needs: parsing ``--option a,b`` from the magic,
checking Python values, the panel's controls and ``explain``. A value the table refuses never
reaches a run. It is plain Python at the bottom of the layers: a run carries its ``Knobs`` (what
was asked, and what ran) from the probe to the store and back.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any


class KnobError(ValueError):
    """A knob or run option with a value that is not allowed; the message is one line.

    ``given``: the option and value as the user wrote them, where that is not the magic's
    ``--option value`` (a keyword only the Python API has, a subcommand's argument)."""

    def __init__(self, option: str, value: Any, allowed: str, given: str | None = None) -> None:
        self.option, self.value, self.allowed, self.given = option, value, allowed, given
        super().__init__(f"{given or f'--{option} {value!s}'}: not allowed. Expected {allowed}.")

    def as_keyword(self) -> KnobError:
        """The same refusal in the Python API's words (``workers=True``) where it is in the
        magic's (``--workers True``)."""
        if self.given is not None:
            return self
        keyword = f"{self.option.replace('-', '_')}={self.value!r}"
        return KnobError(self.option, self.value, self.allowed, given=keyword)


class KnobRefused(RuntimeError):
    """A knob that cannot act on this cell without changing what it trains on, found when the
    cell's data is seen; the message is one line: the option and value, why, and what to do."""


ON_OFF = {"on": True, "off": False, "true": True, "false": False}


def check_number(
    option: str, value: Any, kind: type, low: float, allowed: str, given: str | None = None
) -> Any:
    """``value`` as ``kind`` (int or float) when it is a number of that kind >= ``low``; else
    a ``KnobError`` naming the option (as ``given``, where given) and ``allowed``."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        ok = ok and float(value).is_integer()
    if not ok or value < low:
        raise KnobError(option, value, allowed, given)
    return kind(value)


def _choice(*values: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        text = str(value).lower()
        if text not in values:
            raise ValueError
        return text

    return check


def _on_off(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return ON_OFF[str(value).lower()]


def _int_at_least(low: int, *, auto: bool = False) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if auto and str(value).lower() == "auto":
            return "auto"
        if isinstance(value, bool):
            raise ValueError
        number = int(value) if isinstance(value, str) else value
        if not isinstance(number, int) or number < low:
            raise ValueError
        return number

    return check


def _compile(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return _choice("off", "on", "default", "reduce-overhead", "max-autotune")(value)


def _strategy(value: Any) -> str:
    text = str(value).strip()
    if not text or not text.replace("_", "").replace("-", "").isalnum():
        raise ValueError
    return text


PRECISIONS = ("32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", "64-true", "amp")


@dataclass(frozen=True)
class KnobSpec:
    """One knob: its option name, how to read a value, what is allowed, and what it does."""

    name: str
    parse: Callable[[Any], Any]
    allowed: str
    explain: str
    choices: tuple[str, ...] = ()
    predicts: str = ""
    """What speedlab's prediction of a run with this knob rests on (speedlab.analysis.predict),
    starting ``none:`` where the baseline's split cannot predict it, with the reason."""

    @property
    def option(self) -> str:
        return option_name(self.name)

    def check(self, value: Any) -> Any:
        try:
            return self.parse(value)
        except (ValueError, KeyError, TypeError):
            raise KnobError(self.option, value, self.allowed) from None


KNOBS: dict[str, KnobSpec] = {
    spec.name: spec
    for spec in (
        KnobSpec(
            "precision",
            _choice(*PRECISIONS),
            "one of " + ", ".join(PRECISIONS),
            "Mixed precision (16-mixed, bf16-mixed) runs matrix multiplies and convolutions in "
            "16-bit floats while the weights stay in 32-bit. On GPUs with tensor cores (NVIDIA "
            "Volta and newer; bf16 needs Ampere or newer) they run several times faster and "
            "their outputs take half the memory; 16-mixed uses a gradient scaler, bf16 needs none. "
            "The step gains only as much as those multiplies were of it: a large model on big "
            "batches most, a small one limited by kernel launches little, a data-bound pipeline "
            "nothing. On a CPU, Lightning runs 16-mixed as bf16-mixed (with a warning), which pays "
            "off only with bf16 instructions (AVX512-BF16, AMX); elsewhere it is often slower than "
            "32-true. 16-true and bf16-true cast the whole model (less memory, a risk to "
            "convergence). amp picks "
            "by device: on a CUDA GPU bf16-mixed where bf16 is native "
            "(Ampere or newer), else 16-mixed; on a CPU bf16-mixed; on an Apple GPU (MPS) what "
            "torch's autocast takes there: bf16-mixed from torch 2.6 on macOS 14, else 16-mixed "
            "from torch 2.5; on a TPU bf16-true, as Lightning's XLA precision has no mixed mode.",
            PRECISIONS,
            predicts=(
                "none: the gain depends on how much of batch_time is arithmetic that the lower "
                "precision speeds up on this hardware, which the split of a step does not show"
            ),
        ),
        KnobSpec(
            "compile",
            _compile,
            "one of off, on, default, reduce-overhead, max-autotune",
            "torch.compile turns the model's Python code into fused kernels. The first steps "
            "are slow while it compiles (seconds for a small model, minutes for a large one), "
            "later steps can be faster: most where many small operations (activations, "
            "normalisations) are fused, little where large matmuls or convolutions, already "
            "library kernels, fill the step; usually less on a CPU than on a GPU. It pays off only "
            "when the run is long enough to win back the compile time: break-even steps = "
            "compile cost / time saved per step. It does nothing for a data-bound pipeline, "
            "and a new shape (a smaller last batch) recompiles once, after which torch treats "
            "that size as dynamic (drop_last=True avoids it). reduce-overhead "
            "adds CUDA graphs (CUDA GPUs only) against launch overhead of small batches; "
            "max-autotune searches longer for faster kernels and uses CUDA graphs too on a CUDA "
            "GPU. On a TPU XLA compiles each step's graph itself, and torch.compile's default "
            "backend does not target XLA: speedlab refuses it there (torch_xla's own "
            "backend='openxla' is not among the knob's values).",
            ("off", "on", "default", "reduce-overhead", "max-autotune"),
            predicts=(
                "none: what fusing saves depends on the model's kernels, which the split of a step "
                "does not show, and the compile time comes first"
            ),
        ),
        KnobSpec(
            "workers",
            _int_at_least(0, auto=True),
            "an integer >= 0 or auto",
            "DataLoader num_workers: processes that load and augment batches in parallel while "
            "the main process trains. With 0, loading runs in the main process between steps "
            "and every step waits for it. Workers help when data_time is large and CPU cores "
            "are free. Each worker is a whole process (memory grows with each one) and starts "
            "again every epoch unless persistent_workers is on. On a machine with few cores "
            "they compete with torch's own compute threads (torch.get_num_threads()), so "
            "batch_time can grow as workers are added. auto uses (cores - devices) / devices. "
            "A stream (an IterableDataset) runs its __iter__ in every worker: it must shard "
            "itself with get_worker_info(), as LitData and datasets do, or each worker repeats "
            "every sample (speedlab stops such a run).",
            predicts=(
                "the baseline's time to make a batch, spread over the workers, "
                "against the step's compute, plus this machine's measured hand-over of a batch from a "
                "worker; a range where the model and the loaders need more CPU than the cores give"
            ),
        ),
        KnobSpec(
            "pin_memory",
            _on_off,
            "on or off",
            "Puts batches in page-locked host memory so the copy to a CUDA GPU is faster and the "
            "host need not wait for it (from pageable memory it waits for the copy and the GPU's "
            "earlier work), so it can queue the next work. The copy still runs after the step's "
            "earlier kernels: overlapping it with compute needs a separate CUDA stream. It only "
            "helps when a GPU is training and the copy shows in data_time (the doctor's "
            "copy_bound); pinning costs the loader time too, so measure it. It does nothing "
            "without a CUDA GPU: a CPU has nothing to copy to and an Apple GPU shares the host's "
            "memory (PyTorch ignores it on both); on a TPU, XLA copies each batch itself, so it "
            "does not apply and speedlab refuses it.",
            ("on", "off"),
            predicts=(
                "1.0x without a GPU (nothing is copied); on a GPU none: how much of the copy pinning "
                "saves, and what it costs the loader, the split does not show"
            ),
        ),
        KnobSpec(
            "persistent_workers",
            _on_off,
            "on or off",
            "Keeps DataLoader worker processes alive between epochs, so an epoch does not start "
            "by launching workers again (starting each process and, with spawn, copying the "
            "dataset into it), part of the epoch-start gap. Each epoch's first batches are still "
            "made after it starts: prefetching begins again when the loader's iterator is reset. "
            "Helps with many workers and short epochs; needs workers > 0 (torch refuses it "
            "otherwise, so speedlab turns it off there) and keeps the workers' memory for the "
            "whole run.",
            ("on", "off"),
            predicts=(
                "1.0x, as each epoch's first batch is left out of the steady steps; where those "
                "span epochs whose workers restarted, a range up to the typical step's pace (the "
                "steps after a restart wait for the new workers)"
            ),
        ),
        KnobSpec(
            "matmul",
            _choice("highest", "high", "medium"),
            "one of highest, high, medium",
            "torch.set_float32_matmul_precision, for float32 matrix multiplies (Linear layers, "
            "@), not convolutions. highest: full float32. high: TF32 on NVIDIA GPUs from Ampere "
            "(A100, RTX 30xx) on; on a CPU, TF32 only where it has AMX-FP16 (Intel Xeon 6), "
            "elsewhere CPU matmuls stay float32. medium: TF32 on those GPUs as well, and bf16 "
            "for all but tiny CPU matmuls wherever oneDNN's bf16 path runs (AVX-512 BW/VL/DQ or "
            "AVX-NE-CONVERT on x86): natively fast only with bf16 instructions (AVX512-BF16, "
            "AMX); elsewhere results change but it is rarely faster. Of "
            "float32's about 7 significant decimal digits, TF32 keeps about 3 and bf16 2 to 3: "
            "faster matmuls, slightly different results. cuDNN already runs convolutions in TF32 "
            "by default, so a ConvNet gains little. On other hardware it changes nothing, a TPU "
            "included (XLA sets its own matmul precision), though on an Apple GPU its effect is "
            "not documented. The run's note says what it did on this machine.",
            ("highest", "high", "medium"),
            predicts=(
                "1.0x where this hardware ignores the level (its note says so); elsewhere none: the "
                "share of float32 matmuls in batch_time is not in the split"
            ),
        ),
        KnobSpec(
            "preload",
            _choice("off", "ram", "shm"),
            "one of off, ram, shm",
            "ram decodes every training sample once, in the main process before training, and "
            "serves it from memory: file reads and decoding leave the step. Datasets with a "
            "load/transform split keep their random augmentation per step; for other datasets "
            "the whole sample is cached, so random augmentation is frozen (the result says so). "
            "shm copies the dataset's files to /dev/shm (memory-backed), reading each once from "
            "the original storage, and trains from the copy: no storage latency, but decoding "
            "stays. The OS page cache does much the same on its own once a file has been read "
            "and memory is free, so a second epoch off a local disk is often fast already. Both "
            "need the data to fit in memory (ram's cache of arrays or images is copied into "
            "every spawn or forkserver DataLoader worker: N+1 copies), their time shows as the "
            "preload phase (it pays back only if the steps save more than it costs), and neither "
            "helps a compute-bound model.",
            ("off", "ram", "shm"),
            predicts=(
                "ram: the step without reading and decoding, at most the loader's busy part "
                "(augmentation, collation) left, a range; a dataset without a load/transform "
                "split is cached whole, and only collation is left; shm: the step without the "
                "storage wait, decoding left"
            ),
        ),
        KnobSpec(
            "batch_size",
            _int_at_least(1),
            "an integer >= 1",
            "Samples per step. Larger batches spread the fixed cost of every step (Python, "
            "Lightning, kernel launches) over more samples, so samples/s rises until the "
            "hardware is busy or memory runs out. It also changes the optimisation (the "
            "learning rate may need scaling): compare samples/s, not steps.",
            predicts=(
                "a range: loading grows with the samples; the compute between per sample (the same "
                "samples/s) and per step (fixed costs spread over more samples)"
            ),
        ),
        KnobSpec(
            "devices",
            _int_at_least(1),
            "an integer >= 1",
            "How many devices (GPUs, or CPU processes) Lightning trains on with data "
            "parallelism. Throughput can grow up to N times; gradient synchronisation and a "
            "shared CPU for data loading take part of it. On a 2-core machine, 2 CPU processes "
            "share the same cores, so expect far less than 2x.",
            predicts=(
                "none: more processes change the compute of a step and add gradient synchronisation, "
                "which a one-process baseline does not show"
            ),
        ),
        KnobSpec(
            "strategy",
            _strategy,
            "a Lightning strategy name such as auto, ddp, ddp_notebook, ddp_spawn, fsdp",
            "How Lightning spreads training over devices: ddp starts one process per device "
            "(for scripts), ddp_notebook forks them (works in notebooks; CUDA must not be "
            "initialised before), fsdp also shards the model, auto lets Lightning choose.",
            predicts=(
                "none: a strategy changes how the processes share the work, which the baseline does "
                "not show"
            ),
        ),
    )
}

DATA_KNOBS = ("workers", "pin_memory", "persistent_workers", "preload", "batch_size")
"""The knobs that act on the training DataLoader (it is rebuilt to apply them); the rest act
on the model or the Trainer."""


def option_name(name: str) -> str:
    """A knob's (or run option's) name as its ``%%profile_train`` option: dashes for
    underscores (``pin_memory`` -> ``pin-memory``)."""
    return name.replace("_", "-")


def knob_name(option: str) -> str:
    """A ``%%profile_train`` option as its knob's name: ``--pin-memory`` -> ``pin_memory``."""
    return str(option).strip().lstrip("-").replace("-", "_")


def option_text(knob: str, *values: Any) -> str:
    """The ``%%profile_train`` option that sets ``knob`` to ``values``: ``--batch-size 64,256``,
    ``--trainer limit_val_batches=0.25``."""
    text = ",".join(("on" if v else "off") if isinstance(v, bool) else str(v) for v in values)
    if knob.startswith(TRAINER_PREFIX):
        return f"--trainer {knob.removeprefix(TRAINER_PREFIX)}={text}"
    return f"--{option_name(knob)} {text}"


PARTS = {
    "data": ("workers", "pin_memory", "persistent_workers", "preload"),
    "step": ("precision", "compile", "matmul", "batch_size"),
    "devices": ("devices", "strategy"),
}
"""The part of training each knob acts on: loading the data, the step's compute, the devices.
A sweep's views show in full the findings about the parts it changed."""


def knob_part(knob: str) -> str | None:
    """The part of training ``knob`` acts on (``PARTS``); None for a Trainer argument."""
    return next((part for part, knobs in PARTS.items() if knob in knobs), None)


def explain(knob: str) -> str:
    """The teaching text for a knob: what it does, when it helps and when it does not."""
    key = knob_name(knob)
    if key not in KNOBS:
        knobs = ", ".join(s.option for s in KNOBS.values())
        raise KnobError("explain", knob, "a knob: " + knobs, given=f"explain {knob}")
    spec = KNOBS[key]
    return (
        f"{spec.option}: {spec.explain}\nPrediction (made before each run from the "
        f"baseline's split of a step): {spec.predicts}.\nValues: {spec.allowed}."
    )


def literal(text: str) -> Any:
    """A Trainer argument value from text: Python literals (``2``, ``0.5``, ``None``) or a string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


TRAINER_PREFIX = "trainer."
"""How a Trainer argument swept with ``--trainer KEY=...`` is named among a run's knobs."""


@dataclass(frozen=True)
class Knobs(Mapping[str, Any]):
    """One run's knob settings; ``None`` leaves the cell's own choice in place.

    ``trainer`` holds any other Trainer arguments (``--trainer KEY=V``). Knobs also read as a
    mapping of the settings made (``knobs["workers"]``, ``knobs.get("trainer.max_epochs")``):
    the knobs that are set, each Trainer argument as ``trainer.<name>``.
    """

    precision: str | None = None
    compile: str | None = None
    workers: int | str | None = None
    pin_memory: bool | None = None
    persistent_workers: bool | None = None
    matmul: str | None = None
    preload: str | None = None
    batch_size: int | None = None
    devices: int | None = None
    strategy: str | None = None
    trainer: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for spec in KNOBS.values():
            value = getattr(self, spec.name)
            if value is not None:
                object.__setattr__(self, spec.name, spec.check(value))
        if not isinstance(self.trainer, Mapping):
            raise KnobError("trainer", self.trainer, "KEY=VALUE pairs")
        object.__setattr__(self, "trainer", dict(self.trainer))

    def as_dict(self) -> dict[str, Any]:
        """The knobs that are set, as plain values (for results and the run store)."""
        out = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name != "trainer" and getattr(self, f.name) is not None
        }
        out.update({f"{TRAINER_PREFIX}{k}": v for k, v in self.trainer.items()})
        return out

    to_dict = as_dict

    @classmethod
    def from_dict(cls, settings: Mapping[str, Any]) -> Knobs:
        """Knobs from their mapping form (``as_dict()``), each value checked again."""
        trainer = {
            k.removeprefix(TRAINER_PREFIX): v
            for k, v in settings.items()
            if k.startswith(TRAINER_PREFIX)
        }
        unknown = set(settings) - set(KNOBS) - {f"{TRAINER_PREFIX}{k}" for k in trainer}
        if unknown:
            bad = sorted(unknown)[0]
            raise KnobError(option_name(bad), settings[bad], "a known knob: " + ", ".join(KNOBS))
        return cls(**{k: v for k, v in settings.items() if k in KNOBS}, trainer=trainer)

    def __getitem__(self, key: str) -> Any:
        return self.as_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.as_dict())

    def __len__(self) -> int:
        return len(self.as_dict())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self.as_dict() == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items())
        return f"Knobs({settings})"


def parse_list(option: str, text: str) -> list[Any]:
    """``--workers 0,2,auto`` -> ``[0, 2, 'auto']``, each value checked."""
    spec = KNOBS[knob_name(option)]
    values = [v.strip() for v in str(text).split(",")]
    if not all(values):
        raise KnobError(spec.option, text, f"a comma-separated list of values: {spec.allowed}")
    return [spec.check(v) for v in values]


def parse_trainer_option(text: str) -> tuple[str, list[Any]]:
    """``--trainer accumulate_grad_batches=1,4`` -> ``('accumulate_grad_batches', [1, 4])``."""
    key, sep, values = str(text).partition("=")
    if not sep or not key.strip().isidentifier() or not values.strip():
        raise KnobError("trainer", text, "KEY=V1,V2 with a Trainer argument name as KEY")
    return key.strip(), [literal(v.strip()) for v in values.split(",")]


def as_list(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def sweep_plan(
    knob_values: Mapping[str, Iterable[Any]], trainer_values: Mapping[str, Iterable[Any]]
) -> list[Knobs]:
    """The cartesian product of the value lists in the order given; the first is the baseline."""
    names = list(knob_values)
    keys = list(trainer_values)
    lists = [as_list(knob_values[n]) for n in names] + [as_list(trainer_values[k]) for k in keys]
    for name, values in zip(names + keys, lists):
        if not values:
            raise KnobError(option_name(name), "[]", "at least one value")
    plan = []
    for combo in itertools.product(*lists):
        settings = dict(zip(names, combo[: len(names)]))
        plan.append(Knobs(**settings, trainer=dict(zip(keys, combo[len(names) :]))))
    return plan
