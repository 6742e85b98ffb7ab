"""speedlab's prediction of a run from its baseline's split (speedlab.analysis.predict): the
formula on baselines of known figures, then known-cost cells trained for real, predicted
against measured."""

from __future__ import annotations

from dataclasses import replace

import pytest

from speedlab.analysis.doctor import diagnose
from speedlab.analysis.predict import (
    predict,
    prediction_gap,
    prediction_off,
    prediction_said,
    with_prediction,
)
from speedlab.measure.devices import device_for
from speedlab.results.comparison import Comparison
from speedlab.results.findings import Finding
from speedlab.results.knobs import Knobs
from speedlab.results.prediction import FAR_OFF, Prediction
from speedlab.results.run import RunResult
from speedlab.results.stats import summarize
from speedlab.results.system import SystemSummary
from tests.doctor_runs import known_cost, profile, require_quiet
from tests.records import BATCH, baseline, records_of


def test_workers_spread_a_waiting_loader_over_the_step() -> None:
    """24 ms of waiting for storage a batch, 10 ms of compute: 3 workers make a batch every
    8 ms, under the step, so the step is its compute and the hand-over: 34 / 11 ms."""
    p = predict(baseline(handover=0.001), Knobs(workers=3))
    assert p.speedup == pytest.approx(0.034 / 0.011, rel=1e-6)
    assert p.low == p.high == p.speedup  # nothing competes for the cores: one figure
    assert (p.data_time, p.batch_time) == pytest.approx((0.001, 0.010))
    assert "workers=3" in p.reason and "8.0 ms a batch" in p.reason and "waiting" in p.reason
    assert str(p).startswith("predicted about 3.1x: ")


def test_a_later_hand_over_reading_stands_in_for_the_baselines() -> None:
    """The same split with the hand-over read 4 ms just before the run (a shared VM's moves by
    several times within minutes): the step is its compute and that hand-over, 34 / 14 ms."""
    p = predict(baseline(handover=0.001), Knobs(workers=3), handover=0.004)
    assert p.speedup == pytest.approx(0.034 / 0.014, rel=1e-6)
    assert (p.data_time, p.batch_time) == pytest.approx((0.004, 0.010))


def test_busy_loaders_need_more_cpu_than_the_cores_give() -> None:
    """A loader busy all the time beside a one-thread model: the CPU a step needs, 10 ms of
    compute and 24 ms of loading, over 2 cores is 17 ms, not the 10 ms of compute; without that
    contention (the range's top) it would be 11 ms."""
    p = predict(baseline(busy=1.0, handover=0.001), Knobs(workers=3))
    assert p.speedup == pytest.approx(0.034 / 0.018, rel=1e-6)
    assert (p.low, p.high) == pytest.approx((0.034 / 0.018, 0.034 / 0.011))
    assert "more CPU than the 2.0 free cores give" in p.reason and p.text() == "1.9x to 3.1x"


def test_working_workers_hold_up_torch_threads_that_fill_the_cores() -> None:
    """torch's 2 threads on 2 cores wait for each other after every operation: a decoding
    worker beside them doubles the compute (STRAGGLE), more than the CPU they need (22 ms)."""
    p = predict(baseline(data_s=0.010, batch_s=0.020, busy=1.0, threads=2), Knobs(workers=2))
    assert p.batch_time == pytest.approx(0.040) and p.speedup == pytest.approx(0.030 / 0.040)
    assert p.high == pytest.approx(0.030 / 0.020)  # the best case: no hold-up
    assert "wait for each other" in p.reason and "up to 40.0 ms (alone 20.0 ms)" in p.reason
    waiting = predict(baseline(data_s=0.010, batch_s=0.020, threads=2), Knobs(workers=2))
    assert waiting.batch_time == pytest.approx(0.020)  # workers that wait on storage: no hold-up
    # From a baseline whose workers held the compute up, none lets it run alone.
    held = baseline(data_s=0.0, batch_s=0.040, busy=1.0, threads=2, knobs={"workers": 2})
    starts = [k * 0.010 for k in range(10) for _ in (0, 1)]  # each worker busy end to end
    stamps = {
        "worker": [0, 1] * 10,
        "start": starts,
        "end": [t + 0.010 for t in starts],
        "taken": [t + 0.020 for t in starts],
    }
    working = replace(held.system, workers_cpu_percent=100.0)  # half a core each
    held = replace(held, records=held.records | {"pipeline": stamps}, system=working)
    alone = predict(held, Knobs(workers=0))
    assert alone.batch_time == pytest.approx(0.020) and alone.speedup == pytest.approx(
        0.040 / 0.030
    )


