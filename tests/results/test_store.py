"""The store on SQLite and a real PostgreSQL server: recording, re-recording, schema versions, concurrent writers."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.requires("sqlalchemy")


def _commit(i: int) -> str:
    return hashlib.sha1(str(i).encode()).hexdigest()


def _doc(i: int, steps: int = 20, label=None, machine="m1") -> dict:
    """A results document of the shape build_results writes (only what the store reads varies)."""
    times = [0.001 * (1 + ((i * 7 + k * 13) % 17) / 100) for k in range(steps)]
    return {"format": "deep500lite-results", "version": 1, "recipe": {"name": "toy"}, "framework": "reference",
            "executor_variant": "reference", "device": "cpu", "label": label,
            "samples": {"steps": [{"global_step": k, "loss": 1.0, "step_time": t, "samples": 32}
                                  for k, t in enumerate(times)], "epochs": []},
            "summaries": {"warmup_steps": 1, "step_time": None, "final_test_accuracy": 90.0 + i % 3},
            "verdicts": [], "passed": True, "environment": {"machine": machine, "git_commit": _commit(i)},
            "started": 1_800_000_000.0 + i, "finished": 1_800_000_010.0 + i}


def _open(url):
    from deep500lite.results.config import parse_target
    from deep500lite.results.store import open_store

    return open_store(parse_target(url))


def test_record_and_read_back(db_url):
    from deep500lite.results.extract import from_results

    with _open(db_url) as store:
        rec = from_results(_doc(1, label="a"), "/x/results.json", command="run")
        run_id = store.record(rec)
        (run,) = store.runs()
        assert run["id"] == run_id and run["label"] == "a" and run["machine"] == "m1" and run["suite"] == "toy"
        assert run["git_commit"] == _commit(1) and run["path"] == "/x/results.json" and run["passed"] is True
        rows = store.series(metric="step_time")
        expected = [s["step_time"] for s in _doc(1)["samples"]["steps"][1:]]
        assert rows[0]["values"] == expected and rows[0]["n"] == 19 and rows[0]["headline"]
        assert rows[0]["benchmark"] == "toy/reference"
        assert store.document(run_id)["samples"] == _doc(1)["samples"]
        with pytest.raises(Exception, match="has no run 999"):
            store.document(999)


def test_recording_again_updates_and_keeps_the_label(db_url):
    from deep500lite.results.extract import from_results

    with _open(db_url) as store:
        first = store.record(from_results(_doc(2, label="kept"), "/a/results.json"))
        again = store.record(from_results(_doc(2), "/b/results.json"))  # db import of the same file, no label
        assert first == again
        (run,) = store.runs()
        assert run["label"] == "kept" and run["path"] == "/b/results.json"
        assert store.counts() == {"runs": 1, "series": len(from_results(_doc(2)).series)}
        relabel = store.record(from_results(_doc(2), "/b/results.json", label="new"))
        assert relabel == first and store.runs()[0]["label"] == "new"


def test_filters(db_url):
    from deep500lite.results.extract import from_results

    with _open(db_url) as store:
        for i in range(6):
            store.record(from_results(_doc(i, label="ab"[i % 2], machine=f"m{i % 3}")))
        assert [r["label"] for r in store.runs(label="a")] == ["a"] * 3
        assert {r["machine"] for r in store.runs(machine=["m0", "m2"])} == {"m0", "m2"}
        assert [r["git_commit"] for r in store.runs(commits=[_commit(3)[:7]])] == [_commit(3)]
        assert [r["id"] for r in store.runs(since=1_800_000_002.0, until=1_800_000_004.0)] == [3, 4]
        assert store.distinct("label") == ["a", "b"]


def test_newer_schema_is_refused(db_url):
    import sqlalchemy as sa

    from deep500lite.results import schema

    with _open(db_url) as store:
        with store._writer.begin() as conn:
            conn.execute(sa.update(schema.meta).where(schema.meta.c.key == "schema_version").values(value="99"))
    from deep500lite.errors import UserError

    with pytest.raises(UserError, match="schema version 99; this deep500lite reads up to version 1"):
        _open(db_url)


def test_a_migration_runs_once_for_processes_opening_at_once(db_url, tmp_path):
    """Version 1 databases meet a (test-only) version 2 that adds a column: eight processes open it at once."""
    with _open(db_url) as store:
        assert store.version == 1
    script = tmp_path / "migrate.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        import sqlalchemy as sa
        from deep500lite.results import schema
        from deep500lite.results.config import parse_target
        from deep500lite.results.store import open_store

        def add_note(conn):
            conn.execute(sa.text("ALTER TABLE d5_runs ADD COLUMN note TEXT"))
            conn.execute(sa.text("INSERT INTO d5_meta (key, value) VALUES ('migrated-by', :who)"),
                         {{"who": sys.argv[1]}})

        schema.MIGRATIONS[1] = add_note
        schema.SCHEMA_VERSION = 2
        while time.time() < float(sys.argv[2]):
            time.sleep(0.005)
        store = open_store(parse_target({db_url!r}))
        print(store.version)
    """))
    import time

    start = str(time.time() + 3)
    procs = [subprocess.Popen([sys.executable, str(script), str(k), start], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for k in range(8)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    assert [o.strip() for o, _ in outs] == ["2"] * 8
    import sqlalchemy as sa

    from deep500lite.errors import UserError
    from deep500lite.results.config import parse_target

    with pytest.raises(UserError, match="schema version 2; this deep500lite reads up to version 1"):
        _open(db_url)  # this process still knows version 1 only
    engine = sa.create_engine(parse_target(db_url).url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT key, value FROM d5_meta ORDER BY key")).all()
        cols = [c["name"] for c in sa.inspect(conn).get_columns("d5_runs")]
    engine.dispose()
    assert [k for k, _ in rows] == ["migrated-by", "schema_version"] and rows[1][1] == "2"
    assert cols.count("note") == 1


WRITER = """
import sys, time
from deep500lite.results.config import parse_target
from deep500lite.results.extract import from_results
from deep500lite.results.store import open_store
sys.path.insert(0, {tests!r})
from test_store import _doc

url, worker, count, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
while time.time() < start:
    time.sleep(0.005)
for k in range(count):
    store = open_store(parse_target(url))  # each write opens its own connection, as each rank does
    store.record(from_results(_doc(worker * 1000 + k, steps=200, label=f"w{{worker}}")))
    store.close()
"""


def test_concurrent_writers_lose_nothing(db_url, tmp_path):
    """Eight processes record twelve runs each at the same moment; all 96 are there, samples whole."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(tests=os.path.dirname(__file__)))
    import time

    workers, count = 8, 12
    start = str(time.time() + 4)
    procs = [subprocess.Popen([sys.executable, str(script), db_url, str(w), str(count), start], stderr=subprocess.PIPE,
                              text=True) for w in range(workers)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    with _open(db_url) as store:
        runs = store.runs()
        assert len(runs) == workers * count
        assert sorted(r["label"] for r in runs) == sorted(f"w{w}" for w in range(workers) for _ in range(count))
        rows = store.series(metric="step_time")
        assert len(rows) == workers * count
        by_commit = {r["git_commit"]: r["values"] for r in rows}
        for w in range(workers):
            for k in range(count):
                doc = _doc(w * 1000 + k, steps=200)
                assert by_commit[doc["environment"]["git_commit"]] == [s["step_time"]
                                                                        for s in doc["samples"]["steps"][1:]]


def test_bad_databases_are_clear_errors(tmp_path):
    from deep500lite.errors import UserError

    not_db = tmp_path / "notes.sqlite"
    not_db.write_text("these are my notes, not a database\n" * 100)
    with pytest.raises(UserError, match="not a usable results database"):
        _open(str(not_db))
    assert not_db.read_text().startswith("these are my notes")  # left as it was


def test_unreachable_postgres_is_a_clear_error():
    pytest.importorskip("psycopg")
    import socket

    from deep500lite.errors import UserError

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(UserError, match=r"Cannot open the results database postgresql://u:\*\*\*@127.0.0.1"):
        _open(f"postgresql://u:secret@127.0.0.1:{port}/db")


def test_json_documents_round_trip_exactly(db_url):
    from deep500lite.results.extract import canonical_json, from_results

    doc = _doc(5)
    doc["odd"] = {"text": "</script><b>\u2028 ünïcode", "big": 2**62, "small": 1e-300}
    with _open(db_url) as store:
        run_id = store.record(from_results(doc))
        assert canonical_json(store.document(run_id)) == canonical_json(doc)
        assert json.loads(store.runs()[0]["path"] or "null") is None
