"""``deep500lite dashboard``: a static HTML site of the results store (open ``index.html``; no server).

:func:`build_site` writes into a folder:

- ``index.html``: every recipe and bench command recorded, with its runs, machines, frameworks,
  latest run and how many series the latest run made slower;
- one page per recipe or bench command: for each metric a chart of every run over time, one
  series per benchmark (framework or variant) and machine, the median with its 95% confidence
  band, and a red cross on each run that ``regress`` calls slower than the run before it (the
  same test: Mann-Whitney U, Holm over the page, the minimum effect); the latest comparison
  table (each benchmark's latest run on each machine against the fastest there); the regressions
  found; every run with links to its raw files (the copy in ``runs/ID.json`` and the file it was
  written to);
- ``plotly.min.js``, copied from the ``plotly`` pip package, so the charts draw offline.

Charts are drawn by plotly.js from figure JSON the pages carry (:mod:`deep500lite.results.pages`
escapes every string that comes from a results file).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import shutil
import time

from deep500lite.errors import UserError
from deep500lite.results.history import format_time as _when
from deep500lite.results.figures import history_figure, plotly_js_path
from deep500lite.results.history import format_value, history_points, panels
from deep500lite.results.pages import Raw, esc, figure_block, page, table
from deep500lite.results.regress import ALPHA, MIN_EFFECT, compare_series

__all__ = ["build_site", "suite_page_name", "MARKER"]

#: The file that marks a folder as a dashboard this command may overwrite.
MARKER = ".deep500lite-dashboard"


def suite_page_name(suite: str) -> str:
    """The page of a recipe or bench command: a readable, file-safe name with a short hash."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", suite).strip("-.")[:60] or "suite"
    return f"s-{slug}-{hashlib.sha1(suite.encode('utf-8')).hexdigest()[:8]}.html"


def _slower_markers(rows: list, min_effect: float, alpha: float) -> tuple:
    """Each run against the run before it, per series with raw samples: the slower points and the regressions."""
    by_series: dict = {}
    for r in rows:
        if r["values"]:
            by_series.setdefault((r["metric"], r["benchmark"], r["machine"]), []).append(r)
    base, cand, pairs = [], [], {}
    for key, members in by_series.items():
        members.sort(key=lambda r: (r["started"] if r["started"] is not None else r["recorded"], r["run_id"]))
        for i in range(1, len(members)):
            tag = f"{key[1]}\x1f{i}"
            base.append(dict(members[i - 1], benchmark=tag))
            cand.append(dict(members[i], benchmark=tag))
            pairs[(tag, key[0], key[2])] = (members[i - 1], members[i])
    found = []
    for c in compare_series(base, cand, min_effect=min_effect, alpha=alpha):
        if c.verdict == "slower":
            before, after = pairs[(c.benchmark, c.metric, c.machine)]
            found.append((before, after, c))
    return found


def _latest_table(rows: list, min_effect: float, alpha: float) -> list:
    """Each benchmark's latest run per machine and headline metric, against the best there."""
    latest: dict = {}
    for r in rows:
        if r["headline"]:
            latest[(r["machine"], r["metric"], r["benchmark"])] = r  # rows come oldest first
    groups: dict = {}
    for (machine, metric, _), r in latest.items():
        groups.setdefault((machine, metric), []).append(r)
    base, cand, out = [], [], []
    for members in groups.values():
        timed = [m for m in members if m["median"] is not None]
        if not timed:
            continue
        pick = min if timed[0]["better"] == "lower" else max
        best = pick(timed, key=lambda m: m["median"])
        for m in members:
            if m is not best and m["values"] and best["values"]:
                base.append(dict(best, benchmark=m["benchmark"]))
                cand.append(m)
        out.extend((m, best) for m in members)
    verdicts = {(c.benchmark, c.metric, c.machine): c for c in compare_series(base, cand, min_effect=min_effect,
                                                                               alpha=alpha)}
    rows_out = []
    for m, best in sorted(out, key=lambda mb: (mb[0]["machine"] or "", mb[0]["metric"], mb[0]["benchmark"])):
        if m is best:
            vs = "best"
        else:
            c = verdicts.get((m["benchmark"], m["metric"], m["machine"]))
            vs = (f"x{c.ratio:.3f}: {c.verdict}" if c is not None and c.ratio is not None
                  else (f"x{m['median'] / best['median']:.3f}" if best["median"] and m["median"] is not None
                        else "-"))
        ci = f"[{format_value(m['ci_low'], m['unit'])}, {format_value(m['ci_high'], m['unit'])}]"
        rows_out.append([m["benchmark"], m["machine"] or "?", m["metric"],
                         Raw(f"<a href='#run-{int(m['run_id'])}'>{int(m['run_id'])}</a>"), _when(m["started"]),
                         m["label"] or "", (m["git_commit"] or "")[:12], m["n"],
                         format_value(m["median"], m["unit"]), ci, vs])
    return rows_out


