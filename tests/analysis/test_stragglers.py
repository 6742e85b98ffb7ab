"""speedlab.analysis.stragglers: a slow DataLoader worker (the slow rank is tested with the
per-rank records, in tests/measure/test_ranks.py), and the test both rules share."""

from __future__ import annotations

from speedlab.analysis.doctor import diagnose
from speedlab.analysis.stragglers import (
    RANK_STRAGGLER_FACTOR,
    STRAGGLER_MIN_S,
    WORKER_STRAGGLER_FACTOR,
    slower,
)
from tests.doctor_runs import known_cost, profile, the


def test_one_slow_worker_is_a_straggler() -> None:
    train = known_cost(n=2000, batch_size=8, sleep_s=0.002, slow_worker=1, slow_factor=6)
    run = profile(train, workers=2, steps=24).baseline
    found = the(diagnose(run), "straggler")
    assert found.evidence.startswith("Worker 1 takes")
    assert (found.knob, found.value) == ("workers", 4)


def test_a_straggler_is_slower_by_its_factor_and_beyond_the_noise_floor() -> None:
    assert slower(0.020, 0.010, WORKER_STRAGGLER_FACTOR)
    assert not slower(0.019, 0.010, WORKER_STRAGGLER_FACTOR)
    assert slower(0.014, 0.010, RANK_STRAGGLER_FACTOR)
    tiny = STRAGGLER_MIN_S / 4  # many times slower, but by less than the noise floor
    assert not slower(3 * tiny, tiny, WORKER_STRAGGLER_FACTOR)
