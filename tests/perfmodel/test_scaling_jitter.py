"""The wait for the slowest rank (``ScalingSetup.jitter``, ``model scaling --jitter / --step-from``)."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from deep500lite.perfmodel import scaling
from deep500lite.perfmodel import scaling_networks as sn
from deep500lite.cli import main
from deep500lite.errors import UserError

ACC = sn.Accelerator("test", 1e12, 1e11, 0.5, 16.0, 5e-6)
MODEL = sn.ModelDescription("toy", (sn.Layer("conv", "conv", 100, 10_000, 50, 80, 16),
                                    sn.Layer("fc", "fc", 1000, 1000, 80, 10)))
FREE = sn.Interconnect("free", 0.0, math.inf)


def test_expected_maximum_of_normals_matches_closed_forms_and_sampling():
    assert scaling.expected_max_normal(1) == 0.0
    # closed forms for 2 and 3 variables
    assert scaling.expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-6)
    assert scaling.expected_max_normal(3) == pytest.approx(3 / (2 * math.sqrt(math.pi)), rel=1e-6)
    # larger counts against a seeded Monte Carlo estimate (standard error about 0.002)
    rng = np.random.default_rng(0)
    for n in (4, 64, 4096):
        sampled = rng.standard_normal((2000, n)).max(axis=1).mean()
        assert scaling.expected_max_normal(n) == pytest.approx(sampled, abs=0.02)
    values = [scaling.expected_max_normal(n) for n in (2, 8, 64, 512, 4096)]
    assert values == sorted(values)
    with pytest.raises(UserError, match="Received: 0"):
        scaling.expected_max_normal(0)


def test_jitter_adds_the_wait_for_the_slowest_accelerator():
    plain = scaling.ScalingSetup(MODEL, FREE, ACC)
    noisy = dataclasses.replace(plain, jitter=0.1)
    for nodes in (1, 2, 16):
        a, b = scaling.predict_step(plain, nodes, 32), scaling.predict_step(noisy, nodes, 32)
        assert a.straggler == 0.0
        expected = 0.1 * a.compute * scaling.expected_max_normal(nodes)
        assert b.straggler == pytest.approx(expected) and b.step == pytest.approx(a.step + expected)
    assert scaling.predict_step(noisy, 1, 32).step == scaling.predict_step(plain, 1, 32).step
    for bad in (-0.1, math.inf, math.nan):
        with pytest.raises(UserError, match="coefficient of variation"):
            dataclasses.replace(plain, jitter=bad)


@pytest.fixture(scope="module")
def one_rank_run(tmp_path_factory):
    """A real 1-rank ``deep500lite run`` of a bundled recipe, with its results.json."""
    out = tmp_path_factory.mktemp("run1")
    proc = subprocess.run([sys.executable, "-m", "deep500lite", "run", "digits_mlp_distributed", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out / "results.json"


def test_step_from_a_run_sets_the_measured_step_and_the_jitter(one_rank_run, tmp_path, capsys):
    step = json.loads(one_rank_run.read_text())["summaries"]["step_time"]
    cv = (step["q3"] - step["q1"]) / 1.349 / step["median"]
    common = ["model", "scaling", "digits_mlp_distributed", "--nodes", "1,2,4", "--weak", "--batch", "32"]
    out_json = tmp_path / "s.json"
    assert main([*common, "--step-from", str(one_rank_run), "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    assert "wait for slowest" in text and f"jitter {cv * 100:.3g}%" in text
    rows = json.loads(out_json.read_text())["rows"]
    assert rows[0]["step"] == pytest.approx(step["median"], rel=1e-9)  # 1 node is the measured step
    for row in rows:
        compute = row["forward"] + row["backward"] + row["update"]
        assert row["straggler"] == pytest.approx(cv * compute * scaling.expected_max_normal(row["accelerators"]))
    assert rows[0]["straggler"] == 0 and rows[2]["straggler"] > rows[1]["straggler"] > 0
    # an explicit --jitter wins over the run's spread
    assert main([*common, "--step-from", str(one_rank_run), "--jitter", "0", "--json", str(out_json)]) == 0
    assert "wait for slowest" not in capsys.readouterr().out
    assert all(r["straggler"] == 0 for r in json.loads(out_json.read_text())["rows"])


def test_bad_step_and_jitter_input_is_one_line_with_exit_2(one_rank_run, tmp_path, capsys):
    data = json.loads(one_rank_run.read_text())
    two = tmp_path / "two.json"
    two.write_text(json.dumps(dict(data, distributed={"ranks": 2})))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"rows": []}))
    cases = [
        (["--step-from", str(two)], "a run on 2 ranks without it"),
        (["--step-from", str(other)], "no summaries.step_time"),
        (["--step-from", str(tmp_path / "missing.json")], "the path of an existing file"),
        (["--step-from", str(one_rank_run), "--measured-step", "0.001"], "do not give --measured-step too"),
        (["--jitter", "-1"], "--jitter: must be a finite number >= 0 and <= 10"),
        (["--jitter", "0.1", "--scheme", "pipeline"], "cannot be combined with another --scheme"),
    ]
    for extra, expected in cases:
        rc = main(["model", "scaling", "digits_mlp_distributed", "--nodes", "1,2", *extra])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and len(err.splitlines()) == 1, (extra, err)
        assert expected in err and "Received:" in err, (extra, err)
