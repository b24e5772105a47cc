"""A stop that comes while a store is created waits until the store is whole, then reaches
whatever would have taken it."""

from __future__ import annotations

import signal
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
