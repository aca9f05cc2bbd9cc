"""Database targets, labels and selections (label:, commit:, run:, date:, bare values)."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from deep500lite.errors import UserError
from deep500lite.results.config import check_label, parse_target, resolve_target


def test_targets(tmp_path, monkeypatch):
    t = parse_target(str(tmp_path / "r.sqlite"))
    assert t.kind == "sqlite" and t.path == str(tmp_path / "r.sqlite") and t.url == "sqlite:///" + t.path
    monkeypatch.chdir(tmp_path)
    assert parse_target("sqlite:///rel.db").path == str(tmp_path / "rel.db")
    assert parse_target("sqlite:////abs/x.db").path == "/abs/x.db"
    pg = parse_target("postgresql://me:s3cret@db.example:5433/results")
    assert pg.kind == "postgresql" and pg.url == "postgresql+psycopg://me:s3cret@db.example:5433/results"
    assert pg.shown == "postgresql://me:***@db.example:5433/results" and "s3cret" not in pg.shown
    assert parse_target("postgres://me@h/r").url == "postgresql+psycopg://me@h/r"
    assert parse_target("none") is None and parse_target("OFF") is None
    for bad, words in (("mysql://h/db", "Unknown database URL scheme 'mysql://'"),
                       ("postgresql://h", "needs a database name"), ("postgresql:///db", "needs a host"),
                       ("", "needs a database"), (str(tmp_path), "names a folder")):
        with pytest.raises(UserError, match=words):
            parse_target(bad)


def test_resolution_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DEEP500LITE_DB", raising=False)
    assert resolve_target().path == str(tmp_path / "d5-results" / "deep500lite.sqlite")
    monkeypatch.setenv("DEEP500LITE_DB", str(tmp_path / "env.sqlite"))
    assert resolve_target().path == str(tmp_path / "env.sqlite")
    assert resolve_target(str(tmp_path / "flag.sqlite")).path == str(tmp_path / "flag.sqlite")
    monkeypatch.setenv("DEEP500LITE_DB", "none")
    assert resolve_target() is None


def test_labels():
    assert check_label("pr-123 (torch 2.13)") == "pr-123 (torch 2.13)"
    for bad in ("", "   ", "a\nb", "x" * 201):
        with pytest.raises(UserError, match="label"):
            check_label(bad)


@pytest.fixture
def store(tmp_path):
    pytest.importorskip("sqlalchemy")
    from deep500lite.results.extract import from_results
    from deep500lite.results.store import open_store

    s = open_store(parse_target(str(tmp_path / "s.sqlite")))
    day = dt.datetime(2026, 11, 27, 12).timestamp()
    for i, (label, commit) in enumerate((("main", "abcdef1234"), ("pr", "abcdef9999"), ("2", "fedcba0000"))):
        s.record(from_results({"format": "deep500lite-results", "recipe": {"name": "r"}, "framework": "reference",
                               "label": label, "samples": {"steps": []}, "summaries": {}, "passed": True,
                               "environment": {"git_commit": commit, "machine": "m"}, "started": day + i * 86400}))
    yield s
    s.close()


def test_selections(store):
    from deep500lite.results.select import parse_selection

    def ids(text):
        return [r["id"] for r in store.runs(**parse_selection(text, store).filters)]

    assert ids("label:main") == [1] and ids("main") == [1] and ids("pr") == [2]
    assert ids("commit:abcdef") == [1, 2] and ids("abcdef9") == [2] and ids("commit:fedcba0000,abcdef12") == [1, 3]
    assert ids("run:1-2") == [1, 2] and ids("2,3") == [2, 3]
    assert ids("date:2026-11-28") == [2] and ids("2026-11-27..2026-11-28") == [1, 2]
    assert ids("date:2026-11-28..") == [2, 3]
    assert ids("date:2026-11-27T11:00..2026-11-27T13:00") == [1]
    # a label that is also a run id needs its prefix
    with pytest.raises(UserError, match="could be several selections; say which: label:2, run:2"):
        parse_selection("2", store)
    assert ids("label:2") == [3] and ids("run:2") == [2]
    for bad, words in (("nothing", "no label, commit, run id or date"), ("run:x", "run: takes run ids"),
                       ("date:2026-13-01", "date: takes days"), ("date:2026-11-28..2026-11-27", "earlier date"),
                       ("commit:xyz", "commit: takes git commits"), ("label:", "needs a value")):
        with pytest.raises(UserError, match=words):
            parse_selection(bad, store)
    assert os.path.exists(store.target.path)
