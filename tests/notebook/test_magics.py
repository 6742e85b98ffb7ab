"""%%profile_train and %speedlab driven through a real IPython shell and real training."""

from __future__ import annotations

import re

import pytest
from IPython.core.error import UsageError

import speedlab
from speedlab.analysis.doctor import diagnose
from speedlab.notebook import session
from speedlab.run.next_step import next_experiment
from tests.doctor_runs import require_quiet

SETUP = """
import os, signal
import lightning.pytorch as pl
from speedlab.labs import image_lab, KnownCostModel, known_cost_loader
QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
"""

IMAGE_CELL = """
model, data = image_lab()
trainer = pl.Trainer(max_epochs=1, accelerator="cpu", limit_val_batches=0, **QUIET)
trainer.fit(model, data)
"""

KNOWN_COST_CELL = """
trainer = pl.Trainer(max_epochs=1, accelerator="cpu", **QUIET)
trainer.fit(KnownCostModel(step_s=0.002), known_cost_loader(n=800, batch_size=8, sleep_s=0.001))
"""


@pytest.fixture
def shell(shell):
    """The shared shell, with the cell's imports run."""
    shell.run_cell(SETUP)
    return shell


def test_workers_and_preload_sweep_on_the_image_lab(shell) -> None:
    sweep = shell.run_cell_magic(
        "profile_train", "--workers 0,2 --preload off,ram --steps 30 -o", IMAGE_CELL
    )
    assert [r.knobs for r in sweep.runs] == [
        {"workers": 0, "preload": "off"},
        {"workers": 0, "preload": "ram"},
        {"workers": 2, "preload": "off"},
        {"workers": 2, "preload": "ram"},
    ]
    for run in sweep.runs:
        assert run.ok and run.steps == 30
        assert 0 < run.data_time < 1 and 0 < run.batch_time < 1 and run.samples_per_s > 10
    off, ram = sweep.runs[0], sweep.runs[1]
    require_quiet(off, ram)  # beside other work, decoding from RAM can wait longer than reading
    assert ram.data_time < off.data_time
    assert ram.phases["preload"] > 0
    assert speedlab.last is sweep


def test_amp_runs_as_bf16_on_a_cpu_and_16_mixed_is_explained(shell) -> None:
    sweep = shell.run_cell_magic(
        "profile_train", "--precision amp,16-mixed --steps 8 -o", KNOWN_COST_CELL
    )
    amp, fp16 = sweep.runs
    assert amp.ok and fp16.ok
    assert any("precision=amp ran as bf16-mixed" in n for n in amp.notes)
    assert any(
        "precision=16-mixed is not supported on this hardware; Lightning ran bf16-mixed" in n
        for n in fp16.notes
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--workers -1", "--workers -1: not allowed. Expected an integer >= 0 or auto."),
        ("--precision 12", "--precision 12: not allowed. Expected one of 32-true"),
        ("--matmul fast", "--matmul fast: not allowed. Expected one of highest, high, medium."),
        ("--warp-speed 9", "unrecognized arguments: --warp-speed 9"),
        ("--steps 0", "--steps 0: not allowed. Expected an integer >= 1."),
        ("--trainer max_epochs", "--trainer max_epochs: not allowed. Expected KEY=V1,V2"),
        ("--predict --autotune", "--predict: not with --autotune, which picks each run from"),
        # argparse would keep the last value silently
        ("--workers 0 --workers 2", "--workers: given twice. Give it once"),
        ("--work 0 --workers 2", "--workers: given twice. Give it once"),  # an abbreviation
        ("--steps 5 --steps=6", "--steps: given twice. Give it once"),
        (
            "--trainer max_epochs=1 --trainer max_epochs=2",
            "--trainer max_epochs=2: not allowed. Expected max_epochs once",
        ),
        ("--trainer max_epoch=1", "--trainer max_epoch=1: not allowed. Expected an argument of"),
        ("--steps abc", "--steps abc: not allowed. Expected an integer >= 1."),
        ("--time -1", "--time -1: not allowed. Expected seconds > 0."),
        ("--repeat 1.5", "--repeat 1.5: not allowed. Expected an integer >= 1."),
    ],
)
def test_bad_options_are_refused_in_one_line_before_training(
    shell, line: str, message: str
) -> None:
    with pytest.raises(UsageError) as info:
        shell.run_cell_magic("profile_train", line, "ran = True\n" + KNOWN_COST_CELL)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert "ran" not in shell.user_ns


