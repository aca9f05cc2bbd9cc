"""Recipes: Deep500's semantics (fixed + mutable + acceptable metrics), component resolution,
thresholds and directions, seeds and determinism, results files and MLPerf log lines."""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import subprocess

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import datasets, networks
from deep500lite.errors import UserError
from deep500lite.frameworks import reference as d5ref
from deep500lite.frameworks.reference.transforms import RandomHorizontalFlip
from deep500lite.metrics.training import PeakMemory, TestAccuracy, TimeToAccuracy, TrainingAccuracy
from deep500lite.recipe import (check_determinism, first_step_divergence, load_recipe, resolve_recipe, run_recipe,
                                train_recipe)
from deep500lite.recipe.results import read_results

from support import framework_params

ISSUE_EXAMPLE = """\
import deep500lite as d5
from deep500lite.frameworks import reference as d5ref

FIXED = {'dataset': 'digits', 'model': 'lenet', 'train_sampler': d5.ShuffleSampler,
         'train_sampler_kwargs': dict(seed=3), 'epochs': 8}
MUTABLE = {'batch_size': 64, 'executor': 'torch', 'optimizer': d5ref.MomentumOptimizer,
           'optimizer_kwargs': dict(learning_rate=0.05, momentum=0.9)}
METRICS = [(d5.TestAccuracy(), 90)]

if __name__ == '__main__':
    d5.run_recipe(FIXED, MUTABLE, METRICS) or exit(1)
"""


@pytest.fixture
def exports(monkeypatch):
    """d5.run_recipe and d5.TestAccuracy as the package will export them (no-op once it does)."""
    monkeypatch.setattr(d5, "run_recipe", getattr(d5, "run_recipe", run_recipe), raising=False)
    monkeypatch.setattr(d5, "TestAccuracy", getattr(d5, "TestAccuracy", TestAccuracy), raising=False)


def tiny(threshold=10, executor="reference", **changes):
    """A small digits + MLP recipe (449 training images, 1 epoch of 14 steps)."""
    fixed = {"dataset": "digits", "dataset_kwargs": dict(test_fraction=0.75), "model": "mlp",
             "model_kwargs": dict(hidden=(16,)), "train_sampler": "ShuffleSampler", "epochs": 1}
    mutable = {"batch_size": 32, "executor": executor, "optimizer": "MomentumOptimizer",
               "optimizer_kwargs": dict(learning_rate=0.1, momentum=0.9)}
    for k, v in changes.items():
        (fixed if k in fixed else mutable)[k] = v
    return fixed, mutable, [(TestAccuracy(), threshold)]


def _test_accuracy_numpy(executor, output_node, test_set):
    """Accuracy (percent) of the executor's current parameters on the whole test set, by numpy argmax."""
    bs = executor.network.input_descriptors()["input"].shape[0]
    correct = 0
    for i in range(0, len(test_set), bs):
        x, y = test_set.data[i:i + bs], test_set.labels[i:i + bs]
        n = len(x)
        feed_y = y
        if n < bs:
            x = np.concatenate([x, np.repeat(x[-1:], bs - n, axis=0)])
            feed_y = np.concatenate([y, np.repeat(y[-1:], bs - n)])
        logits = executor.inference({"input": x, "label": feed_y})[output_node][:n]
        correct += int(np.sum(np.argmax(logits, axis=1) == y))
    return 100.0 * correct / len(test_set)


class _Probe:
    """An event keeping the trainer's executor and the test accuracy computed with numpy after training."""

    def after_training(self, trainer, stats):
        self.accuracy = _test_accuracy_numpy(trainer.executor, trainer.network_output,
                                             trainer.validation_sampler.dataset)


# ------------------------------------------------------------------------------ Deep500 semantics
@pytest.mark.requires("torch")
def test_issue_example_runs_after_changing_imports(tmp_path, exports):
    path = tmp_path / "example.py"
    path.write_text(ISSUE_EXAMPLE.replace("'epochs': 8", "'epochs': 1"))
    recipe = load_recipe(path)  # the __main__ block must not run here (it would train)
    assert recipe.fixed["epochs"] == 1 and recipe.mutable["executor"] == "torch"
    # One epoch reaches about 65%: below the example's 90%, above 50%.
    assert d5.run_recipe(recipe.fixed, recipe.mutable, recipe.metrics, verbose=False) is False
    assert d5.run_recipe(recipe.fixed, recipe.mutable, [(d5.TestAccuracy(), 50)], verbose=False) is True


