"""held_interrupts: a real Ctrl-C during the block is held and reported, not raised."""

from __future__ import annotations

import os
import signal
import threading

from speedlab.run.interrupts import held_interrupts


def test_a_sigint_is_held_until_the_block_ends_and_the_handler_put_back() -> None:
    before = signal.getsignal(signal.SIGINT)
    with held_interrupts() as held:
        os.kill(os.getpid(), signal.SIGINT)
        reached = True
    assert reached and held.interrupted
    assert signal.getsignal(signal.SIGINT) is before
    with held_interrupts() as quiet:
        pass
    assert not quiet.interrupted


def test_off_the_main_thread_nothing_changes() -> None:
    seen = []

    def panel_run() -> None:
        with held_interrupts() as held:
            seen.append(signal.getsignal(signal.SIGINT))
        seen.append(held.interrupted)

    thread = threading.Thread(target=panel_run)
    thread.start()
    thread.join()
    assert seen == [signal.getsignal(signal.SIGINT), False]
