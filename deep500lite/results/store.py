"""The results store: runs and their series in SQLite or PostgreSQL, through SQLAlchemy Core.

:func:`open_store` connects (SQLite: the file is created with its folder; PostgreSQL: through
psycopg 3), creates or upgrades the tables (:func:`deep500lite.results.schema.ensure_schema`)
and returns a :class:`Store`. Writers never lose each other's runs:

- SQLite runs in WAL mode (readers do not block the writer) and every write transaction starts
  with ``BEGIN IMMEDIATE``, so concurrent writers (every rank of ``run -n``, two ``compare``\\ s)
  queue on the file's lock (waiting up to 5 minutes) instead of failing half-way; WAL needs
  a local file system (not NFS).
- PostgreSQL takes concurrent inserts as they come; a run recorded twice at once (same key) is
  retried as an update.

SQLAlchemy and psycopg are imported with this module only (``pip install 'deep500lite[db]'``).
"""

from __future__ import annotations

import contextlib
import json
import os
import time

from deep500lite.errors import FrameworkNotAvailableError, UserError
from deep500lite.results.config import Target
from deep500lite.results.extract import Record, canonical_json

try:
    import sqlalchemy as sa
except ImportError as _exc:  # pragma: no cover - depends on the installation
    raise FrameworkNotAvailableError("The results store needs SQLAlchemy, which is not installed: "
                                     "pip install 'deep500lite[db]'") from _exc

from deep500lite.results import schema

__all__ = ["Store", "open_store", "opened", "RUN_COLUMNS"]

#: The run columns queries return (everything but the document and the environment).
RUN_COLUMNS = ("id", "kind", "command", "session", "suite", "framework", "variant", "device", "rank", "ranks",
               "label", "git_commit", "machine", "started", "recorded", "passed", "path")

_SQLITE_BUSY_SECONDS = 300


def _sqlite_engine(target: Target):
    folder = os.path.dirname(target.path)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise UserError(f"Cannot make the folder of the results database {target.shown} ({exc.strerror or exc}); "
                        f"give --db a writable place. Received: --db {target.given}") from exc
    engine = sa.create_engine(target.url, connect_args={"timeout": _SQLITE_BUSY_SECONDS})

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record):
        # Let SQLAlchemy's "begin" event below start transactions (pysqlite would begin them lazily).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {_SQLITE_BUSY_SECONDS * 1000}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("d5_write") else "BEGIN")

    return engine


def _postgres_engine(target: Target):
    try:
        import psycopg  # noqa: F401 - SQLAlchemy's postgresql+psycopg dialect needs it
    except ImportError as exc:
        raise FrameworkNotAvailableError("A PostgreSQL results database needs psycopg 3, which is not installed: "
                                         "pip install 'deep500lite[db]'") from exc
    return sa.create_engine(target.url, connect_args={"connect_timeout": 15}, pool_pre_ping=True)


