"""The dashboard with hostile strings in results files, in headless Chromium: shown as text, never run."""

from __future__ import annotations

import json

import pytest
from browser import chromium, errors, open_page
from store_support import d5, write_recipe

pytestmark = pytest.mark.requires("sqlalchemy", "plotly")

LABEL = "</script><script>window.d5pwned=1</script><img src=x onerror=\"window.d5pwned=2\">"
MACHINE = "<b onmouseover=window.d5pwned=3>m&amp;\"'</b>"
RECIPE = "evil<svg onload=window.d5pwned=4>"
VARIANT = "<i>torch</i>"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A run's real results file, its strings replaced by hostile ones, imported twice, and the dashboard."""
    tmp = tmp_path_factory.mktemp("dash")
    proc = d5("run", write_recipe(tmp / "r"), "--out", tmp / "run", "--db", "none")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp / "run" / "results.json").read_text())
    doc["label"], doc["environment"]["machine"] = LABEL, MACHINE
    doc["recipe"]["name"], doc["executor_variant"] = RECIPE, VARIANT
    for k in (1, 2):
        doc["started"] += k
        folder = tmp / "evil" / str(k)
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps(doc))
    db = tmp / "e.sqlite"
    assert d5("db", "import", tmp / "evil", "--db", db).returncode == 0
    out = tmp / "site"
    proc = d5("dashboard", "--out", out, "--db", db, "--title", "<title>x</title>")
    assert proc.returncode == 0, proc.stderr
    return out


def test_hostile_strings_are_text(site):
    (page,) = site.glob("s-*.html")
    assert page.name.startswith("s-evil-svg-onload-window.d5pwned-4-")
    with chromium() as driver:
        for path in (site / "index.html", page):
            log = open_page(driver, path)
            assert errors(log) == [], log
            assert driver.execute_script("return window.d5pwned === undefined")
            assert driver.execute_script("return document.querySelectorAll('img, svg[onload], b[onmouseover], "
                                         "i').length") == 0
        runs = driver.execute_script("return Array.from(document.querySelectorAll('table.runs tbody tr')).map("
                                     "r => Array.from(r.cells).map(c => c.textContent))")
        assert [r[2] for r in runs] == [LABEL, LABEL] and [r[4] for r in runs] == [MACHINE, MACHINE]
        assert [r[5] for r in runs] == [VARIANT, VARIANT]
        assert driver.find_element("tag name", "h1").text == RECIPE
        legend = driver.execute_script("return Array.from(document.querySelectorAll('#fig-0 .legendtext'))"
                                       ".map(e => e.textContent)")
        assert f"{VARIANT} @ {MACHINE}" in legend
        driver.get((site / "index.html").as_uri())
        assert driver.find_element("tag name", "h1").text == "<title>x</title>"


def test_the_site_works_offline_and_refuses_a_foreign_folder(site, tmp_path):
    html = (site / "index.html").read_text() + "".join(p.read_text() for p in site.glob("s-*.html"))
    assert "http://" not in html.replace("http://www.w3.org", "") and "https://" not in html
    assert (site / "plotly.min.js").stat().st_size > 1_000_000
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    proc = d5("dashboard", "--out", mine, "--db", site.parent / "e.sqlite")
    assert proc.returncode == 2 and "holds other files" in proc.stderr
    assert (mine / "notes.txt").read_text() == "keep"
    again = d5("dashboard", "--out", site, "--db", site.parent / "e.sqlite")  # its own folder: rewritten
    assert again.returncode == 0, again.stderr
