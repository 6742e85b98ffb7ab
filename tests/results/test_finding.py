"""speedlab.results.findings: a finding reads in one breath, its evidence and advice after."""

from __future__ import annotations

from dataclasses import replace

from speedlab.results.findings import Finding

IO = Finding(
    "io_bound",
    "Each step waits 24.0 ms for data and computes 10.0 ms.",
    "Workers keep reads in flight.",
    "workers",
    "critical",
    2,
    "Waiting for storage takes 71% of each step",
)


def test_the_headline_says_what_limits_the_step_and_the_knob_to_try() -> None:
    assert IO.headline == "Waiting for storage takes 71% of each step; try --workers 2."
    assert IO.title == "[critical] io_bound: " + IO.headline
    assert (
        IO.details
        == "Each step waits 24.0 ms for data and computes 10.0 ms. Workers keep reads in flight."
    )


def test_the_headline_names_speedlabs_prediction_for_the_knob() -> None:
    predicted = replace(IO, predicted=2.84)
    assert predicted.headline == (
        "Waiting for storage takes 71% of each step; try --workers 2 (predicted 2.8x)."
    )
    assert Finding.from_dict(predicted.to_dict()) == predicted  # stored with the finding
    assert replace(predicted, knob=None).headline.endswith("of each step.")  # no knob, no figure


def test_plain_text_gives_the_headline_then_everything_else() -> None:
    assert str(IO).splitlines() == [IO.title, "    " + IO.details]


def test_a_finding_with_no_knob_says_what_to_do_in_its_summary() -> None:
    finding = Finding("cpu_bound", "ev.", "adv.", summary="X takes 5% of each step; do Y")
    assert finding.headline == "X takes 5% of each step; do Y."


def test_the_summary_is_stored_and_a_finding_stored_without_one_reads_as_before() -> None:
    assert Finding.from_dict(IO.to_dict()) == IO
    stored = {k: v for k, v in IO.to_dict().items() if k != "summary"}  # speedlab 0.1
    old = Finding.from_dict(stored)
    assert old.headline == IO.evidence
    assert old.details == "Workers keep reads in flight. Try --workers 2."
