"""speedlab.notebook.report: a run's report in words."""

from __future__ import annotations

from dataclasses import replace

from tests.records import run_of as run


def test_report_has_averages_spread_and_phases() -> None:
    r = replace(
        run([0.01, 0.02, 0.03, 0.04], [0.05] * 4),
        phases={"setup": 1.0, "steady": 2.0, "validation": 0.0},
        # a sampled run's figures (an unsampled run has no system line)
        system={"samples": 4, "cpu_percent": 55.0, "peak_rss_bytes": 300_000_000},
    )
    text = r.report()
    assert "data_time     30.00 ms average   (p10" in text
    assert "setup 1.00 s" in text and "validation" not in text
    assert "peak RSS 300 MB" in text
