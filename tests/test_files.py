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
    assert list((tmp_path / "out").iterdir()) == []
