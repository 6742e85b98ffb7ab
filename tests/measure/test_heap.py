"""Full garbage collections stamped by Python's own callbacks: known answers from collections
the test runs itself. Torch-free, so it runs on the edge Pythons too (the collector changed in
3.13 and 3.14)."""

from __future__ import annotations

import gc
import time

from speedlab.measure.heap import FULL, FullCollections


def test_a_full_collection_is_stamped_with_its_own_span() -> None:
    watch = FullCollections()
    watch.start()
    try:
        before = time.perf_counter()
        gc.collect()
        after = time.perf_counter()
    finally:
        watch.stop()
    ((start, end),) = watch.spans
    assert before <= start < end <= after


def test_young_collections_are_not_stamped() -> None:
    watch = FullCollections()
    watch.start()
    try:
        for generation in range(FULL):
            gc.collect(generation)
    finally:
        watch.stop()
    assert watch.spans == []


def test_stopping_puts_the_callbacks_back_as_they_were() -> None:
    before = list(gc.callbacks)
    watch = FullCollections()
    watch.start()
    watch.start()  # once only
    assert len(gc.callbacks) == len(before) + 1
    watch.stop()
    watch.stop()
    assert gc.callbacks == before
    gc.collect()
    assert watch.spans == []


def test_a_collection_under_way_as_the_stamps_start_is_not_stamped() -> None:
    watch = FullCollections()
    watch.start()
    try:
        gc.callbacks[-1]("stop", {"generation": FULL, "collected": 0, "uncollectable": 0})
    finally:
        watch.stop()
    assert watch.spans == []
