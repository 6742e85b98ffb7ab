"""speedlab.analysis.verdict: the sweep's verdict, the best run and what helped."""

from __future__ import annotations

import re
from dataclasses import replace

from speedlab.analysis.compare import compare
from speedlab.analysis.verdict import diagnose_sweep, judge_sweep, verdicts
from speedlab.results.run import RunResult
from speedlab.results.sweep import SweepResult
from tests.doctor_runs import kinds, require_quiet, the
from tests.records import run_of


def test_the_verdict_names_the_best_run_and_what_helped(batch_sweep: SweepResult) -> None:
    """On a machine whose cores were the sweep's: other processes' load widens the change a
    comparison calls real (``SHARED_EFFECT``), and this failed once beside them (2026-12-02)."""
    require_quiet(*batch_sweep.runs)
    verdict = the(diagnose_sweep(batch_sweep), "verdict")
    assert verdict.evidence.startswith("Best: batch_size=16 at ")
    assert "faster" in verdict.evidence and "Helped: batch_size=16" in verdict.evidence
    assert verdict.advice == "Keep batch_size=16."


def waiting_on_storage(workers: int, batch_s: float) -> RunResult:
    """A run whose steps wait 20 ms for data while the loading is idle: storage-bound."""
    run = run_of([0.02] * 30, [batch_s] * 30, knobs={"workers": workers}, warmup=5)
    system = {"cores": 2, "cpu_percent": 30.0, "main_cpu_percent": 25.0}
    system |= {"train_thread_cpu_percent": 25.0, "workers_cpu_percent": 5.0 * workers}
    return replace(run, system=system)


def test_a_single_run_gets_findings_but_no_verdict_against_itself() -> None:
    findings = judge_sweep([waiting_on_storage(0, 0.01)]).diagnosis
    assert findings and "verdict" not in kinds(findings)


def test_advice_this_sweep_already_measured_says_what_it_measured_instead_of_try() -> None:
    base, tried = waiting_on_storage(0, 0.01), waiting_on_storage(2, 0.05)
    sweep = judge_sweep([base, tried])
    assert sweep.best is sweep.baseline
    alone = the(judge_sweep([base]).diagnosis, "io_bound")
    assert (alone.knob, alone.value) == ("workers", 2)
    assert re.search(r"; try --workers 2 \(predicted \d+\.\dx\)\.$", alone.headline)
    found = the(sweep.diagnosis, "io_bound")
    assert found.knob is None and "try --workers" not in found.headline
    assert found.headline.endswith("; this sweep measured --workers 2.")
    assert "This sweep already measured --workers 2 against it: 0." in found.advice
    assert "slower" in found.advice or "too few" in found.advice


def test_when_the_baseline_is_fastest_the_verdict_does_not_compare_it_with_itself() -> None:
    sweep = judge_sweep([waiting_on_storage(0, 0.01), waiting_on_storage(2, 0.05)])
    verdict = the(sweep.diagnosis, "verdict")
    assert verdict.evidence == "No run beat the baseline beyond noise. Slower: workers=2 0.43x."


def test_verdicts_say_each_runs_verdict_and_how_its_two_parts_moved() -> None:
    base = run_of([0.02] * 30, [0.01] * 30, knobs={"workers": 0}, warmup=5)
    hidden = run_of([0.001] * 30, [0.01] * 30, knobs={"workers": 2}, warmup=5)
    crowded = run_of([0.001] * 30, [0.03] * 30, knobs={"workers": 4}, warmup=5)
    lines = verdicts(judge_sweep([base, hidden, crowded]))
    assert lines == [
        f"workers=2: {compare(base, hidden)}; data_time fell from 20.0 ms to 1.0 ms, "
        "batch_time stayed about the same (10.0 ms, then 10.0 ms).",
        f"workers=4: {compare(base, crowded)}; data_time fell from 20.0 ms to 1.0 ms, "
        "batch_time grew from 10.0 ms to 30.0 ms.",
    ]
    assert compare(base, hidden).verdict == "faster" and "faster" in lines[0]


def test_verdicts_name_a_failed_run_and_nothing_for_a_single_run() -> None:
    base = run_of([0.02] * 30, [0.01] * 30, knobs={"workers": 0}, warmup=5)
    failed = replace(run_of([], [], knobs={"workers": 2}), error="RuntimeError: boom")
    assert verdicts(judge_sweep([base, failed])) == ["workers=2: failed: RuntimeError: boom"]
    assert verdicts(judge_sweep([base])) == []


def test_a_sweeps_own_findings_say_what_it_measured_of_their_suggestion_too() -> None:
    """Workers that slow the model suggest fewer workers; where the same sweep ran that many,
    the finding says what they measured instead of 'Try'."""

    def crowded(workers: int, data_s: float, batch_s: float) -> RunResult:
        run = run_of([data_s] * 30, [batch_s] * 30, knobs={"workers": workers}, warmup=5)
        return replace(run, system={"cores": 2, "torch_threads": 2})

    sweep = judge_sweep([crowded(0, 0.004, 0.01), crowded(1, 0.001, 0.02), crowded(4, 0.001, 0.03)])
    found = the(sweep.diagnosis, "oversubscribed")
    assert found.knob is None and "Try --workers" not in str(found)
    assert "This sweep already measured --workers 1 against it: 0." in found.advice


