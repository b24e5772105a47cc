"""Signals that come while something must not be cut in two (a store's schema being created
or migrated, a file being renamed into place) wait until it is whole.

A handler that runs in the middle of MLflow's schema creation and raises, or SIGTERM's
default action there, leaves a store whose every later job fails (`table experiment_tags
already exists`). `deferred_stops` notes such a signal and hands it, once the block is
done, to whatever would have taken it: hetrl's own handlers only note a stop too, so the
loop honours it at its next step; the default action (no hetrl handler listening) ends the
process then, with the store whole.
"""

from __future__ import annotations

import atexit
import signal
import threading
from contextlib import contextmanager
from multiprocessing import resource_tracker
from typing import Iterable, Iterator

from hetrl.faults import StopRequest

SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def deferred_stops() -> Iterator[None]:
    """Run the block with SIGINT and SIGTERM deferred until it ends (only the main thread
    runs Python's handlers: elsewhere this changes nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: came.append(signum)) for s in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in came:
            redeliver(signum, previous[signum])


def block(signals: Iterable[int]) -> set[signal.Signals]:
    """Block `signals` in this thread; the mask before. multiprocessing's resource
    tracker unblocks SIGINT and SIGTERM in the thread that starts it, whatever was blocked
    (CPython gh-110844): a joblib sweep's first pool started it after the sweep blocked them,
    so loky's workers started unblocked and died of the stop the sweep sent them, and the
    sweep ended with loky's TerminatedWorkerError. It is started first, so that nothing the
    block spans starts it."""
    resource_tracker.ensure_running()
    return signal.pthread_sigmask(signal.SIG_BLOCK, signals)


def redeliver(signum: int, handler: object) -> None:
    """Hand a noted signal to `handler` (what signal.signal returned): call a Python one,
    raise the signal again for the default action, drop it where it was ignored."""
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        signal.raise_signal(signum)


def listen_early() -> StopRequest:
    """Note SIGINT and SIGTERM from now on (the first thing `python -m hetrl` does): a stop
    that comes while Python imports and Hydra composes is read by the job or the sweep at
    their first safe point (`adopt`), not the default action's death or a KeyboardInterrupt
    in whatever code it lands in."""
    early = StopRequest()
    if threading.current_thread() is threading.main_thread():
        for signum in SIGNALS:
            signal.signal(signum, early.request)
        atexit.register(ignore_after_exit)  # the first registered: it runs last
    return early


def ignore_after_exit() -> None:
    """Ignore SIGINT and SIGTERM once the process has done all it does before it ends (its
    atexit functions). Python's finalization gives a signal that had a Python handler its
    default action back: a launcher's forwarded SIGTERM landing in the last moments of a sweep
    that had stopped killed it by SIGTERM (-15) instead of letting it exit 130."""
    for signum in SIGNALS:
        if callable(signal.getsignal(signum)):
            signal.signal(signum, signal.SIG_IGN)


def adopt(handler: object) -> list[int]:
    """The signals noted so far by the listener whose method `handler` is (what
    signal.signal returned when a later listener took over: the early one, a sweep's)."""
    noted = getattr(getattr(handler, "__self__", None), "signals", None)
    return list(noted) if isinstance(noted, list) else []
