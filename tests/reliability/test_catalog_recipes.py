"""Bad-input catalog, part C: recipes, ``--set``, ``run``/``compare``/``report`` arguments, results files, metrics.

Each case is one mistake a user can make. It asserts exit status 2 (or the documented exception)
and one clean line naming the field, key or argument and the value received
(``tests/catalog_support.py``). Recipe cases write a small digits recipe with one thing wrong;
results-file cases damage a results.json written by a real run.
"""

from __future__ import annotations

import json

import pytest
from catalog_support import api_error, cli_error

from deep500lite.errors import UserError

RECIPE = '''\
from deep500lite.metrics.base import TestMetric
from deep500lite.metrics.training import PeakMemory, StepTimeBreakdown, TestAccuracy, TimeToAccuracy
FIXED = {"dataset": "digits", "dataset_kwargs": dict(test_fraction=0.75), "model": "mlp",
         "model_kwargs": dict(hidden=(8,)), "train_sampler": "ShuffleSampler", "epochs": 1}
MUTABLE = {"batch_size": 32, "executor": "reference", "optimizer": "MomentumOptimizer",
           "optimizer_kwargs": dict(learning_rate=0.1, momentum=0.9)}
METRICS = [(TestAccuracy(), 10)]
'''


def _recipe(tmp_path, change: str = "", text: str | None = None):
    path = tmp_path / "recipe_case.py"
    path.write_text(text if text is not None else RECIPE + change + "\n")
    return path


def _run(tmp_path, path, *more):
    return ("run", path, "--out", tmp_path / "out", "--progress", "none", *more)


