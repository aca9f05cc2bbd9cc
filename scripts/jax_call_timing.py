"""How long the JAX executor's fused training step and native JAX's step spend in the call (host time)
against the whole step, and how many kernels (fusions) each optimized program has: the GPU figures
in docs/performance.md (its GPU section).

    python scripts/jax_call_timing.py gpu:0     # or cpu
"""

import collections
import re
import sys
import time

import jax
import numpy as np

from deep500lite.lv1.device import as_device
from deep500lite.frameworks.jax import bench, models
dev = sys.argv[1] if len(sys.argv) > 1 else "cpu"
bench.set_device(as_device(dev))
jdev = bench._jax_device(as_device(dev))
def hlo_stats(txt):
    entry = txt[txt.index("ENTRY"):]
    ops = collections.Counter(re.findall(r"= \S+ (\w[\w-]*)\(", entry))
    return dict(ops.most_common(8)), sum(ops.values())
for model in ("lenet", "resnet20"):
    rng = np.random.default_rng(0)
    d5c, nat, ex = bench.training_pair(model, 64, rng)
    jm = bench._model(model)
    step, carry = models.training_step(jm, 0.01, 0.9)
    x = rng.standard_normal((64, *bench.MODEL_SHAPES[model])).astype(np.float32)
    y = rng.integers(0, 10, 64).astype(np.int64)
    xd, yd = jax.device_put(x, jdev), jax.device_put(y, jdev)
    with jax.default_matmul_precision("highest"):
        ncomp = step.lower(carry, xd, yd).compile()
    print(model, "native HLO", hlo_stats(ncomp.as_text()), "args", len(jax.tree_util.tree_leaves((carry, xd, yd))))
    for key, comp in ex._compiled.items():
        print(model, "d5", key[0][0], "HLO", hlo_stats(comp.as_text()))
    # native: jit vs aot, device inputs; dispatch and total
    def timeit(f, n=50):
        for _ in range(5): r = f()
        jax.block_until_ready(r)
        disp = []
        t = time.perf_counter()
        for _ in range(n):
            t1 = time.perf_counter(); r = f(); disp.append(time.perf_counter() - t1)
            jax.block_until_ready(r)
        return round((time.perf_counter() - t) / n * 1e3, 3), round(float(np.median(disp)) * 1e3, 3)
    state = {"c": carry}
    def nat_jit():
        with jax.default_matmul_precision("highest"):
            state["c"], loss = step(state["c"], xd, yd)
        return loss
    def nat_jit_np():
        with jax.default_matmul_precision("highest"):
            state["c"], loss = step(state["c"], x, y)
        return loss
    def nat_aot():
        state["c"], loss = ncomp(state["c"], xd, yd)
        return loss
    feeds = {"input": x, "label": y}
    fd = {"input": xd, "label": yd}
    def d5_step(): return d5c()
    for rnd in range(2):
        print(model, "native jit dev-in", timeit(nat_jit), "| native jit numpy-in", timeit(nat_jit_np), "| native AOT", timeit(nat_aot),
              "| d5 step", timeit(d5_step))
