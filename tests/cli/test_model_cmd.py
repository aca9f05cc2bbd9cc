"""``deep500lite model scaling``: the four built-in networks, a bundled recipe, and bad input."""

from __future__ import annotations

import json

import pytest

from deep500lite.cli import main
from deep500lite.perfmodel.allreduce import CalibratedModel, CostParameters
from support import run_cli


def _strict_json(text: str):
    """Parse as any JSON reader would: Python's own literals Infinity and NaN are not JSON."""
    def refuse(literal):
        raise AssertionError(f"the file holds {literal}, which is not JSON")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("name", ["alexnet", "googlenet", "resnet50", "vgg16"])
def test_scaling_runs_on_the_built_in_networks(name, tmp_path, capsys):
    out_json, png = tmp_path / "s.json", tmp_path / "s.png"
    rc = main(["model", "scaling", name, "--nodes", "1..4096", "--network", "fdr-ib", "--accelerator", "k80",
               "--json", str(out_json), "--plot", str(png)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "speedup" in out and "efficiency" in out and ("scaling stops at" in out or "does not stop" in out)
    data = _strict_json(out_json.read_text())
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


PARAMS = CostParameters(overhead=5e-6, alpha=4e-6, beta=2e-10, gamma=1e-10, delta=3e-10)
P2P = ("recursive_doubling", "rabenseifner", "ring", "tree")


def _digits_mlp_scaling(model, nodes, tmp_path, capsys):
    """``model scaling digits_mlp_distributed`` with ``model`` saved as the calibration file: (its output,
    its rows by node count). One allreduce per layer (fusion 0), all after the backward pass."""
    path, out_json = tmp_path / "allreduce.json", tmp_path / "r.json"
    model.save(path)
    rc = main(["model", "scaling", "digits_mlp_distributed", "--nodes", nodes, "--weak", "--accelerator",
               "xeon-e5-2680v3", "--allreduce-model", str(path), "--measured-step", "0.002", "--fusion-mb", "0",
               "--no-overlap", "--json", str(out_json)])
    out = capsys.readouterr().out
    assert rc == 0, out
    data = json.loads(out_json.read_text())
    assert data["batch"] == 32  # the recipe's per-rank batch
    return out, {r["nodes"]: r for r in data["rows"]}


def test_scaling_of_a_bundled_recipe_with_a_calibrated_allreduce_model(tmp_path, capsys):
    model = CalibratedModel("MPICommunicator", ((2, PARAMS), (4, PARAMS)))
    _, rows = _digits_mlp_scaling(model, "1..4", tmp_path, capsys)
    assert rows[1]["step"] == pytest.approx(0.002)  # the measured step scales the compute model
    for p in (2, 4):
        # one allreduce per layer with weights (fusion 0), each costing what the calibrated model says
        assert rows[p]["comm"] > 0 and rows[p]["step"] == pytest.approx(0.002 + rows[p]["comm"])
    fc_bytes = [64 * 64 * 4 + 64 * 4, 64 * 10 * 4 + 10 * 4]  # the MLP's two layers: weights and biases
    expected = sum(min(model.cost(a, n, 2) for a in P2P) for n in fc_bytes)
    assert rows[2]["comm"] == pytest.approx(expected, rel=1e-6), rows[2]


def test_the_first_allreduce_after_compute_costs_what_the_model_measured_for_a_cold_call(tmp_path, capsys):
    cold = CostParameters(**{**PARAMS.__dict__, "cold_overhead": 60e-6, "cold_per_byte": 1e-10})
    model = CalibratedModel("MPICommunicator", ((2, cold),), cold={"2": {"evict_bytes": 32 << 20, "measurements": []}})
    out, rows = _digits_mlp_scaling(model, "1,2", tmp_path, capsys)
    assert "the first allreduce after compute is cold: +60.0 us + 0.100 ns/B (2 ranks)" in out, out
    # backward order: the last layer's gradient is ready first and its allreduce starts cold; the
    # next one starts as soon as it ends, warm
    last, first = 64 * 10 * 4 + 10 * 4, 64 * 64 * 4 + 64 * 4
    best = {n: min(PARAMS.seconds(a, n, 2) for a in P2P) for n in (last, first)}
    assert rows[2]["comm"] == pytest.approx(best[last] + 60e-6 + 1e-10 * last + best[first], rel=1e-6)


@pytest.mark.parametrize("argv,allowed", [
    (["alexnet", "--network", "carrier-pigeon"], "Allowed values are 'fdr-ib'"),
    (["alexnet", "--accelerator", "abacus"], "Allowed values are 'k80'"),
    (["no_such_recipe"], "built-in network ('alexnet'"),
    (["alexnet", "--nodes", "8..2"], "LOW..HIGH"),
    (["alexnet", "--io", "tape"], "one of 'packed', 'small-files'"),
    (["alexnet", "--format", "pdf"], "--format: must be one of"),
    (["alexnet", "--batch", "0"], "--batch: must be a finite number >= 1 (samples)"),
    (["alexnet", "--algorithm", "fastest"], "--algorithm: must be one of 'auto'"),
])
def test_bad_input_is_one_line_with_exit_2(argv, allowed, capsys):
    rc = main(["model", "scaling", *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("deep500lite model scaling: error:") and allowed in err and "Received:" in err, err


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


# ------------------------------------------------------------------ --scheme pipeline|spatial|tensor
LINK = ["--network", "1e-5,1e9", "--measured-step", "0.1", "--batch", "64", "--nodes", "1,2,4"]


def _scheme_json(tmp_path, capsys, *argv):
    out_json = tmp_path / "scheme.json"
    rc = main(["model", "scaling", "alexnet", *LINK, *argv, "--json", str(out_json)])
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out_json.read_text()), out


def test_scheme_pipeline_prints_the_gpipe_formula(tmp_path, capsys):
    data, out = _scheme_json(tmp_path, capsys, "--scheme", "pipeline", "--micro-batches", "4",
                             "--activation-bytes", "1000")
    assert data["scheme"] == "pipeline" and "pipeline parallelism" in out and "strong scaling" in out
    rows = {r["ranks"]: r for r in data["rows"]}
    assert sorted(rows) == [1, 2, 4]
    m, alpha, beta, a = 4, 1e-5, 1e-9, 1000 * 64
    for p, r in rows.items():
        message = 2 * (alpha + beta * a / m) if p > 1 else 0.0
        assert r["step"] == pytest.approx((m + p - 1) * (0.1 / (p * m) + message), rel=1e-9)
        assert r["idle_fraction"] == pytest.approx((p - 1) / (m + p - 1), rel=1e-9)  # the bubble
        assert r["compute"] == pytest.approx(0.1 / p, rel=1e-9)
        assert r["communication"] == pytest.approx(m * message, rel=1e-9)
        assert r["bytes_per_rank"] == (a if p > 1 else 0)
        assert r["speedup"] == pytest.approx(rows[1]["step"] / r["step"])
        # the table shows the same step and idle share
        line = next(x for x in out.splitlines() if x.split()[:1] == [str(p)])
        assert f"{100 * r['idle_fraction']:.1f}%" in line


def test_scheme_spatial_and_tensor_equal_the_formulas(tmp_path, capsys):
    from deep500lite.perfmodel import scaling_networks as sn
    from deep500lite.lv3.allreduce import AlphaBeta, allreduce_cost, choose_algorithm
    from deep500lite.lv3.tensor_parallel import allreduce_bytes

    link = AlphaBeta(1e-5, 1e-9)

    def allreduce(n, p):
        return allreduce_cost(choose_algorithm(n, p, link), n, p, link)

    model = sn.model_description("alexnet")
    conv_weights = sum(layer.params for layer in model.layers[:8]) * 4  # conv1..pool5, before fc6
    data, _ = _scheme_json(tmp_path, capsys, "--scheme", "spatial", "--halo-bytes", "100,50", "--gathered-bytes",
                           "200")
    for r in data["rows"]:
        p = r["ranks"]
        comm = 0.0 if p == 1 else (4 * (1e-5 + 1e-9 * 6400) + 4 * (1e-5 + 1e-9 * 3200) + allreduce(conv_weights, p)
                                   + (p - 1) * (1e-5 + 1e-9 * 12800 / p))
        assert r["compute"] == pytest.approx(0.1 / p, rel=1e-9)
        assert r["communication"] == pytest.approx(comm, rel=1e-9) and r["idle"] == 0
        assert r["step"] == pytest.approx(0.1 / p + comm, rel=1e-9)
    data, _ = _scheme_json(tmp_path, capsys, "--scheme", "tensor")
    rows = {r["ranks"]: r for r in data["rows"]}
    assert rows[1]["compute"] == pytest.approx(0.1, rel=1e-9) and rows[1]["communication"] == 0
    # fc6 + fc7 form the Megatron pair (9216 -> 4096); fc8 runs replicated
    sizes = [64 * 9216 * 4, 64 * 4096 * 4]
    for p in (2, 4):
        r = rows[p]
        assert r["bytes_per_rank"] == sum(allreduce_bytes(n, p) for n in sizes)
        assert r["communication"] == pytest.approx(sum(allreduce(n, p) for n in sizes), rel=1e-9)
        assert r["step"] == pytest.approx(r["compute"] + r["communication"], rel=1e-12)
    # compute = replicated + split / P, so it falls linearly in 1/P
    split = 2 * (rows[1]["compute"] - rows[2]["compute"])
    assert rows[4]["compute"] == pytest.approx(rows[1]["compute"] - 0.75 * split, rel=1e-9)


@pytest.mark.parametrize("argv,allowed", [
    (["--scheme", "pipe"], "--scheme: must be one of 'data', 'pipeline', 'spatial', 'tensor'"),
    (["--scheme", "pipeline", "--micro-batches", "0"], "--micro-batches: must be an integer from 1 to"),
    (["--micro-batches", "4"], "--micro-batches belongs to --scheme pipeline"),
    (["--scheme", "tensor", "--halo-bytes", "10"], "--halo-bytes belongs to --scheme spatial"),
    (["--scheme", "spatial"], "--scheme spatial needs --halo-bytes"),
    (["--scheme", "spatial", "--halo-bytes", "10,x"], "--halo-bytes must be comma-separated finite numbers"),
    (["--scheme", "tensor", "--weak"], "strong scaling"),
    (["--scheme", "pipeline", "--activation-bytes", "-1"], "--activation-bytes: must be a finite number >= 0"),
    (["--scheme", "pipeline", "--nodes", "64"], "at most 11 stages"),
])
def test_bad_scheme_input_is_one_line_with_exit_2(argv, allowed, capsys):
    rc = main(["model", "scaling", "alexnet", *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("deep500lite model scaling: error:") and allowed in err and "Received:" in err, err