# -- recipe files: (what is appended to the good recipe, needles) -------------------------------------
RECIPE_CASES = [
    pytest.param("del FIXED['dataset']", ("'dataset'", "Required keys"), id="missing-dataset"),
    pytest.param("del MUTABLE['optimizer']", ("'optimizer'", "Received: the keys"), id="missing-optimizer"),
    pytest.param("FIXED['optimiser'] = 'AdamOptimizer'", ("'optimiser'", "Did you mean 'optimizer'"),
                 id="unknown-key-suggests-closest"),
    pytest.param("FIXED['batchsize'] = 3", ("'batchsize'", "Did you mean 'batch_size'"), id="unknown-key-batchsize"),
    pytest.param("FIXED[3] = 'x'", ("keys must be strings", "3"), id="non-string-key"),
    pytest.param("MUTABLE['epochs'] = 2", ("'epochs'", "both FIXED and MUTABLE"), id="key-in-fixed-and-mutable"),
    pytest.param("MUTABLE['optimizer_kwarg'] = {}", ("sets 'optimizer_kwargs' twice", "'optimizer_kwarg'"),
                 id="singular-and-plural-spelling"),
    pytest.param("FIXED['epochs'] = 10**30", ("'epochs'", "1,000,000", "Received: 1000000000"),
                 id="epochs-astronomical"),
    pytest.param("FIXED['epochs'] = -1", ("'epochs'", "Received: -1"), id="epochs-negative"),
    pytest.param("FIXED['epochs'] = 2.5", ("'epochs'", "Received: float 2.5"), id="epochs-float"),
    pytest.param("FIXED['epochs'] = True", ("'epochs'", "Received: bool True"), id="epochs-bool"),
    pytest.param("MUTABLE['batch_size'] = 0", ("'batch_size'", "Received: 0"), id="batch-size-zero"),
    pytest.param("MUTABLE['batch_size'] = 2**40", ("'batch_size'", "2,147,483,647", "Received: 1099511627776"),
                 id="batch-size-beyond-int32"),
    pytest.param("FIXED['dataset'] = 'digitz'", ("Unknown dataset", "'digitz'"), id="unknown-dataset"),
    pytest.param("FIXED['model'] = 'lenett'", ("Unknown network", "'lenett'"), id="unknown-model"),
    pytest.param("FIXED['model'] = 'missing.onnx'", ("missing.onnx", "does not exist"), id="model-file-missing"),
    pytest.param("FIXED['model_kwargs'] = dict(hiden=3)", ("'hiden'", "'hidden'"), id="model-option-typo"),
    pytest.param("FIXED['dataset_kwargs'] = dict(test_fraction=2.0)", ("test_fraction", "2.0"),
                 id="dataset-option-out-of-range"),
    pytest.param("MUTABLE['executor'] = 'tensorflw'", ("Unknown framework", "'tensorflw'"), id="unknown-executor"),
    pytest.param("MUTABLE['executor'] = 5", ("'executor'", "Received: int 5"), id="executor-not-a-name"),
    pytest.param("MUTABLE['executor_kwargs'] = dict(devise='cpu')", ("'reference' executor", "'devise'"),
                 id="executor-option-typo"),
    pytest.param("MUTABLE['optimizer'] = 'Adamm'", ("Unknown optimizer", "'Adamm'"), id="unknown-optimizer"),
    pytest.param("MUTABLE['optimizer'] = 'torch.Nope'", ("no native optimizer", "'torch.Nope'"),
                 id="unknown-native-optimizer"),
    pytest.param("MUTABLE['optimizer_kwargs'] = dict(learning_rate=0)", ("learning_rate", "Received: 0"),
                 id="learning-rate-zero"),
    pytest.param("MUTABLE['optimizer_kwargs'] = dict(learning_rate='fast')", ("learning_rate", "'fast'"),
                 id="learning-rate-string"),
    pytest.param("MUTABLE['optimizer_kwargs'] = dict(lr=0.1)", ("optimizer", "'lr'"), id="optimizer-option-typo"),
    pytest.param("MUTABLE['optimizer_args'] = 5", ("'optimizer_args'", "int 5"), id="args-not-a-list"),
    pytest.param("MUTABLE['optimizer_kwargs'] = {1: 2}", ("'optimizer_kwargs'", "{1: 2}"), id="kwargs-int-keys"),
    pytest.param("FIXED['train_sampler'] = 'ShufleSampler'", ("Unknown sampler", "'ShufleSampler'"),
                 id="unknown-sampler"),
    pytest.param("FIXED['train_sampler_kwargs'] = dict(sed=3)", ("train_sampler", "'sed'"), id="sampler-option-typo"),
    pytest.param("FIXED['validation_sampler'] = 42", ("'validation_sampler'", "int 42"), id="sampler-not-a-name"),
    pytest.param("FIXED['events'] = 'Nope'", ("Unknown event", "'Nope'"), id="unknown-event"),
    pytest.param("FIXED['events'] = [3]", ("events[0]", "int 3"), id="event-list-holds-a-number"),
    pytest.param("FIXED['communicator'] = 'gloo'", ("Unknown communicator", "'gloo'"), id="unknown-communicator"),
    pytest.param("FIXED['distributed'] = 'Nope'", ("Unknown distributed optimizer", "'Nope'"),
                 id="unknown-distributed-optimizer"),
    pytest.param("FIXED['dataset'] = lambda *a, **k: 1 / 0", ("dataset", "ZeroDivisionError", "division by zero"),
                 id="dataset-callable-raises"),
    pytest.param("FIXED['dataset'] = lambda *a, **k: 5", ("dataset callable", "Received: int"),
                 id="dataset-callable-returns-number"),
    pytest.param("FIXED['model'] = lambda *a, **k: 'net'", ("model callable", "Received: str"),
                 id="model-callable-returns-string"),
    pytest.param("METRICS = [(TestAccuracy(), '90%')]", ("METRICS[0]", "threshold", "'90%'"),
                 id="threshold-is-text"),
    pytest.param("METRICS = [(TestAccuracy(), float('nan'))]", ("METRICS[0]", "threshold", "nan"),
                 id="threshold-nan"),
    pytest.param("METRICS = [(TestAccuracy(), True)]", ("METRICS[0]", "threshold", "True"), id="threshold-bool"),
    pytest.param("METRICS = [(TestAccuracy(), 150)]", ("METRICS[0]", "from 0 to 100", "150"),
                 id="accuracy-threshold-above-100"),
    pytest.param("METRICS = [(TestAccuracy(), 90, 'up')]", ("METRICS[0]", "'higher' or 'lower'", "'up'"),
                 id="unknown-direction"),
    pytest.param("METRICS = [(TestAccuracy(), 90, 'higher', 1)]", ("METRICS[0]", "4 items"),
                 id="metric-tuple-too-long"),
    pytest.param("METRICS = [('accuracy', 90)]", ("METRICS[0]", "TestMetric", "'accuracy'"), id="metric-is-text"),
    pytest.param("METRICS = [(TimeToAccuracy, 1)]", ("METRICS[0]", "TimeToAccuracy needs arguments"),
                 id="metric-class-needs-arguments"),
    pytest.param("METRICS = [(StepTimeBreakdown(), 1)]", ("METRICS[0]", "StepTimeBreakdown", "threshold=1"),
                 id="threshold-on-breakdown"),
    pytest.param("class Custom(TestMetric):\n    def measure(self, i, o, r):\n        return 1.0\n"
                 "METRICS = [(Custom(), 0.5)]", ("METRICS[0]", "Custom", "'higher', 'lower'", "no direction"),
                 id="custom-metric-without-direction"),
    pytest.param("METRICS = {'accuracy': 90}", ("METRICS must be a list", "dict"), id="metrics-is-a-dict"),
    pytest.param("FIXED = [1]", ("FIXED must be a dict", "list"), id="fixed-is-a-list"),
    pytest.param("del METRICS", ("does not define METRICS", "FIXED, MUTABLE"), id="metrics-missing"),
    pytest.param("FIXED = {", ("syntax error", "line 8"), id="syntax-error"),
    pytest.param("raise RuntimeError('boom')", ("RuntimeError", "line 8", "boom"), id="recipe-raises"),
    pytest.param("import sys\nsys.exit(3)", ("exited while loading", "__main__", "exit status 3"),
                 id="recipe-exits-at-import"),
]


