"""Plain data to and from records, by their fields' type hints."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from speedlab.results.codec import from_plain, to_plain
from speedlab.results.comparison import Verdict
from speedlab.results.findings import Finding, Kind, Severity
from speedlab.results.knobs import Knobs
from speedlab.results.run import RankRecord, RunResult
from speedlab.results.system import SystemSummary


@dataclass(frozen=True)
class Record:
    knobs: Knobs
    findings: list[Finding] = field(default_factory=list)
    verdict: Verdict | None = None
    pair: tuple[int, float] = (0, 0.0)
    system: SystemSummary = field(default_factory=SystemSummary)


def test_a_record_comes_back_as_the_types_it_was_built_with() -> None:
    record = Record(
        Knobs(workers=2, trainer={"max_epochs": 1}),
        [Finding("io_bound", "waits", "add workers", "workers", "warn", 2)],
        Verdict.faster,
        (3, 0.5),
        SystemSummary(cores=2, cpu_percent=50.0),
    )
    plain = json.loads(json.dumps(to_plain(record)))
    assert plain["knobs"] == {"workers": 2, "trainer.max_epochs": 1}
    assert plain["verdict"] == "faster" and plain["findings"][0]["kind"] == "io_bound"
    back = from_plain(Record, plain)
    assert back == record
    assert isinstance(back.knobs, Knobs) and back.verdict is Verdict.faster
    assert back.findings[0].kind is Kind.io_bound and back.findings[0].severity is Severity.warn
    assert back.pair == (3, 0.5) and back.system.cores == 2


def test_keys_another_version_wrote_are_passed_over_and_missing_fields_keep_defaults() -> None:
    back = from_plain(Record, {"knobs": {"workers": 1}, "written_by_a_later_version": 1})
    assert back == Record(Knobs(workers=1))


def test_a_run_stored_by_an_earlier_version_comes_back_typed() -> None:
    """Earlier versions kept dicts: the fit's number among the knobs, system and ranks as
    dicts, findings as dicts, and a speedup field."""
    old = {
        "knobs": {"workers": 2, "fit": 2},
        "system": {"cores": 2, "cpu_percent": 40.0},
        "ranks": [{"rank": 0, "host": "h", "steps": 4, "system": {"cores": 2}}],
        "diagnosis": [{"kind": "cpu_bound", "evidence": "e", "advice": "a", "severity": "info"}],
        "speedup": 1.5,
    }
    run = RunResult.from_dict(old)
    assert run.knobs == Knobs(workers=2) and run.fit == 2 and run.ran == run.knobs
    assert run.system == SystemSummary(cores=2, cpu_percent=40.0)
    assert run.ranks == [RankRecord(0, "h", steps=4, system=SystemSummary(cores=2))]
    assert run.diagnosis[0].kind is Kind.cpu_bound
    assert run.speedup is None  # judged only by a sweep now: it has no comparison


def test_an_unknown_finding_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="not a valid Kind"):
        from_plain(Finding, {"kind": "fast_enough", "evidence": "", "advice": ""})
