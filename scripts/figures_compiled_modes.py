"""Eager against compiled executors on LeNet (1x28x28) or ResNet-20 (3x32x32), batch 64: the figures
in docs/performance.md.

Run one executor spelling per process (frameworks' thread pools in one process slow each other):

    for s in torch torch:compile tensorflow tensorflow:xla onnxruntime:O0 onnxruntime jax; do
        .venv/bin/python scripts/figures_compiled_modes.py $s; done
    python scripts/figures_compiled_modes.py jax --device gpu:0 --model resnet20   # on a GPU

Each prints one JSON line: the compile time of the first inference and of the first training
step (``executor.compile_seconds``), then the median and 95% CI of 100 inference calls and 50
``inference_and_backprop`` calls, timed after three warm-up calls of each, in 10 interleaved rounds.
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

import deep500lite as d5  # noqa: E402
from deep500lite import datasets, networks  # noqa: E402
from deep500lite.metrics.statistics import summarize  # noqa: E402


def main(spelling: str, rounds: int = 10, device: str = "cpu", model: str = "lenet") -> dict:
    batch = 64
    name, shape, options = ("lenet", (1, 28, 28), {}) if model == "lenet" else ("resnet", (3, 32, 32), {"depth": 20})
    net, inp, out = networks.create_model(name, batch, classes=10, shape=shape, seed=0, **options)
    net.add_operation(datasets.SoftmaxCrossEntropy()([out, "label"], "loss"))
    rng = np.random.default_rng(0)
    feeds = {inp: rng.standard_normal((batch, *shape)).astype(np.float32),
             "label": rng.integers(0, 10, batch).astype(np.int64)}
    ex = d5.executor(net, spelling, device=device)
    ex.inference(feeds)
    compile_inference = ex.compile_seconds
    ex.inference_and_backprop(feeds)
    compile_training = ex.compile_seconds - compile_inference
    for _ in range(3):
        ex.inference(feeds)
        ex.inference_and_backprop(feeds)
    warm = ex.compile_seconds
    inference, training = [], []
    for _ in range(rounds):
        for _ in range(10):
            t = time.perf_counter()
            ex.inference(feeds)
            inference.append(time.perf_counter() - t)
        for _ in range(5):
            t = time.perf_counter()
            ex.inference_and_backprop(feeds)
            training.append(time.perf_counter() - t)
    assert ex.compile_seconds == warm, "recompiled while timing"
    a, b = summarize(inference), summarize(training)
    return {"executor": spelling, "model": model, "device": device, "options": ex.options, "compile_inference_s": compile_inference,
            "compile_training_s": compile_training,
            "inference_ms": [a.median * 1e3, a.ci_low * 1e3, a.ci_high * 1e3, a.n],
            "training_ms": [b.median * 1e3, b.ci_low * 1e3, b.ci_high * 1e3, b.n]}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("spelling", help="an executor spelling: torch, torch:compile, jax, tensorflow:xla, ...")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds of 10 inference + 5 training calls")
    parser.add_argument("--device", default="cpu", help="cpu or gpu:N")
    parser.add_argument("--model", default="lenet", choices=("lenet", "resnet20"))
    args = parser.parse_args()
    print(json.dumps(main(args.spelling, args.rounds, args.device, args.model)))
