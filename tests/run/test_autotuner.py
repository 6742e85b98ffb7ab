"""speedlab.run.autotuner: a real search from the baseline, one knob at a time, within a budget."""

from __future__ import annotations

import inspect
import time
from dataclasses import replace
from typing import Any

import lightning.pytorch as pl
import pytest
import torch

import speedlab
from speedlab.analysis.compare import compare
from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader
from speedlab.labs.known_cost import exact_sleep
from speedlab.measure.machine import usable_cores
from speedlab.results.comparison import Comparison
from speedlab.results.findings import Finding
from speedlab.results.knobs import KnobError
from speedlab.results.run import RunResult
from speedlab.results.stats import summarize
from speedlab.results.sweep import SweepResult
from speedlab.run.autotuner import autotune, keeps, start_knobs
from tests.doctor_runs import require_quiet
from tests.records import run_of

QUIET = dict(accelerator="cpu", **QUIET_TRAINER)


def slow_reads() -> None:
    """Each sample waits 2 ms as if read from slow storage; each step computes 5 ms."""
    loader = known_cost_loader(n=300, batch_size=8, sleep_s=0.002)
    pl.Trainer(max_epochs=10, **QUIET).fit(KnownCostModel(step_s=0.005), loader)


@pytest.fixture(scope="module")
def tuned() -> SweepResult:
    """A search on a quiet machine: with another process on a core, idle loaders may have
    waited for a core rather than for storage, and the doctor (rightly) names no knob."""
    result = speedlab.autotune(slow_reads, budget_s=60, steps=25, store=False)
    require_quiet(result.baseline)
    return result


def test_it_starts_from_the_cells_own_settings_and_changes_one_knob_at_a_time(
    tuned: SweepResult,
) -> None:
    knobs = [run.knobs for run in tuned.runs]
    assert knobs[0] == {}
    for i, after in enumerate(knobs[1:], start=1):
        changed = [set(after.items()) ^ set(before.items()) for before in knobs[:i]]
        assert any(len({k for k, _ in c}) == 1 for c in changed)
    # The doctor's first remedy for waiting reads: workers (preload comes after, if needed).
    assert knobs[1] == {"workers": 2}


def test_it_keeps_what_helps_and_reports_the_path_with_evidence(tuned: SweepResult) -> None:
    notes = tuned.notes
    assert notes[0].startswith("Baseline: ")
    steps = [n for n in notes if n.startswith("Step ")]
    assert len(steps) == len(tuned.runs) - 1
    assert steps[0].startswith("Step 1: io_bound: Each step waits")
    assert "Tried workers=2" in steps[0] and steps[0].endswith(": kept.")
    assert all(s.endswith((": kept.", ": dropped.")) for s in steps)
    [best] = [n for n in notes if n.startswith("Best configuration: ")]
    assert best.endswith("the baseline (faster).")
    kept = tuned.best
    assert kept is not None and kept is not tuned.baseline
    assert best.startswith(f"Best configuration: {kept.label()}, {kept.samples_per_s:.1f}")
    # Workers hide 16 ms of reads a step behind 5 ms of compute: about 1.9x here, quiet (12
    # runs each of this tree and the last landed one: 1.54 to 2.28; clean-clone CI runs, the
    # trial quiet: 1.39 and 1.41, where the two workers' handover shares 2 cores with the
    # model). A fixed figure needs the trial quiet too, as the fixture needs the baseline
    # quiet; 1.3x is well beyond the 5% a quiet machine's noise allows, below all of those.
    require_quiet(tuned.runs[1])
    assert tuned.runs[1].speedup > 1.3
    assert tuned.diagnosis[0].kind == "verdict"
    assert speedlab.last is tuned


def test_compile_is_not_tried_on_a_small_budget() -> None:
    def all_compute() -> None:
        loader = known_cost_loader(n=2000, batch_size=8)
        pl.Trainer(max_epochs=1, **QUIET).fit(KnownCostModel(step_s=0.02), loader)

    # Started from bf16-mixed, so that compile is the doctor's remedy on any CPU (on one with
    # bf16 instructions it would suggest bf16-mixed first).
    start = {"precision": "bf16-mixed"}
    result = autotune(all_compute, budget_s=60, steps=20, start=start, store=False)
    assert [run.knobs for run in result.runs] == [start], result.notes
    assert any(n.startswith("Not tried: compile=on (model_bound)") for n in result.notes), (
        result.notes
    )
    assert "Stopped: the doctor has nothing left to try." in result.notes


def test_a_spent_budget_leaves_only_the_baseline() -> None:
    start = time.perf_counter()
    result = autotune(slow_reads, budget_s=0.01, steps=10, store=False)
    assert len(result.runs) == 1
    assert result.notes[-1].endswith("no change was measured.")
    require_quiet(result.baseline)  # else the doctor may name no knob, and nothing is tried
    assert "would not fit in the 0 s budget" in result.notes[-2]
    assert (
        result.notes[-1] == "Best configuration: the cell's own settings; no change was measured."
    )
    assert time.perf_counter() - start < 30


def test_a_failing_cell_stops_after_the_baseline() -> None:
    def broken() -> None:
        raise RuntimeError("no data here")

    result = autotune(broken, store=False)
    assert len(result.runs) == 1 and "no data here" in result.runs[0].error
    assert "Stopped: the baseline failed." in result.notes


