"""Tests for speedlab.cli: the ``speedlab`` command (demo, system, history, load, explain)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from speedlab.cli import main
from speedlab.results.findings import Finding, Kind
from speedlab.results.knobs import explain
from speedlab.results.store import RunStore
from speedlab.results.sweep import SweepResult
from tests.records import run_of

SCRIPT = Path(sys.executable).with_name("speedlab")


def test_demo_generates_the_lab_trains_and_prints_the_breakdown(tmp_path: Path) -> None:
    """The installed console script, on an empty dataset cache: its first use, in full."""
    pytest.importorskip("lightning", reason="the demo trains with Lightning")
    env = {**os.environ, "SPEEDLAB_CACHE": str(tmp_path / "cache")}
    start = time.perf_counter()
    done = subprocess.run(
        [str(SCRIPT), "demo", "--steps", "40"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("speedlab demo: the image lab")
    for line in ("samples/s", "data_time", "batch_time", "data share", "phases", "CPU"):
        assert f"\n{line}" in out, line
    assert "(1280 samples in 40 steps)" in out and "peak RSS" in out
    assert "p10" in out and "p90" in out
    kinds = "|".join(kind.value for kind in Kind)
    doctor = re.compile(rf"^\[(info|warn|critical)\] ({kinds}): ", re.M)
    assert doctor.search(out) or "The doctor found no bottleneck" in out, out
    assert "LeafSpec" not in done.stderr  # Lightning's own deprecation, not the user's
    assert any((tmp_path / "cache").glob("shapes-*/manifest.json")), "dataset not generated"
    assert seconds < 60, f"demo took {seconds:.0f} s with a 40-step run"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["demo", "--steps", "0"], "demo --steps 0: not allowed. Expected an integer >= 1."),
        (["demo", "--workers", "-1"], "demo --workers -1: not allowed. Expected an integer >= 0."),
    ],
)
def test_bad_demo_arguments_are_named_before_anything_runs(argv, said: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert said in capsys.readouterr().err


def test_explain_prints_the_knobs_text(capsys) -> None:
    assert main(["explain", "workers"]) == 0
    assert capsys.readouterr().out.strip() == explain("workers").strip()
    with pytest.raises(SystemExit):
        main(["explain", "warp-drive"])
    assert "invalid choice: 'warp-drive'" in capsys.readouterr().err
    # the knob's Python name, as speedlab.explain and the magic take it
    assert main(["explain", "pin_memory"]) == 0
    assert capsys.readouterr().out.strip() == explain("pin-memory").strip()


def test_system_says_in_words_what_reduced_precision_math_the_cpu_has(
    fake_cpu_flags, capsys
) -> None:
    fake_cpu_flags("avx512f avx512bw")
    assert main(["system"]) == 0
    out = capsys.readouterr().out
    assert "\nCPU math           AVX-512 yes, bf16 no (no avx512_bf16 or amx_bf16), AMX no" in out


def test_system_and_history_print(capsys) -> None:
    assert main(["system"]) == 0
    assert "cores" in capsys.readouterr().out.lower()
    assert main(["history", "5"]) == 0
    assert capsys.readouterr().out.strip()


def stored_by_hand(path: Path) -> tuple[SweepResult, int]:
    """A finished two-run sweep in the store at ``path``, made without torch."""
    runs = [
        run_of([0.004] * 12, [0.008] * 12, knobs={"workers": 0}),
        run_of([0.001] * 12, [0.008] * 12, knobs={"workers": 2}),
    ]
    finding = Finding("io_bound", "data_time is a third of the step.", "Load in parallel.")
    sweep = SweepResult(runs, name="by hand", diagnosis=[finding], notes=["A note."])
    with RunStore(path) as store:
        sweep_id = store.new_sweep(name=sweep.name, cell_hash=None, env={})
        for position, run in enumerate(sweep.runs):
            store.add_run(sweep_id, position, run.to_dict())
        store.finish_sweep(sweep_id, sweep.to_dict())
    return sweep, sweep_id


def test_load_prints_a_stored_sweep_as_it_showed_without_loading_torch(
    tmp_path: Path, capsys
) -> None:
    path = tmp_path / "runs.sqlite"
    sweep, sweep_id = stored_by_hand(path)
    assert main(["history"]) == 0
    header, _, *rows = capsys.readouterr().out.splitlines()
    assert header.split()[:2] == ["run", "sweep"]
    assert {row.split()[1] for row in rows} == {str(sweep_id)}
    assert main(["load", str(sweep_id)]) == 0
    assert capsys.readouterr().out == f"{sweep}\n{sweep.diagnosis[0]}\n"
    code = (
        "import sys\n"
        "from speedlab.cli import main\n"
        f"assert main(['load', '{sweep_id}']) == 0\n"
        "assert 'torch' not in sys.modules and 'lightning' not in sys.modules\n"
    )
    env = {**os.environ, "SPEEDLAB_STORE": str(path)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{sweep}\n{sweep.diagnosis[0]}\n"


def test_load_of_an_unknown_sweep_is_one_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "runs.sqlite"
    assert main(["load", "3"]) == 1
    assert (
        capsys.readouterr().err
        == f"speedlab load: no sweep 3: there is no run store at {path} yet\n"
    )
    assert not path.exists()
    _, sweep_id = stored_by_hand(path)
    assert main(["load", str(sweep_id + 1)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no sweep {sweep_id + 1} in the run store {path}" in err
    with pytest.raises(SystemExit):
        main(["load", "three"])
    assert "invalid int value: 'three'" in capsys.readouterr().err


def test_history_of_a_damaged_store_is_one_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "runs.sqlite"
    stored_by_hand(path)
    data = bytearray(path.read_bytes())
    data[4096:] = b"\x07" * (len(data) - 4096)  # every page after the first
    path.write_bytes(bytes(data))
    assert main(["history"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"speedlab history: speedlab run store {path} is a damaged SQLite")
