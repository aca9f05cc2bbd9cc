"""Optional parts are checked before any work starts, each missing one named once with its pip extra.

The environment is real, not simulated: a fresh ``python -m venv --without-pip`` whose only packages
are deep500lite's core dependencies (numpy, onnx, protobuf, jsonschema and what they need, linked
from this interpreter's site-packages) and deep500lite itself, installed from a wheel. No
framework, scipy, matplotlib or scikit-learn can be imported there.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import subprocess
import sys

import pytest

CORE = ("numpy", "onnx", "protobuf", "jsonschema")


def _closure(names) -> set:
    """The distributions ``names`` need, recursively (environment markers and extras honoured)."""
    from packaging.requirements import Requirement

    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        for text in md.distribution(name).requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


@pytest.fixture(scope="module")
def minimal_python(installed_wheel, tmp_path_factory):
    """A venv with deep500lite's core only; returns its python."""
    pytest.importorskip("packaging")
    _, site = installed_wheel
    root = tmp_path_factory.mktemp("minimal")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    deps = root / "deps"
    deps.mkdir()
    for name in _closure(CORE):
        dist = md.distribution(name)
        tops = {str(f).split("/")[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            source = dist.locate_file(top)
            if os.path.exists(source) and not (deps / top).exists():
                (deps / top).symlink_to(source)
    (pure,) = (root / "venv" / "lib").glob("python3*/site-packages")
    (pure / "minimal.pth").write_text(f"{site}\n{deps}\n")
    python = root / "venv" / "bin" / "python"
    check = subprocess.run([str(python), "-c", "import deep500lite, importlib.util as u; print([n for n in "
                            "('torch', 'tensorflow', 'onnxruntime', 'jax', 'scipy', 'matplotlib', 'sklearn') "
                            "if u.find_spec(n)])"], capture_output=True, text=True, env=_env(), timeout=120,
                           cwd=root)
    assert check.returncode == 0 and check.stdout.strip() == "[]", check.stdout + check.stderr
    return python


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _run(python, *args, cwd):
    return subprocess.run([str(python), "-m", "deep500lite", *args], capture_output=True, text=True, cwd=cwd,
                          env=_env(), timeout=300)


def test_compare_names_every_missing_part_once_before_anything_runs(minimal_python, tmp_path):
    proc = _run(minimal_python, "compare", "digits_lenet", "--frameworks", "torch,onnxruntime", "--out", "cmp",
                cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    for part, extra in (("torch (framework 'torch')", "torch"), ("onnxruntime (framework 'onnxruntime')",
                                                                  "onnxruntime"),
                        ("scikit-learn", "datasets"), ("scipy", "stats"), ("matplotlib", "plots")):
        assert err.count(part) == 1 and f"pip install 'deep500lite[{extra}]'" in err, (part, err)
    assert "starting" not in proc.stdout and not (tmp_path / "cmp").exists()  # nothing ran


def test_compare_without_plots_still_needs_the_dataset_package(minimal_python, tmp_path):
    proc = _run(minimal_python, "compare", "digits_lenet", "--frameworks", "reference", "--no-plots", cwd=tmp_path)
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert err.count("scikit-learn") == 1 and "matplotlib" not in err and "scipy" not in err, err


def test_run_plots_is_refused_before_training(minimal_python, tmp_path):
    proc = _run(minimal_python, "run", "digits_lenet", "--set", "executor=reference", "--plots", "--out", "r",
                cwd=tmp_path)
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1
    assert "matplotlib for --plots (pip install 'deep500lite[plots]')" in err and err.count("scikit-learn") == 1
    assert "training:" not in proc.stdout + proc.stderr and not (tmp_path / "r").exists()


def test_synthetic_recipe_runs_in_the_minimal_install(minimal_python, tmp_path):
    # nothing optional is needed: the check passes and the run completes
    recipe = tmp_path / "tiny.py"
    recipe.write_text("FIXED = {'dataset': 'synthetic', 'dataset_kwargs': dict(shape=(4,), classes=2, "
                      "train_size=64, test_size=32), 'model': 'mlp', 'model_kwargs': dict(hidden=(4,)), 'epochs': 1}\n"
                      "MUTABLE = {'batch_size': 16, 'executor': 'reference', 'optimizer': 'GradientDescent'}\n"
                      "METRICS = []\n")
    proc = _run(minimal_python, "run", str(recipe), "--out", "r", "--progress", "none", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "r" / "results.json").is_file()