def test_too_few_workers_leave_the_loader_the_limit() -> None:
    """One worker makes a batch every 24 ms, longer than the 10 ms step: the step waits for it."""
    p = predict(baseline(handover=0.001), Knobs(workers=1))
    assert p.speedup == pytest.approx(0.034 / 0.024)
    assert p.data_time == pytest.approx(0.014) and "over the 10.0 ms of compute" in p.reason


def test_a_baseline_with_workers_is_read_from_their_stamps() -> None:
    """With 2 workers stamping 30 ms a batch, going back to 0 workers puts that 30 ms into
    every step beside the 10 ms of compute."""
    base = baseline(data_s=0.005, knobs={"workers": 2})
    stamps = {"worker": [0, 1] * 10, "start": [0.0] * 20, "end": [0.030] * 20, "taken": [0.04] * 20}
    base = replace(base, records=base.records | {"pipeline": stamps})
    p = predict(base, Knobs(workers=0))
    assert p.speedup == pytest.approx(0.015 / 0.040)
    assert "workers=0 loads in the main process" in p.reason
    no_stamps = replace(base, records={k: v for k, v in base.records.items() if k != "pipeline"})
    assert predict(no_stamps, Knobs(workers=4)).speedup is None


def test_preload_ram_takes_the_storage_out_of_the_step() -> None:
    """An idle loader (all waiting): preloading leaves at most its busy part, none here."""
    p = predict(baseline(), Knobs(workers=0, preload="ram"))
    assert p.speedup == pytest.approx(0.034 / 0.010)
    busy = predict(baseline(busy=0.5), Knobs(workers=0, preload="ram"))
    assert (busy.low, busy.speedup, busy.high) == pytest.approx(
        (0.034 / 0.022, 0.034 / 0.016, 0.034 / 0.010)
    )
    shm = predict(baseline(busy=0.5), Knobs(workers=0, preload="shm"))
    # shm leaves decoding, ram augmentation: the split cannot tell them apart in the busy part
    assert (shm.low, shm.speedup, shm.high) == pytest.approx((busy.low, busy.speedup, busy.high))
    assert "the storage wait" in shm.reason and "decoding" in shm.reason


def test_preload_ram_of_a_dataset_cached_whole_leaves_only_collation() -> None:
    """Without a load/transform split preload=ram caches whole samples: augmentation goes too,
    and the point keeps none of the busy part (collation, all that stays, is little of it)."""
    base = baseline(busy=0.5)
    whole = replace(base, workload={**base.workload, "dataset": "Rows", "ram_cache": "items"})
    p = predict(whole, Knobs(workers=0, preload="ram"))
    assert (p.low, p.speedup, p.high) == pytest.approx(
        (0.034 / 0.022, 0.034 / 0.010, 0.034 / 0.010)
    )
    assert "caches whole samples (Rows has no load/transform split)" in p.reason
    assert "only collation stays, at most its busy part (12.0 ms)" in p.reason
    split = replace(base, workload={**base.workload, "ram_cache": "loads"})
    assert predict(split, Knobs(workers=0, preload="ram")) == predict(
        base, Knobs(workers=0, preload="ram")
    )
    rows = replace(whole, workload={**whole.workload, "dataset": "TensorDataset"})
    in_memory = predict(rows, Knobs(workers=0, preload="ram"))
    assert in_memory.speedup == pytest.approx(0.034 / 0.016)  # collation may be half of it
    assert "only indexing each row leaves" in in_memory.reason
    # shm keeps decoding whatever ram would cache
    shm = predict(whole, Knobs(workers=0, preload="shm"))
    assert shm.speedup == pytest.approx(0.034 / 0.016)


def test_batch_size_is_a_range_between_per_sample_and_per_step_costs() -> None:
    p = predict(baseline(data_s=0.0, batch_s=0.020), Knobs(workers=0, batch_size=16))
    assert (p.low, p.high) == pytest.approx((1.0, 2.0)) and p.low < p.speedup < p.high


@pytest.mark.parametrize(
    ("knobs", "said"),
    [
        ({"pin_memory": True}, "only speeds copies to a CUDA GPU"),
        ({"persistent_workers": True}, "steady steps leave out"),
        ({}, "the same configuration"),
    ],
)
def test_a_knob_that_cannot_act_predicts_no_change(knobs: dict, said: str) -> None:
    p = predict(baseline(), Knobs(workers=0, **knobs))
    assert (p.speedup, p.low, p.high) == (1.0, 1.0, 1.0) and said in p.reason


def test_a_gpu_runs_matmul_prediction_read_on_a_machine_without_one_says_it_cannot_tell() -> None:
    """A run recorded on a GPU, diagnosed where there is none (its records loaded by hand): what
    --matmul does on that GPU is not this machine's to say, and asking CUDA would raise."""
    if device_for("cuda").is_available():
        pytest.skip("this machine has a CUDA GPU to ask")
    p = predict(replace(baseline(), device="cuda"), Knobs(workers=0, matmul="high"))
    assert p.speedup is None and "float32 matmuls" in p.reason


