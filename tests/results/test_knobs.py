"""Knobs: parsing, validation in one line, sweep plans and the teaching texts."""

from __future__ import annotations

import pytest

from speedlab.measure.devices import XlaDevice
from speedlab.measure.devices.mps import AUTOCAST_TORCH, BF16_MACOS
from speedlab.measure.numerics import amp_choice
from speedlab.results.knobs import (
    KNOBS,
    KnobError,
    Knobs,
    explain,
    parse_list,
    parse_trainer_option,
    sweep_plan,
)


@pytest.mark.parametrize(
    ("option", "text", "values"),
    [
        ("workers", "0,2,auto", [0, 2, "auto"]),
        ("precision", "32-true,bf16-mixed,amp", ["32-true", "bf16-mixed", "amp"]),
        ("compile", "off, on ,max-autotune", ["off", "on", "max-autotune"]),
        ("pin-memory", "on,off", [True, False]),
        ("persistent_workers", "off", [False]),
        ("matmul", "highest,medium", ["highest", "medium"]),
        ("preload", "off,ram,shm", ["off", "ram", "shm"]),
        ("batch-size", "16,64", [16, 64]),
        ("devices", "1,2", [1, 2]),
        ("strategy", "auto,ddp_notebook", ["auto", "ddp_notebook"]),
    ],
)
def test_parse_list(option: str, text: str, values: list) -> None:
    assert parse_list(option, text) == values


@pytest.mark.parametrize(
    ("option", "text", "named"),
    [
        ("workers", "-1", "--workers -1"),
        ("workers", "two", "--workers two"),
        ("precision", "12", "--precision 12"),
        ("matmul", "fast", "--matmul fast"),
        ("batch-size", "0", "--batch-size 0"),
        ("pin-memory", "maybe", "--pin-memory maybe"),
        ("preload", "disk", "--preload disk"),
        ("compile", "1,fast", "--compile 1"),
        ("workers", "0,,2", "--workers 0,,2"),
    ],
)
def test_bad_values_are_refused_in_one_line_naming_option_value_and_allowed(
    option: str, text: str, named: str
) -> None:
    with pytest.raises(KnobError) as info:
        parse_list(option, text)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(named)
    assert "Expected" in message


def test_knobs_check_python_values() -> None:
    knobs = Knobs(workers=2, pin_memory=True, compile=True, precision="BF16-MIXED")
    assert knobs.as_dict() == {
        "precision": "bf16-mixed",
        "compile": "on",
        "workers": 2,
        "pin_memory": True,
    }
    with pytest.raises(KnobError, match=r"^--workers True"):
        Knobs(workers=True)
    with pytest.raises(KnobError, match=r"^--batch-size 2.5"):
        Knobs(batch_size=2.5)


def test_trainer_option() -> None:
    assert parse_trainer_option("accumulate_grad_batches=1,4") == (
        "accumulate_grad_batches",
        [1, 4],
    )
    assert parse_trainer_option("gradient_clip_val=None,0.5") == ("gradient_clip_val", [None, 0.5])
    assert parse_trainer_option("accelerator=cpu") == ("accelerator", ["cpu"])
    for bad in ("accumulate_grad_batches", "=1", "2x=1", "key="):
        with pytest.raises(KnobError, match=r"^--trainer"):
            parse_trainer_option(bad)


def test_sweep_plan_is_the_product_in_the_order_given_baseline_first() -> None:
    plan = sweep_plan(
        {"workers": [0, 2], "preload": ["off", "ram"]}, {"accumulate_grad_batches": [1, 2]}
    )
    assert len(plan) == 8
    assert plan[0] == Knobs(workers=0, preload="off", trainer={"accumulate_grad_batches": 1})
    assert [(k.workers, k.preload) for k in plan[::2]] == [
        (0, "off"),
        (0, "ram"),
        (2, "off"),
        (2, "ram"),
    ]
    assert plan[1].as_dict() == {
        "workers": 0,
        "preload": "off",
        "trainer.accumulate_grad_batches": 2,
    }


def test_empty_plan_is_one_run_as_written() -> None:
    assert sweep_plan({}, {}) == [Knobs()]


@pytest.mark.parametrize("knob", list(KNOBS))
def test_every_knob_has_a_teaching_text(knob: str) -> None:
    text = explain(knob)
    assert text.startswith(KNOBS[knob].option + ":")
    assert "Values:" in text
    assert 150 < len(KNOBS[knob].explain) < 1100
    # What speedlab's prediction rests on (issue 26), in one short line; "none:" says why not.
    prediction = KNOBS[knob].predicts
    assert (
        f"Prediction (made before each run from the baseline's split of a step): {prediction}."
        in text
    )
    assert 50 < len(prediction) < 300