def test_workers_that_slow_the_model_in_two_groups_of_runs_are_one_finding() -> None:
    """A sweep of workers and preload has a group of runs for each preload; where workers
    slowed the model in both, one finding says so, of the larger growth. Lesson 03 showed two
    (41% and 59%), and once the same line twice (45% and 45%: CI, 2026-12-02)."""

    def crowded(workers: int, preload: str, batch_s: float) -> RunResult:
        knobs = {"workers": workers, "preload": preload}
        run = run_of([0.001] * 30, [batch_s] * 30, knobs=knobs, warmup=5)
        return replace(run, system={"cores": 2, "torch_threads": 2})

    runs = [crowded(0, "off", 0.010), crowded(2, "off", 0.0145), crowded(0, "ram", 0.010)]
    sweep = judge_sweep([*runs, crowded(2, "ram", 0.0159)])
    found = [f for f in sweep.diagnosis if f.kind == "oversubscribed"]
    assert len(found) == 1 and "grows 59%" in found[0].summary, found


def test_a_best_run_whose_compile_never_pays_back_is_told_to_run_without_it() -> None:
    """Workers make the step ten times faster; compiling on top saves 2%, within noise, so it
    never wins back its 2 s: the verdict says never, not 'only never', and what to run."""
    base = run_of([0.09] * 20, [0.01] * 20, knobs={"workers": 0, "compile": "off"})
    workers = run_of([0.0] * 20, [0.0102] * 20, knobs={"workers": 2, "compile": "off"})
    both = run_of([0.0] * 20, [0.01] * 20, knobs={"workers": 2, "compile": "on"})
    sweep = judge_sweep([base, workers, replace(both, phases={"compile": 2.0})])
    assert sweep.best is sweep.runs[2]
    verdict = the(sweep.diagnosis, "verdict")
    assert "compiling (compile=on) never pays back: its steps are not faster than without it" in (
        verdict.advice
    )
    assert "only never" not in verdict.advice and "unknown length" not in verdict.advice
    assert verdict.advice.endswith("Run it with --compile off, which saves the up-front time.")
    assert "never pays back; run it with --compile off" in verdict.summary


def test_a_cell_that_fits_twice_has_each_fit_judged_against_the_same_fit_of_the_baseline() -> None:
    """A fit, then a fine-tune on other data: the second fit is compared with the baseline's
    second fit, never with the first fit (the audit of 2026-12-01 read 1.02x across them)."""
    from speedlab.notebook.tables import sweep_table

    def fit(number: int, knobs: dict, step_s: float) -> RunResult:
        return replace(run_of([0.0] * 61, [step_s] * 61, knobs=knobs), fit=number)

    runs = [
        fit(1, {"workers": 0}, 0.010),
        fit(2, {"workers": 0}, 0.040),  # the fine-tune's steps take 4 times as long
        fit(1, {"workers": 2}, 0.005),
        fit(2, {"workers": 2}, 0.020),
    ]
    sweep = judge_sweep(runs)
    speedups = [round(run.speedup, 2) for run in sweep.runs]
    assert speedups == [1.0, 1.0, 2.0, 2.0]  # not 0.25x and 0.5x against the first fit
    table = sweep_table(sweep)
    assert [row[0] for row in table.rows] == [
        "baseline fit=1",
        "baseline fit=2",
        "workers=2 fit=1",
        "workers=2 fit=2",
    ]
    assert [row[3] for row in table.rows][:2] == ["-", "-"]  # each fit's baseline: no verdict
    assert sweep.best.label(sweep.baseline_of(sweep.best)).startswith("workers=2")
    assert [line.split(":")[0] for line in verdicts(sweep)] == [
        "workers=2 fit=1",
        "workers=2 fit=2",
    ]


def test_runs_after_a_baseline_that_failed_are_not_compared_with_it() -> None:
    """A failed baseline ran nothing: a run after it is neither 'alike' (within noise, its knob
    'changed nothing') nor 'too few to tell', and the sweep's verdict says what failed."""
    refused = RunResult(knobs={"preload": "ram"}, error="PreloadError: --preload ram: a stream")
    refused = replace(refused, ran_otherwise={"preload": "off"})
    ran = run_of([0.001] * 20, [0.003] * 20, knobs={"preload": "off"})
    sweep = judge_sweep([refused, ran])
    assert sweep.runs[1].comparison.inert == ()
    assert verdicts(sweep) == ["preload=off: not compared: its baseline failed."]
    verdict = the(sweep.diagnosis, "verdict")
    assert verdict.evidence == (
        "The baseline failed, so no run was compared with it: PreloadError: --preload ram: a stream"
    )
    assert verdict.severity == "critical"