def _file_links(run: dict) -> Raw:
    links = [f"<a href='runs/{int(run['id'])}.json'>stored copy</a>"]
    if run.get("path"):
        uri = pathlib.Path(run["path"]).as_uri() if os.path.isabs(run["path"]) else run["path"]
        folder = pathlib.Path(run["path"]).parent.as_uri() if os.path.isabs(run["path"]) else ""
        links.append(f"<a href='{esc(uri)}'>{esc(os.path.basename(run['path']))}</a>")
        if folder:
            links.append(f"<a href='{esc(folder)}'>folder</a>")
    return Raw(" | ".join(links))


def _suite_page(suite: str, runs: list, rows: list, min_effect: float, alpha: float) -> tuple:
    points = history_points(rows, by="run")
    regressions = _slower_markers(rows, min_effect, alpha)
    slower_runs = {(after["metric"], after["benchmark"], after["machine"], after["run_id"])
                   for _, after, _ in regressions}
    blocks, n = [], 0
    headline_metrics = {r["metric"] for r in rows if r["headline"]}
    order = sorted(panels(points).items(), key=lambda kv: (kv[0][1] not in headline_metrics, kv[0][1]))
    for (_, metric), series in order:
        marks = [p for pts in series.values() for p in pts
                 if (p["metric"], p["benchmark"], p["machine"], p["runs"][0]) in slower_runs]
        fig = history_figure(series, f"{suite}: {metric}" + (" (headline)" if metric in headline_metrics else ""),
                             "run start time", markers=marks, time_axis=True)
        blocks.append(figure_block(f"fig-{n}", fig, "median of each run with its 95% confidence interval (band); "
                                                   "a red cross: slower than the run before it"))
        n += 1
    latest = _latest_table(rows, min_effect, alpha)
    reg_rows = [[c.benchmark.split("\x1f")[0], c.metric, c.machine or "?",
                 Raw(f"<a href='#run-{int(b['run_id'])}'>{int(b['run_id'])}</a> &rarr; "
                     f"<a href='#run-{int(a['run_id'])}'>{int(a['run_id'])}</a>"),
                 a["label"] or "", f"x{c.ratio:.3f}",
                 f"[{c.ratio_ci[0]:.3f}, {c.ratio_ci[1]:.3f}]" if c.ratio_ci[0] is not None else "-",
                 f"{c.p_adjusted:.2g}", Raw("<span class='slower'>slower</span>")] for b, a, c in regressions]
    run_rows = [[Raw(f"<span id='run-{int(r['id'])}'>{int(r['id'])}</span>"), _when(r["started"] or r["recorded"]),
                 r["label"] or "", (r["git_commit"] or "")[:12], r["machine"] or "?",
                 r["variant"] or r["framework"] or "-", r["command"] or "-",
                 {True: "pass", False: "FAIL"}.get(r["passed"], "-"), _file_links(r)] for r in runs]
    body = (f"<p>{len(runs)} run(s) of <code>{esc(suite)}</code>. Charts: every run's median and 95% confidence "
            f"interval per series; regressions use the test of <code>deep500lite regress</code> (Mann-Whitney U, "
            f"Holm-adjusted over this page, alpha {alpha:g}, minimum effect {min_effect:.0%}).</p>\n"
            "<h2>Latest comparison</h2>\n"
            + table(["benchmark", "machine", "metric", "run", "started", "label", "commit", "n", "median", "95% CI",
                     "vs best"], latest, "latest")
            + "<h2>Regressions</h2>\n"
            + (table(["benchmark", "metric", "machine", "runs", "label", "median ratio", "95% CI", "p (Holm)",
                      "verdict"], reg_rows, "regressions") if reg_rows else "<p>None: no run is slower than the "
                                                                            "run before it.</p>\n")
            + "<h2>Charts</h2>\n" + "".join(blocks)
            + "<h2>Runs</h2>\n"
            + table(["run", "started", "label", "commit", "machine", "framework", "command", "metrics", "raw files"],
                    run_rows, "runs"))
    return body, len(regressions)


