"""Atomic files and directories: all-or-nothing, umask kept, interrupted swaps recovered."""

from __future__ import annotations

import os
import stat

import pytest

from bertfamily.files import atomic_directory, atomic_write, recover_directory, write_text_atomic


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_atomic_write_keeps_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        write_text_atomic(tmp_path / "a.txt", "x")
        with atomic_directory(tmp_path / "d") as d:
            write_text_atomic(d / "b.txt", "y")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "a.txt") == 0o640
    assert _mode(tmp_path / "d") == 0o750 and _mode(tmp_path / "d" / "b.txt") == 0o640


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    write_text_atomic(tmp_path / "a.txt", "old")

    def boom(tmp):
        tmp.write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write(tmp_path / "a.txt", boom)
    assert (tmp_path / "a.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_directory_is_replaced_whole_and_keeps_other_files(tmp_path):
    target = tmp_path / "model"
    with atomic_directory(target) as d:
        write_text_atomic(d / "config.json", "v1")
        write_text_atomic(d / "weights", "w1")
        write_text_atomic(d / "tokenizer.json", "tok")
    with pytest.raises(RuntimeError):
        with atomic_directory(target) as d:
            write_text_atomic(d / "weights", "w2")
            raise RuntimeError("killed between the weights and the config")
    assert (target / "weights").read_text() == "w1" and (target / "config.json").read_text() == "v1"
    with atomic_directory(target) as d:  # a save of weights + config keeps the tokenizer
        write_text_atomic(d / "weights", "w2")
        write_text_atomic(d / "config.json", "v2")
    assert [(target / n).read_text() for n in ("weights", "config.json", "tokenizer.json")] == [
        "w2",
        "v2",
        "tok",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporaries left


def test_interrupted_swap_is_recovered(tmp_path):
    target = tmp_path / "model"
    with atomic_directory(target) as d:
        write_text_atomic(d / "config.json", "v1")
    # killed after the old version was moved aside, before the new one was renamed in
    os.replace(target, tmp_path / ".model.old-12345678")
    (tmp_path / ".model.tmp-abcd1234").mkdir()
    (tmp_path / ".model.tmp-abcd1234" / "weights").write_text("partial")
    recover_directory(target)
    assert (target / "config.json").read_text() == "v1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_a_file_in_the_way_is_refused(tmp_path):
    (tmp_path / "model").write_text("not a directory")
    with pytest.raises(NotADirectoryError):
        with atomic_directory(tmp_path / "model"):
            pass