def test_error_in_the_cell_shows_the_users_traceback_and_restores_state(shell, capsys) -> None:
    cell = """
class Broken(KnownCostModel):
    def training_step(self, batch, batch_idx):
        if batch_idx == 5:
            raise ZeroDivisionError("cell bug")
        return super().training_step(batch, batch_idx)
trainer = pl.Trainer(max_steps=20, accelerator="cpu", **QUIET)
trainer.fit(Broken(step_s=0.001), known_cost_loader(n=400, batch_size=8))
"""
    sweep = shell.run_cell_magic("profile_train", "--workers 2 --matmul medium -o", cell)
    run = sweep.runs[0]
    assert run.error == "ZeroDivisionError: cell bug" and run.steps == 5
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert "raise ZeroDivisionError" in out and "lightning/pytorch/loops" in out
    # the frames of speedlab's wrappers that the error passed through are not the user's:
    assert re.findall(r"speedlab/(?:run|measure|notebook)/\w+\.py", out) == []
    # the autouse fixture checks patches, matmul, SIGINT and workers; the next run works:
    again = shell.run_cell_magic("profile_train", "--steps 5 -o", KNOWN_COST_CELL)
    assert again.runs[0].ok


def test_interrupt_stops_cleanly_and_the_next_cell_works(shell) -> None:
    cell = """
class Interrupted(KnownCostModel):
    def training_step(self, batch, batch_idx):
        if batch_idx == 8:
            os.kill(os.getpid(), signal.SIGINT)
        return super().training_step(batch, batch_idx)
trainer = pl.Trainer(max_steps=50, accelerator="cpu", **QUIET)
trainer.fit(Interrupted(step_s=0.001), known_cost_loader(n=800, batch_size=8, num_workers=2))
"""
    sweep = shell.run_cell_magic("profile_train", "--persistent-workers on,off -o", cell)
    assert len(sweep.runs) == 1 and sweep.runs[0].error == "interrupted"
    assert sweep.runs[0].steps >= 8
    again = shell.run_cell_magic("profile_train", "--steps 5 -o", KNOWN_COST_CELL)
    assert again.runs[0].ok


def test_result_is_displayed_without_o_and_kept_as_last(shell, capsys) -> None:
    assert shell.run_cell_magic("profile_train", "--steps 8 --name quick", KNOWN_COST_CELL) is None
    assert "baseline" in capsys.readouterr().out
    assert speedlab.last.name == "quick"


def test_line_magics(shell, capsys) -> None:
    shell.run_cell_magic("profile_train", "--steps 8 --name stored", KNOWN_COST_CELL)
    capsys.readouterr()
    shell.run_line_magic("speedlab", "history 5")
    assert "stored" in capsys.readouterr().out
    shell.run_line_magic("speedlab", "explain pin-memory")
    assert "page-locked" in capsys.readouterr().out
    shell.run_line_magic("speedlab", "system")
    assert "cores" in capsys.readouterr().out.lower()
    with pytest.raises(UsageError, match="expected one of"):
        shell.run_line_magic("speedlab", "frobnicate")
    with pytest.raises(UsageError, match=r"^explain warp: not allowed\. Expected a knob"):
        shell.run_line_magic("speedlab", "explain warp")


def test_system_shows_the_cpus_bf16_amx_and_avx512(shell, fake_cpu_flags, capsys) -> None:
    fake_cpu_flags("avx512f avx512_bf16 amx_tile amx_bf16 amx_int8")
    shell.run_line_magic("speedlab", "system")
    out = capsys.readouterr().out
    assert re.search(r"^CPU math +AVX-512 yes, bf16 yes, AMX yes", out, re.MULTILINE)
    fake_cpu_flags("")
    shell.run_line_magic("speedlab", "system")
    out = capsys.readouterr().out
    assert "AVX-512 no, bf16 no (no avx512_bf16 or amx_bf16), AMX no" in out


def test_autotune_starts_from_the_values_given_and_returns_its_path(shell) -> None:
    tuned = shell.run_cell_magic(
        "profile_train",
        "--autotune --workers 0 --steps 10 --name tuned --no-live -o",
        KNOWN_COST_CELL,
    )
    assert tuned.runs[0].knobs == {"workers": 0} and tuned.name == "tuned"
    assert tuned.notes[0].startswith("Baseline: ")
    require_quiet(tuned.baseline)  # else the doctor may name no knob, and nothing is tried
    assert tuned.notes[1].startswith("Step 1: io_bound: ") and "Tried workers=2" in tuned.notes[1]
    # --steps caps every run (a larger batch may end the cell's one epoch sooner)
    assert tuned.runs[0].steps == 10 and all(run.steps <= 10 for run in tuned.runs)
    assert speedlab.last is tuned


