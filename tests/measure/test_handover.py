"""The hand-over of a ready batch from a DataLoader worker, measured on this machine."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading

from speedlab.measure.handover import handover_time


def test_the_hand_over_is_a_real_cross_process_take_and_leaves_no_worker_behind() -> None:
    took = handover_time()
    # More than a function call, far less than a batch's making (0.1 to 8 ms measured on the
    # machines this project runs on).
    assert 1e-5 < took < 0.05, took
    assert not multiprocessing.active_children()


def test_each_reading_is_taken_anew_so_a_busy_moment_is_not_kept() -> None:
    """A reading taken while other threads of the process hold the GIL reads their switch
    intervals (about 200 ms here); the next, after they stopped, reads the machine's own. A
    reading kept for the process (as before 2026-12-02) would read 200 ms ever after. Two busy
    threads, not one: beside one, a reading's median take now and then got the GIL back
    before the thread did (13 and 38 ms, once under the next reading, in 29 readings on
    2026-12-02); beside two, 24 readings took 176 to 284 ms, and 49 ms with a busy process
    beside the suite besides (the after reading 0.5 ms): a busy moment is told from the next
    by their ratio, and by a take longer than two switch intervals."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    busy = [threading.Thread(target=spin, daemon=True) for _ in range(2)]
    for thread in busy:
        thread.start()
    try:
        beside = handover_time()
    finally:
        stop.set()
        for thread in busy:
            thread.join()
    after = handover_time()
    assert beside > 2 * sys.getswitchinterval() and beside > 10 * after, (beside, after)


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
