"""``deep500lite model scaling``: the four built-in networks, a bundled recipe, and bad input."""

from __future__ import annotations

import json

import pytest

from deep500lite.cli import main
from deep500lite.lv3.costmodel import CalibratedModel, CostParameters
from support import run_cli


@pytest.mark.parametrize("name", ["alexnet", "googlenet", "resnet50", "vgg16"])
def test_scaling_runs_on_the_built_in_networks(name, tmp_path, capsys):
    out_json, png = tmp_path / "s.json", tmp_path / "s.png"
    rc = main(["model", "scaling", name, "--nodes", "1..4096", "--network", "fdr-ib", "--accelerator", "k80",
               "--json", str(out_json), "--plot", str(png)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "speedup" in out and "efficiency" in out and ("scaling stops at" in out or "does not stop" in out)
    data = json.loads(out_json.read_text())
    assert data["model"]["name"] == name and data["mode"] == "strong"
    rows = data["rows"]
    assert rows[0]["nodes"] == 1 and rows[0]["efficiency"] == pytest.approx(1.0)
    for r in rows:
        assert r["efficiency"] == pytest.approx(r["speedup"] / r["accelerators"])
        assert r["step"] == pytest.approx(r["io_exposed"] + r["forward"] + r["update"]
                                          + max(r["backward"], r["backward"] + r["comm_exposed"]))
        assert r["batch"] * r["accelerators"] == pytest.approx(data["batch"])
    assert data["stop"] in [r["nodes"] for r in rows] and data["reason"]
    assert png.read_bytes().startswith(b"\x89PNG")


def test_scaling_of_a_bundled_recipe_with_a_calibrated_allreduce_model(tmp_path, capsys):
    path = tmp_path / "allreduce.json"
    params = CostParameters(overhead=5e-6, alpha=4e-6, beta=2e-10, gamma=1e-10, delta=3e-10)
    CalibratedModel("MPICommunicator", ((2, params), (4, params))).save(path)
    out_json = tmp_path / "r.json"
    rc = main(["model", "scaling", "digits_mlp_distributed", "--nodes", "1..4", "--weak", "--accelerator",
               "xeon-e5-2680v3", "--allreduce-model", str(path), "--measured-step", "0.002", "--fusion-mb", "0",
               "--no-overlap", "--json", str(out_json)])
    out = capsys.readouterr().out
    assert rc == 0, out
    data = json.loads(out_json.read_text())
    assert data["batch"] == 32  # the recipe's per-rank batch
    model = CalibratedModel.load(path)
    rows = {r["nodes"]: r for r in data["rows"]}
    assert rows[1]["step"] == pytest.approx(0.002)  # the measured step scales the compute model
    for p in (2, 4):
        # one allreduce per layer with weights (fusion 0), each costing what the calibrated model says
        assert rows[p]["comm"] > 0 and rows[p]["step"] == pytest.approx(0.002 + rows[p]["comm"])
    fc_bytes = [64 * 64 * 4 + 64 * 4, 64 * 10 * 4 + 10 * 4]  # the MLP's two layers: weights and biases
    expected = sum(min(model.cost(a, n, 2) for a in ("recursive_doubling", "rabenseifner", "ring", "tree"))
                   for n in fc_bytes)
    assert rows[2]["comm"] == pytest.approx(expected, rel=1e-6), rows[2]


@pytest.mark.parametrize("argv,allowed", [
    (["alexnet", "--network", "carrier-pigeon"], "Allowed values are 'fdr-ib'"),
    (["alexnet", "--accelerator", "abacus"], "Allowed values are 'k80'"),
    (["no_such_recipe"], "built-in network ('alexnet'"),
    (["alexnet", "--nodes", "8..2"], "LOW..HIGH"),
    (["alexnet", "--io", "tape"], "one of 'packed', 'small-files'"),
    (["alexnet", "--format", "pdf"], "--format must be one of"),
    (["alexnet", "--batch", "0"], "at least 1 sample"),
    (["alexnet", "--algorithm", "fastest"], "Allowed values are 'auto'"),
])
def test_bad_input_is_one_line_with_exit_2(argv, allowed, capsys):
    rc = main(["model", "scaling", *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("deep500lite model: error:") and allowed in err and "Received:" in err, err


def test_the_console_command_exits_2_on_bad_input():
    out = run_cli("model", "scaling", "vgg16", "--network", "0,0")
    assert out.returncode == 2 and "Received: '0,0'" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_model_allreduce_shows_the_latency_bandwidth_crossover(capsys):
    from deep500lite.lv3.allreduce import AlphaBeta, choose_algorithm

    rc = main(["model", "allreduce", "--nodes", "64", "--network", "fdr-ib", "--format", "csv"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    lines = captured.out.strip().splitlines()
    assert lines[0] == "bytes,ring,recursive_doubling,rabenseifner,tree,fastest"
    ab = AlphaBeta(0.7e-6, 1 / (56e9 * 64 / 66 / 8))
    fastest = [line.rsplit(",", 1)[1] for line in lines[1:]]
    assert fastest[0] == "recursive_doubling" and fastest[-1] in ("ring", "rabenseifner")
    assert fastest[-1] == choose_algorithm(256 << 20, 64, ab)
    assert "crossover: recursive_doubling is fastest up to 4,096 bytes, rabenseifner from 16,384 bytes" in captured.err


def test_io_measured_by_bench_dataset_makes_small_files_the_bottleneck(tmp_path, capsys):
    io = tmp_path / "io.json"
    io.write_text(json.dumps({"samples": 1000, "bytes": {"files": 4_000_000, "shard": 3_200_000},
                              "throughput_samples_per_s": {"files": {"median": 500.0}, "shard": {"median": 50000.0}}}))
    out_json = tmp_path / "s.json"
    rc = main(["model", "scaling", "resnet50", "--weak", "--batch", "64", "--nodes", "1,8", "--network", "none",
               "--accelerator", "h100", "--io", "small-files", "--io-from", str(io), "--json", str(out_json)])
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = json.loads(out_json.read_text())["rows"]
    assert rows[0]["io"] == pytest.approx(64 / 500.0)  # 64 small files at the measured 500 per second
    assert rows[0]["io_exposed"] == pytest.approx(rows[0]["io"] - rows[0]["forward"] - rows[0]["backward"]
                                                  - rows[0]["update"])
    assert rows[0]["step"] == pytest.approx(rows[0]["io"])  # reading, not computing, sets the pace
