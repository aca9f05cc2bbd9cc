"""Helpers of the results-store tests (the fixtures are in conftest.py): PostgreSQL databases, a recipe, the CLI.

``postgres_database()`` creates a database on the server ``DEEP500LITE_TEST_POSTGRES`` names (an
admin URL such as ``postgresql://postgres@127.0.0.1:5432/postgres``; ``scripts/ci_services.sh``
starts one and sets it in CI) and drops it afterwards; without that variable the test skips,
saying so.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import textwrap
import urllib.parse

import pytest

__all__ = ["PG_ENV", "postgres_database", "write_recipe", "d5"]

PG_ENV = "DEEP500LITE_TEST_POSTGRES"


def _pg_admin():
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(f"needs a PostgreSQL server: set {PG_ENV}=postgresql://USER@HOST:PORT/postgres "
                    "(scripts/ci_services.sh starts a throwaway one; CI sets it)")
    pytest.importorskip("psycopg", reason="needs psycopg: pip install 'deep500lite[db]'")
    return url


@contextlib.contextmanager
def postgres_database():
    """A new, empty PostgreSQL database (dropped at the end); yields its URL. Skips without a server."""
    admin = _pg_admin()
    import psycopg

    name = "d5test_" + secrets.token_hex(6)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urllib.parse.urlsplit(admin)
    try:
        yield urllib.parse.urlunsplit(parts._replace(path="/" + name))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


MLP_RECIPE = """
    import deep500lite as d5

    FIXED = {{'dataset': 'digits', 'model': 'mlp', 'model_kwargs': dict(hidden={hidden!r}), 'epochs': {epochs},
             'train_sampler': d5.ShuffleSampler, 'train_sampler_kwargs': dict(seed=1)}}
    MUTABLE = {{'batch_size': 32, 'executor': 'reference', 'optimizer': 'GradientDescent',
               'optimizer_kwargs': dict(learning_rate=0.1)}}
    METRICS = [(d5.TestAccuracy(), None)]
"""


def write_recipe(folder, hidden=(32,), epochs: int = 1) -> str:
    """Write ``folder/mlpbench.py`` (digits, an MLP of the given hidden widths, the reference executor)."""
    path = os.path.join(os.fspath(folder), "mlpbench.py")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(textwrap.dedent(MLP_RECIPE.format(hidden=tuple(hidden), epochs=epochs)))
    return path


def d5(*args, env=None, cwd=None, timeout=600):
    """Run ``deep500lite ARGS`` (the console script's module) in a fresh process; the CompletedProcess."""
    full = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "deep500lite", *map(str, args)], capture_output=True, text=True,
                          env=full, cwd=cwd, timeout=timeout)