def _reason(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


class Store:
    """A results database (use :func:`open_store`).

    Attributes:
        target: where it is (:class:`~deep500lite.results.config.Target`).
        version: its schema version.
    """

    def __init__(self, target: Target, engine, version: int):
        self.target, self._engine, self.version = target, engine, version
        self._writer = engine.execution_options(d5_write=True)

    # ------------------------------------------------------------------ writing
    def record(self, rec: Record) -> int:
        """Record one run (replacing the run with the same key, whose label is kept unless ``rec`` has one).

        Returns:
            The run's id.
        """
        values = {c: getattr(rec, c) for c in ("key", "kind", "command", "session", "suite", "framework", "variant",
                                               "device", "rank", "ranks", "label", "git_commit", "machine", "started",
                                               "recorded", "passed", "path")}
        env = rec.document.get("environment")
        values["environment"] = canonical_json(env) if isinstance(env, dict) else None
        values["document"] = canonical_json(rec.document)
        rows = [{"benchmark": s.benchmark, "metric": s.metric, "unit": s.unit, "better": s.better,
                 "headline": bool(s.headline), "n": int(s.n), "median": s.median, "ci_low": s.ci_low,
                 "ci_high": s.ci_high, "samples": json.dumps(s.values)} for s in rec.series]
        runs, series = schema.runs, schema.series
        for attempt in range(5):
            try:
                with self._writer.begin() as conn:
                    old = conn.execute(sa.select(runs.c.id, runs.c.label, runs.c.path, runs.c.session)
                                       .where(runs.c.key == rec.key)).first()
                    if old is None:
                        run_id = conn.execute(sa.insert(runs).values(values)).inserted_primary_key[0]
                    else:
                        run_id = old.id
                        update = dict(values)
                        for col in ("label", "path", "session"):
                            if update[col] is None:
                                update[col] = getattr(old, col)
                        conn.execute(sa.update(runs).where(runs.c.id == run_id).values(update))
                        conn.execute(sa.delete(series).where(series.c.run_id == run_id))
                    if rows:
                        conn.execute(sa.insert(series), [dict(r, run_id=run_id) for r in rows])
                return int(run_id)
            except sa.exc.IntegrityError:
                if attempt == 4:  # another process recorded the same run each time: give up, loudly
                    raise
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    def set_label(self, run_ids, label: str | None) -> int:
        """Give runs a label (None removes it); returns how many runs changed."""
        with self._writer.begin() as conn:
            result = conn.execute(sa.update(schema.runs).where(schema.runs.c.id.in_(list(run_ids)))
                                  .values(label=label))
            return result.rowcount

    # ------------------------------------------------------------------ reading
    def _where(self, *, suite=None, framework=None, machine=None, label=None, kind=None, run_ids=None,
               commits=None, since=None, until=None, session=None):
        r = schema.runs.c
        clauses = []
        for column, value in ((r.suite, suite), (r.machine, machine), (r.label, label), (r.kind, kind),
                              (r.session, session)):
            if value is not None:
                values = [value] if isinstance(value, str) else list(value)
                clauses.append(column.in_(values))
        if framework is not None:
            names = [framework] if isinstance(framework, str) else list(framework)
            clauses.append(sa.or_(r.framework.in_(names), r.variant.in_(names)))
        if run_ids is not None:
            clauses.append(r.id.in_(list(run_ids)))
        if commits is not None:
            clauses.append(sa.or_(*[r.git_commit.startswith(c, autoescape=True) for c in commits]))
        if since is not None:
            clauses.append(sa.func.coalesce(r.started, r.recorded) >= since)
        if until is not None:
            clauses.append(sa.func.coalesce(r.started, r.recorded) < until)
        return clauses

    def runs(self, **filters) -> list[dict]:
        """Runs (every column but the document), oldest first; filters as for :meth:`series`."""
        cols = [getattr(schema.runs.c, c) for c in RUN_COLUMNS]
        query = sa.select(*cols).where(*self._where(**filters)).order_by(
            sa.func.coalesce(schema.runs.c.started, schema.runs.c.recorded), schema.runs.c.id)
        with self._engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(query)]

    def series(self, *, metric=None, headline=None, benchmark=None, samples: bool = True, **filters) -> list[dict]:
        """Series joined with their run's columns, oldest run first.

        Args:
            metric: a metric name (or a list); None: any.
            headline: True for headline metrics only.
            benchmark: a benchmark name (or a list).
            samples: also return the raw samples (``values``).
            **filters: ``suite``, ``framework`` (a framework or variant), ``machine``, ``label``,
                ``kind``, ``run_ids``, ``commits`` (prefixes), ``since``/``until`` (Unix times),
                ``session``; each a value or a list.
        """
        s, r = schema.series.c, schema.runs.c
        cols = [getattr(r, c).label("run_id" if c == "id" else c) for c in RUN_COLUMNS]
        cols += [s.benchmark, s.metric, s.unit, s.better, s.headline, s.n, s.median, s.ci_low, s.ci_high]
        if samples:
            cols.append(s.samples)
        clauses = self._where(**filters)
        if metric is not None:
            clauses.append(s.metric.in_([metric] if isinstance(metric, str) else list(metric)))
        if benchmark is not None:
            clauses.append(s.benchmark.in_([benchmark] if isinstance(benchmark, str) else list(benchmark)))
        if headline:
            clauses.append(s.headline.is_(True))
        query = (sa.select(*cols).select_from(schema.series.join(schema.runs, s.run_id == r.id)).where(*clauses)
                 .order_by(sa.func.coalesce(r.started, r.recorded), r.id, s.id))
        out = []
        with self._engine.connect() as conn:
            for row in conn.execute(query):
                d = dict(row._mapping)
                if samples:
                    d["values"] = json.loads(d.pop("samples"))
                out.append(d)
        return out

    def document(self, run_id: int) -> dict:
        """The whole results document of a run.

        Raises:
            UserError: no run has that id.
        """
        with self._engine.connect() as conn:
            text = conn.execute(sa.select(schema.runs.c.document).where(schema.runs.c.id == int(run_id))).scalar()
        if text is None:
            raise UserError(f"The results database {self.target.shown} has no run {run_id}; `deep500lite db list` "
                            f"shows the runs. Received: run {run_id}")
        return json.loads(text)

    def distinct(self, column: str, **filters) -> list:
        """The distinct values of a run column (``label``, ``git_commit``, ``machine``, ``suite``), sorted."""
        col = getattr(schema.runs.c, column)
        with self._engine.connect() as conn:
            rows = conn.execute(sa.select(col).where(*self._where(**filters), col.is_not(None)).distinct())
            return sorted(v for (v,) in rows)

    def counts(self) -> dict:
        """How many runs and series the database holds."""
        with self._engine.connect() as conn:
            n_runs = conn.execute(sa.select(sa.func.count()).select_from(schema.runs)).scalar_one()
            n_series = conn.execute(sa.select(sa.func.count()).select_from(schema.series)).scalar_one()
        return {"runs": int(n_runs), "series": int(n_series)}

    def close(self) -> None:
        """Close the database's connections."""
        self._engine.dispose()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_store(target: Target) -> Store:
    """Connect to a results database and create or upgrade its tables.

    Raises:
        UserError: the database cannot be reached or opened (the reason is named), or was written
            by a newer deep500lite.
        FrameworkNotAvailableError: SQLAlchemy or psycopg is not installed.
    """
    engine = _sqlite_engine(target) if target.kind == "sqlite" else _postgres_engine(target)
    try:
        version = schema.ensure_schema(engine, target.shown)
    except sa.exc.OperationalError as exc:
        engine.dispose()
        hint = ("is the server running and the database created (createdb)?" if target.kind == "postgresql"
                else "is it an SQLite database on a writable, local file system?")
        raise UserError(f"Cannot open the results database {target.shown}: {_reason(exc)}; {hint} "
                        f"Received: --db {target.shown}") from exc
    except sa.exc.DatabaseError as exc:
        engine.dispose()
        raise UserError(f"{target.shown} is not a usable results database: {_reason(exc)}. Give an SQLite file "
                        f"written by deep500lite (or a new path), or a PostgreSQL URL. Received: --db {target.shown}"
                        ) from exc
    except BaseException:
        engine.dispose()
        raise
    return Store(target, engine, version)


@contextlib.contextmanager
def opened(target: Target):
    """``with opened(target) as store:`` -- :func:`open_store`, closed at the end."""
    store = open_store(target)
    try:
        yield store
    finally:
        store.close()