@pytest.mark.parametrize("change, needles", RECIPE_CASES)
def test_catalog_recipe_file(tmp_path, change, needles):
    cli_error(*_run(tmp_path, _recipe(tmp_path, change)), needles=needles)


# -- --set on a good recipe ------------------------------------------------------------------------
SET_CASES = [
    pytest.param("batch_size", ("key=value", "'batch_size'"), id="set-without-equals"),
    pytest.param("=5", ("needs a key", "'=5'"), id="set-empty-key"),
    pytest.param("batchsize=3", ("'batchsize'", "Did you mean 'batch_size'"), id="set-unknown-key"),
    pytest.param("epochs=10**30", ("'epochs'", "FIXED key"), id="set-fixed-key"),
    pytest.param("events=Nope", ("'events'", "not a MUTABLE key"), id="set-key-not-in-recipe"),
    pytest.param("batch_size=abc", ("'batch_size'", "'abc'"), id="set-batch-size-text"),
    pytest.param("batch_size=1e400", ("'batch_size'", "inf"), id="set-batch-size-inf"),
    pytest.param("executor=torch:weird", ("Unknown executor variant", "'torch:weird'"), id="set-unknown-variant"),
    pytest.param("optimizer_kwargs.learning_rate=nan", ("learning_rate", "'nan'"), id="set-learning-rate-nan"),
    pytest.param("optimizer_kwargs..x=1", ("keyword name", "'.x'"), id="set-dotted-key-not-a-name"),
    pytest.param("batch_size.x=1", ("dotted key", "'batch_size.x'"), id="set-dotted-key-on-non-dict"),
    pytest.param("optimizer_kwargs=5", ("'optimizer_kwargs'", "5"), id="set-kwargs-not-a-dict"),
]