class DeviceBoundModel(KnownCostModel):
    """Each step waits 20 ms with the CPU free, as the host does while a GPU computes."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        exact_sleep(0.02)
        return loss


def test_workers_that_only_take_cores_are_given_back() -> None:
    """The doctor says oversubscribed and the autotuner tries no workers; kept where it measures
    them as fast, dropped where it measures them slower: the project's CI on 2026-12-02 read
    0.86x (285 against 340 samples/s), the day this VM's idle vCPUs were measured slow to wake
    (tests/measure/test_probe.py: known_step; the cause here is not isolated)."""
    if 2 + torch.get_num_threads() <= usable_cores():
        pytest.skip("two workers do not oversubscribe this machine's cores")

    def idle_workers() -> None:
        loader = known_cost_loader(n=4000, batch_size=8, num_workers=2, persistent_workers=True)
        pl.Trainer(max_epochs=1, **QUIET).fit(DeviceBoundModel(step_s=0), loader)

    result = autotune(idle_workers, budget_s=60, steps=20, store=False)
    [step] = [n for n in result.notes if n.startswith("Step 1: ")]
    assert step.startswith("Step 1: oversubscribed: 2 worker(s) + ")
    assert "Tried workers=0" in step
    if ", slower (" in step:  # the comparison's verdict, as the note gives it
        assert step.endswith(": dropped.")
        assert result.best is not None and result.best.knobs.get("workers") != 0
    else:
        assert step.endswith(": kept.")
        assert result.best is not None and result.best.knobs.get("workers") == 0


def comparison(speedup: float, significant: bool) -> Comparison:
    spread = summarize([100.0, 110.0, 120.0])
    return Comparison(speedup, significant=significant, a=spread, b=spread)


def test_fewer_workers_are_kept_when_as_fast_and_nothing_else_is() -> None:
    current = RunResult(knobs={"workers": 2})
    fewer = Finding("oversubscribed", "", "", "workers", value=0)
    more = Finding("cpu_bound", "", "", "workers", value=4)
    preload = Finding("io_bound", "", "", "preload", value="ram")
    assert keeps(comparison(0.98, False), fewer, current, current) == "as fast with fewer workers"
    assert keeps(comparison(1.03, False), more, current, current) is None
    assert keeps(comparison(1.03, False), preload, current, current) is None
    assert keeps(comparison(0.5, True), fewer, current, current) is None


def preloaded(planned_steps: int) -> tuple[RunResult, RunResult]:
    """Steps of 100 ms without preload, 10 ms with it after 3 s of preloading."""
    without = run_of([0.09] * 20, [0.01] * 20, knobs={"preload": "off"})
    with_it = run_of([0.0] * 20, [0.01] * 20, knobs={"preload": "ram"})
    with_it = replace(with_it, phases={"preload": 3.0})
    workload = {"planned_steps": planned_steps}
    return replace(without, workload=workload), replace(with_it, workload=workload)


def test_a_faster_preload_is_kept_only_when_it_pays_back_within_the_cells_own_training() -> None:
    preload = Finding("io_bound", "", "", "preload", value="ram")
    long_cell = preloaded(planned_steps=200)  # break-even after 34 steps
    assert keeps(compare(*long_cell), preload, *long_cell) == "faster"
    short_cell = preloaded(planned_steps=30)
    assert compare(*short_cell).verdict == "faster"
    assert keeps(compare(*short_cell), preload, *short_cell) is None


@pytest.mark.parametrize(
    ("start", "knobs"),
    [
        (None, {}),
        ({"workers": 2, "preload": ["ram"]}, {"workers": 2, "preload": "ram"}),
        ({"trainer.max_epochs": (3,)}, {"trainer.max_epochs": 3}),
    ],
)
def test_the_start_is_one_value_per_knob(start: Any, knobs: dict[str, Any]) -> None:
    assert start_knobs(start) == knobs


@pytest.mark.parametrize(
    ("start", "message"),
    [
        ({"pin_memory": [True, False]}, "--pin-memory True,False: not allowed. Expected one value"),
        ({"trainer.max_epochs": [1, 2]}, "--trainer max_epochs=1,2: not allowed. Expected one"),
        ({"workers": []}, "--workers []: not allowed. Expected one value"),
    ],
)
def test_a_start_with_several_values_is_refused(start: dict[str, Any], message: str) -> None:
    with pytest.raises(KnobError) as info:
        start_knobs(start)
    assert str(info.value).startswith(message)
    assert str(info.value).endswith("autotune starts from one configuration.")


def test_a_bad_start_value_is_refused_before_the_baseline_runs() -> None:
    ran = []
    with pytest.raises(KnobError, match="--workers -1: not allowed"):
        autotune(lambda: ran.append(1), start={"workers": -1}, store=False)
    assert not ran


@pytest.mark.parametrize("budget", [-1, 0, "60"])
def test_a_bad_budget_is_refused_before_the_baseline_runs(budget: Any) -> None:
    ran = []
    with pytest.raises(KnobError) as info:
        speedlab.autotune(lambda: ran.append(1), budget_s=budget, store=False)
    assert str(info.value) == f"budget_s={budget!r}: not allowed. Expected seconds > 0, or None."
    assert not ran


def test_the_public_autotune_names_its_budget_and_steps() -> None:
    """As the interface says: ``autotune(train_fn, *, budget_s=None, steps=None)``."""
    parameters = inspect.signature(speedlab.autotune).parameters
    assert parameters["budget_s"].default is None and parameters["steps"].default is None
    assert parameters["budget_s"].kind is inspect.Parameter.KEYWORD_ONLY
