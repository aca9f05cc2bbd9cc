"""Packaging: the wheel installs working, namespaced imports; pyproject lists every package."""

import os
import subprocess
import sys
import zipfile

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None


def _package_folders(repo):
    mapping = {"deep500lite": "deep500lite", "deep500lite.frameworks": "frameworks",
               "deep500lite.metrics": "metrics", "deep500lite.recipes": "recipes"}
    found = set()
    for prefix, folder in mapping.items():
        for root, dirs, files in os.walk(os.path.join(repo, folder)):
            dirs[:] = [d for d in dirs if not d.startswith((".", "__"))]
            if "__init__.py" in files:
                rel = os.path.relpath(root, os.path.join(repo, folder))
                name = prefix if rel == "." else prefix + "." + rel.replace(os.sep, ".")
                if not any(name.startswith(p + ".") for p in mapping if p != prefix and p.startswith(prefix)):
                    found.add(name)
    return found


@pytest.mark.skipif(tomllib is None, reason="tomllib needs Python 3.11")
def test_pyproject_lists_every_package(repo_root):
    with open(os.path.join(repo_root, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    assert listed == _package_folders(repo_root)


def test_wheel_installs_namespaced_packages(installed_wheel, tmp_path):
    wheel, target = installed_wheel
    names = zipfile.ZipFile(wheel).namelist()
    assert "deep500lite/frameworks/reference/executor.py" in names
    assert "deep500lite/metrics/timing.py" in names
    assert not any(n.startswith(("frameworks/", "metrics/", "recipes/", "tests/")) for n in names)
    code = ("import deep500lite as d5, deep500lite.frameworks.reference as r, deep500lite.metrics as m\n"
            "from deep500lite import networks\n"
            "net = networks.create_model('mlp', 1, shape=(4,))[0]\n"
            "print(d5.__file__); print(r.__file__); print(m.__file__)\n"
            "print(d5.executor(net, 'reference').inference(net.random_feeds())['output'].shape)\n")
    env = dict(os.environ, PYTHONPATH=str(target))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert all(line.startswith(str(target)) for line in lines[:3]), lines
    assert lines[3] == "(1, 10)"
    script = subprocess.run([sys.executable, "-m", "deep500lite", "list", "networks"], capture_output=True,
                            text=True, env=env, cwd=tmp_path)
    assert script.returncode == 0 and "lenet" in script.stdout