@pytest.mark.requires("torch")
def test_deep500_tutorial_recipe_ports(tmp_path):
    """The Deep500 tutorial's recipe (its key spellings, a framework's from_model and native optimizer
    with positional arguments), on digits instead of CIFAR-10 so that it needs no download."""
    import deep500lite.frameworks.torch as d5fw

    fixed = {'model': 'mlp', 'model_kwarg': dict(hidden=(16,)), 'dataset': 'digits',
             'dataset_kwarg': dict(test_fraction=0.75), 'train_sampler': d5.ShuffleSampler, 'epochs': 1}
    mutable = {'batch_size': 64, 'executor': d5fw.from_model, 'executor_kwarg': dict(device=d5.CPUDevice()),
               'optimizer': d5fw.MomentumOptimizer, 'optimizer_args': (0.1, 0.9)}
    run = train_recipe(resolve_recipe(fixed, mutable, [(TestAccuracy(), 10.0)]), environment=False)
    assert run.passed
    comp = run.results["components"]
    assert comp["executor"] == "deep500lite.frameworks.torch.executor.TorchExecutor"
    assert comp["optimizer"] == "deep500lite.frameworks.torch.optimizers.MomentumOptimizer"
    assert run.results["recipe"]["config"]["executor"] == "deep500lite.frameworks.torch.executor.from_model"
    assert run.results["seeds"]["executor"] == 0  # from_model declares seed, so the run seed reached it


def test_measured_accuracy_matches_numpy(tmp_path):
    fixed, mutable, metrics = tiny()
    probe = _Probe()
    run = train_recipe(resolve_recipe(fixed, mutable, metrics), events=[probe], out=tmp_path)
    assert run.values[0] == pytest.approx(probe.accuracy, abs=1e-9)
    assert read_results(tmp_path / "results.json")["summaries"]["final_test_accuracy"] == pytest.approx(probe.accuracy)


def test_caller_objects_are_not_modified():
    transform = RandomHorizontalFlip(seed=4)
    generator_state = copy.deepcopy(transform.random.bit_generator.state)
    fixed = {"dataset": "digits", "dataset_kwargs": {"test_fraction": 0.75}, "model": "mlp",
             "model_kwargs": {"hidden": [16]}, "train_sampler": d5.ShuffleSampler,
             "train_sampler_kwargs": {"transformations": [transform]}, "epochs": 1}
    mutable = {"batch_size": 32, "executor": "reference", "optimizer": d5ref.MomentumOptimizer,
               "optimizer_args": [0.1], "optimizer_kwargs": {"momentum": 0.9}, "events": []}
    metric = TestAccuracy()
    metrics = [(metric, 10)]
    before = (copy.deepcopy(fixed), copy.deepcopy(mutable))
    lists = (fixed["train_sampler_kwargs"]["transformations"], mutable["events"], mutable["optimizer_args"])
    assert run_recipe(fixed, mutable, metrics, seed=5, verbose=False, events=[])
    for given, saved in zip((fixed, mutable), before):
        assert given.keys() == saved.keys()
        for k in given:
            if k not in ("train_sampler_kwargs",):
                assert given[k] == saved[k], k
    assert fixed["train_sampler_kwargs"]["transformations"] == [transform]
    assert transform.random.bit_generator.state == generator_state  # the run flipped with its own copy
    now = (fixed["train_sampler_kwargs"]["transformations"], mutable["events"], mutable["optimizer_args"])
    assert all(a is b for a, b in zip(now, lists))
    assert mutable["events"] == [] and mutable["optimizer_args"] == [0.1]
    assert metrics == [(metric, 10)] and metric.samples == []  # each run measures with its own copy