def test_matmul_predicts_no_change_only_where_this_machine_ignores_it() -> None:
    """Derived from this CPU: medium changes float32 matmuls only where oneDNN has bf16."""
    p = predict(baseline(), Knobs(workers=0, matmul="medium"))
    if device_for("cpu").matmul("medium")[1]:
        assert p.speedup is None and "float32 matmuls" in p.reason
    else:
        assert p.speedup == 1.0 and "matmul=medium" in p.reason


def test_persistent_workers_may_gain_where_restarts_fall_in_the_steady_steps() -> None:
    """Two epochs in the steady steps: after the restart, the rounds wait for the new workers
    (here 4 steps of 40 ms among 10 ms ones). Keeping the workers gains at most the typical
    step's pace; with one epoch, or without workers, nothing."""
    base = baseline(data_s=0.0, batch_s=0.010, knobs={"workers": 2})
    made = {"worker": [0, 1], "start": [0.0, 0.0], "end": [0.005, 0.005], "taken": [0.01, 0.02]}
    base = replace(base, records=base.records | {"pipeline": made})
    records = {k: list(v) if k != "pipeline" else v for k, v in base.records.items()}
    for i in range(20, 40):
        records["epoch"][i] = 1
    for i in range(21, 25):  # the rounds after the restart (step 20 starts the epoch)
        records["data_time"][i] = 0.030
        records["wall"][i] = 0.040
    two_epochs = replace(base, records=records)
    p = predict(two_epochs, Knobs(workers=2, persistent_workers=True))
    gain = two_epochs.step_time / two_epochs.steady.typical_step
    assert gain > 1.2 and (p.speedup, p.low, p.high) == pytest.approx((1.0, 1.0, gain))
    assert "the rounds after a restart still wait" in p.reason
    one_epoch = predict(base, Knobs(workers=2, persistent_workers=True))
    assert (one_epoch.low, one_epoch.high) == (1.0, 1.0)


@pytest.mark.parametrize(
    ("knobs", "said"),
    [
        ({"compile": "on"}, "compile=on: what fusing saves"),
        ({"precision": "bf16-mixed"}, "precision=bf16-mixed: the gain depends"),
        ({"devices": 2}, "gradient synchronisation"),
        ({"trainer": {"max_epochs": 2}}, "Trainer arguments"),
    ],
)
def test_what_the_split_cannot_predict_says_why(knobs: dict, said: str) -> None:
    p = predict(baseline(), Knobs(workers=0, **knobs))
    assert p.speedup is None and said in p.reason and p.text() == "none"
    assert str(p) == p.reason  # never shown as a figure


@pytest.mark.parametrize(
    ("was", "now", "said"),
    [
        ({"preload": "ram"}, {"preload": "off"}, "the baseline ran with preload=ram"),
        ({"compile": "on"}, {"compile": "off"}, "compile=off: what fusing saves"),
    ],
)
def test_going_back_from_a_knob_the_baseline_had_is_not_guessed(was, now, said) -> None:
    p = predict(baseline(knobs={"workers": 0, **was}), Knobs(workers=0, **now))
    assert p.speedup is None and said in p.reason


def test_a_finding_names_the_prediction_for_the_knob_it_suggests() -> None:
    """The doctor's io_bound finding on a waiting loader suggests workers; its headline carries
    speedlab's prediction of the run with them. A knob the split cannot predict gets none."""
    base = baseline(handover=0.001)
    io = Finding("io_bound", "waits", "try workers", "workers", "critical", 2, "Waiting")
    expected = predict(base, Knobs(workers=2)).speedup
    assert with_prediction(base, io).predicted == expected
    assert (
        with_prediction(base, io).headline
        == f"Waiting; try --workers 2 (predicted {expected:.1f}x)."
    )
    assert [f.predicted for f in diagnose(base) if f.kind == "io_bound"] == [expected]
    bf16 = replace(io, knob="precision", value="bf16-mixed")
    assert with_prediction(base, bf16).predicted is None
    trainer = replace(io, knob="trainer.max_epochs", value=2)
    assert with_prediction(base, trainer) is trainer


def test_no_prediction_without_a_measured_baseline() -> None:
    assert predict(RunResult(error="boom"), Knobs(workers=2)).speedup is None


def _measured(prediction: Prediction, data_s: float, batch_s: float, speedup: float) -> RunResult:
    """A run that measured these figures, with its prediction and a comparison of ``speedup``."""
    spread = summarize([1.0, 1.0, 1.0])
    comparison = Comparison(speedup, True, spread, spread)
    return RunResult(
        knobs=Knobs(workers=3),
        records=records_of(40, data_s, batch_s, BATCH),
        prediction=prediction,
        comparison=comparison,
    )


