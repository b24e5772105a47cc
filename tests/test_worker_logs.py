"""A worker's own log is bounded: rotated at MAX_BYTES into one backup, a native crash's stack
still lands in it after a rotation, and its last line is still found."""

from __future__ import annotations

import faulthandler
import multiprocessing as mp
from pathlib import Path

from hetrl.actors.worker_logs import MAX_BYTES, last_words, log, log_to

LINE = 1000  # bytes a record, about


def _rotate_then_crash(log_file: Path) -> None:
    log_to(log_file)
    for i in range(3 * MAX_BYTES // LINE):  # two rotations and more
        log.info("line %d %s", i, "x" * (LINE - 60))
    log.info("last words")
    faulthandler._sigsegv()


def test_a_worker_log_rotates_and_its_last_words_and_crash_stay_in_it(tmp_path: Path):
    log_file = tmp_path / "workers" / "actor-0.log"
    worker = mp.get_context("fork").Process(target=_rotate_then_crash, args=(log_file,))
    worker.start()
    worker.join()
    assert worker.exitcode == -11
    files = sorted(p.name for p in log_file.parent.iterdir())
    assert files == ["actor-0.log", "actor-0.log.1"]
    assert log_file.with_name("actor-0.log.1").stat().st_size <= MAX_BYTES
    logged, crash = log_file.read_text().split("last words", 1)
    assert len(logged) < MAX_BYTES and logged.endswith("[hetrl.worker][INFO] - ")
    assert "Fatal Python error: Segmentation fault" in crash  # written past the bound: fine
    assert last_words(log_file).startswith("its last log line: ")
    assert last_words(log_file).endswith(f" ({log_file})")


def test_the_last_line_of_a_log_just_rotated_is_its_backups(tmp_path: Path):
    log_file = tmp_path / "selfplay-1.log"
    log_file.write_text("")
    log_file.with_name("selfplay-1.log.1").write_text("first\nlast one\n\n")
    assert last_words(log_file) == f"its last log line: 'last one' ({log_file}.1)"
    assert last_words(tmp_path / "none.log") == f"it logged nothing ({tmp_path / 'none.log'})"
