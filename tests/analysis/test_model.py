"""speedlab.analysis.model: per-step overhead and model-bound runs."""

from __future__ import annotations

from speedlab.analysis.doctor import diagnose
from speedlab.measure.numerics import cpu_matmul_changes
from speedlab.results.sweep import SweepResult
from tests.doctor_runs import known_cost, profile, require_quiet, the


def test_mlp_lab_is_overhead_bound_and_asks_for_a_larger_batch(tabular_sweep: SweepResult) -> None:
    require_quiet(tabular_sweep.baseline)
    found = the(diagnose(tabular_sweep.baseline), "overhead_bound")
    assert (found.knob, found.value) == ("batch_size", 256)
    assert "64 samples" in found.evidence and "larger batch" in found.advice


def test_a_model_that_is_all_compute_is_model_bound_and_says_what_this_cpu_cannot_do() -> None:
    sweep = profile(known_cost(step_s=0.02, n=2000), steps=15)
    found = the(diagnose(sweep.baseline), "model_bound")
    assert found.severity == "info"
    if cpu_matmul_changes("medium"):  # measured on this CPU: oneDNN runs bf16 matmuls
        assert "--matmul medium runs its larger float32 matmuls in bf16" in found.advice
    else:
        assert "--matmul changes nothing" in found.advice
    assert "bf16" in found.advice
    assert found.knob in ("compile", "precision")
