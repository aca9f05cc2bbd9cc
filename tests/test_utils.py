"""deep500lite.utils: atomic writes and standard JSON."""

import json
import math
import os
import stat

import pytest

from deep500lite.errors import UserError
from deep500lite.utils import atomic_write_bytes, atomic_write_text, finite_json


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


def test_finite_json_writes_null_for_infinity_and_nan():
    data = {"limit": math.inf, "rows": [1.5, -math.inf, (math.nan, 2)], "name": "x", "n": 3, "ok": True}
    text = finite_json(data, indent=1)
    for literal in ("Infinity", "NaN"):
        assert literal not in text
    assert json.loads(text) == {"limit": None, "rows": [1.5, None, [None, 2]], "name": "x", "n": 3, "ok": True}


def test_finite_json_passes_other_arguments_to_json_dumps():
    assert finite_json({"b": 1, "a": object()}, default=lambda o: "obj", sort_keys=True) == '{"a": "obj", "b": 1}'
