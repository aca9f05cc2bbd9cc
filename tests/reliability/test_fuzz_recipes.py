"""Fuzz tests, part C: ``--set`` parsing, recipe dicts, recipe files and results files (hypothesis).

Each test feeds generated input to one parser and asserts the one promise the reliability issue
makes for it: the input is accepted, or a :class:`~deep500lite.errors.Deep500Error` with a clean
one-line message is raised; never another exception type. The "ci" hypothesis profile
(tests/conftest.py) keeps them seeded and short; ``--fuzz-long`` runs them for hours. Inputs are
small (a few KB), so nothing allocates more than a few MB.
"""

from __future__ import annotations

import json

import pytest
from catalog_support import assert_clean_message
from hypothesis import example, given
from hypothesis import strategies as st

from deep500lite.errors import Deep500Error
from deep500lite.recipe import RECIPE_KEYS, load_recipe, parse_set, resolve_recipe

GOOD_FIXED = {"dataset": "digits", "dataset_kwargs": {"test_fraction": 0.75}, "model": "mlp",
              "model_kwargs": {"hidden": [8]}, "epochs": 1}
GOOD_MUTABLE = {"batch_size": 32, "executor": "reference", "optimizer": "MomentumOptimizer",
                "optimizer_kwargs": {"learning_rate": 0.1, "momentum": 0.9}}

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6)
KEYS = st.sampled_from(RECIPE_KEYS) | st.text(max_size=12)


def _clean(exc: Deep500Error) -> None:
    assert_clean_message(str(exc))
    assert "Received" in str(exc), str(exc)


@given(st.text(max_size=60))
@example("batch_size")
@example("=")
@example("optimizer_kwargs..x=1")
@example("x=" + "(" * 500)
@example("epochs=10**10**10")
def test_fuzz_set_parsing(text):
    try:
        key, value = parse_set(text)
    except Deep500Error as exc:
        _clean(exc)
        return
    assert isinstance(key, str) and key
    try:
        resolve_recipe(GOOD_FIXED, GOOD_MUTABLE, [], overrides={key: value})
    except Deep500Error as exc:
        _clean(exc)


@given(st.dictionaries(KEYS, JSON, max_size=6), st.dictionaries(KEYS, JSON, max_size=6),
       st.lists(st.tuples(JSON, JSON) | JSON, max_size=3))
@example({"epochs": 10**30}, {}, [])
@example({"batch_size": float("nan")}, {}, [])
def test_fuzz_recipe_dicts(fixed_changes, mutable_changes, metrics):
    fixed = {**GOOD_FIXED, **fixed_changes}
    mutable = {k: v for k, v in {**GOOD_MUTABLE, **mutable_changes}.items() if k not in fixed}
    try:
        resolved = resolve_recipe(fixed, mutable, metrics)
    except Deep500Error as exc:
        _clean(exc)
        return
    # Accepted: every checked value holds.
    assert 0 <= resolved.config["epochs"] <= 1_000_000 and resolved.config["batch_size"] >= 1


SOURCE = st.one_of(
    st.builds(lambda f, m, x: f"FIXED = {f!r}\nMUTABLE = {m!r}\nMETRICS = {x!r}\n".encode(),
              st.dictionaries(KEYS, JSON, max_size=4), st.dictionaries(KEYS, JSON, max_size=4),
              st.lists(JSON, max_size=2)),
    st.text(max_size=80).map(str.encode),
    st.binary(max_size=60),
)


@pytest.fixture(scope="module")
def recipe_folder(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz_recipes")


@given(SOURCE)
@example(b"FIXED = {}\nMUTABLE = {}\nMETRICS = []\n")
@example(b"\x00")
@example(b"\xff\xfe")
@example(b"import sys; sys.exit(3)")
@example(b"FIXED = MUTABLE = METRICS = None")
def test_fuzz_recipe_files(recipe_folder, source):
    path = recipe_folder / "fuzzed_recipe.py"
    path.write_bytes(source)
    try:
        load_recipe(path).resolve()
    except Deep500Error as exc:
        _clean(exc)


@pytest.fixture(scope="module")
def real_results(tmp_path_factory):
    """A results dict of one real run (reference executor, one small epoch)."""
    from deep500lite.recipe import train_recipe

    folder = tmp_path_factory.mktemp("fuzz_results")
    fixed = dict(GOOD_FIXED, dataset_kwargs={"test_fraction": 0.9})
    train_recipe(resolve_recipe(fixed, GOOD_MUTABLE, []), out=folder / "run", environment=False)
    text = (folder / "run" / "results.json").read_text()
    return folder, json.loads(text)


def _mutate(data, draw, depth: int = 0):
    """Replace one value somewhere in ``data`` (a path drawn at random) with a drawn JSON value."""
    if depth > 6 or not isinstance(data, (dict, list)) or not data or draw(st.booleans()):
        return draw(JSON)
    if isinstance(data, dict):
        key = draw(st.sampled_from(sorted(data)))
        if draw(st.integers(0, 9)) == 0:
            return {k: v for k, v in data.items() if k != key}  # drop the field
        return {**data, key: _mutate(data[key], draw, depth + 1)}
    i = draw(st.integers(0, len(data) - 1))
    return data[:i] + [_mutate(data[i], draw, depth + 1)] + data[i + 1:]


def _report(path):
    from deep500lite.recipe.compare import compare_results
    from deep500lite.recipe.report import comparison_table, load_results, significance_lines

    results = load_results([path])
    comparison = compare_results(results)
    for fmt in ("table", "markdown", "csv"):
        comparison_table(comparison, fmt)
    significance_lines(comparison)


@given(st.data())
def test_fuzz_results_files(real_results, data):
    folder, good = real_results
    damaged = _mutate(good, data.draw)
    path = folder / "fuzzed" / "results.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(damaged, allow_nan=True))
    try:
        _report(path)
    except Deep500Error as exc:
        _clean(exc)


@given(st.binary(max_size=200))
@example(b"{}")
@example(b'{"format": "deep500lite-results", "version": 1e308}')
@example(b'{"format": "deep500lite-results", "version": ' + b"9" * 5000 + b"}")
def test_fuzz_results_bytes(real_results, content):
    folder, _ = real_results
    path = folder / "bytes" / "results.json"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(content)
    try:
        _report(path)
    except Deep500Error as exc:
        _clean(exc)

