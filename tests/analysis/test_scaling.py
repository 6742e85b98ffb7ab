"""speedlab.analysis.scaling: what a sweep's multi-process runs say of scaling."""

from __future__ import annotations

from dataclasses import replace

from speedlab.analysis.scaling import Scaling, scaling_notes
from tests.records import run_of


def test_the_cpu_scaling_note_tells_forked_ranks_threads_from_spawned_ones() -> None:
    """Lightning gives spawned ranks cores/N threads; speedlab gives forked ones one each."""
    one = run_of([0.0] * 20, [0.01] * 20)
    two = run_of([0.0] * 20, [0.008] * 20, knobs={"devices": 2})
    (note,) = scaling_notes([Scaling(two, one, 2)])
    assert "Lightning gives spawned ranks (and a script's) cores/N torch threads each" in note
    assert "ranks forked from a notebook (ddp_notebook) train on 1 thread each" in note
    assert "Lightning gives each cores/N threads" not in note
    gpus = Scaling(replace(two, device="cuda"), replace(one, device="cuda"), 2)
    assert scaling_notes([gpus]) == []