@pytest.mark.parametrize(
    ("knob", "honest"),
    [
        ("pin_memory", "without a CUDA GPU"),
        ("precision", "On a CPU"),
        ("matmul", "not convolutions"),
        ("compile", "break-even"),
        ("workers", "compete"),
        ("persistent-workers", "needs workers > 0"),
        ("preload", "compute-bound"),
    ],
)
def test_texts_say_when_a_knob_does_not_help(knob: str, honest: str) -> None:
    assert honest in explain(knob)


@pytest.mark.parametrize(
    ("knob", "said"),
    [
        (
            "precision",
            "on a CUDA GPU bf16-mixed where bf16 is native (Ampere or newer), else 16-mixed",
        ),
        ("precision", "Lightning's XLA precision has no mixed mode"),
        ("compile", "reduce-overhead adds CUDA graphs (CUDA GPUs only)"),
        ("compile", "speedlab refuses it there"),
        ("pin_memory", "an Apple GPU shares the host's memory"),
        ("pin_memory", "on a TPU, XLA copies each batch itself, so it does not apply"),
        ("matmul", "a TPU included (XLA sets its own matmul precision)"),
        ("matmul", "on an Apple GPU its effect is not documented"),
        ("precision", "On a CPU, Lightning runs 16-mixed as bf16-mixed (with a warning)"),
        ("compile", "max-autotune searches longer for faster kernels and uses CUDA graphs too"),
        ("pin_memory", "overlapping it with compute needs a separate CUDA stream"),
        ("matmul", "wherever oneDNN's bf16 path runs (AVX-512 BW/VL/DQ or AVX-NE-CONVERT on x86)"),
        ("matmul", "natively fast only with bf16 instructions (AVX512-BF16, AMX); elsewhere"),
        ("persistent_workers", "prefetching begins again when the loader's iterator is reset"),
        ("preload", "copied into every spawn or forkserver DataLoader worker: N+1 copies"),
    ],
)
def test_texts_say_what_a_knob_does_on_each_device(knob: str, said: str) -> None:
    assert said in explain(knob)


@pytest.mark.parametrize(
    ("knob", "wrong"),
    [
        ("precision", "16-mixed is not supported"),
        ("pin_memory", "can overlap with compute"),
        ("persistent_workers", "waiting for their first batches"),
        ("matmul", "on CPUs with bf16 instructions (AVX512-BF16, AMX). Of"),
    ],
)
def test_texts_no_longer_overstate_a_knob(knob: str, wrong: str) -> None:
    assert wrong not in explain(knob)


def test_the_cpu_precision_text_is_what_lightning_does() -> None:
    """Lightning runs 16-mixed on a CPU as bf16-mixed, as the precision text says."""
    pl = pytest.importorskip("lightning.pytorch", reason="the edge venvs have no Lightning")

    with pytest.warns(UserWarning, match="Using `precision='bf16-mixed'` instead"):
        trainer = pl.Trainer(accelerator="cpu", precision="16-mixed", logger=False)
    assert trainer.precision == "bf16-mixed"


def test_the_persistent_workers_prediction_text_is_what_predict_does() -> None:
    """As speedlab.analysis.predict does: 1.0x, and a range up to the typical step's pace where
    the steady steps span epochs whose workers restarted."""
    said = KNOBS["persistent_workers"].predicts
    assert said.startswith("1.0x") and "a range up to the typical step's pace" in said


def test_the_device_texts_agree_with_the_devices() -> None:
    """What the precision text says amp runs as, and which knobs speedlab refuses on a TPU, is
    what the device layer does (asked torch-free, without the hardware)."""
    xla = XlaDevice(probe=lambda: True)
    assert f"on a TPU {xla.amp()[0]}," in explain("precision")
    mps = (
        f"on an Apple GPU (MPS) what torch's autocast takes there: bf16-mixed from torch "
        f"{AUTOCAST_TORCH['bf16']} on macOS {BF16_MACOS[0]}, else 16-mixed from torch "
        f"{AUTOCAST_TORCH['fp16']};"
    )
    assert mps in explain("precision")
    for knob, value in (("compile", "on"), ("pin_memory", True), ("precision", "amp")):
        refused = xla.refusal(knob, value) is not None
        assert ("speedlab refuses it" in explain(knob)) == refused, knob
    cuda = (
        f"on a CUDA GPU {amp_choice(cuda=True, native_bf16=True)} where bf16 is native (Ampere "
        f"or newer), else {amp_choice(cuda=True, native_bf16=False)}; on a CPU "
        f"{amp_choice(cuda=False, native_bf16=False)};"
    )
    assert cuda in explain("precision")


def test_explain_unknown_knob() -> None:
    # as the subcommand is written: there is no --explain option
    with pytest.raises(
        KnobError, match=r"^explain warp-speed: not allowed. Expected a knob: .*workers"
    ):
        explain("warp-speed")
