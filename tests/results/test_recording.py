"""What the commands record, through the CLI: run (default database, --db none), run -n (every rank),
two compares at once, bench (its JSON), and a database that fails (the results file stays whole)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from store_support import d5, write_recipe
from support import requires_mpi

pytestmark = pytest.mark.requires("sqlalchemy")


def _store(path):
    from deep500lite.results.config import parse_target
    from deep500lite.results.store import open_store

    return open_store(parse_target(str(path)))


def test_run_records_into_the_default_database_and_none_records_nothing(tmp_path):
    recipe = write_recipe(tmp_path / "r")
    env = {"DEEP500LITE_DB": ""}  # unset: the default database in the working folder
    proc = d5("run", recipe, "--label", "first", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    db = tmp_path / "d5-results" / "deep500lite.sqlite"
    results = tmp_path / "d5-results" / "mlpbench" / "reference" / "results.json"
    with _store(db) as store:
        (run,) = store.runs()
        assert run["label"] == "first" and run["command"] == "run" and run["path"] == str(results)
        assert json.loads(results.read_text())["label"] == "first"  # the file says its label too
        doc = store.document(run["id"])
    assert doc == {k: v for k, v in json.loads(results.read_text()).items()}
    off = d5("run", recipe, "--out", tmp_path / "off", "--db", "none", env=env, cwd=tmp_path)
    assert off.returncode == 0 and (tmp_path / "off" / "results.json").is_file()
    with _store(db) as store:
        assert len(store.runs()) == 1


def test_an_unreachable_database_stops_the_command_before_it_runs(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    recipe = write_recipe(tmp_path / "r")
    proc = d5("run", recipe, "--out", tmp_path / "out", "--db", f"postgresql://u:pw@127.0.0.1:{port}/db")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("deep500lite run: error: Cannot open the results database postgresql://u:***@") and "pw" \
        not in line
    assert not (tmp_path / "out").exists()
    bad = d5("run", recipe, "--db", "mysql://x/y")
    assert bad.returncode == 2 and "Unknown database URL scheme 'mysql://'" in bad.stderr


def test_a_database_failing_during_the_run_costs_a_warning_not_the_results(tmp_path, monkeypatch, capsys):
    """As a library (DEEP500LITE_DB set by hand), a database that cannot be opened: the file is written."""
    import deep500lite as d5lib
    from deep500lite.recipe import load_recipe, train_recipe

    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("DEEP500LITE_DB", str(blocker / "sub" / "db.sqlite"))  # its folder cannot be made
    recipe = load_recipe(write_recipe(tmp_path / "r")).resolve()
    run = train_recipe(recipe, 0, out=tmp_path / "out")
    err = capsys.readouterr().err
    assert "warning: results not recorded in the database" in err
    assert f"deep500lite db import {tmp_path / 'out' / 'results.json'}" in err
    assert d5lib and run.passed and json.loads((tmp_path / "out" / "results.json").read_text())["passed"] is True


@requires_mpi
@pytest.mark.mpi
def test_run_n_records_every_rank_the_baseline_and_the_job(tmp_path):
    db = tmp_path / "mpi.sqlite"
    proc = d5("run", "digits_mlp_distributed", "-n", "2", "--set", "epochs=1", "--set", "executor=reference",
              "--out", tmp_path / "out", "--db", db, "--label", "mpi", timeout=300)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    with _store(db) as store:
        runs = store.runs()
        paths = sorted(os.path.relpath(r["path"], tmp_path / "out") for r in runs)
        assert paths == ["baseline/results.json", "rank0/results.json", "rank1/results.json", "results.json"]
        assert {r["label"] for r in runs} == {"mpi"} and len({r["session"] for r in runs}) == 1
        benchmarks = {r["benchmark"] for r in store.series(metric="step_time")}
    assert benchmarks == {"digits_mlp_distributed/reference [rank 0 of 2]", "digits_mlp_distributed/reference "
                          "[rank 1 of 2]", "digits_mlp_distributed/reference [2 ranks]",
                          "digits_mlp_distributed/reference"}


def test_two_compares_at_once_lose_nothing(tmp_path):
    """Two compare commands, each with two frameworks in fresh processes, write into one SQLite file at once."""
    recipe = write_recipe(tmp_path / "r")
    db = tmp_path / "both.sqlite"
    cmds = [[sys.executable, "-m", "deep500lite", "compare", recipe, "--frameworks", "reference,onnxruntime",
             "--out", str(tmp_path / f"c{k}"), "--db", str(db), "--label", f"c{k}", "--no-plots"] for k in (1, 2)]
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cmds]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e[-2000:] for _, e in outs]
    with _store(db) as store:
        runs = store.runs()
    assert sorted((r["label"], r["variant"]) for r in runs) == [("c1", "onnxruntime"), ("c1", "reference"),
                                                                ("c2", "onnxruntime"), ("c2", "reference")]
    assert len({r["session"] for r in runs}) == 2 and {r["command"] for r in runs} == {"compare"}


def test_bench_records_its_json_and_import_does_not_add_it_twice(tmp_path):
    pytest.importorskip("onnxruntime")
    db = tmp_path / "b.sqlite"
    started = time.time()
    proc = d5("bench", "overhead", "--framework", "onnxruntime", "--models", "lenet", "--batch-size", "8",
              "--max-time", "0.5", "--db", db, "--label", "ort", timeout=300)
    assert proc.returncode == 0, proc.stderr
    (written,) = (tmp_path / "bench-overhead").glob("*.json")
    assert f"results: {written}" in proc.stdout and written.stat().st_mtime >= started - 1
    payload = json.loads(written.read_text())
    (row,) = payload["results"]
    with _store(db) as store:
        (run,) = store.runs()
        assert run["kind"] == "bench" and run["suite"] == "bench overhead" and run["label"] == "ort"
        assert run["framework"] == "onnxruntime" and run["path"] == str(written)
        series = {s["metric"]: s for s in store.series(run_ids=[run["id"]])}
    assert set(series) == {"native", "deep500lite", "ratios"}
    assert series["ratios"]["values"] == row["ratios"] and series["native"]["values"] == row["native"]["raw"]
    assert series["ratios"]["benchmark"] == "cpu onnxruntime lenet batch_size=8 training=false"
    again = d5("db", "import", tmp_path / "bench-overhead", "--db", db)
    assert again.returncode == 0, again.stderr
    with _store(db) as store:
        assert [r["label"] for r in store.runs()] == ["ort"]


def test_bench_rows_are_named_by_their_executor_variant():
    from deep500lite.results.extract import from_payload

    rows = [{"variant": v, "executor": {"raw": [1e-4, 2e-4, 3e-4]}, "direct": {"raw": [1e-5, 2e-5]}}
            for v in ("torch", "torch:compile", "onnxruntime")]
    record = from_payload({"benchmark": "overhead --op FILE:FACTORY", "op": "myop.py:make", "results": rows},
                          "bench overhead")
    names = {s.benchmark for s in record.series}
    assert any("torch:compile" in n for n in names) and any("onnxruntime" in n for n in names), names
    assert not any("results[" in n for n in names), names
