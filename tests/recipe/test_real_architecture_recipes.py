"""The bundled real-architecture recipes (ResNet-50, MobileNetV2, BERT on synthetic data) resolve with
the documented sizes and run end to end with tiny sizes set from the command line."""

from __future__ import annotations

import json

import pytest

from deep500lite import networks
from deep500lite.recipe import load_recipe

from support import run_cli

RECIPES = ["synthetic_resnet50", "synthetic_mobilenet_v2", "synthetic_bert"]


def test_recipes_are_bundled_and_build_the_real_architectures():
    sizes = {}
    for name in RECIPES:
        config = load_recipe(name).resolve().config
        kwargs = config["dataset_kwargs"]
        shape = kwargs.get("shape") or (kwargs["seq_len"],)
        sizes[name] = networks.model_parameter_count(config["model"], classes=kwargs["classes"], shape=shape,
                                                     **config["model_kwargs"])
    # ResNet-50 and MobileNetV2 1.0 with a 10-class head: torchvision's 25,557,032 and 3,504,872
    # less the 1000-class head plus the 10-class one.
    assert sizes["synthetic_resnet50"] == 25_557_032 - 2049 * 1000 + 2049 * 10
    assert sizes["synthetic_mobilenet_v2"] == 3_504_872 - 1281 * 1000 + 1281 * 10
    # BERT-base's embeddings and width, 2 of its 12 layers: 23,837,184 + 2 * 7,087,872, the pooler, 2 classes.
    assert sizes["synthetic_bert"] == 23_837_184 + 2 * 7_087_872 + 768 * 769 + 768 * 2 + 2


@pytest.mark.requires("onnxruntime")
@pytest.mark.parametrize("name,sets", [
    ("synthetic_resnet50", ["dataset_kwargs.train_size=4", "batch_size=2"]),
    ("synthetic_mobilenet_v2", ["dataset_kwargs.train_size=4", "batch_size=2", "model_kwargs.width=0.25"]),
    ("synthetic_bert", ["dataset_kwargs.train_size=4", "dataset_kwargs.seq_len=8", "dataset_kwargs.vocab_size=100",
                        "model_kwargs.vocab_size=100", "model_kwargs.hidden=32", "model_kwargs.heads=4",
                        "model_kwargs.intermediate=64", "batch_size=2"]),
])
def test_recipe_runs_end_to_end_with_tiny_sizes(name, sets, tmp_path):
    args = [a for s in ["executor=onnxruntime", *sets] for a in ("--set", s)]
    proc = run_cli("run", name, *args, "--out", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["passed"] and results["error"] is None
    assert results["framework"] == "onnxruntime" and results["components"]["steps_per_epoch"] == 2
    steps = results["samples"]["steps"]
    assert len(steps) == 2 and all(s["step_time"] > 0 and s["loss"] > 0 for s in steps)
    assert "Throughput:" in proc.stdout and "StepTimeBreakdown:" in proc.stdout
