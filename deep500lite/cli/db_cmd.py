"""``deep500lite db``: the results database itself: import, export, list, info."""

from __future__ import annotations

import json
import os
import sys

__all__ = ["add_parser", "run_import", "run_export", "run_list", "run_info", "payload_command"]


def add_parser(subparsers):
    from deep500lite.cli.store_args import add_filter_options, add_store_options
    from deep500lite.metrics.tables import TABLE_FORMATS

    p = subparsers.add_parser("db", help="the results database",
                              description="Work with the results database (SQLite file or PostgreSQL; see "
                                          "docs/tracking.md).")
    sub = p.add_subparsers(dest="db_command", metavar="ACTION", parser_class=type(p))
    i = sub.add_parser("import", help="record existing results folders and benchmark JSON files",
                       description="Record results.json files (folders are searched recursively) and the JSON files "
                                   "of bench/model commands in the database. Importing a file twice updates its run.")
    i.add_argument("paths", nargs="+", metavar="PATH",
                   help="results.json files, folders holding them, bench JSON files")
    i.add_argument("--machine", default=None, metavar="NAME",
                   help="the machine of files that do not name one (older files; default: their CPU model)")
    add_store_options(i)
    i.set_defaults(func=run_import)
    e = sub.add_parser("export", help="write runs back out as results files",
                       description="Write each selected run's stored document to DIR: recipe runs as "
                                   "DIR/RECIPE/FRAMEWORK/run-ID/results.json (what report and db import read), "
                                   "bench/model runs as DIR/COMMAND/run-ID.json.")
    e.add_argument("--out", required=True, metavar="DIR", help="the folder to write to")
    e.add_argument("--run", dest="run_ids", default=None, metavar="ID[,ID|-ID]", help="only these run ids")
    add_filter_options(e)
    add_store_options(e, label=False)
    e.set_defaults(func=run_export)
    ls = sub.add_parser("list", help="list the recorded runs", description="List recorded runs, oldest first.")
    ls.add_argument("--format", choices=TABLE_FORMATS, default="table", help="table format (default table)")
    add_filter_options(ls)
    add_store_options(ls, label=False)
    ls.set_defaults(func=run_list)
    n = sub.add_parser("info", help="the database's schema version and contents",
                       description="Show where the database is, its schema version, and how many runs and series, "
                                   "labels, machines and recipes it holds.")
    add_store_options(n, label=False)
    n.set_defaults(func=run_info)
    p.set_defaults(func=lambda args: _no_action(p))
    return p


def _no_action(parser) -> int:
    parser.print_help(sys.stderr)
    return 2


def payload_command(path: str, payload: dict) -> str:
    """The command a benchmark JSON file came from: its folder's name when the store wrote it there
    (``bench-overhead``), else its ``benchmark`` field (``bench overhead``), else ``json FILE``."""
    folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
    for kind in ("bench", "model"):
        if folder.startswith(kind + "-"):
            return f"{kind} {folder[len(kind) + 1:].replace('-', ' ')}"
    bench = payload.get("benchmark")
    if isinstance(bench, str) and bench.strip():
        return "bench " + bench.split()[0]
    return f"json {os.path.splitext(os.path.basename(path))[0]}"


def _json_files(paths) -> tuple:
    """results.json files (via find_results) and other JSON files (given, or in bench-*/model-* folders)."""
    from deep500lite.errors import UserError
    from deep500lite.recipe.results import find_results

    results, others = [], []
    for p in paths:
        if os.path.isfile(p):
            (results if os.path.basename(p) == "results.json" else others).append(p)
            continue
        if not os.path.isdir(p):
            raise UserError(f"'{p}' does not exist; give results.json files, folders holding them, or benchmark JSON "
                            f"files. Received: {p!r}")
        found = False
        for root, _, files in os.walk(p):
            if os.path.basename(root).startswith(("bench-", "model-")):
                others.extend(os.path.join(root, f) for f in sorted(files) if f.endswith(".json"))
                found = found or any(f.endswith(".json") for f in files)
            found = found or "results.json" in files
        if not found:
            raise UserError(f"Folder '{p}' holds no results.json and no bench-*/model-* JSON (searched recursively). "
                            f"Received: {p!r}")
        try:
            results.extend(find_results([p]))
        except UserError:
            pass  # only benchmark JSON in it
    return list(dict.fromkeys(results)), list(dict.fromkeys(others))


