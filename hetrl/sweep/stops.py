"""Stops (Ctrl-C, SIGTERM) that reach every job of a sweep, whichever launcher runs it.

Every handler here only notes the signal (a handler runs wherever the main thread is: one
that raised or took a lock stranded runs and stores); the sweep reads the note at its safe
points. Under Hydra's basic launcher the jobs run in this process one after another: a
signal during a job is the job's (hetrl.experiment checkpoints it and ends its run KILLED),
one between two jobs stops the next as it begins (`run_job` raises `Stopped` there), and the
sweep ends there; one after the last job changes nothing.

A launcher that runs jobs in other processes (joblib's loky workers, submitit's tasks) needs
more: the launching process must wait for its jobs to stop, and no process of the launcher
may die of the stop before the jobs it holds have stopped (loky kills every worker when one
dies; submitit's local controller SIGKILLs its tasks a second after a Ctrl-C). So:

- The launching process blocks SIGINT and SIGTERM for the sweep and takes them in a thread of
  its own (`signal.sigtimedwait`). The launcher's processes inherit the blocked mask (fork
  and exec keep it), so a Ctrl-C, which the terminal sends to the whole process group, never
  kills a worker, a controller or a job between two of its steps.
- A job unblocks them while its loop listens (hetrl.experiment._stop_on_signals): a stop sent
  to its process between two jobs arrives as the next job begins, which stops before its run
  opens. Threads a job leaves behind (torch's, MLflow's) do not block them: one such a thread
  takes between two jobs is handed to the main thread, where it waits in the same way.
- The listening thread acts on a stop (a handler in the main thread only notes one the
  kernel gave a thread that did not block it): the launching process writes STOPPED in the
  sweep dir (a job reads it before it starts: one the stop did not reach does not run
  either) and sends SIGTERM to each process
  that runs the launcher's jobs; a running job checkpoints and ends its run KILLED. A stopped
  job returns (`run_job`), so the launcher collects it and waits for the others rather than
  killing their processes; then the sweep's parent run ends KILLED, listing the jobs that
  never started, and this process exits 130 or 143 (`SweepStopped`).
- SLURM jobs (hydra/launcher=slurm) run on other machines: they are asked by
  `scancel --signal=TERM` with the ids submitit filed their submissions under.
- joblib with one worker (`n_jobs=1`, or -1 on one CPU) runs the jobs in the launching process
  itself: there a stop reaches the running job through this process's main thread, and ends
  the sweep as under the basic launcher.
"""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from hetrl.faults import Stopped
from hetrl.stopping import SIGNALS, adopt, block

log = logging.getLogger("hetrl")
_noted: int | None = None  # a stop this worker took between jobs without blocking it

MARKER = "STOPPED"  # in the sweep dir: the signal that stopped the sweep
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
SLURM_LAUNCHER = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
JOB_PROCESSES = (  # how the processes that run a launcher's jobs are started
    "joblib.externals.loky.backend.popen_loky_posix",  # loky's workers (hydra/launcher=joblib)
    "submitit.core._submit",  # submitit's tasks, children of its controllers (submitit_local)
)


class SweepStopped(Stopped):
    """A sweep whose jobs ran in other processes stopped on request, once each job had."""

    def __init__(self, signum: int, sweep_dir: str) -> None:
        super().__init__(signum)
        self.sweep_dir = sweep_dir

    def describe(self, go_on: str | None = None) -> str:
        return (f"stopped by {signal.Signals(self.signum).name}: the sweep's running jobs "
                "checkpointed and ended KILLED, the others did not start; its parent run ends "
                "KILLED, its summary lists them. Go on with a job: "
                f"python -m hetrl resume={self.sweep_dir}/<job number>")


class StoppedBetweenJobs(Stopped):
    """A sweep under the basic launcher stopped between two of its jobs."""

    def describe(self, go_on: str | None = None) -> str:
        return (f"stopped by {signal.Signals(self.signum).name} between two jobs of the sweep; "
                "its parent run ends KILLED, its summary lists the jobs that did not run")


def stopped_by(sweep_dir: str | Path) -> int | None:
    """The signal that stopped the sweep writing into `sweep_dir`; None if none did."""
    try:
        return signal.Signals[(Path(sweep_dir) / MARKER).read_text().split()[0]]
    except (OSError, IndexError, KeyError):
        return None