def _prepare(out: str) -> str:
    out = os.path.abspath(os.fspath(out))
    if os.path.isfile(out):
        raise UserError(f"--out must be a folder for the site; '{out}' is a file. Received: --out {out}")
    if os.path.isdir(out) and os.listdir(out) and not os.path.exists(os.path.join(out, MARKER)):
        raise UserError(f"The folder '{out}' holds other files; the dashboard writes into an empty folder or one it "
                        f"wrote before (with {MARKER}). Received: --out {out}")
    try:
        os.makedirs(os.path.join(out, "runs"), exist_ok=True)
    except OSError as exc:
        raise UserError(f"Cannot make the dashboard folder '{out}' ({exc.strerror or exc}). Received: --out {out}"
                        ) from exc
    return out


def build_site(store, out, *, filters: dict | None = None, min_effect: float = MIN_EFFECT, alpha: float = ALPHA,
               title: str = "deep500lite results") -> dict:
    """Write the dashboard of a store's runs into ``out``.

    Args:
        store: an open :class:`~deep500lite.results.store.Store`.
        out: the site's folder (empty, new, or a dashboard written before).
        filters: store filters (``suite``, ``framework``, ``machine``, ``label``).
        min_effect, alpha: as for ``regress``.
        title: the index page's title.

    Returns:
        ``{"index": path, "pages": {suite: path}, "runs": count, "regressions": count}``.

    Raises:
        UserError: no recorded run matches, or ``out`` cannot be written.
        FrameworkNotAvailableError: plotly is not installed.
    """
    from deep500lite.utils import atomic_write_text

    filters = dict(filters or {})
    js = plotly_js_path()
    runs = store.runs(**filters)
    if not runs:
        raise UserError(f"No recorded runs in {store.target.shown} match the filters; record some with "
                        f"`deep500lite run RECIPE --label NAME` or `deep500lite db import FOLDER`. "
                        f"Received: filters {json.dumps({k: v for k, v in filters.items() if v is not None})}")
    out = _prepare(out)
    shutil.copyfile(js, os.path.join(out, "plotly.min.js"))
    rows = store.series(**filters)
    suites: dict = {}
    for r in runs:
        suites.setdefault(r["suite"], []).append(r)
    pages, index_rows, total = {}, [], 0
    nav = "<nav><a href='index.html'>all recipes and benchmarks</a></nav>"
    for suite, members in sorted(suites.items()):
        ids = {r["id"] for r in members}
        body, found = _suite_page(suite, members, [r for r in rows if r["run_id"] in ids], min_effect, alpha)
        name = suite_page_name(suite)
        atomic_write_text(os.path.join(out, name), page(f"{suite}", body, scripts=["plotly.min.js"], nav=nav))
        pages[suite] = os.path.join(out, name)
        total += found
        last = max(members, key=lambda r: r["started"] or r["recorded"])
        index_rows.append([Raw(f"<a href='{esc(name)}'>{esc(suite)}</a>"), last["kind"], len(members),
                           ", ".join(sorted({r["machine"] or "?" for r in members})),
                           ", ".join(sorted({r["variant"] or r["framework"] or "-" for r in members})),
                           _when(last["started"] or last["recorded"]),
                           Raw(f"<span class='slower'>{found}</span>") if found else "0"])
    for r in runs:
        atomic_write_text(os.path.join(out, "runs", f"{int(r['id'])}.json"),
                          json.dumps(store.document(r["id"]), indent=1) + "\n")
    body = (f"<p>{len(runs)} run(s) in <code>{esc(store.target.shown)}</code> (schema version {store.version}), "
            f"written {esc(time.strftime('%Y-%m-%d %H:%M:%S'))}. A page per recipe or bench command: its charts, "
            f"the latest comparison, regressions and runs.</p>\n"
            + table(["recipe or command", "kind", "runs", "machines", "frameworks", "latest run",
                     "regressions (slower than the run before)"], index_rows, "suites"))
    index = os.path.join(out, "index.html")
    atomic_write_text(index, page(title, body))
    with open(os.path.join(out, MARKER), "w", encoding="utf-8") as f:
        f.write("written by deep500lite dashboard\n")
    return {"index": index, "pages": pages, "runs": len(runs), "regressions": total}