def run_import(args) -> int:
    from deep500lite.cli.store_args import open_from_args_writable
    from deep500lite.errors import Deep500Error
    from deep500lite.recipe.results import read_results
    from deep500lite.results.extract import from_payload, from_results, is_results_document

    results, others = _json_files(args.paths)
    ids, failed = [], []
    with open_from_args_writable(args) as store:
        for path in results + others:
            try:
                if path in results:
                    rec = from_results(read_results(path), os.path.abspath(path), command="db import",
                                       label=args.label, machine=args.machine)
                else:
                    try:
                        with open(path, encoding="utf-8") as f:
                            payload = json.load(f)
                    except (OSError, ValueError) as exc:
                        raise Deep500Error(f"'{path}' is not readable JSON ({exc})") from exc
                    if is_results_document(payload):
                        rec = from_results(read_results(path), os.path.abspath(path), command="db import",
                                           label=args.label, machine=args.machine)
                    else:
                        rec = from_payload(payload, payload_command(path, payload), os.path.abspath(path),
                                           label=args.label, machine=args.machine,
                                           recorded=os.path.getmtime(path))
                ids.append(store.record(rec))
            except Deep500Error as exc:
                failed.append(path)
                print(f"deep500lite db import: error: {path}: {' '.join(str(exc).split())}", file=sys.stderr)
        shown = store.target.shown
    print(f"recorded {len(ids)} file(s) in {shown}" + (f" as run(s) {_ranges(ids)}" if ids else "")
          + (f"; {len(failed)} file(s) failed (above)" if failed else ""))
    return 2 if failed else 0


def _ranges(ids) -> str:
    ids = sorted(set(ids))
    out, start = [], None
    for i, v in enumerate(ids):
        if start is None:
            start = v
        if i + 1 == len(ids) or ids[i + 1] != v + 1:
            out.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return ",".join(out)


def _safe(name: str) -> str:
    keep = "".join(c if c.isalnum() or c in "._-" else "-" for c in name).strip(".-")
    return keep[:80] or "unnamed"


def run_export(args) -> int:
    from deep500lite.cli.store_args import filters_of, open_from_args
    from deep500lite.errors import UserError
    from deep500lite.results.select import parse_selection
    from deep500lite.utils import atomic_write_text

    filters = filters_of(args)
    with open_from_args(args) as store:
        if args.run_ids:
            filters.update(parse_selection(f"run:{args.run_ids}", store).filters)
        runs = store.runs(**filters)
        if not runs:
            raise UserError(f"No recorded runs in {store.target.shown} match; `deep500lite db list` shows them. "
                            f"Received: {filters or 'no filters'}")
        written = []
        for r in runs:
            doc = store.document(r["id"])
            if r["kind"] == "run":
                variant = _safe((r["variant"] or r["framework"] or "run").replace(":", "-"))
                rank = f"-rank{r['rank']}" if r["rank"] is not None and (r["ranks"] or 1) > 1 else ""
                path = os.path.join(args.out, _safe(r["suite"]), variant + rank, f"run-{r['id']}", "results.json")
            else:
                path = os.path.join(args.out, _safe(r["suite"].replace(" ", "-")), f"run-{r['id']}.json")
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                atomic_write_text(path, json.dumps(doc, indent=1, allow_nan=False) + "\n")
            except OSError as exc:
                raise UserError(f"Cannot write '{path}' ({exc.strerror or exc}); give --out a writable folder. "
                                f"Received: --out {args.out}") from exc
            written.append(path)
    print(f"wrote {len(written)} run(s) to {args.out}")
    return 0


def run_list(args) -> int:
    from deep500lite.cli.store_args import filters_of, open_from_args
    from deep500lite.metrics.tables import format_table
    from deep500lite.results.history import format_time

    with open_from_args(args) as store:
        runs = store.runs(**filters_of(args))
    rows = [[r["id"], format_time(r["started"] or r["recorded"]), r["kind"], r["suite"],
             r["variant"] or r["framework"] or "-",
             "-" if not r["ranks"] or r["ranks"] < 2 else (f"all {r['ranks']}" if r["rank"] is None
                                                          else f"{r['rank']}/{r['ranks']}"),
             r["machine"] or "?", r["label"] or "", (r["git_commit"] or "")[:12],
             {True: "pass", False: "FAIL"}.get(r["passed"], "-"), r["path"] or ""] for r in runs]
    print(format_table(["id", "started", "kind", "recipe/command", "framework", "rank", "machine", "label", "commit",
                        "metrics", "file"], rows, args.format))
    return 0


def run_info(args) -> int:
    from deep500lite.cli.store_args import open_from_args

    with open_from_args(args) as store:
        counts = store.counts()
        print(f"database: {store.target.shown} ({store.target.kind})")
        print(f"schema version: {store.version}")
        print(f"runs: {counts['runs']}, series: {counts['series']}")
        for column, name in (("suite", "recipes and commands"), ("label", "labels"), ("machine", "machines")):
            values = store.distinct(column)
            print(f"{name}: {', '.join(values[:20]) + (' ...' if len(values) > 20 else '') if values else '-'}")
    return 0
