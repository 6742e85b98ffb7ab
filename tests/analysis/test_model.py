"""speedlab.analysis.model: per-step overhead and model-bound runs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from speedlab.analysis.doctor import diagnose
from speedlab.analysis.model import MODEL_BOUND_DATA_SHARE, OVERHEAD_STEP_S, model_bound
from speedlab.measure.numerics import cpu_matmul_changes
from speedlab.measure.probe import SpeedProbe
from speedlab.results.sweep import SweepResult
from speedlab.results.table import fmt_ms
from tests.doctor_runs import kinds, known_cost, profile, require_quiet, the
from tests.records import run_of
from tests.simulated_device import fit_on_device, on_device, probe_on_simulated_device


def test_mlp_lab_is_overhead_bound_and_asks_for_a_larger_batch(tabular_sweep: SweepResult) -> None:
    run = tabular_sweep.baseline
    require_quiet(run)
    if not run.step_time < OVERHEAD_STEP_S:  # a slow machine: 8.7 ms once on this VM (2026-12-02)
        pytest.skip(f"the lab's step took {run.step_time * 1e3:.1f} ms on this machine: not tiny")
    found = the(diagnose(run), "overhead_bound")
    assert (found.knob, found.value) == ("batch_size", 256)
    assert "64 samples" in found.evidence and "larger batch" in found.advice


def test_a_model_that_is_all_compute_is_model_bound_and_says_what_this_cpu_cannot_do() -> None:
    sweep = profile(known_cost(step_s=0.02, n=2000), steps=15)
    require_quiet(sweep.baseline)  # else the doctor rightly says oversubscribed instead
    found = the(diagnose(sweep.baseline), "model_bound")
    assert found.severity == "info"
    if cpu_matmul_changes("medium"):  # measured on this CPU: oneDNN runs bf16 matmuls
        assert "--matmul medium runs all but its tiny float32 matmuls in bf16" in found.advice
    else:
        assert "--matmul changes nothing" in found.advice
    assert "bf16" in found.advice
    assert found.knob in ("compile", "precision")


def test_loading_hidden_behind_the_devices_work_is_model_bound_and_says_so() -> None:
    """The loader's 10 ms a step run while the device works 20 ms: the host waits for data, the
    device does not, and no loading knob is suggested. The device's idle time is what the host
    and the device's thread take to wake and queue and reach the step's start: under 1 ms in
    most steps, up to 4.7 ms where a thread woke late on this 2-core VM (2026-12-02), so the
    sentence is checked against the run's own figures."""
    with probe_on_simulated_device() as device:
        probe = SpeedProbe(warmup=5)
        fit_on_device(on_device(device, work_s=0.02), probe, 40, sleep_s=0.00125)
    run = replace(probe.result(), device="cuda")  # its figures are the simulated device's
    if run.data_share >= MODEL_BOUND_DATA_SHARE:
        pytest.skip("the host fell behind the device (a busy machine): nothing was hidden")
    found = the(diagnose(run), "model_bound")
    said = f"The host waited {fmt_ms(run.host_data_time)} a step for the loader, but the GPU sat "
    assert said + f"idle only {fmt_ms(run.data_time)}" in found.evidence
    assert run.host_data_time > 0.01  # the loader's 10 ms
    assert "more workers or preloading would not make this run faster" in found.evidence
    assert not {"io_bound", "cpu_bound"} & set(kinds(diagnose(run)))


@pytest.mark.parametrize("bf16", [True, False])
def test_the_cpu_advice_is_for_the_cpu_the_run_recorded_not_the_one_reading_it(bf16) -> None:
    """A stored run judged on another machine: its CPU's math comes from its record."""
    run = replace(
        run_of([0.0001] * 20, [0.02] * 20),
        workload={"math": {"bf16": bf16, "matmul_medium": bf16}},
    )
    found = the(diagnose(run), "model_bound")
    has = "this CPU has bf16 instructions" in found.advice
    medium = "--matmul medium runs all but its tiny float32 matmuls in bf16" in found.advice
    assert has is bf16 and medium is bf16
    assert ("--matmul changes nothing" in found.advice) is not bf16
    # A run stored before it recorded them: no claim about a CPU's math either way.
    unknown = the(diagnose(replace(run, workload={})), "model_bound")
    assert "bf16 instructions" not in unknown.advice and "--matmul" not in unknown.advice


