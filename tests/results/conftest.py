"""Fixtures of the results-store tests: a database per test, on SQLite and on a real PostgreSQL server.

``db_url`` is parametrized over ``sqlite`` (a file in the test's folder) and ``postgresql`` (a
database created for the test on the server ``DEEP500LITE_TEST_POSTGRES`` names, dropped
afterwards; those cases skip, saying so, without one). ``recipe_file`` writes a small MLP recipe.
"""

from __future__ import annotations

import pytest
from store_support import postgres_database, write_recipe


@pytest.fixture
def postgres_url():
    """A new, empty PostgreSQL database for this test; its URL."""
    with postgres_database() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A results database for this test: an SQLite file, then a PostgreSQL database."""
    pytest.importorskip("sqlalchemy", reason="needs SQLAlchemy: pip install 'deep500lite[db]'")
    if request.param == "sqlite":
        yield str(tmp_path / "results.sqlite")
    else:
        yield request.getfixturevalue("postgres_url")


@pytest.fixture
def recipe_file(tmp_path):
    """``recipe_file(name, hidden=(32,))``: :func:`write_recipe` into ``tmp_path/name``."""
    return lambda name, hidden=(32,), epochs=1: write_recipe(tmp_path / name, hidden, epochs)
