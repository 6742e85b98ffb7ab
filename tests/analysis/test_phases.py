"""speedlab.analysis.phases: waits at each epoch start, and heavy validation."""

from __future__ import annotations

from speedlab.analysis.doctor import diagnose
from speedlab.labs import known_cost_loader
from tests.doctor_runs import known_cost, profile, the


def test_workers_restarting_every_epoch_show_as_epoch_start_and_persistence_removes_it() -> None:
    sweep = profile(
        known_cost(step_s=0.01, n=48, batch_size=8, trainer={"max_epochs": 100}),
        workers=2,
        persistent_workers=[False, True],
        steps=42,
    )
    restart, persistent = sweep.runs
    found = the(diagnose(restart), "epoch_start")
    assert "6 epoch(s) after the first" in found.evidence
    assert (found.knob, found.value) == ("persistent_workers", True)
    assert restart.phases["epoch_start"] > 2 * persistent.phases["epoch_start"]
    assert all(f.knob is None for f in diagnose(persistent) if f.kind == "epoch_start")


def test_slow_validation_is_validation_heavy() -> None:
    val = known_cost_loader(n=48, batch_size=8, sleep_s=0.003)
    train = known_cost(n=2000, val=val, trainer={"val_check_interval": 5})
    run = profile(train, steps=30).baseline
    found = the(diagnose(run), "validation_heavy")
    assert found.severity == "critical"
    assert f"Validation took {run.phases['validation']:.2f} s" in found.evidence
    assert found.knob == "trainer.limit_val_batches"