def test_autotune_refuses_a_list_of_values_before_training(shell) -> None:
    with pytest.raises(UsageError) as info:
        shell.run_cell_magic("profile_train", "--autotune --workers 0,2", "ran = True\n")
    assert str(info.value) == (
        "--workers 0,2: not allowed. Expected one value: autotune starts from one configuration."
    )
    assert "ran" not in shell.user_ns


def test_doctor_prints_the_findings_and_the_line_to_run_next(shell, capsys, monkeypatch) -> None:
    monkeypatch.setattr(session, "last", None)
    with pytest.raises(UsageError, match="nothing profiled yet"):
        shell.run_line_magic("speedlab", "doctor")
    shell.run_cell_magic("profile_train", "--steps 12 --no-live", KNOWN_COST_CELL)
    capsys.readouterr()
    shell.run_line_magic("speedlab", "doctor")
    out = capsys.readouterr().out
    assert "verdict" not in out  # one run: nothing to compare it with
    # A 12-step run is too short for the CPU sampler to tell a sleep from a spin, so which
    # data finding it is belongs to the doctor's own known-cost tests; here: each finding of
    # the run, then the experiment that follows from them.
    [data] = [f for f in diagnose(session.last.runs[0]) if f.kind in ("io_bound", "cpu_bound")]
    assert f"{data.kind}: {data.headline}\n    {data.evidence}" in out  # every finding in full
    assert out.rstrip().endswith("Try next:\n" + next_experiment(session.last))
    assert next_experiment(session.last).startswith("%%profile_train ")


def test_the_magic_runs_the_way_profile_train_does(shell) -> None:
    """Its options are profile_train's keywords: the same sweep, stored the same way, with the
    cell's hash beside it."""
    from speedlab.run.sweep import cell_hash

    line = "--workers 0,1 --matmul highest --trainer limit_val_batches=0 --steps 3 --name same --no-live"
    cell = "pass  # never trains\n"
    by_magic = shell.run_cell_magic("profile_train", line + " -o", cell)
    by_api = speedlab.profile_train(
        lambda: None,
        workers=[0, 1],
        matmul="highest",
        trainer={"limit_val_batches": [0]},
        steps=3,
        name="same",
        live=False,
    )
    assert [r.knobs for r in by_magic.runs] == [r.knobs for r in by_api.runs]
    assert by_magic.name == by_api.name == "same"
    api_rows, magic_rows = speedlab.history(4)[:2], speedlab.history(4)[2:]
    assert [r["knobs"] for r in magic_rows] == [r["knobs"] for r in api_rows]
    assert {r["cell_hash"] for r in magic_rows} == {cell_hash(cell)}
    assert {r["cell_hash"] for r in api_rows} == {None}
    magics = shell.magics_manager.registry["SpeedlabMagics"]
    assert magics.last_cell[1].plan == [run.knobs for run in by_api.runs]


def test_load_shows_a_stored_sweep_as_it_showed(shell, capsys) -> None:
    sweep = shell.run_cell_magic(
        "profile_train", "--workers 0,1 --steps 8 --name kept --no-live -o", KNOWN_COST_CELL
    )
    shell.run_cell_magic("profile_train", "--steps 5 --name later --no-live -o", KNOWN_COST_CELL)
    capsys.readouterr()
    shell.run_line_magic("speedlab", "history 3")
    header, _, *rows = capsys.readouterr().out.splitlines()
    assert header.split()[:2] == ["run", "sweep"]
    [sweep_id] = {row.split()[1] for row in rows if "kept" in row}
    shell.run_line_magic("speedlab", f"load {sweep_id}")
    out = capsys.readouterr().out
    assert out.startswith(str(sweep))  # as %%profile_train displayed it: table, notes
    for finding in sweep.diagnosis:  # then its findings
        assert str(finding) in out
    assert speedlab.last is not sweep and str(speedlab.last) == str(sweep)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("load", "%speedlab load: expected a sweep's number"),
        ("load three", "%speedlab load three: expected a sweep's number"),
        ("load 999", "no sweep 999: there is no run store at"),
    ],
)
def test_load_refuses_what_it_cannot_show_in_one_line(shell, line: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        shell.run_line_magic("speedlab", line)
    assert message in str(info.value) and "\n" not in str(info.value)