def test_fixed_and_mutable_keys_never_overlap():
    fixed, mutable, metrics = tiny()
    mutable["epochs"] = 2
    with pytest.raises(UserError, match="'epochs' is in both FIXED and MUTABLE"):
        resolve_recipe(fixed, mutable, metrics)
    fixed["model_kwarg"] = {"hidden": (8,)}  # Deep500's singular spelling is the same key as model_kwargs
    del mutable["epochs"]
    with pytest.raises(UserError, match="sets 'model_kwargs' twice"):
        resolve_recipe(fixed, mutable, metrics)


def test_unknown_and_missing_keys():
    fixed, mutable, metrics = tiny()
    mutable["optimiser"] = mutable.pop("optimizer")
    with pytest.raises(UserError, match="unknown key 'optimiser'.*Did you mean 'optimizer'"):
        resolve_recipe(fixed, mutable, metrics)
    mutable["optimizer"] = mutable.pop("optimiser")
    del fixed["epochs"]
    with pytest.raises(UserError, match="does not set 'epochs'"):
        resolve_recipe(fixed, mutable, metrics)


def test_deep500_singular_kwarg_spelling_builds_the_model(tmp_path):
    fixed, mutable, metrics = tiny()
    fixed["model_kwarg"] = fixed.pop("model_kwargs")
    fixed["model_kwarg"]["hidden"] = (12,)
    run = train_recipe(resolve_recipe(fixed, mutable, metrics))
    assert run.results["components"]["parameters"] == 64 * 12 + 12 + 12 * 10 + 10


def test_overrides_change_only_mutable_keys():
    fixed, mutable, metrics = tiny()
    r = resolve_recipe(fixed, mutable, metrics, overrides={"batch_size": 16, "optimizer_kwargs.learning_rate": 0.5})
    assert r.config["batch_size"] == 16
    assert r.config["optimizer_kwargs"] == {"learning_rate": 0.5, "momentum": 0.9}
    assert mutable["optimizer_kwargs"] == {"learning_rate": 0.1, "momentum": 0.9}
    with pytest.raises(UserError, match="'epochs' is a FIXED key"):
        resolve_recipe(fixed, mutable, metrics, overrides={"epochs": 3})
    with pytest.raises(UserError, match="'dataset_kwargs' is a FIXED key"):
        resolve_recipe(fixed, mutable, metrics, overrides={"dataset_kwargs.seed": 3})
    with pytest.raises(UserError, match="'events' is not a MUTABLE key"):
        resolve_recipe(fixed, mutable, metrics, overrides={"events": []})


# ------------------------------------------------------------------------------ acceptable metrics
def test_accuracy_thresholds_are_percent_or_fractions():
    fixed, mutable, _ = tiny()
    r = resolve_recipe(fixed, mutable, [(TestAccuracy(), 90), (TestAccuracy(), 0.9), (TrainingAccuracy(), 1)])
    assert [m.required for m in r.metrics] == [90.0, 90.0, 100.0]
    assert all(m.direction == "higher" for m in r.metrics)
    with pytest.raises(UserError, match="percentage, so its threshold must be from 0 to 100"):
        resolve_recipe(fixed, mutable, [(TestAccuracy(), 150)])


def test_directions_default_to_the_metric_and_can_be_stated():
    fixed, mutable, _ = tiny()
    r = resolve_recipe(fixed, mutable, [(TimeToAccuracy(50), 60), (PeakMemory(), 2**40), (TestAccuracy(), 50, "lower"),
                                        (PeakMemory(), 1, ">="), PeakMemory()])
    assert [m.direction for m in r.metrics] == ["lower", "lower", "lower", "higher", "lower"]
    assert r.metrics[-1].required is None
    with pytest.raises(UserError, match="direction must be 'higher' or 'lower'"):
        resolve_recipe(fixed, mutable, [(TestAccuracy(), 50, "up")])
    with pytest.raises(UserError, match="must be a d5.TestMetric"):
        resolve_recipe(fixed, mutable, [("accuracy", 50)])
    with pytest.raises(UserError, match="threshold must be a finite number"):
        resolve_recipe(fixed, mutable, [(TestAccuracy(), "90")])


