"""The store's tables (SQLAlchemy Core), its schema version and the migrations between versions.

Tables (prefixed ``d5_`` so they can share a team's PostgreSQL database):

- ``d5_meta``: ``key``/``value`` pairs; ``schema_version`` is the version of the tables.
- ``d5_runs``: one row per results document: ``key`` (unique: a recipe run's recipe, variant,
  rank, start time and machine; a benchmark JSON's digest), ``kind`` (``run``, ``bench``,
  ``model``), ``command``, ``session`` (shared by the runs of one command), ``suite`` (the recipe
  or the bench command), ``framework``, ``variant``, ``device``, ``rank``, ``ranks``, ``label``,
  ``git_commit``, ``machine``, ``started`` and ``recorded`` (Unix times), ``passed``, ``path``
  (the file it was written to), ``environment`` and ``document`` (JSON text: the whole file).
- ``d5_series``: one row per benchmark and metric of a run: ``benchmark``, ``metric``, ``unit``,
  ``better``, ``headline``, ``n``, ``median``, ``ci_low``, ``ci_high`` and ``samples`` (JSON
  text: every raw sample).

:func:`ensure_schema` creates the tables of a new database at :data:`SCHEMA_VERSION`, brings an
older one up through :data:`MIGRATIONS` (each step in one transaction, under a lock: PostgreSQL's
``pg_advisory_xact_lock``, SQLite's ``BEGIN IMMEDIATE``, so processes opening a database at the
same time migrate it once) and refuses a newer one.
"""

from __future__ import annotations

from typing import Callable

import sqlalchemy as sa

from deep500lite.errors import UserError

__all__ = ["SCHEMA_VERSION", "MIGRATIONS", "metadata", "meta", "runs", "series", "ensure_schema", "schema_version"]

#: The version of the tables this deep500lite writes.
SCHEMA_VERSION = 1

metadata = sa.MetaData()

meta = sa.Table(
    "d5_meta", metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

runs = sa.Table(
    "d5_runs", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("key", sa.String(64), nullable=False, unique=True),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("command", sa.String(64)),
    sa.Column("session", sa.String(64), index=True),
    sa.Column("suite", sa.String(200), nullable=False, index=True),
    sa.Column("framework", sa.String(64)),
    sa.Column("variant", sa.String(64)),
    sa.Column("device", sa.String(64)),
    sa.Column("rank", sa.Integer),
    sa.Column("ranks", sa.Integer),
    sa.Column("label", sa.String(200), index=True),
    sa.Column("git_commit", sa.String(80), index=True),
    sa.Column("machine", sa.String(200), index=True),
    sa.Column("started", sa.Float),
    sa.Column("recorded", sa.Float, nullable=False),
    sa.Column("passed", sa.Boolean),
    sa.Column("path", sa.Text),
    sa.Column("environment", sa.Text),
    sa.Column("document", sa.Text, nullable=False),
)

series = sa.Table(
    "d5_series", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Integer, sa.ForeignKey("d5_runs.id", ondelete="CASCADE"), nullable=False, index=True),
    sa.Column("benchmark", sa.String(400), nullable=False),
    sa.Column("metric", sa.String(200), nullable=False),
    sa.Column("unit", sa.String(32), nullable=False),
    sa.Column("better", sa.String(8), nullable=False),
    sa.Column("headline", sa.Boolean, nullable=False),
    sa.Column("n", sa.Integer, nullable=False),
    sa.Column("median", sa.Float),
    sa.Column("ci_low", sa.Float),
    sa.Column("ci_high", sa.Float),
    sa.Column("samples", sa.Text, nullable=False),
    sa.Index("ix_d5_series_benchmark_metric", "benchmark", "metric"),
)

#: Upgrades: ``MIGRATIONS[k](connection)`` takes the tables from version ``k`` to ``k + 1``
#: (with :mod:`sqlalchemy` DDL both dialects run). None yet: version 1 is the first.
MIGRATIONS: dict[int, Callable] = {}

# Any constant: the key of the PostgreSQL advisory lock that serializes migrations.
_LOCK_KEY = 0x6435_7265_7331


def schema_version(conn) -> int | None:
    """The database's schema version, or None when it has no deep500lite tables."""
    if not sa.inspect(conn).has_table(meta.name):
        return None
    value = conn.execute(sa.select(meta.c.value).where(meta.c.key == "schema_version")).scalar()
    return int(value) if value is not None else None


def _set_version(conn, version: int) -> None:
    if conn.execute(sa.select(meta.c.key).where(meta.c.key == "schema_version")).first() is None:
        conn.execute(sa.insert(meta).values(key="schema_version", value=str(version)))
    else:
        conn.execute(sa.update(meta).where(meta.c.key == "schema_version").values(value=str(version)))


def _refuse_newer(version: int, shown: str) -> None:
    raise UserError(f"The results database {shown} has schema version {version}; this deep500lite reads up to "
                    f"version {SCHEMA_VERSION}. Upgrade deep500lite (pip install -U deep500lite). "
                    f"Received: schema version {version}")


def ensure_schema(engine, shown: str) -> int:
    """Create or upgrade the tables; returns the schema version (:data:`SCHEMA_VERSION`).

    Raises:
        UserError: the database was written by a newer deep500lite.
    """
    with engine.connect() as conn:
        version = schema_version(conn)
    if version == SCHEMA_VERSION:
        return version
    if version is not None and version > SCHEMA_VERSION:
        _refuse_newer(version, shown)
    # d5_write: the store starts this transaction with BEGIN IMMEDIATE on SQLite (a write lock at once).
    with engine.execution_options(d5_write=True).begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
        version = schema_version(conn)  # again, under the lock: another process may have done it
        if version is None:
            metadata.create_all(conn)
            _set_version(conn, SCHEMA_VERSION)
            return SCHEMA_VERSION
        if version > SCHEMA_VERSION:
            _refuse_newer(version, shown)
        while version < SCHEMA_VERSION:
            step = MIGRATIONS.get(version)
            if step is None:
                raise UserError(f"The results database {shown} has schema version {version}, which this deep500lite "
                                f"cannot upgrade (it knows steps from {sorted(MIGRATIONS) or 'none'}). "
                                f"Received: schema version {version}")
            step(conn)
            version += 1
            _set_version(conn, version)
    return version
