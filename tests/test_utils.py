"""deep500lite.utils: atomic writes."""

import os
import stat

import pytest

from deep500lite.errors import UserError
from deep500lite.utils import atomic_write_bytes, atomic_write_text


def test_atomic_write_gives_the_permissions_open_would(tmp_path):
    old = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "a.json", "{}")
        with open(tmp_path / "b.json", "w") as f:
            f.write("{}")
    finally:
        os.umask(old)
    mode = stat.S_IMODE(os.stat(tmp_path / "a.json").st_mode)
    assert mode == stat.S_IMODE(os.stat(tmp_path / "b.json").st_mode) == 0o640


def test_atomic_write_replaces_and_leaves_no_temporary_file(tmp_path):
    atomic_write_bytes(tmp_path / "x.bin", b"old")
    atomic_write_bytes(tmp_path / "x.bin", b"new")
    assert (tmp_path / "x.bin").read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["x.bin"]


def test_atomic_write_to_an_unwritable_path_is_a_user_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match=r"Cannot write '.*file/out.json'.*Received: '.*file/out.json'"):
        atomic_write_text(tmp_path / "file" / "out.json", "{}")
    os.makedirs(tmp_path / "folder")
    with pytest.raises(UserError, match="Cannot write"):
        atomic_write_text(tmp_path / "folder", "{}")
    assert sorted(os.listdir(tmp_path)) == ["file", "folder"] and os.listdir(tmp_path / "folder") == []
