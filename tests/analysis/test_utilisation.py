"""speedlab.analysis.utilisation and RunResult.mfu: a run's share of its device's peak, in
words, or why it is unknown."""

from __future__ import annotations

from dataclasses import replace

import pytest

from speedlab.analysis.model import model_bound
from speedlab.analysis.utilisation import flops_notes, mfu_text, utilisation
from tests.records import run_of

# 10 samples a step, 2 + 8 ms: 1000 samples/s; 2 MFLOP a step is 200 kFLOP a sample.
RUN = run_of([0.002] * 20, [0.008] * 20)
PEAK = {"peak": 1e9, "peak_source": "this CPU's measured float32 matmul peak"}
COUNTED = replace(RUN, flops={"per_step": 2_000_000, "step": 0, "uncounted": [], **PEAK})


def test_mfu_is_the_steps_flops_a_second_over_the_peak() -> None:
    assert COUNTED.samples_per_s == pytest.approx(1000)
    assert COUNTED.flops_per_step == 2_000_000
    assert COUNTED.mfu == pytest.approx(2_000_000 / 10 * 1000 / 1e9)  # 20%
    assert mfu_text(COUNTED) == (
        "20.0% of this CPU's measured float32 matmul peak (0.002 GFLOP a step)"
    )


@pytest.mark.parametrize(
    ("flops", "said"),
    [
        ({}, "no step's FLOPs were counted"),
        ({"per_step": 5, "step": 0, "uncounted": ["aten.mkldnn_rnn_layer"]}, "mkldnn_rnn_layer"),
        (
            {
                "per_step": 5,
                "step": 0,
                "uncounted": [],
                "peak": None,
                "peak_source": "the T4 has no bfloat16 peak",
            },
            "the T4 has no bfloat16 peak",
        ),
    ],
)
def test_an_unknown_mfu_says_why(flops: dict, said: str) -> None:
    run = replace(RUN, flops=flops)
    assert run.mfu is None
    assert mfu_text(run).startswith("unknown: ") and said in mfu_text(run)
    assert utilisation(run) == ""


def test_only_an_op_without_a_formula_is_worth_a_note() -> None:
    assert flops_notes(COUNTED) == [] and flops_notes(RUN) == []
    uncounted = replace(RUN, flops={"per_step": 5, "step": 0, "uncounted": ["aten.lstm"]})
    assert flops_notes(uncounted) == [f"MFU {mfu_text(uncounted)}."]


def test_the_doctor_says_how_far_a_model_bound_step_is_from_the_peak() -> None:
    slow = replace(COUNTED, flops=COUNTED.flops | {"peak": 1e11})  # 0.2%: far below
    [finding] = model_bound(replace(slow, records=run_of([0.0002] * 20, [0.02] * 20).records))
    assert "The steps reach " in finding.evidence and "not arithmetic" in finding.evidence
