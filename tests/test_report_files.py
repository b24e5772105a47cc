"""A report's files reach --out whole: a disk that fills while one is copied leaves the
previous file (or none), never a truncated one, and the error is one line."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest

from hetrl.report import make


def test_a_full_disk_leaves_no_truncated_file_and_keeps_the_previous_one(tmp_path, monkeypatch):
    source, out = tmp_path / "pareto.png", tmp_path / "out"
    out.mkdir()
    source.write_bytes(b"new picture " * 1000)
    (out / "pareto.png").write_bytes(b"previous picture")
    real_copy = shutil.copyfile

    def fills_up(src, dst):
        Path(dst).write_bytes(Path(src).read_bytes()[:100])  # as a write that ran out of room
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(make.shutil, "copyfile", fills_up)
    with pytest.raises(OSError) as error:
        make.copy_whole(source, out)
    assert error.value.filename == str(out / "pareto.png")
    assert sorted(p.name for p in out.iterdir()) == ["pareto.png"]
    assert (out / "pareto.png").read_bytes() == b"previous picture"
    monkeypatch.setattr(make.shutil, "copyfile", real_copy)
    assert make.copy_whole(source, out).read_bytes() == source.read_bytes()
