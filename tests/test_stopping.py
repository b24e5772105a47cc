"""A stop that comes while a store is created waits until the store is whole, then reaches
whatever would have taken it."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

from hetrl.stopping import deferred_stops


def test_a_signal_during_a_deferred_block_is_handed_on_once_the_block_is_done():
    taken: list[int] = []
    main = threading.main_thread().ident
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: taken.append(signum))
    try:
        with deferred_stops():
            signal.pthread_kill(main, signal.SIGTERM)
            signal.pthread_kill(main, signal.SIGTERM)  # doubled
            for _ in range(1000):  # Python runs handlers between bytecodes: time to run one
                pass
            assert taken == []
        assert taken == [signal.SIGTERM, signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is not None
    finally:
        signal.signal(signal.SIGTERM, previous)


SHUTS_DOWN_SLOWLY = """
import sys, time
from hetrl.stopping import listen_early

listen_early()

class Slow:
    def __del__(self):  # runs in Python's finalization, after the atexit functions
        print("finalizing", flush=True)
        time.sleep(3)

slow = Slow()
sys.exit(130)
"""


def test_a_signal_in_the_last_moments_of_a_stopped_process_leaves_its_exit_code():
    """Python's finalization gives SIGTERM its default action back: a forwarded SIGTERM then
    killed a sweep that had stopped (-15) instead of letting it exit 130."""
    process = subprocess.Popen([sys.executable, "-c", SHUTS_DOWN_SLOWLY], stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout.readline() == "finalizing\n"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 130
