"""The hand-over of a ready batch from a DataLoader worker, measured on this machine."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys

from speedlab.measure.handover import handover_time


def test_the_hand_over_is_measured_once_and_leaves_no_worker_behind() -> None:
    handover_time.cache_clear()
    took = handover_time()
    # A real cross-process hand-over: more than a function call, far less than a batch's
    # making (0.1 to 4 ms measured on the machines this project runs on).
    assert 1e-5 < took < 0.05, took
    assert handover_time() == took  # cached: measured once per process
    assert not multiprocessing.active_children()


def test_the_hand_over_leaves_torchs_random_numbers_and_the_start_method_as_they_were() -> None:
    """Measured after a run's fit, it must not change what the next cell draws, nor fix the
    start method a later cell may still choose. In a fresh process, where none is fixed yet."""
    code = (
        "import multiprocessing, torch\n"
        "from speedlab.measure.handover import handover_time\n"
        "torch.manual_seed(0)\n"
        "expected = torch.randperm(8).tolist()\n"
        "torch.manual_seed(0)\n"
        "handover_time()\n"
        "print(torch.randperm(8).tolist() == expected, multiprocessing.get_start_method(True))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "None"]