def runs_elsewhere(launcher: DictConfig) -> bool:
    """Whether the launcher (`hydra.launcher`) runs jobs outside the launching process."""
    return launcher.get("_target_") != BASIC_LAUNCHER


def remote(hydra_cfg: DictConfig) -> bool:
    """Whether this is a sweep whose launcher runs jobs outside the launching process."""
    from hydra.types import RunMode

    return hydra_cfg.mode == RunMode.MULTIRUN and runs_elsewhere(hydra_cfg.launcher)


def run_job(hydra_cfg: DictConfig, run: Callable[[], dict]) -> dict | None:
    """Run a job (`run`). In a sweep whose launcher runs it in another process, a job that
    the sweep's stop reached before it began does not start, and a stopped job returns what
    stopped it: an exception would make joblib kill the workers of the jobs still stopping."""
    if not remote(hydra_cfg):
        sweep = SweepStops.listening
        if sweep is not None and sweep.signum is not None and not sweep.remote:
            sweep.mark()  # a stop between two jobs: this one does not begin
            sweep.release()
            raise StoppedBetweenJobs(sweep.signum)
        return run()
    if (signum := stopped_by(hydra_cfg.sweep.dir) or _noted) is not None:
        log.warning("not started: the sweep was stopped by %s before this job began",
                    signal.Signals(signum).name)
        return {"stopped": signal.Signals(signum).name, "step": None}
    if (sweep := SweepStops.listening) is not None and sweep.remote:  # a job in this process
        sweep.job_here = True
        try:
            return run()  # a stop ends the sweep here
        finally:
            sweep.job_here = False
    for signum in SIGNALS:  # between this job and the next (the job's loop installs its own)
        signal.signal(signum, _to_main_thread)
    try:
        return run()
    except Stopped as stopped:
        log.warning("%s", stopped.describe() if stopped.step is not None else
                    f"not started: the sweep was stopped by "
                    f"{signal.Signals(stopped.signum).name} before this job began")
        return {"stopped": signal.Signals(stopped.signum).name, "step": stopped.step}


def _to_main_thread(signum: int, frame: object) -> None:
    """A signal taken between two jobs by a thread that does not block it (one a job left,
    e.g. torch's): pend it on the main thread, which does, so that the next job gets it as
    it begins rather than the default ending this worker (and loky every other one)."""
    global _noted
    if signum in signal.pthread_sigmask(signal.SIG_BLOCK, set()):  # this is the main thread
        signal.pthread_kill(threading.main_thread().ident, signum)
    else:  # a worker that did not inherit the mask: the next job reads it here
        _noted = signum


def job_processes() -> list:
    """The processes that run the launcher's jobs: the nearest descendants of this process
    started as JOB_PROCESSES (not a job's own workers, nor the launcher's helpers)."""
    import psutil

    found, todo = [], psutil.Process().children()
    while todo:
        process = todo.pop()
        try:
            command = " ".join(process.cmdline())
            if any(name in command for name in JOB_PROCESSES):
                found.append(process)
            else:
                todo.extend(process.children())
        except psutil.Error:  # it ended meanwhile
            continue
    return found


def slurm_job_ids(submitit_folder: str) -> list[str]:
    """The SLURM ids of a sweep's submitted jobs: submitit files each submission as
    `<job id>_submitted.pkl` in the job's folder (`submitit_folder`, its `%j` the id)."""
    root = Path(submitit_folder.split("%", 1)[0])
    return sorted(p.name.removesuffix("_submitted.pkl") for p in root.glob("**/*_submitted.pkl"))


def cancel_slurm_jobs(submitit_folder: str) -> int:
    """Ask the sweep's SLURM jobs to stop (SIGTERM to their steps: a running job checkpoints
    and ends KILLED; one that ended already is left as it is); the number asked."""
    ids = slurm_job_ids(submitit_folder)
    if not ids:
        return 0
    if shutil.which("scancel") is None:
        log.warning("no scancel on this machine: the sweep's SLURM jobs %s were not asked to "
                    "stop", " ".join(ids))
        return 0
    subprocess.run(["scancel", "--signal=TERM", *ids], check=False, timeout=60)
    return len(ids)


