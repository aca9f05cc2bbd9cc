"""The results store: every run's results kept in a database, their history, regressions, a dashboard.

- :mod:`~deep500lite.results.config`: which database (``--db``, ``DEEP500LITE_DB``), the label,
  the machine's name;
- :mod:`~deep500lite.results.extract`: a results file or a benchmark's JSON as a run and its series;
- :mod:`~deep500lite.results.schema` and :mod:`~deep500lite.results.store`: the tables (SQLAlchemy
  Core over SQLite or PostgreSQL), their version and migrations, reading and writing;
- :mod:`~deep500lite.results.hook`: what the writers of results call to record them;
- :mod:`~deep500lite.results.select`: ``label:``, ``commit:``, ``run:`` and date selections;
- :mod:`~deep500lite.results.regress`, :mod:`~deep500lite.results.history`,
  :mod:`~deep500lite.results.dashboard`: the ``regress``, ``history`` and ``dashboard`` commands' work.

Importing this package imports no database library; the modules that need SQLAlchemy, scipy or
plotly import them themselves (``pip install 'deep500lite[db,dashboard]'``).
"""

from deep500lite.results.config import DEFAULT_DB, Target, parse_target, resolve_target

__all__ = ["DEFAULT_DB", "Target", "parse_target", "resolve_target"]
