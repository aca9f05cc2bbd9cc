"""The README's commands: setup is idempotent (a second run installs nothing)."""

import os
import subprocess

import pytest

from support import REPO


@pytest.mark.skipif(not os.path.exists(os.path.join(REPO, ".venv", ".deep500lite-setup")),
                    reason="the environment was not made by scripts/setup.sh")
def test_setup_does_not_reinstall():
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", "setup.sh")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "is up to date" in proc.stdout and "installing" not in proc.stdout.lower()


def test_readme_has_exactly_the_two_commands():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    assert "bash scripts/main.sh" in text and "bash scripts/test.sh" in text
    with open(os.path.join(REPO, ".ci", "run"), encoding="utf-8") as f:
        assert "bash scripts/test.sh" in f.read()


def test_ci_runs_the_tensorflow_tests_with_onednn_on_and_off():
    # CI machines may have the CPU features that turn TensorFlow's oneDNN kernels on by default or not:
    # CI runs the TensorFlow tests a second time with oneDNN in the other state.
    with open(os.path.join(REPO, ".ci", "run"), encoding="utf-8") as f:
        assert "bash scripts/test_tensorflow_onednn.sh" in f.read()
    with open(os.path.join(REPO, "scripts", "test_tensorflow_onednn.sh"), encoding="utf-8") as f:
        script = f.read()
    assert "export TF_ENABLE_ONEDNN_OPTS=$((1 - main))" in script and "IsMklEnabled()" in script
