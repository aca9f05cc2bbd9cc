"""A user's C++ operator on every executor variant: run there, or refused before the run with one line.

The operator is tests/data/ops/swish.cpp, compiled from a user's file that imports a neighbour
module (as ``bench overhead --op FILE:FACTORY`` and ``bench op --custom-op`` load it). The
benchmark times it forward and backward through each of the eight variants of
``deep500lite.registry``; its results must equal the operator's own forward and backward.
"""

from __future__ import annotations

import json
import shutil
import textwrap

import numpy as np
import pytest

import deep500lite as d5
from support import REPO, run_cli

SWISH = REPO / "tests" / "data" / "ops" / "swish.cpp"
VARIANTS = ["reference", "torch", "torch:compile", "torch:max-autotune", "tensorflow", "tensorflow:xla",
            "onnxruntime", "jax"]


def _user_folder(tmp_path):
    """A user's folder: op.py imports kernels.py, which compiles the C++ file beside it."""
    folder = tmp_path / "myops"
    folder.mkdir()
    shutil.copy(SWISH, folder / "swish.cpp")
    (folder / "kernels.py").write_text(textwrap.dedent("""
        import os
        import numpy as np
        import deep500lite as d5

        def swish(n):
            d = d5.tensordesc(np.float32, (n,))
            return d5.compile_custom_cppop("swish", os.path.join(os.path.dirname(__file__), "swish.cpp"), [d], [d])
    """))
    (folder / "op.py").write_text(textwrap.dedent("""
        import deep500lite as d5
        from kernels import swish  # a neighbour of this file

        @d5.factory
        def make():
            return swish(1024)
    """))
    return folder


def test_every_variant_runs_the_cpp_operator_or_refuses_it_up_front(tmp_path):
    from deep500lite.registry import EXECUTOR_VARIANTS, FRAMEWORKS, is_framework_available, split_executor_spelling

    assert len(VARIANTS) == 8 and set(VARIANTS) <= set(FRAMEWORKS) | set(EXECUTOR_VARIANTS)
    wanted = [v for v in VARIANTS if is_framework_available(split_executor_spelling(v)[0])]
    folder = _user_folder(tmp_path)
    out = tmp_path / "overhead.json"
    proc = run_cli("bench", "overhead", "--op", f"{folder / 'op.py'}:make", "--framework", ",".join(wanted),
                   "--max-time", "0.2", "--json", out, cwd=tmp_path, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = {r["variant"]: r for r in json.loads(out.read_text())["results"]}
    assert list(rows) == wanted
    for variant, row in rows.items():
        if variant == "tensorflow:xla":
            assert row["refused"].startswith("tensorflow:xla cannot run the custom operator")
            assert "XLA" in row["refused"] and "Received:" in row["refused"] and "executor" not in row
            continue
        assert row["refused"] is None, (variant, row["refused"])
        assert row["max_abs_error"] <= 1e-5, variant  # outputs and input gradients equal the direct call's
        assert len(row["ratios"]) >= 3 and all(r > 0 for r in row["ratios"])
    assert "tensorflow:xla cannot run the custom operator" in proc.stdout
    for variant in rows:
        assert variant in proc.stdout


@pytest.mark.requires("torch")
def test_trains_identically_under_torch_compile(tmp_path):
    from deep500lite import networks
    from deep500lite.datasets import dataset_loss
    from deep500lite.frameworks.reference import MomentumOptimizer

    batch = 16
    desc = d5.tensordesc(np.float32, (batch, 10))
    op = d5.compile_custom_cppop("swish", str(SWISH), [desc], [desc])

    def build():
        net, _, out = networks.create_model("mlp", batch, classes=10, shape=(64,))
        net.add_custom_operation("Swish", [out], ["swished"], op=op)
        net.add_operation(dataset_loss("digits")(["swished", "label"], "loss"))
        return net

    rng = np.random.default_rng(0)
    feeds = {"input": rng.random((batch, 64), dtype=np.float32), "label": rng.integers(0, 10, batch)}
    losses = {}
    for variant in ("torch", "torch:compile"):
        opt = MomentumOptimizer(d5.executor(build(), variant), learning_rate=0.1, momentum=0.9, loss="loss")
        losses[variant] = [float(opt.step(feeds)["loss"]) for _ in range(3)]
    assert losses["torch:compile"] == pytest.approx(losses["torch"], rel=1e-5)


@pytest.mark.requires("tensorflow")
def test_tensorflow_xla_refuses_before_building():
    from deep500lite import networks
    from deep500lite.errors import UnsupportedOperatorError

    desc = d5.tensordesc(np.float32, (8, 10))
    op = d5.compile_custom_cppop("swish", str(SWISH), [desc], [desc])
    net, _, out = networks.create_model("mlp", 8, classes=10, shape=(64,))
    net.add_custom_operation("Swish", [out], ["swished"], op=op)
    with pytest.raises(UnsupportedOperatorError) as info:
        d5.executor(net, "tensorflow:xla")
    message = str(info.value)
    assert "\n" not in message and "tensorflow:xla cannot run the custom operator 'Swish'" in message
    assert "tensorflow (without XLA)" in message
    d5.executor(net, "tensorflow")  # the same network runs without XLA


def test_bench_op_custom_op_file_imports_its_neighbours(tmp_path):
    folder = tmp_path / "cases"
    folder.mkdir()
    (folder / "helper.py").write_text(textwrap.dedent("""
        import numpy as np
        import deep500lite as d5

        class Twice(d5.CustomPythonOp):
            def forward(self, x):
                return 2 * x

            def backward(self, grads, fwd_inputs, fwd_outputs):
                return 2 * grads[0]

        def make(n):
            d = d5.tensordesc(np.float32, (n,))
            return Twice([d], [d])
    """))
    (folder / "mycases.py").write_text(textwrap.dedent("""
        import deep500lite as d5
        from helper import make  # a neighbour of this file
        from deep500lite.bench.op import custom_case

        @d5.factory
        def cases(size):
            return [custom_case(make(4096), flops=4096, bytes_moved=8 * 4096, name="twice-4096")]
    """))
    proc = run_cli("bench", "op", "--suite", "custom", "--custom-op", f"{folder / 'mycases.py'}:cases",
                   "--size", "small", "--max-time", "0.05", "--format", "csv", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "twice-4096" in proc.stdout