@pytest.mark.parametrize("high", [True, False])
def test_matmul_high_is_said_to_act_only_where_it_changed_the_runs_cpu_matmuls(high) -> None:
    """TF32 runs on a CPU with AMX-FP16 (Xeon 6): where ``high`` changed float32 matmuls, the
    advice says so instead of "no TF32"."""
    math = {"bf16": True, "matmul_medium": True, "matmul_high": high}
    found = the(
        diagnose(replace(run_of([0.0001] * 20, [0.02] * 20), workload={"math": math})),
        "model_bound",
    )
    assert ("--matmul high runs them in TF32 (this CPU has AMX-FP16)" in found.advice) is high
    assert ("--matmul high changes nothing (no TF32 on this CPU)" in found.advice) is not high


def lagged(lag: float, batch: float = 0.03, data: float = 0.0005) -> object:
    """A GPU run of 30 ms steps whose device finished each training batch ``lag`` seconds
    after the host queued its end."""
    run = replace(run_of([data] * 20, [batch] * 20, samples=64), device="cuda")
    return replace(run, records={**run.records, "launch_lag": [lag] * 20})


def test_on_a_gpu_overhead_is_read_from_its_timeline_not_from_the_steps_length() -> None:
    """30 ms steps: far longer than the 8 ms the step-length rule needs, yet the GPU finished
    each 0.2 ms after the host queued it: it waited on the host's launches."""
    found = the(diagnose(lagged(0.0002)), "overhead_bound")
    assert found.severity == "critical" and (found.knob, found.value) == ("batch_size", 256)
    assert found.evidence.startswith("In 19 of 19 steady steps the GPU finished the training")
    assert "torch.compile" in found.advice
    # CUDA graphs replay the compiled forward and backward only, not the whole step.
    assert "the compiled forward and backward as CUDA graphs" in found.advice
    assert "the optimizer step" in found.advice and "one CUDA graph" not in found.advice
    assert "model_bound" not in kinds(diagnose(lagged(0.0002)))
    # The host ran ahead by a step's work: the GPU's own work sets the pace.
    behind = kinds(diagnose(lagged(0.03)))
    assert "overhead_bound" not in behind and "model_bound" in behind
    # Waiting for data comes first: the data doctor's finding, not a launch-bound one.
    assert "overhead_bound" not in kinds(diagnose(lagged(0.0002, batch=0.02, data=0.01)))


def test_the_device_advice_suggests_only_knobs_that_act_on_the_runs_device() -> None:
    """A model-bound run: tensor cores and TF32 only on a CUDA GPU; on a TPU no --compile
    (speedlab refuses it there) and no --matmul (XLA ignores torch's level)."""
    run = run_of([0.0001] * 20, [0.02] * 20)
    cuda = the(diagnose(replace(run, device="cuda")), "model_bound")
    assert "tensor cores" in cuda.advice and "TF32" in cuda.advice
    assert (cuda.knob, cuda.value) == ("precision", "amp")
    # model_bound itself: diagnose's prediction for --matmul asks the GPU, which this machine
    # may not have.
    tried = {"precision": "amp", "compile": "on"}
    assert (
        the(model_bound(replace(run, device="cuda", knobs=tried)), "model_bound").knob == "matmul"
    )
    # The run's own --matmul high changed nothing (a GPU before Ampere): not suggested again.
    inert = replace(
        run, device="cuda", knobs={**tried, "matmul": "high"}, workload={"matmul_changes": False}
    )
    found = the(diagnose(inert), "model_bound")
    assert found.knob is None and "--matmul" not in found.advice
    for device in ("xla", "mps"):
        found = the(diagnose(replace(run, device=device)), "model_bound")
        assert "tensor cores" not in found.advice and "TF32" not in found.advice
        assert (found.knob, found.value) == ("precision", "amp")
    tpu = replace(run, device="xla", knobs={"precision": "bf16-true"})
    found = the(diagnose(tpu), "model_bound")
    assert found.knob is None and "no knob here does" in found.summary
    assert "--compile on" not in found.advice and "--compile does not apply on the TPU" in (
        found.advice
    )
    assert "matmul=high changes nothing on the TPU" in found.advice
    apple = replace(run, device="mps", knobs={"precision": "bf16-mixed"})
    assert the(diagnose(apple), "model_bound").knob == "compile"


def test_matmul_medium_on_a_cpu_without_bf16_units_is_called_rarely_faster() -> None:
    """oneDNN's bf16 path runs on AVX-512 without bf16 units: results change, speed rarely."""
    run = replace(
        run_of([0.0001] * 20, [0.02] * 20),
        workload={"math": {"bf16": False, "matmul_medium": True}},
    )
    found = the(diagnose(run), "model_bound")
    assert "--matmul medium runs all but its tiny float32 matmuls in bf16" in found.advice
    assert "changes the results but is rarely faster" in found.advice
    native = the(
        diagnose(replace(run, workload={"math": {"bf16": True, "matmul_medium": True}})),
        "model_bound",
    )
    assert "rarely faster" not in native.advice and "on its bf16 units" in native.advice
