"""End to end through the CLI, on SQLite and on a real PostgreSQL server: record, regress, dashboard.

Labelled runs of one recipe name, ``mlpbench``: ``base`` and ``again`` run the same code (two
runs each, interleaved, so a change of the machine's load falls on both), ``wide`` a copy of the
recipe with a wider network (two hidden layers of 512 instead of one of 32: about ten times the
step time). ``regress base wide`` must exit 1 naming the slower benchmark; ``regress base
again`` must exit 0; the dashboard must load in headless Chromium without a console error and
show the runs with the database's figures.

The runs use one BLAS thread (steadier on a busy machine), and the same-code check a minimum
effect of 100%: these steps take about a millisecond, and on a shared 2-core machine two runs of
the same code have differed by 1.7x (see docs/tracking.md), and by more than 2x at a load
average near 20 before the runs were interleaved; the wide run is far beyond that.
"""

from __future__ import annotations

import contextlib
import json

import pytest
from browser import chromium, colour_pixels, errors, open_page
from store_support import d5, postgres_database, write_recipe

from deep500lite.metrics.plots import variant_color

pytestmark = pytest.mark.requires("sqlalchemy", "scipy")

ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def flow(request, tmp_path_factory):
    """The five runs recorded into a database; yields (db, folder)."""
    folder = tmp_path_factory.mktemp(f"flow-{request.param}")
    sqlite = contextlib.nullcontext(str(folder / "results.sqlite"))
    with postgres_database() if request.param == "postgresql" else sqlite as db:
        small = write_recipe(folder / "v1", hidden=(32,), epochs=2)
        wide = write_recipe(folder / "v2", hidden=(512, 512), epochs=2)
        runs = ((small, "base", "flag"), (small, "again", "env"), (small, "base", "flag"), (small, "again", "env"),
                (wide, "wide", "flag"))
        for k, (recipe, label, how) in enumerate(runs):
            args = ["run", recipe, "--label", label, "--out", folder / "out" / f"{label}{k}"]
            env = dict(ONE_THREAD, **({"DEEP500LITE_DB": db} if how == "env" else {}))
            proc = d5(*args, *(["--db", db] if how == "flag" else []), env=env)
            assert proc.returncode == 0, proc.stderr[-3000:]
        yield db, folder


def test_regress_names_the_slower_benchmark(flow):
    db, _ = flow
    proc = d5("regress", "base", "wide", "--db", db)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("mlpbench/reference"))
    assert row.split()[-1] == "slower" and "step_time" in row
    assert "slower: mlpbench/reference step_time @ " in proc.stderr


def test_regress_passes_the_same_code(flow):
    db, _ = flow
    proc = d5("regress", "label:base", "label:again", "--db", db, "--min-effect", "100%")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "slower" not in proc.stdout.split("verdict", 1)[1]