@pytest.mark.parametrize("text, needles", SET_CASES)
def test_catalog_set(tmp_path, text, needles):
    cli_error(*_run(tmp_path, _recipe(tmp_path), "--set", text), needles=needles)


# -- run / compare / report arguments ----------------------------------------------------------------
def test_catalog_recipe_not_utf8(tmp_path):
    path = tmp_path / "latin1.py"
    path.write_bytes(RECIPE.encode() + b"NAME = \"caf\xe9\"\n")
    cli_error(*_run(tmp_path, path), needles=("latin1.py", "line 8", "not UTF-8", "xe9"))


def test_catalog_run_missing_recipe(tmp_path):
    cli_error(*_run(tmp_path, tmp_path / "nope.py"), needles=("does not exist", "nope.py", "digits_lenet"))


def test_catalog_run_recipe_is_a_folder(tmp_path):
    cli_error(*_run(tmp_path, tmp_path), needles=("is a folder", str(tmp_path)))


def test_catalog_run_out_is_a_file(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    cli_error("run", _recipe(tmp_path), "--out", blocker, "--progress", "none",
              needles=("is a file", "--out", "blocker"))


@pytest.mark.parametrize("flag, value", [
    pytest.param("--timeout", "-1", id="run-timeout-negative"),
    pytest.param("--timeout", "nan", id="run-timeout-nan"),
    pytest.param("--comm-timeout", "inf", id="run-comm-timeout-inf"),
])
def test_catalog_run_time_limits(tmp_path, flag, value):
    cli_error(*_run(tmp_path, _recipe(tmp_path), flag, value, "-n", "2"),
              needles=(flag, "seconds > 0", f"Received: '{value}'"))


@pytest.mark.parametrize("argv", [
    pytest.param(("infer", "model.onnx", "--max-time", "-1"), id="infer-max-time-negative"),
    pytest.param(("bench", "op", "--max-time", "nan"), id="bench-op-max-time-nan"),
])
def test_catalog_max_time(argv):
    cli_error(*argv, needles=("--max-time", "seconds > 0", f"'{argv[-1]}'"))


def test_catalog_run_ranks_without_distributed_component(tmp_path):
    cli_error(*_run(tmp_path, _recipe(tmp_path), "-n", "2"), needles=("-n 2", "'distributed'", "has none"))


def test_catalog_run_seed_negative(tmp_path):
    cli_error(*_run(tmp_path, _recipe(tmp_path), "--seed", "-1"), needles=("--seed", "'-1'"))


def test_catalog_compare_empty_framework_list(tmp_path):
    cli_error("compare", _recipe(tmp_path), "--frameworks", ",", needles=("--frameworks", "element 1 of ','", "non-empty"))


def test_catalog_compare_unknown_framework(tmp_path):
    cli_error("compare", _recipe(tmp_path), "--frameworks", "tensorflw", "--out", tmp_path / "c",
              needles=("Unknown framework", "'tensorflw'"))


def test_catalog_compare_repeats_zero(tmp_path):
    cli_error("compare", _recipe(tmp_path), "--repeats", "0", needles=("--repeats", "'0'"))


def test_catalog_report_missing_path(tmp_path):
    cli_error("report", tmp_path / "none.json", needles=("does not exist", "none.json"))


def test_catalog_report_folder_without_results(tmp_path):
    (tmp_path / "empty").mkdir()
    cli_error("report", tmp_path / "empty", needles=("holds no results.json", "empty"))


def test_catalog_report_plots_folder_is_a_file(tmp_path, results_file):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    cli_error("report", results_file, "--plots", blocker, needles=("--plots", "is a file, not a folder", "blocker"))


# -- results files ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_results(tmp_path_factory):
    """The results dict of one real run of the small recipe (reference executor, one epoch)."""
    from deep500lite.recipe import load_recipe, train_recipe
    from deep500lite.recipe.results import read_results

    folder = tmp_path_factory.mktemp("real")
    recipe = folder / "small.py"
    recipe.write_text(RECIPE)
    train_recipe(load_recipe(recipe).resolve(), out=folder / "out", environment=False)
    return read_results(folder / "out" / "results.json")


@pytest.fixture
def results_file(tmp_path, real_results):
    path = tmp_path / "good" / "results.json"
    path.parent.mkdir()
    path.write_text(json.dumps({k: v for k, v in real_results.items() if k != "_path"}))
    return path


def _damage(data: dict, change) -> dict:
    data = json.loads(json.dumps({k: v for k, v in data.items() if k != "_path"}))
    change(data)
    return data


RESULTS_CASES = [
    pytest.param(lambda d: d.clear() or d.update(format="deep500lite-results"),
                 ("lacks the section(s) version, recipe, framework, samples", "Received: the sections format"),
                 id="results-only-format"),
    pytest.param(lambda d: d.pop("samples"), ("lacks the section(s) samples",), id="results-missing-samples"),
    pytest.param(lambda d: d.update(format="mlperf"), ("not a deep500lite results file", "'mlperf'"),
                 id="results-wrong-format"),
    pytest.param(lambda d: d.update(version=7), ("version 7", "up to version 1"), id="results-newer-version"),
    pytest.param(lambda d: d.update(version="1"), ("\"version\"", "Received: version '1'"),
                 id="results-version-text"),
    pytest.param(lambda d: d.update(summaries=[]), ("field 'summaries'", "Received: []"),
                 id="results-summaries-a-list"),
    pytest.param(lambda d: d["samples"]["steps"][3].update(step_time="fast"),
                 ("field 'samples.steps[3].step_time'", "Received: 'fast'"), id="results-step-time-text"),
    pytest.param(lambda d: d["samples"]["epochs"][0].pop("train_loss"),
                 ("field 'samples.epochs[0]'", "'train_loss' is a required property"),
                 id="results-epoch-without-loss"),
    pytest.param(lambda d: d["verdicts"][0].update(direction="up"),
                 ("field 'verdicts[0].direction'", "Received: 'up'"), id="results-verdict-direction"),
    pytest.param(lambda d: d.update(passed="yes"), ("field 'passed'", "Received: 'yes'"), id="results-passed-text"),
    pytest.param(lambda d: d["summaries"].update(warmup_steps=-2), ("field 'summaries.warmup_steps'", "-2"),
                 id="results-negative-warmup"),
    pytest.param(lambda d: d["recipe"].pop("name"), ("field 'recipe'", "'name' is a required property"),
                 id="results-recipe-without-name"),
    pytest.param(lambda d: d["summaries"].update(time_to_accuracy=12),
                 ("field 'summaries.time_to_accuracy'", "Received: 12"), id="results-time-to-accuracy-number"),
]


@pytest.mark.parametrize("change, needles", RESULTS_CASES)
def test_catalog_results_file(tmp_path, real_results, change, needles):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(_damage(real_results, change)))
    cli_error("report", path, needles=("results.json", *needles))


