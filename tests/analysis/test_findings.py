"""speedlab.analysis.findings: findings are plain data, of known kinds, in the doctor's order."""

from __future__ import annotations

import json

import pytest

from speedlab.analysis.verdict import diagnose_sweep
from speedlab.results.findings import KINDS, Finding
from speedlab.results.sweep import SweepResult
from tests.doctor_runs import require_quiet


def test_findings_are_plain_data_in_the_doctors_order(image_sweep: SweepResult) -> None:
    require_quiet(image_sweep.baseline)  # beside other work the doctor may name nothing more
    findings = diagnose_sweep(image_sweep)
    assert findings[0].kind == "verdict"
    rest = findings[1:]
    order = [KINDS.index(f.kind) for f in rest]
    assert order == sorted(order)
    assert all(f.kind in KINDS for f in findings)
    json.dumps([f.to_dict() for f in findings])
    assert str(rest[0]).startswith(f"[{rest[0].severity}] {rest[0].kind}: ")
    with pytest.raises(ValueError):
        Finding("slow", "evidence", "advice")


@pytest.mark.parametrize(
    ("device", "name"), [("cuda", "GPU"), ("mps", "GPU"), ("xla", "TPU"), ("cpu", "cpu")]
)
def test_the_texts_name_a_runs_device_as_its_device_says(device: str, name: str) -> None:
    from types import SimpleNamespace

    from speedlab.analysis.findings import device_name

    assert device_name(SimpleNamespace(device=device)) == name
