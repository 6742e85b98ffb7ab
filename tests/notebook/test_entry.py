"""The one way into a sweep that profile_train, the magic and the panel share."""

from __future__ import annotations

import pytest

import speedlab
from speedlab.notebook.entry import one_run, plan, profile
from speedlab.results.knobs import KnobError, Knobs
from speedlab.run.intercept import RunControls
from speedlab.run.sweep import cell_hash
from speedlab.run.watch import LiveView


@pytest.mark.parametrize(
    "knobs",
    [
        Knobs(),
        Knobs(workers="auto", pin_memory=True, compile="on", precision="bf16-mixed"),
        Knobs(batch_size=64, trainer={"callbacks": [0, 1], "max_epochs": 2}),  # a list is one value
    ],
)
def test_one_run_plans_exactly_those_knobs(knobs: Knobs) -> None:
    controls = RunControls(steps=7, time=30, warmup=2)
    spec = plan(**one_run(knobs, controls, name="p"))
    assert spec.plan == [knobs]
    assert spec.controls == controls and spec.name == "p" and spec.repeat == 1


def test_plan_takes_profile_train_s_keywords_and_refuses_a_bad_one() -> None:
    spec = plan(workers=[0, 2], trainer={"max_epochs": [1, 2]}, steps=5, repeat=2, name="n")
    assert spec.plan == [
        Knobs(workers=0, trainer={"max_epochs": 1}),
        Knobs(workers=0, trainer={"max_epochs": 2}),
        Knobs(workers=2, trainer={"max_epochs": 1}),
        Knobs(workers=2, trainer={"max_epochs": 2}),
    ]
    assert spec.controls == RunControls(steps=5) and spec.repeat == 2 and spec.name == "n"
    with pytest.raises(KnobError, match=r"^--time -1: not allowed"):
        plan(time=-1)


def test_profile_uses_the_view_it_is_given_and_keeps_the_result(tmp_path) -> None:
    class Counting(LiveView):
        runs = 0

        def end_run(self, result) -> None:
            Counting.runs += 1
            super().end_run(result)

    errors: list[BaseException] = []
    source = "raise ValueError('cell bug')"

    def broken() -> None:
        raise ValueError("cell bug")

    path = tmp_path / "runs.sqlite"
    sweep = profile(
        broken,
        view=Counting(),
        store=path,
        source=source,
        show_error=errors.append,
        workers=[0, 1],
        name="given",
    )
    assert Counting.runs == 2 and speedlab.last is sweep and sweep.name == "given"
    assert [str(e) for e in errors] == ["cell bug"]  # the same failure in every run: shown once
    rows = speedlab.history(path=path)
    assert [row["knobs"] for row in rows] == [{"workers": 1}, {"workers": 0}]
    assert {row["cell_hash"] for row in rows} == {cell_hash(source)}