def test_verdicts_follow_the_direction():
    fixed, mutable, _ = tiny()
    metrics = [(PeakMemory(), 1), (PeakMemory(), 2**50), (PeakMemory(), 1, "higher"), (TestAccuracy(), 100),
               (TimeToAccuracy(99.9), 1e9)]
    run = train_recipe(resolve_recipe(fixed, mutable, metrics), environment=False)
    passed = [v.passed for v in run.verdicts]
    # Peak memory is far above 1 byte and far below 1 PiB; 100% accuracy is out of reach after one
    # epoch and so is 99.9% within any time.
    assert passed == [False, True, True, False, False]
    assert run.passed is False
    assert run.verdicts[4].note == "never reached" and run.verdicts[4].measured is None
    line = run.verdicts[0].line()
    assert "required <= 1 bytes (lower is better): FAIL" in line and line.startswith("PeakMemory: measured ")


# ------------------------------------------------------------------------------ components
def test_component_names_resolve(tmp_path):
    fixed, mutable, metrics = tiny()
    fixed["validation_sampler"] = "OrderedSampler"
    fixed["validation_sampler_kwargs"] = {"drop_last_batch": False}
    mutable["optimizer"] = "native.GradientDescent"  # the reference executor's "native" optimizers are the numpy ones
    mutable["optimizer_kwargs"] = {"learning_rate": 0.1}
    run = train_recipe(resolve_recipe(fixed, mutable, metrics), environment=False)
    comp = run.results["components"]
    assert comp["train_sampler"] == "deep500lite.lv2.sampler.ShuffleSampler"
    assert comp["validation_sampler"] == "deep500lite.lv2.sampler.OrderedSampler"
    assert comp["optimizer"] == "deep500lite.frameworks.reference.optimizers.GradientDescent"
    assert run.results["summaries"]["epochs_done"] == 1


@pytest.mark.parametrize("value, message", [
    ("BogusSampler", "Unknown sampler 'BogusSampler'.*'ShuffleSampler'"),
])
def test_unknown_sampler(value, message):
    fixed, mutable, metrics = tiny(train_sampler=value)
    with pytest.raises(UserError, match=message):
        train_recipe(resolve_recipe(fixed, mutable, metrics), environment=False)


@pytest.mark.parametrize("value, message", [
    ("Adam", "Unknown optimizer 'Adam'.*'AdamOptimizer'"),
    ("reference.Bogus", "Framework 'reference' has no native optimizer 'Bogus'"),
])
def test_unknown_optimizer(value, message):
    fixed, mutable, metrics = tiny(optimizer=value)
    with pytest.raises(UserError, match=message):
        train_recipe(resolve_recipe(fixed, mutable, metrics), environment=False)


def test_unknown_framework_and_dataset():
    fixed, mutable, metrics = tiny(executor="caffe")
    with pytest.raises(UserError, match="Unknown framework 'caffe'"):
        train_recipe(resolve_recipe(fixed, mutable, metrics), environment=False)
    fixed, mutable, metrics = tiny(dataset="imagenette")
    with pytest.raises(UserError, match="Unknown dataset 'imagenette'"):
        train_recipe(resolve_recipe(fixed, mutable, metrics), environment=False)


