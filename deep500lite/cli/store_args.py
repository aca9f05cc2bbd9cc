"""``--db`` and ``--label``: the options that send a command's results to the results store.

:func:`wire_store_options` adds them, in one argument group, to ``run``, ``compare`` and every
``bench ...``/``model ...`` command that writes JSON (``build_parser`` calls it once);
:func:`add_store_options` adds ``--db`` (and ``--label`` where it records) to one parser, for the
store's own commands. :func:`store_session` wraps a command: for a recording command it opens
the database once (a database that cannot be opened stops the command before it measures,
exit 2), then sets ``DEEP500LITE_DB``, ``DEEP500LITE_LABEL``, ``DEEP500LITE_SESSION`` and
``DEEP500LITE_COMMAND`` for it and the processes it starts (the writers of results record
through :mod:`deep500lite.results.hook`), and restores them afterwards. A ``bench``/``model``
command without ``--json`` writes its JSON to ``d5-results/COMMAND/TIME.json`` (beside an SQLite
database) so the store can link the raw file; its JSON is recorded when the command returns.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
import uuid

__all__ = ["add_store_options", "wire_store_options", "store_session", "db_argument", "add_filter_options",
           "filters_of", "open_from_args", "open_from_args_writable", "RECORDING"]

#: The commands whose results are recorded (``bench``/``model``: the subcommands that write JSON).
RECORDING = ("run", "compare", "bench", "model")


def db_argument(text: str) -> str:
    """An argparse type: a database target (a path, ``sqlite:///PATH``, ``postgresql://...``, ``none``)."""
    from deep500lite.errors import UserError
    from deep500lite.results.config import parse_target

    try:
        parse_target(text)
    except UserError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _label(text: str) -> str:
    from deep500lite.errors import UserError
    from deep500lite.results.config import check_label

    try:
        return check_label(text)
    except UserError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_store_options(parser, *, label: bool = True, record: bool = False, command: str | None = None):
    """Add ``--db`` (and ``--label``) to a parser.

    Args:
        parser: the subcommand's parser.
        label: also add ``--label`` (the name the runs are recorded under).
        record: the command records results (:func:`store_session` then sets up the database).
        command: the command's name as recorded (``bench overhead``).
    """
    g = parser.add_argument_group("results store (docs/tracking.md)")
    g.add_argument("--db", type=db_argument, default=None, metavar="PATH|URL",
                   help="results database: an SQLite file or postgresql://USER@HOST/DBNAME; none records nothing "
                        "(default: $DEEP500LITE_DB, else d5-results/deep500lite.sqlite)")
    if label:
        g.add_argument("--label", type=_label, default=None, metavar="NAME",
                       help="record the results under this label (baseline, pr-123; default: $DEEP500LITE_LABEL)")
    if record:
        parser.set_defaults(_d5_record=command)
    return g


def _leaves(parser, prefix: str):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prefix, parser
    for action in subs:
        for name, child in action.choices.items():
            yield from _leaves(child, f"{prefix} {name}")


def wire_store_options(subparsers) -> None:
    """Add ``--db``/``--label`` to every recording command (:data:`RECORDING`) under ``subparsers``."""
    for name in RECORDING:
        for command, parser in _leaves(subparsers.choices[name], name):
            writes_json = any(a.dest == "json" and a.option_strings for a in parser._actions)
            if name in ("run", "compare") or writes_json:
                add_store_options(parser, record=True, command=command)


def _auto_json(target, command: str) -> str:
    folder = os.path.dirname(target.path) if target.path else "d5-results"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join(folder, command.replace(" ", "-"), f"{stamp}-{os.getpid()}.json")


@contextlib.contextmanager
def store_session(args):
    """Run a command with its results recorded (see the module documentation); other commands pass through."""
    command = getattr(args, "_d5_record", None)
    if not command:
        yield
        return
    from deep500lite.errors import FrameworkNotAvailableError
    from deep500lite.results.config import ENV_COMMAND, ENV_DB, ENV_LABEL, ENV_SESSION, resolve_target
    from deep500lite.utils import is_package_available

    explicit = args.db is not None or bool(os.environ.get(ENV_DB))
    target = resolve_target(args.db)
    if target is not None and not is_package_available("sqlalchemy"):
        if explicit:
            raise FrameworkNotAvailableError(f"Recording results in {target.shown} needs SQLAlchemy, which is not "
                                             "installed: pip install 'deep500lite[db]' (or give --db none)")
        target = None  # the default database, without the library: record nothing, say nothing
    if target is not None:
        from deep500lite.results.store import opened

        with opened(target):  # create or upgrade it now: a database that cannot be opened stops the command here
            pass
    names = (ENV_DB, ENV_LABEL, ENV_SESSION, ENV_COMMAND)
    saved = {k: os.environ.get(k) for k in names}
    os.environ[ENV_DB] = target.given if target is not None else "none"
    if args.label is not None:
        os.environ[ENV_LABEL] = args.label
    os.environ[ENV_SESSION] = uuid.uuid4().hex
    os.environ[ENV_COMMAND] = command
    payload = None
    if target is not None and hasattr(args, "json") and command.split(" ")[0] in ("bench", "model"):
        if args.json is None:
            args.json = _auto_json(target, command)
            os.makedirs(os.path.dirname(args.json), exist_ok=True)
        payload = (os.path.abspath(args.json), time.time())
    try:
        yield
        if payload is not None:
            path, started = payload
            if os.path.isfile(path) and os.path.getmtime(path) >= started - 1:
                from deep500lite.results.hook import record_payload

                try:
                    with open(path, encoding="utf-8") as f:
                        data = json.load(f)
                except (OSError, ValueError) as exc:
                    print(f"deep500lite: warning: {path} was not recorded: not readable JSON ({exc})")
                else:
                    record_payload(path, data, command)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def add_filter_options(parser, *, label: bool = True) -> None:
    """Add the filters of the store's reading commands: ``--recipe``, ``--framework``, ``--machine`` (``--label``)."""
    g = parser.add_argument_group("which runs")
    g.add_argument("--recipe", default=None, metavar="NAME",
                   help="only this recipe (its name) or bench/model command ('bench overhead')")
    g.add_argument("--framework", default=None, metavar="FW",
                   help="only this framework or variant (torch, torch:compile)")
    g.add_argument("--machine", default=None, metavar="NAME", help="only runs on this machine (see `db list`)")
    if label:
        g.add_argument("--label", dest="label_filter", default=None, metavar="NAME", help="only runs with this label")


def filters_of(args) -> dict:
    """The store filters of :func:`add_filter_options`' options."""
    out = {"suite": args.recipe, "framework": args.framework, "machine": args.machine}
    if getattr(args, "label_filter", None) is not None:
        out["label"] = args.label_filter
    return {k: v for k, v in out.items() if v is not None}


def open_from_args_writable(args):
    """Open (creating it if new) the store a writing command such as ``db import`` names.

    Raises:
        UserError: recording is off (``none``).
    """
    from deep500lite.errors import UserError
    from deep500lite.results.config import resolve_target
    from deep500lite.results.store import open_store

    target = resolve_target(args.db)
    if target is None:
        raise UserError("This command writes to the results database, and --db (or DEEP500LITE_DB) is none. Give "
                        "--db PATH or --db postgresql://USER@HOST/DBNAME. Received: --db none")
    return open_store(target)


def open_from_args(args):
    """Open the store a reading command names (``--db``, ``DEEP500LITE_DB``, the default).

    Raises:
        UserError: recording is off (``none``) or the database does not exist yet.
    """
    from deep500lite.errors import UserError
    from deep500lite.results.config import resolve_target

    target = resolve_target(args.db)
    if target is None:
        raise UserError("This command reads the results database, and --db (or DEEP500LITE_DB) is none. Give "
                        "--db PATH or --db postgresql://USER@HOST/DBNAME. Received: --db none")
    if target.kind == "sqlite" and not os.path.isfile(target.path):
        raise UserError(f"No results database at {target.shown}: record runs first (deep500lite run RECIPE --label "
                        f"NAME) or import results folders (deep500lite db import FOLDER), or give --db. "
                        f"Received: --db {args.db or target.shown}")
    from deep500lite.results.store import open_store

    return open_store(target)