def test_a_far_off_prediction_names_the_part_that_came_out_otherwise() -> None:
    p = Prediction(3.0, "workers=3: ...", 3.0, 3.0, data_time=0.001, batch_time=0.010)
    slow = replace(_measured(p, 0.001, 0.015, 2.1), system=SystemSummary(cores=2, torch_threads=2))
    gap = prediction_gap(slow)
    assert gap == (
        "predicted about 3.0x, measured 2.10x: batch_time 15.0 ms where 10.0 ms was predicted: "
        "the workers' loading competed with the model for 2 cores."
    )
    assert prediction_said(slow) == gap[0].upper() + gap[1:]
    near = _measured(p, 0.001, 0.011, 3.0 * (1 - FAR_OFF / 2))
    assert prediction_gap(near) is None and prediction_said(near).startswith("Predicted about 3.0x")
    none = _measured(Prediction(None, "compile=on: the split cannot say"), 0.001, 0.010, 1.2)
    assert prediction_said(none) == "No prediction: compile=on: the split cannot say."


def test_a_run_within_noise_of_its_baseline_does_not_contradict_a_prediction_of_no_change() -> None:
    """An inert knob predicted 1.0x, measured 0.80x on a noisy machine, within noise: the
    measurement cannot tell the run from its baseline, so the prediction is not called off."""
    p = Prediction(1.0, "pin_memory=on only speeds copies to a GPU", 1.0, 1.0, 0.02, 0.01)
    noisy = _measured(p, 0.025, 0.0125, 0.8)
    noisy = replace(noisy, comparison=replace(noisy.comparison, significant=False))
    assert prediction_off(noisy) == 0.0 and prediction_gap(noisy) is None
    decided = _measured(p, 0.025, 0.0125, 0.7)
    assert prediction_off(decided) == pytest.approx(1 / 0.7 - 1)
    assert "data_time 25.0 ms where 20.0 ms was predicted" in prediction_gap(decided)


# -- known-cost cells trained for real ---------------------------------------------------------


def _held(run: RunResult) -> None:
    """The measured speedup within FAR_OFF (25%) of the predicted one, as issue 26 asks."""
    p = run.prediction
    assert p is not None and p.made, run.prediction
    assert abs(run.speedup / p.speedup - 1) <= FAR_OFF, (run.speedup, str(p))


def test_workers_before_a_busy_wait_step_are_predicted_within_a_quarter() -> None:
    """A sleeping loader (3 ms a sample, 24 ms a batch) before a 10 ms busy-wait step."""
    sweep = profile(known_cost(step_s=0.010, n=2000, sleep_s=0.003), workers=[0, 3], steps=40)
    require_quiet(*sweep.runs)
    _held(sweep.runs[1])


def test_preload_ram_on_slow_storage_is_predicted_within_a_quarter() -> None:
    """Every sample waits 2 ms on storage (16 ms a batch) before a 10 ms step."""
    sweep = profile(
        known_cost(step_s=0.010, n=400, sleep_s=0.002), preload=["off", "ram"], steps=40
    )
    require_quiet(*sweep.runs)
    assert sweep.baseline.workload["ram_cache"] == "items"  # KnownCostDataset: cached whole
    assert "only collation stays" in sweep.runs[1].prediction.reason
    _held(sweep.runs[1])


def test_an_inert_matmul_level_is_predicted_as_no_change() -> None:
    """On a CPU whose matmuls --matmul medium leaves in float32: predicted 1.0x (issue 26: the
    inert knob within 10% of 1.0x), and the measurement, within noise by rule, does not call it
    off. The measured speedup itself is not held to 10%: two fits of one configuration differ by
    up to 20% on a shared 2-core machine (0.89x seen here on a quiet one)."""
    if device_for("cpu").matmul("medium")[1]:
        pytest.skip("this CPU runs float32 matmuls in bf16 at medium: the level acts here")
    sweep = profile(known_cost(step_s=0.010, n=2000), matmul=["highest", "medium"], steps=40)
    require_quiet(*sweep.runs)
    run = sweep.runs[1]
    assert run.prediction.speedup == 1.0 and run.prediction.high == 1.0
    assert run.comparison.verdict == "within noise" and prediction_off(run) == 0.0


def test_batch_size_measured_within_its_predicted_range(batch_sweep) -> None:
    """A step of fixed cost whatever the batch: twice the batch, 2.0x, the range's top. Timed
    on a machine nothing else took, as the other measured predictions are: on 2026-11-30 it read
    far off once while a second test session shared the 2 cores."""
    require_quiet(*batch_sweep.runs)
    run = batch_sweep.runs[1]
    p = run.prediction
    assert p.low == pytest.approx(1.0, abs=0.05) and p.high == pytest.approx(2.0, rel=0.1)
    assert prediction_off(run) <= FAR_OFF, (run.speedup, str(p))