def test_missing_dataset_files_name_the_path(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    fixed, mutable, metrics = tiny(dataset="mnist")
    del fixed["dataset_kwargs"]
    with pytest.raises(datasets.MissingDatasetError, match=str(tmp_path / "mnist" / "train-images-idx3-ubyte")):
        train_recipe(resolve_recipe(fixed, mutable, metrics), environment=False)


def test_callables_build_components():
    def my_data(input_node, label_node, n=300):
        train, test = datasets.load_dataset("digits", input_node, label_node)
        return (d5.NumpyDataset(train.data[:n], input_node, train.labels[:n], label_node),
                d5.NumpyDataset(test.data[:100], input_node, test.labels[:100], label_node))

    def my_model(batch_size, classes, shape, seed):
        return networks.create_model("mlp", batch_size, classes=classes, shape=shape, seed=seed, hidden=(8,))

    fixed = {"dataset": my_data, "dataset_kwargs": {"n": 64}, "model": my_model, "epochs": 1,
             "events": [TrainingEventCounter]}
    mutable = {"batch_size": 16, "executor": d5ref.from_model, "optimizer": d5ref.GradientDescent,
               "optimizer_args": (0.1,)}
    run = train_recipe(resolve_recipe(fixed, mutable, [(TestAccuracy(), None)]), environment=False)
    assert run.results["components"]["train_samples"] == 64 and run.results["components"]["test_samples"] == 100
    assert run.results["components"]["parameters"] == 64 * 8 + 8 + 8 * 10 + 10
    assert run.results["recipe"]["config"]["dataset"].endswith("test_callables_build_components.<locals>.my_data")
    assert len(run.stats.steps) == 4
    assert run.verdicts[0].passed is None and run.passed


class TrainingEventCounter:
    """A recipe event given as a class (built by the recipe)."""

    def __init__(self):
        self.steps = 0

    def after_training_batch(self, trainer, stats, batch, outputs):
        self.steps += 1


def test_reference_optimizer_trains_on_every_executor(framework):
    fixed, mutable, metrics = tiny(executor=framework)
    run = train_recipe(resolve_recipe(fixed, mutable, metrics), environment=False)
    assert run.results["framework"] == framework
    losses = [s["loss"] for s in run.stats.steps]
    assert np.mean(losses[-4:]) < np.mean(losses[:4])
    assert run.results["seeds"]["executor"] == 0


def test_nonfinite_loss_fails_and_keeps_results(tmp_path):
    fixed, mutable, metrics = tiny()
    mutable["optimizer_kwargs"] = dict(learning_rate=0.1, momentum=0.9, gradient_modifier=_nan_gradient)
    run = train_recipe(resolve_recipe(fixed, mutable, metrics), out=tmp_path, environment=False)
    assert run.passed is False and "is nan" in run.error
    saved = read_results(tmp_path / "results.json")
    assert saved["error"] == run.error and len(saved["samples"]["steps"]) == 2  # step 0 fine, step 1 NaN
    assert saved["samples"]["steps"][1]["loss"] is None  # NaN written as null


def _nan_gradient(name, param, grad):
    return grad * np.nan


# ------------------------------------------------------------------------------ seeds, determinism
@pytest.mark.parametrize("framework", framework_params(["reference", "torch"]))
def test_same_seed_same_accuracy_curve(framework):
    fixed, mutable, metrics = tiny(executor=framework)
    fixed["epochs"] = 2
    resolved = resolve_recipe(fixed, mutable, metrics)
    a, b, c = (train_recipe(resolved, seed, environment=False) for seed in (7, 7, 8))
    curve = lambda run: [e["test_accuracy"] for e in run.stats.epochs]  # noqa: E731
    losses = lambda run: [s["loss"] for s in run.stats.steps]  # noqa: E731
    assert curve(a) == curve(b) and losses(a) == losses(b)
    assert losses(a) != losses(c)  # the seed reaches the weights and the sampler
    assert a.results["seeds"] == {"run": 7, "model": 7, "executor": 7, "train_sampler": 7, "validation_sampler": 8}


def test_recipe_seeds_win_over_the_run_seed():
    fixed, mutable, metrics = tiny(train_sampler_kwargs={"seed": 3}, model_kwargs={"hidden": (16,), "seed": 11})
    run = train_recipe(resolve_recipe(fixed, mutable, metrics), 5, environment=False)
    assert run.results["seeds"]["train_sampler"] == 3 and run.results["seeds"]["model"] == 11
    assert run.results["seeds"]["executor"] == 5


def test_check_determinism_on_reference():
    fixed, mutable, metrics = tiny()
    report = check_determinism(resolve_recipe(fixed, mutable, metrics), 1)
    assert report.identical and report.first_divergence is None and report.steps == 14
    assert report.accuracy_a == report.accuracy_b and "deterministic" in report.describe()


class _NoisyGradientDescent(d5ref.GradientDescent):
    """Gradient descent with unseeded noise in its update: not reproducible."""

    def update_rule(self, grad, old_param, param_name):
        return old_param - self.learning_rate * grad + np.random.default_rng().normal(0, 1e-3, grad.shape)


def test_check_determinism_finds_the_first_difference():
    fixed, mutable, metrics = tiny(optimizer=_NoisyGradientDescent)
    mutable["optimizer_kwargs"] = {"learning_rate": 0.1}
    report = check_determinism(resolve_recipe(fixed, mutable, metrics), 1)
    assert not report.identical
    # Step 0's loss comes before the first update, so the runs agree on it; the noisy update makes
    # the parameters differ right after it.
    assert report.first_divergence["global_step"] == 0 and report.first_divergence["what"] == "parameters"
    assert "diverge first at global step 0" in report.describe()


# ------------------------------------------------------------------------------ divergence
@pytest.mark.requires("torch")
def test_first_step_divergence_matches_a_direct_computation():
    fixed, mutable, metrics = tiny(executor="torch", model="lenet")
    fixed.pop("model_kwargs")
    got = first_step_divergence(resolve_recipe(fixed, mutable, metrics), seed=2)
    # The same computation written out: same weights (seed 2), the first batch of the seeded sampler.
    train, _ = datasets.load_dataset("digits", "input", "label", test_fraction=0.75)
    batch = next(iter(d5.ShuffleSampler(train, 32, seed=2)))
    runs = []
    for fw in ("torch", "reference"):
        net, _, out = networks.create_model("lenet", 32, classes=10, shape=(1, 8, 8), seed=2)
        net.add_operation(datasets.dataset_loss("digits")([out, "label"], "loss"))
        ex = d5.executor(net, fw)
        outputs = ex.inference_and_backprop(batch, "loss")
        grads = net.fetch_tensors([g for _, g in net.gradient("loss")])
        runs.append((outputs, grads))
    (oa, ga), (ob, gb) = runs
    diffs_out = [np.max(np.abs(np.asarray(oa[k], np.float64) - ob[k])) for k in ob]
    diffs_grad = [np.max(np.abs(a.astype(np.float64) - b)) for a, b in zip(ga, gb)]
    assert got["outputs"] == pytest.approx(max(diffs_out), rel=1e-12, abs=0)
    assert got["gradients"] == pytest.approx(max(diffs_grad), rel=1e-12, abs=0)
    assert got["gradients"] < 1e-4 and got["gradients_compared"] == len(gb)


def test_divergence_of_the_reference_is_zero_by_definition():
    fixed, mutable, metrics = tiny()
    got = first_step_divergence(resolve_recipe(fixed, mutable, metrics))
    assert got["is_reference"] and got["outputs"] == 0.0 and got["gradients"] == 0.0


# ------------------------------------------------------------------------------ results and logs
def test_results_file_holds_samples_summaries_and_environment(tmp_path):
    folder = tmp_path / "recipes"
    folder.mkdir()
    fixed, mutable, metrics = tiny()
    path = folder / "tiny.py"
    path.write_text("from deep500lite.metrics.training import TestAccuracy\n"
                    f"FIXED = {fixed!r}\nMUTABLE = {mutable!r}\nMETRICS = [(TestAccuracy(), 10)]\n")
    git = shutil.which("git")
    if git:
        env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
                   GIT_COMMITTER_EMAIL="t@t")
        for cmd in (["init", "-q"], ["add", "tiny.py"], ["commit", "-q", "-m", "recipe"]):
            subprocess.run([git, "-C", str(folder), *cmd], check=True, env=env, capture_output=True)
        head = subprocess.run([git, "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    run = train_recipe(load_recipe(path).resolve(), 3, out=tmp_path / "out")
    data = read_results(tmp_path / "out" / "results.json")
    assert data["format"] == "deep500lite-results" and data["passed"] is True
    steps = data["samples"]["steps"]
    assert len(steps) == 14 and len(data["samples"]["epochs"]) == 1
    after_warmup = [s["step_time"] for s in steps[1:]]
    assert data["summaries"]["step_time"]["median"] == pytest.approx(float(np.median(after_warmup)))
    assert data["summaries"]["step_time"]["n"] == 13
    assert data["recipe"]["config"]["optimizer"] == "MomentumOptimizer"
    assert data["recipe"]["sha256"] == __import__("hashlib").sha256(path.read_bytes()).hexdigest()
    assert data["verdicts"][0]["passed"] is True and data["verdicts"][0]["required"] == 10.0
    env = data["environment"]
    for key in ("packages", "frameworks", "cpu", "gpus", "threads", "mpi_library", "runtime_threads"):
        assert key in env
    assert env["cpu"]["model"] and env["packages"]["numpy"] == np.__version__
    if git:
        assert env["recipe_git_commit"] == head.strip()
    assert data["seeds"]["run"] == 3
    assert run.results_path == str(tmp_path / "out" / "results.json")
    assert (tmp_path / "out" / "steps.csv").read_text().count("\n") == 15


def test_mllog_lines(tmp_path):
    fixed, mutable, metrics = tiny()
    fixed["epochs"] = 2
    log = tmp_path / "run.log"
    run = train_recipe(resolve_recipe(fixed, mutable, metrics), mllog=log, environment=False)
    lines = log.read_text().splitlines()
    assert all(line.startswith(":::MLLOG {") for line in lines)
    records = [json.loads(line[len(":::MLLOG "):]) for line in lines]
    keys = [r["key"] for r in records]
    assert keys.index("run_start") < keys.index("epoch_start") and keys[-1] == "run_stop"
    assert keys.count("epoch_start") == keys.count("epoch_stop") == 2
    evals = [r for r in records if r["key"] == "eval_accuracy"]
    assert [r["metadata"]["epoch_num"] for r in evals] == [1, 2]
    assert [r["value"] for r in evals] == pytest.approx([e["test_accuracy"] / 100 for e in run.stats.epochs])
    assert records[-1]["metadata"]["status"] == ("success" if run.passed else "aborted")
    assert [r["time_ms"] for r in records] == sorted(r["time_ms"] for r in records)
    assert next(r for r in records if r["key"] == "global_batch_size")["value"] == 32


def test_bundled_recipes_resolve():
    for name in ("digits_lenet", "mnist_lenet", "cifar10_resnet20", "synthetic_throughput"):
        recipe = load_recipe(name)
        resolved = recipe.resolve()
        assert "executor" in resolved.mutable_keys, name
        assert recipe.path.endswith(f"{name}.py") and recipe.__class__.__name__ == "Recipe"
    cifar = load_recipe("cifar10_resnet20").resolve()
    transforms = cifar.config["train_sampler_kwargs"]["transformations"]
    assert [type(t).__name__ for t in transforms] == ["RandomCrop", "RandomHorizontalFlip", "Normalize"]
    assert transforms[0].padding == (4, 4) and transforms[0].size == (32, 32)
    assert math.isclose(load_recipe("digits_lenet").resolve().metrics[0].required, 90.0)


def test_the_package_keeps_every_public_name_of_the_old_module():
    import deep500lite.recipe as recipe

    for name in ("run_recipe", "train_recipe", "resolve_recipe", "load_recipe", "parse_set", "check_determinism",
                 "first_step_divergence", "Recipe", "ResolvedRecipe", "AcceptableMetric", "Verdict", "RecipeRun",
                 "DeterminismReport", "EpochLines", "metric_name", "RECIPE_KEYS", "COMPONENT_KEYS", "REQUIRED_KEYS",
                 "COMMUNICATORS"):
        assert name in recipe.__all__ and getattr(recipe, name) is not None, name
    assert d5.run_recipe is recipe.run_recipe and d5.load_recipe is recipe.load_recipe


def test_nothing_outside_the_cli_starts_or_imports_the_cli():
    """compare and run -n start the recipe worker; only deep500lite/cli (and ``python -m deep500lite``) reach the CLI."""
    import ast

    import deep500lite.frameworks
    import deep500lite.metrics

    core = os.path.dirname(os.path.abspath(d5.__file__))
    roots = [core, *deep500lite.frameworks.__path__, *deep500lite.metrics.__path__]
    found = []
    for root in roots:
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != "__pycache__" and os.path.join(folder, d) != os.path.join(core, "cli")]
            for name in files:
                path = os.path.join(folder, name)
                if not name.endswith(".py") or path == os.path.join(core, "__main__.py"):
                    continue
                tree = ast.parse(open(path, encoding="utf-8").read())
                docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
                for node in ast.walk(tree):
                    if isinstance(node, ast.ImportFrom):
                        names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                    elif isinstance(node, ast.Import):
                        names = [a.name for a in node.names]
                    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                        names = [node.value]
                    else:
                        continue
                    if any("deep500lite.cli" in n for n in names):
                        found.append(f"{path}:{node.lineno}")
    assert found == []
