"""speedlab.results.comparison: a stored comparison reads its verdict and, where the verdict is
not decided, its reason from its own fields."""

from __future__ import annotations

import math

import pytest

from speedlab.results.comparison import SAME, Comparison, Verdict
from speedlab.results.stats import Summary


def throughput(q1: float, q3: float, n: int = 10) -> Summary:
    """A throughput distribution with these quartiles."""
    return Summary(median=(q1 + q3) / 2, p10=q1, p90=q3, q1=q1, q3=q3, n=n)


@pytest.mark.parametrize(
    ("comparison", "verdict", "reason"),
    [
        (  # a big change whose middle halves still overlap: the spread is too wide
            Comparison(0.58, False, throughput(80, 120), throughput(40, 90), needed=0.05),
            Verdict.within_noise,
            "middle halves overlap",
        ),
        (  # apart, but smaller than the change the machine's drift allows
            Comparison(1.03, False, throughput(99, 100), throughput(102, 103), needed=0.05),
            Verdict.within_noise,
            "+3%, under the 5% needed",
        ),
        (  # small and overlapping: the change is named, it alone holds the verdict back
            Comparison(0.97, False, throughput(90, 110), throughput(88, 107), needed=0.3),
            Verdict.within_noise,
            "-3%, under the 30% needed",
        ),
        (  # rounded to whole percents the two would read alike
            Comparison(1.049, False, throughput(99, 100), throughput(104, 105), needed=0.05),
            Verdict.within_noise,
            "+4.9%, under the 5.0% needed",
        ),
        (
            Comparison(2.0, False, throughput(10, 11, n=2), throughput(20, 21, n=40)),
            Verdict.too_few,
            "2 and 40 measurements, 3 needed",
        ),
        (
            Comparison(1.4, False, throughput(10, 11), throughput(14, 15), inert=(SAME,)),
            Verdict.within_noise,
            "the same configuration ran twice",
        ),
        (
            Comparison(
                0.9, False, throughput(10, 11), throughput(9, 9.5), inert=("workers=auto/0",)
            ),
            Verdict.within_noise,
            "workers=auto/0 changed nothing here",
        ),
        (
            Comparison(2.0, True, throughput(10, 11), throughput(20, 21), needed=0.05),
            Verdict.faster,
            None,
        ),
        (
            Comparison(0.5, True, throughput(20, 21), throughput(10, 11), needed=0.05),
            Verdict.slower,
            None,
        ),
        (  # no throughput to compare: nothing to explain
            Comparison(math.nan, False, throughput(0, 0), throughput(10, 11)),
            Verdict.within_noise,
            None,
        ),
    ],
)
def test_an_undecided_verdict_carries_its_reason(
    comparison: Comparison, verdict: Verdict, reason: str | None
) -> None:
    assert comparison.verdict is verdict
    assert comparison.reason == reason
    assert Comparison.from_dict(comparison.to_dict()).reason == reason  # stored, it says the same


def test_the_one_line_text_gives_the_same_reason() -> None:
    few = Comparison(
        3.0, False, throughput(1, 2, n=2), throughput(3, 6, n=2), advice="--steps 50 or more"
    )
    assert str(few) == "3.00x, too few to tell (2 and 2 measurements, 3 needed: --steps 50 or more)"
    same = Comparison(1.1, False, throughput(10, 11), throughput(11, 12), inert=(SAME,))
    assert str(same) == (
        "1.10x, within noise: the same configuration ran twice, so the difference is the machine's"
    )
    inert = Comparison(2.0, False, throughput(10, 11), throughput(20, 21), inert=("matmul=a/b",))
    assert str(inert).startswith("2.00x, within noise: matmul=a/b changed nothing here")
    small = Comparison(1.03, False, throughput(99, 100), throughput(102, 103), needed=0.05)
    assert str(small) == (
        "1.03x, within noise (+3%, under the 5% needed; middle halves 99.0-100.0 vs "
        "102.0-103.0 samples/s)"
    )
    wide = Comparison(0.58, False, throughput(80, 120), throughput(40, 90), needed=0.05)
    assert str(wide) == "0.58x, within noise (middle halves 80.0-120.0 vs 40.0-90.0 samples/s)"