@pytest.mark.parametrize("content, needles", [
    pytest.param(b'{"format": "deep500lite-results", "version": 1, "samples": [1,', ("not valid JSON", "truncated"),
                 id="results-truncated"),
    pytest.param(b"\xff\xfe\x00garbage", ("not UTF-8", "byte 0"), id="results-binary"),
    pytest.param(b'{"format": "deep500lite-results", "version": NaN}', ("not valid JSON", "NaN"),
                 id="results-nan-literal"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, ("not valid JSON", "nested too deeply"), id="results-deep-nesting"),
    pytest.param(b"[1, 2, 3]", ("not a deep500lite results file", "a JSON list"), id="results-a-list"),
])
def test_catalog_results_bytes(tmp_path, content, needles):
    path = tmp_path / "results.json"
    path.write_bytes(content)
    cli_error("report", path, needles=("results.json", *needles))


def test_catalog_results_damaged_among_good_names_the_damaged_one(tmp_path, results_file, real_results):
    bad = tmp_path / "bad" / "results.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps(_damage(real_results, lambda d: d.update(framework=3))))
    cli_error("report", results_file, bad, needles=(str(bad), "field 'framework'", "Received: 3"))


# -- Python API: metrics and overrides -----------------------------------------------------------------
def _api_recipe():
    fixed = {"dataset": "digits", "model": "mlp", "epochs": 1}
    mutable = {"batch_size": 32, "executor": "reference", "optimizer": "MomentumOptimizer"}
    return fixed, mutable