class SweepStops(Callback):
    """Listed before the MLflow callback: it listens before the parent run opens, and raises
    the stop once the parent is closed (Hydra ends callbacks in reverse order)."""

    listening: SweepStops | None = None  # the one that takes this process's signals

    def __init__(self) -> None:
        self.sweep_dir = ""
        self.remote = False
        self.signals: list[int] = []  # every stop signal the sweep got, first first
        self._handlers: dict[int, Any] = {}
        self._mask: set | None = None  # the launching thread's signal mask before the sweep
        self._listener: threading.Thread | None = None
        self.job_here = False  # a job runs in this process (joblib with one worker)
        self.slurm_folder: str | None = None  # submitit's folder of a SLURM sweep

    def __getstate__(self) -> dict:
        """A launcher pickles Hydra's callbacks into its workers: none of this process's
        signal state goes with them."""
        return dict(self.__dict__, _handlers={}, _mask=None, _listener=None, signals=[])

    @property
    def signum(self) -> int | None:
        """The first signal that stopped the sweep; None while none did."""
        return self.signals[0] if self.signals else None

    def note(self, signum: int, frame: object = None) -> None:
        """The signal handler: notes the stop, nothing more (the sweep acts at safe points)."""
        self.signals.append(signum)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self.sweep_dir = str(config.hydra.sweep.dir)
        Path(self.sweep_dir, MARKER).unlink(missing_ok=True)  # a sweep run again in its dir
        launcher = config.hydra.launcher
        self.remote = runs_elsewhere(launcher)
        if launcher.get("_target_") == SLURM_LAUNCHER:
            self.slurm_folder = str(launcher.submitit_folder)
        # remote: for a signal the kernel gives a thread that does not block it (one
        # started before); the listening thread acts on it
        self._handlers = {s: signal.signal(s, self.note) for s in SIGNALS}
        self.signals.extend(adopt(self._handlers[signal.SIGINT]))  # came while Hydra started
        SweepStops.listening = self
        if not self.remote:
            return
        self._mask = block(SIGNALS)
        self._listener = threading.Thread(target=self._listen, name="hetrl-sweep-stops",
                                          daemon=True)
        self._listener.start()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.release()
        if self.signum is None:
            return
        if stopped_by(self.sweep_dir) is not None:  # the listener acted on it
            raise SweepStopped(self.signum, self.sweep_dir)
        log.warning("%s came as the sweep's last job ended: it had finished, nothing was "
                    "left to stop", signal.Signals(self.signum).name)

    def _listen(self) -> None:
        acted = 0  # the signals acted on: each new one asks the job processes again
        while self._listener is not None:
            found = signal.sigtimedwait(SIGNALS, 0.2)
            if found is not None:
                self.note(found.si_signo)
            if len(self.signals) > acted:
                self._stop_jobs(first=acted == 0)
                acted = len(self.signals)

    def _stop_jobs(self, first: bool) -> None:
        """Mark the sweep stopped, then ask every job process to stop."""
        self.mark()
        asked = 0
        for process in job_processes():
            try:
                process.send_signal(signal.SIGTERM)
                asked += 1
            except Exception:  # noqa: BLE001 - it ended meanwhile
                continue
        if self.slurm_folder is not None:
            asked += cancel_slurm_jobs(self.slurm_folder)
        if self.job_here:  # its loop listens in the main thread
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
            asked += 1
        if first:
            log.warning("%s: stopping the sweep: its running jobs stop after a checkpoint, the "
                        "others do not start (%d job processes asked)",
                        signal.Signals(self.signum).name, asked)

    def mark(self) -> None:
        """Write STOPPED in the sweep dir (once), naming the first signal."""
        marker = Path(self.sweep_dir, MARKER)
        if marker.exists():
            return
        Path(self.sweep_dir).mkdir(parents=True, exist_ok=True)
        marker.write_text(
            f"{signal.Signals(self.signum).name}\nThis sweep was stopped: its running jobs "
            "checkpointed and ended KILLED; the jobs that had not started did not run.\n")

    def release(self) -> None:
        """Give the launching process its signals back (after the sweep's jobs are done)."""
        listener, self._listener = self._listener, None
        SweepStops.listening = None
        if listener is not None:
            listener.join()
        if self._mask is not None:  # a signal pending now goes to `note`
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
            self._mask = None
        for sig, handler in self._handlers.items():
            signal.signal(sig, handler)
        self._handlers = {}
