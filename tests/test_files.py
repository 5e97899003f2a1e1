import os
from pathlib import Path

import pytest

from phasekv.files import write_atomic, write_text_atomic


def test_written_files_get_the_mode_a_plain_open_would_give(tmp_path):
    write_text_atomic(tmp_path / "a.json", "{}")
    with open(tmp_path / "plain", "w") as f:
        f.write("{}")
    assert (tmp_path / "a.json").read_text() == "{}"
    assert os.stat(tmp_path / "a.json").st_mode == os.stat(tmp_path / "plain").st_mode  # not mkstemp's 0600


def test_a_failed_write_leaves_neither_the_file_nor_a_temporary(tmp_path):
    def fail(tmp):
        Path(tmp).write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_atomic(tmp_path / "out" / "b.json", fail)
    assert list(tmp_path.iterdir()) == []  # nor the folder it made (issue 53: a full disk left empty folders)
    (tmp_path / "kept").mkdir()
    with pytest.raises(RuntimeError):
        write_atomic(tmp_path / "kept" / "b.json", fail)
    assert list((tmp_path / "kept").iterdir()) == []  # a folder that was there stays


def test_a_full_disk_is_one_clear_error_and_the_earlier_file_is_kept(tmp_path):
    import errno

    from phasekv.files import WriteError

    write_text_atomic(tmp_path / "r.json", "earlier")

    def full(tmp):
        Path(tmp).write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(WriteError, match=r"cannot write .*r\.json: No space left on device \(free space"):
        write_atomic(tmp_path / "r.json", full)
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"] and (tmp_path / "r.json").read_text() == "earlier"


def test_no_output_may_be_one_of_the_inputs(tmp_path):
    from phasekv.files import check_not_input

    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ValueError, match="--out .* would overwrite this command's input"):
        check_not_input(tmp_path / "sub" / ".." / "x.json", [tmp_path / "x.json"])
    with pytest.raises(ValueError, match="would overwrite a file read from this command's input"):
        check_not_input(tmp_path / "new.json", [tmp_path], suffix=".json")
    assert check_not_input(tmp_path / "report.html", [tmp_path], suffix=".json") == tmp_path / "report.html"