def test_catalog_api_custom_metric_without_direction():
    from deep500lite.metrics.base import TestMetric
    from deep500lite.recipe import resolve_recipe

    class Loudness(TestMetric):
        def measure(self, inputs, outputs, reference_outputs):
            return 1.0

    api_error(resolve_recipe, *_api_recipe(), [(Loudness(), 3)], expected=UserError,
              needles=("METRICS[0]", "Loudness", "'higher'", "'lower'", "Received: no direction"))


def test_catalog_api_override_of_unknown_key():
    from deep500lite.recipe import resolve_recipe

    api_error(resolve_recipe, *_api_recipe(), [], overrides={"optimzer": "AdamOptimizer"}, expected=UserError,
              needles=("'optimzer'", "Did you mean 'optimizer'"))


def test_catalog_api_recipe_not_a_dict():
    from deep500lite.recipe import resolve_recipe

    api_error(resolve_recipe, "digits", {}, [], expected=UserError, needles=("FIXED", "Received: str"))


def test_catalog_api_seed_negative():
    from deep500lite.recipe import resolve_recipe, train_recipe

    api_error(train_recipe, resolve_recipe(*_api_recipe(), []), -3, expected=UserError,
              needles=("seed", "Received: -3"))


def test_catalog_api_time_to_accuracy_target_above_100():
    from deep500lite.metrics.training import TimeToAccuracy

    api_error(TimeToAccuracy, 150, expected=UserError, needles=("target", "from 0 to 100", "Received: 150"))


def test_real_results_file_matches_the_schema(real_results):
    """A results file written by the current code passes the schema (read_results checks it), and the
    schema's required sections are all there."""
    from deep500lite.recipe.results_schema import REQUIRED_SECTIONS, RESULTS_SCHEMA, check_results

    check_results({k: v for k, v in real_results.items() if k != "_path"}, "real")
    assert set(REQUIRED_SECTIONS) <= set(real_results)
    assert set(RESULTS_SCHEMA["required"]) == set(REQUIRED_SECTIONS)
    assert len(real_results["samples"]["steps"]) == 14


# -- metrics ------------------------------------------------------------------------------------------
def test_catalog_metric_summarize_text():
    from deep500lite.metrics.statistics import summarize

    api_error(summarize, ["fast", "slow"], expected=UserError, needles=("summarize", "numbers", "['fast', 'slow']"))


def test_catalog_metric_error_without_reference():
    import numpy as np

    from deep500lite.metrics.accuracy import L2Error

    api_error(L2Error().measure, None, {"y": np.ones(3)}, None, expected=UserError,
              needles=("L2Error", "reference outputs", "Received: reference_outputs=None"))


def test_catalog_metric_time_to_accuracy_unknown_key():
    from deep500lite.metrics.training import TimeToAccuracy

    api_error(TimeToAccuracy, 90, key="val_accuracy", expected=UserError,
              needles=("'test_accuracy'", "Received: 'val_accuracy'"))


def test_catalog_metric_flag_not_a_bool():
    from deep500lite.metrics.training import TestAccuracy

    api_error(TestAccuracy, max_acc="yes", expected=UserError, needles=("max_acc", "Received: max_acc='yes'"))