def test_regress_json_and_quiet(flow):
    db, _ = flow
    proc = d5("regress", "base", "wide", "--db", db, "--json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    (comp,) = data["comparisons"]
    assert comp["benchmark"] == "mlpbench/reference" and comp["metric"] == "step_time"
    assert comp["verdict"] == "slower" and comp["ratio"] > 1.5 and comp["ratio_ci"][0] > 1.05
    assert data["exit_status"] == 1 and len(data["slower"]) == 1
    quiet = d5("regress", "base", "wide", "--db", db, "--quiet")
    assert quiet.returncode == 1 and quiet.stdout.startswith("slower: mlpbench/reference step_time @ ")
    assert len(quiet.stdout.strip().splitlines()) == 1
    same = d5("regress", "base", "again", "--db", db, "--quiet", "--min-effect", "100%")
    assert same.returncode == 0 and same.stdout == ""


def test_regress_bad_input_exits_2(flow):
    db, _ = flow
    for args, words in ((["nosuchlabel", "wide"], "no label, commit, run id or date"),
                        (["base", "wide", "--metric", "nosuchmetric"], "no recorded series"),
                        (["base", "wide", "--min-effect", "5"], "percentage"),
                        (["run:999", "wide"], "no recorded series")):
        proc = d5("regress", *args, "--db", db)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert words in proc.stderr and "Traceback" not in proc.stderr


def _series(db):
    from deep500lite.results.config import parse_target
    from deep500lite.results.store import opened

    with opened(parse_target(db)) as store:
        return store.runs(), store.series(metric="step_time")


def test_dashboard_in_chromium_shows_the_runs(flow, tmp_path):
    db, _ = flow
    site = tmp_path / "site"
    proc = d5("dashboard", "--out", site, "--db", db)
    assert proc.returncode == 0, proc.stderr
    assert "5 run(s)" in proc.stdout
    runs, rows = _series(db)
    page = next(site.glob("s-mlpbench-*.html"))
    with chromium() as driver:
        assert errors(open_page(driver, site / "index.html")) == []
        assert driver.find_element("link text", "mlpbench").get_attribute("href").endswith(page.name)
        log = open_page(driver, page)
        assert errors(log) == [], log
        shown = driver.execute_script(
            "return Array.from(document.querySelectorAll('table.runs tbody tr')).map("
            "r => Array.from(r.cells).map(c => c.textContent))")
        assert [r[2] for r in shown] == ["base", "again", "base", "again", "wide"]
        assert [int(r[0]) for r in shown] == [r["id"] for r in runs]
        # the headline chart: one median point per run, equal to the database's medians
        traces = driver.execute_script("return document.getElementById('fig-0').data.map("
                                       "t => ({name: t.name, meta: t.meta || null, y: t.y, "
                                       "color: t.line ? t.line.color : null}))")
        medians = [t for t in traces if t["meta"] == "median"]
        assert len(medians) == 1 and medians[0]["name"].startswith("reference @ ")
        assert medians[0]["y"] == pytest.approx([r["median"] for r in rows], rel=1e-12)
        colour = variant_color("reference")  # the colour the reference executor has in every deep500lite plot
        assert medians[0]["color"] == colour
        slower = [t for t in traces if t["meta"] == "slower"]  # at least the wide run, against the one before
        assert slower and slower[0]["y"][-1] == pytest.approx(rows[-1]["median"], rel=1e-12)
        latest = driver.execute_script("return Array.from(document.querySelectorAll('table.latest tbody td'))"
                                       ".map(c => c.textContent)")
        assert latest[0] == "mlpbench/reference" and latest[3] == str(runs[-1]["id"])
        driver.execute_script("document.getElementById('fig-0').scrollIntoView()")
        png = driver.get_screenshot_as_png()
    # the series' colour draws the median line and markers
    assert colour_pixels(png, tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))) > 300


def test_history_table_and_plots(flow, tmp_path):
    db, _ = flow
    proc = d5("history", "--db", db, "--by", "label", "--plot", tmp_path / "h.png")
    assert proc.returncode == 0, proc.stderr
    lines = [line.split() for line in proc.stdout.splitlines() if line.startswith("mlpbench/reference")]
    assert [line[3] for line in lines] == ["base", "again", "wide"]
    _, rows = _series(db)
    from deep500lite.metrics.statistics import summarize
    from deep500lite.results.history import format_value

    pooled = [summarize([v for r in rows if r["label"] == label for v in r["values"]]).median
              for label in ("base", "again", "wide")]  # the runs of a label pooled
    assert [line[6] + " " + line[7] for line in lines] == [format_value(m, "s") for m in pooled]
    assert [line[4] for line in lines] == ["1,3", "2,4", "5"]
    assert (tmp_path / "h.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = d5("history", "--db", db, "--metric", "throughput", "--plot", tmp_path / "h.html", "--format", "csv")
    assert html.returncode == 0 and html.stdout.startswith("benchmark,metric,machine,point")
    with chromium() as driver:
        assert errors(open_page(driver, tmp_path / "h.html")) == []


def test_export_import_round_trip_and_report(flow, tmp_path):
    db, folder = flow
    out = tmp_path / "export"
    assert d5("db", "export", "--out", out, "--db", db).returncode == 0
    files = sorted(out.rglob("results.json"))
    assert len(files) == 5
    copy = str(tmp_path / "copy.sqlite")
    proc = d5("db", "import", out, "--db", copy)
    assert proc.returncode == 0 and "recorded 5 file(s)" in proc.stdout, proc.stderr
    again = d5("db", "import", out, "--db", copy)  # the same runs: updated, not added
    assert again.returncode == 0
    runs, rows = _series(db)
    copied_runs, copied_rows = _series(copy)
    assert len(copied_runs) == 5 and [r["label"] for r in copied_runs] == [r["label"] for r in runs]
    assert [r["values"] for r in copied_rows] == [r["values"] for r in rows]
    report = d5("report", folder / "out", "--group-by", "label", "--format", "csv")
    assert report.returncode == 0, report.stderr
    lines = report.stdout.splitlines()
    assert lines[0].split(",")[0] == "label" and sorted(line.split(",")[0] for line in lines[1:]) == [
        "again", "base", "wide"]
    assert [line.split(",")[1] for line in lines[1:]] == ["2", "2", "1"]  # runs pooled per label
