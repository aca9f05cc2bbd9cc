"""Executor variants (``torch:compile``, ``tensorflow:xla``, ``onnxruntime:O0``): their spelling, the
errors for unknown ones, and ``compare`` running a framework and its compiled variant side by side
with compile time apart from step time."""

from __future__ import annotations

import csv
import io

import pytest

import deep500lite as d5
from deep500lite import cli, networks, registry
from deep500lite.errors import UserError
from deep500lite.recipe.results import read_results
from deep500lite.registry import (EXECUTOR_VARIANTS, canonical_executor_spelling, canonical_framework,
                                  split_executor_spelling)

TINY = """\
from deep500lite.metrics.training import TestAccuracy
FIXED = {'dataset': 'digits', 'dataset_kwargs': dict(test_fraction=0.75), 'model': 'mlp',
         'model_kwargs': dict(hidden=(16,)), 'train_sampler': 'ShuffleSampler', 'epochs': 1}
MUTABLE = {'batch_size': 32, 'executor': 'reference', 'optimizer': 'MomentumOptimizer',
           'optimizer_kwargs': dict(learning_rate=0.1, momentum=0.9)}
METRICS = [(TestAccuracy(), 20)]
"""


def test_variant_spellings_split_into_framework_and_options():
    assert split_executor_spelling("torch:compile") == ("torch", {"compile": True})
    assert split_executor_spelling("TF:XLA") == ("tensorflow", {"jit_compile": True})
    assert split_executor_spelling("ort:o0") == ("onnxruntime", {"graph_optimization_level": "disabled"})
    assert split_executor_spelling("pytorch") == ("torch", {})
    assert canonical_executor_spelling("tf:xla") == "tensorflow:xla"
    assert canonical_executor_spelling("ort") == "onnxruntime"
    # plain names keep working; where a plain name is needed, a variant is refused, not run as eager
    assert canonical_framework("tf") == "tensorflow"
    with pytest.raises(UserError, match="'torch:compile' is an executor variant spelling"):
        canonical_framework("torch:compile")
    for spelling, (key, kwargs) in EXECUTOR_VARIANTS.items():
        assert spelling.split(":")[0] == key and key in registry.FRAMEWORKS
        assert split_executor_spelling(spelling) == (key, kwargs)
    # the table's dicts are copied, never handed out
    split_executor_spelling("torch:compile")[1]["compile"] = False
    assert EXECUTOR_VARIANTS["torch:compile"][1] == {"compile": True}


def test_unknown_variants_list_the_known_ones(tmp_path, capsys):
    with pytest.raises(UserError, match=r"Variants of torch: 'torch:compile', 'torch:max-autotune'.*"
                                        r"Received: 'torch:jit'"):
        split_executor_spelling("torch:jit")
    with pytest.raises(UserError, match="Unknown framework 'caffe'"):
        split_executor_spelling("caffe:fast")
    recipe = tmp_path / "tiny.py"
    recipe.write_text(TINY)
    assert cli.main(["compare", str(recipe), "--frameworks", "torch,onnxruntime:O7"]) == 2
    assert "Unknown executor variant 'onnxruntime:O7'" in capsys.readouterr().err


@pytest.mark.requires("onnxruntime")
def test_d5_executor_takes_a_variant_and_explicit_options_win():
    net, _, _ = networks.create_model("mlp", 2, classes=3, shape=(4,), seed=0, hidden=(5,))
    assert d5.executor(net, "onnxruntime:O0").options["graph_optimization_level"] == "disabled"
    ex = d5.executor(net, "ort:O0", graph_optimization_level="basic")
    assert ex.options["graph_optimization_level"] == "basic"


@pytest.mark.requires("torch")
def test_compare_eager_and_compiled_torch_side_by_side(tmp_path, capsys, monkeypatch):
    recipe = tmp_path / "tiny.py"
    recipe.write_text(TINY)
    out = tmp_path / "cmp"
    # A framework that is not installed stops the comparison before anything runs, named with its extra.
    available = registry.is_framework_available
    monkeypatch.setattr(registry, "is_framework_available", lambda name: name != "jax" and available(name))
    code = cli.main(["compare", str(recipe), "--frameworks", "torch,torch:compile,jax", "--out", str(out),
                     "--format", "csv", "--no-plots"])
    captured = capsys.readouterr()
    assert code == 2 and "jax (framework 'jax') for --frameworks (pip install 'deep500lite[jax]')" in captured.err
    assert not out.exists()
    monkeypatch.undo()
    code = cli.main(["compare", str(recipe), "--frameworks", "torch,torch:compile", "--out", str(out),
                     "--format", "csv", "--no-plots"])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    assert "compiling the training function (torch" in captured.out  # the compiled child says so, with its time
    table = captured.out[captured.out.index("framework,runs"):].split("\n\n")[0]
    rows = {r["framework"]: r for r in csv.DictReader(io.StringIO(table))}
    assert set(rows) == {"torch", "torch:compile"}
    eager, compiled = read_results(out / "torch" / "results.json"), read_results(out / "torch-compile" / "results.json")
    assert eager["executor_variant"] == "torch" and compiled["executor_variant"] == "torch:compile"
    assert compiled["framework"] == "torch"
    assert eager["executor_options"] == {"compile": False}
    assert compiled["executor_options"] == {"compile": True, "compile_mode": "default"}
    assert eager["compile_seconds"] == 0.0 and compiled["compile_seconds"] > 0.0
    assert float(rows["torch"]["compile (s)"]) == 0.0
    assert float(rows["torch:compile"]["compile (s)"]) == pytest.approx(compiled["compile_seconds"])
    # The first step compiled (seconds with inductor's cache cold, a tenth of one warm); its step time leaves that out.
    first = compiled["samples"]["steps"][0]
    assert first["compile_time"] > 0 and first["step_time"] > 0
    assert first["compile_time"] <= compiled["compile_seconds"] + 1e-9  # a part of the run's compile time, apart
    assert all(s["compile_time"] == 0.0 for s in eager["samples"]["steps"])
    # Both agree: the same first-step differences from the reference, the same accuracy.
    assert compiled["divergence"]["gradients"] < 1e-4 and compiled["divergence"]["outputs"] < 1e-4
    acc = [r["summaries"]["final_test_accuracy"] for r in (eager, compiled)]
    assert abs(acc[0] - acc[1]) <= 0.5, acc
