"""Eager against compiled executors on LeNet (1x28x28, batch 64): the figures in docs/performance.md.

Run one executor spelling per process (frameworks' thread pools in one process slow each other):

    for s in torch torch:compile tensorflow tensorflow:xla onnxruntime:O0 onnxruntime jax; do
        .venv/bin/python scripts/figures_compiled_modes.py $s; done

Each prints one JSON line: the compile time of the first inference and of the first training
step (``executor.compile_seconds``), then the median and 95% CI of 100 inference calls and 50
``inference_and_backprop`` calls, timed after three warm-up calls of each, in 10 interleaved rounds.
"""

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

import deep500lite as d5  # noqa: E402
from deep500lite import datasets, networks  # noqa: E402
from deep500lite.metrics.statistics import summarize  # noqa: E402


def main(spelling: str, rounds: int = 10) -> dict:
    batch = 64
    net, inp, out = networks.create_model("lenet", batch, classes=10, shape=(1, 28, 28), seed=0)
    net.add_operation(datasets.SoftmaxCrossEntropy()([out, "label"], "loss"))
    rng = np.random.default_rng(0)
    feeds = {inp: rng.standard_normal((batch, 1, 28, 28)).astype(np.float32),
             "label": rng.integers(0, 10, batch).astype(np.int64)}
    ex = d5.executor(net, spelling)
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
    return {"executor": spelling, "options": ex.options, "compile_inference_s": compile_inference,
            "compile_training_s": compile_training,
            "inference_ms": [a.median * 1e3, a.ci_low * 1e3, a.ci_high * 1e3, a.n],
            "training_ms": [b.median * 1e3, b.ci_low * 1e3, b.ci_high * 1e3, b.n]}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))))
