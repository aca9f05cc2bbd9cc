"""``model scaling --compute-from``: measured per-layer times in the compute model."""

from __future__ import annotations

import json
import math

import pytest

from deep500lite.perfmodel import scaling
from deep500lite.perfmodel import scaling_networks as sn
from deep500lite.cli import main

ACC = sn.Accelerator("test", 1e12, 1e11, 0.5, 16.0, 5e-6)
MODEL = sn.ModelDescription("toy", (sn.Layer("conv", "conv", 100, 10_000, 50, 80, 16),
                                    sn.Layer("relu", "other", 0, 80, 80, 80),
                                    sn.Layer("fc", "fc", 1000, 1000, 80, 10)))


def test_interpolation_is_linear_in_log_log_between_measured_batches():
    # t(4) = 1 ms, t(16) = 4 ms: log-log linear means t(8) = 2 ms (t proportional to b here)
    assert scaling.interpolate_time([4, 16], [1e-3, 4e-3], 8, lambda b: 0.0) == pytest.approx(2e-3)
    # t(4) = 1 ms, t(16) = 2 ms: t(8) = 1 ms * 2 ** 0.5
    assert scaling.interpolate_time([4, 16], [1e-3, 2e-3], 8, lambda b: 0.0) == pytest.approx(1e-3 * math.sqrt(2))
    # a zero endpoint: linear in the batch
    assert scaling.interpolate_time([4, 16], [0.0, 3e-3], 8, lambda b: 0.0) == pytest.approx(1e-3)


def test_outside_the_measured_batches_the_roofline_gives_the_shape():
    shape = lambda b: 1e-6 + 2e-6 * b  # noqa: E731
    assert scaling.interpolate_time([4, 16], [1e-3, 4e-3], 64, shape) == pytest.approx(4e-3 * shape(64) / shape(16))
    assert scaling.interpolate_time([4, 16], [1e-3, 4e-3], 1, shape) == pytest.approx(1e-3 * shape(1) / shape(4))
    assert scaling.interpolate_time([4, 16], [None, 4e-3], 4, shape) == pytest.approx(4e-3 * shape(4) / shape(16))


def _measured():
    return scaling.MeasuredCompute((4, 16), {"conv": ((1e-3, 3e-3), (2e-3, 5e-3)), "relu": ((1e-5, 2e-5),
                                                                                          (2e-5, 3e-5))},
                                   overhead_forward=7e-6, overhead_backward=9e-6)


def test_compute_times_use_measured_layers_and_the_roofline_for_the_rest():
    m = _measured()
    fwd, bwd, update = scaling.compute_times(MODEL, 16, ACC, measured=m)
    assert fwd == pytest.approx([3e-3 + 7e-6, 2e-5, scaling.layer_time(MODEL.layers[2], 16, ACC)])
    assert bwd == pytest.approx([5e-3 + 9e-6, 3e-5, scaling.layer_time(MODEL.layers[2], 16, ACC, backward=True)])
    assert update == pytest.approx(1100 * 20 / 1e11 + 5e-6)
    fwd2, _, _ = scaling.compute_times(MODEL, 8, ACC, scale=2.0, measured=m)
    assert fwd2[0] == pytest.approx(2 * (math.sqrt(1e-3 * 3e-3) + 7e-6))


def test_a_measured_update_replaces_the_roofline_update():
    import dataclasses

    m = dataclasses.replace(_measured(), update=(1e-3, 3e-3))
    assert scaling.compute_times(MODEL, 8, ACC, measured=m)[2] == pytest.approx(math.sqrt(3) * 1e-3)
    assert scaling.compute_times(MODEL, 64, ACC, measured=m)[2] == pytest.approx(3e-3)  # constant outside


def test_one_node_step_is_the_sum_and_the_overhead_does_not_scale():
    setup = scaling.ScalingSetup(MODEL, sn.interconnect("none"), ACC, measured=_measured())
    p = scaling.predict_step(setup, 1, 16)
    fwd, bwd, update = scaling.compute_times(MODEL, 16, ACC, measured=setup.measured)
    assert p.step == pytest.approx(sum(fwd) + sum(bwd) + update)
    assert p.non_scaling == pytest.approx(update + 7e-6 + 9e-6 + 2 * ACC.launch)  # fc is the one roofline layer
    assert scaling.scaling_sweep(setup, [1], 16).to_dict()["compute_from"]["layers_measured"] == 2


def _lenet_layers_json(path, batches=(16, 64), network=None):
    """A layers file for digits_lenet with every layer 1 ms forward, 2 ms backward per 16 samples (linear);
    ``network``: the whole network's ``(forward, step)`` per batch (default 0 s: no time left to scale to)."""
    from deep500lite.recipe.model_targets import describe_target

    desc, _ = describe_target("digits_lenet")
    layers = [{"name": la.name, "op_type": "X", "status": "measured", "forward": [1e-3 * b / 16 for b in batches],
               "backward": [2e-3 * b / 16 for b in batches]} for la in desc.layers]
    data = {"format": "deep500lite-layer-times/1", "model": "digits_lenet", "framework": "torch", "device": "cpu",
            "batches": list(batches), "overhead": {"forward": 1e-4, "backward": 2e-4}, "layers": layers,
            "network": {"forward": [0.0] * len(batches), "step": [0.0] * len(batches)}}
    if network is not None:
        data["network"] = {"forward": [f for f, _ in network], "step": [s for _, s in network]}
    path.write_text(json.dumps(data))
    return desc


def test_model_scaling_compute_from_predicts_the_hand_computed_step(tmp_path, capsys):
    desc = _lenet_layers_json(tmp_path / "layers.json")
    out = tmp_path / "pred.json"
    rc = main(["model", "scaling", "digits_lenet", "--nodes", "1", "--batch", "32", "--network", "none",
               "--accelerator", "1e12,1e11", "--compute-from", str(tmp_path / "layers.json"), "--layer-sum",
               "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and f"{len(desc.layers)} of {len(desc.layers)} layers measured" in text
    assert "layer times summed as measured (--layer-sum)" in text
    row = json.loads(out.read_text())["rows"][0]
    n = len(desc.layers)
    update = desc.params * 20 / 1e11 + 10e-6  # the roofline update: 20 bytes per parameter, one launch
    assert row["step"] == pytest.approx(n * (2e-3 + 4e-3) + 1e-4 + 2e-4 + update)


@pytest.mark.parametrize("extra, expected", [
    (["--measured-step", "0.01"], "cannot be combined with --measured-step"),
    (["--scheme", "pipeline"], "cannot be combined"),
])
def test_compute_from_with_another_compute_model_exits_2(extra, expected, tmp_path, capsys):
    _lenet_layers_json(tmp_path / "layers.json")
    rc = main(["model", "scaling", "digits_lenet", "--compute-from", str(tmp_path / "layers.json"), *extra])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and expected in err and "Received:" in err, err


def test_compute_from_the_layers_of_another_network_exits_2(tmp_path, capsys):
    _lenet_layers_json(tmp_path / "layers.json")
    rc = main(["model", "scaling", "mlp", "--compute-from", str(tmp_path / "layers.json")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "another network ('digits_lenet')" in err, err
    assert "Received: MODEL_OR_RECIPE 'mlp'" in err


def test_compute_from_a_file_that_is_not_a_layers_file_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "something-else"}))
    rc = main(["model", "scaling", "digits_lenet", "--compute-from", str(bad)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "--compute-from" in err and "Received:" in err, err


def test_skinny_suite_shapes_are_the_layers_im2col_gemms():
    from deep500lite.bench import op

    cases = {c.name: c for c in op.skinny_cases("large")}
    fc6 = cases["skinny-alexnet-fc6-b4"]  # 9216 -> 4096 at batch 4
    assert (fc6.m, fc6.n, fc6.k) == (4096, 4, 9216)
    conv5 = cases["skinny-alexnet-conv5-b2"]  # 256 filters of 3x3 over 384/2 channels (2 groups), 13x13 outputs
    assert (conv5.m, conv5.n, conv5.k) == (256, 2 * 13 * 13, 192 * 3 * 3)
    assert {f"skinny-googlenet-fc-b{b}" for b in op.SKINNY_BATCHES} <= set(cases)
    default = op.skinny_cases("default")
    assert default and all(c.flops <= 4e9 for c in default) and len(default) < len(cases)
    assert len({(c.m, c.n, c.k) for c in cases.values()}) == len(cases)


def _bench_json(path, eff=0.5, m_half=32.0, peak=200e9):
    """A bench op JSON whose GEMM rates follow rate = peak * eff * N / (N + m_half) exactly."""
    results = []
    for n in (1, 4, 16, 64, 256):
        flops = 2.0 * 1000 * n * 1024
        rate = peak * eff * n / (n + m_half)
        results.append({"suite": "gemm", "framework": "torch", "flops": flops, "median_s": flops / rate,
                        "case": {"suite": "gemm", "name": f"skinny-googlenet-fc-b{n}", "M": 1000, "N": n, "K": 1024}})
    results.append({"suite": "gemm", "framework": "torch", "flops": 2e9, "median_s": 1.0,  # not skinny-*: ignored
                    "case": {"suite": "gemm", "name": "square-1024", "M": 1024, "N": 1024, "K": 1024}})
    path.write_text(json.dumps({"benchmark": "op", "peak": {"device": "cpu", "flops": peak, "bandwidth": 20e9},
                                "results": results}))


def test_gemm_from_fits_the_efficiency_curve_of_the_measured_rates(tmp_path, capsys):
    _bench_json(tmp_path / "op.json")
    data = json.loads((tmp_path / "op.json").read_text())
    acc = sn.accelerator_from_gemm_bench(data)
    assert (acc.flops, acc.bandwidth) == (200e9, 20e9)
    assert acc.efficiency == pytest.approx(0.5) and acc.m_half == pytest.approx(32.0)
    v100 = sn.accelerator_from_gemm_bench(data, sn.ACCELERATORS["v100"])
    assert v100.flops == sn.ACCELERATORS["v100"].flops and v100.m_half == pytest.approx(32.0)
    out = tmp_path / "pred.json"
    rc = main(["model", "scaling", "alexnet", "--nodes", "1", "--accelerator", "this", "--gemm-from",
               str(tmp_path / "op.json"), "--json", str(out)])
    assert rc == 0 and "fitted to 5 torch GEMMs" in capsys.readouterr().out
    got = json.loads(out.read_text())["accelerator"]
    assert got["flops"] == 200e9 and got["efficiency"] == pytest.approx(0.5) and got["m_half"] == pytest.approx(32.0)


def test_skinny_bench_json_feeds_the_fit(tmp_path):
    from deep500lite.bench import op
    from deep500lite.perfmodel.peak import Peak

    peak = Peak("cpu", flops=100e9, bandwidth=10e9, flops_method="given", bandwidth_method="given", kernels={})
    bench = op.run_op_benchmark(["skinny"], ["reference"], "small", 0.01, peak=peak)
    assert [r.case.name for r in bench.results][:3] == ["skinny-alexnet-fc8-b1", "skinny-alexnet-fc8-b4",
                                                        "skinny-alexnet-fc8-b16"]
    fw, ns, rates, got_peak = sn.gemm_rates_from_bench(json.loads(json.dumps(bench.to_dict())))
    expected = sorted((r.case.n, r.case.flops / r.measurement.median) for r in bench.results)
    assert fw == "reference" and got_peak["flops"] == 100e9
    assert ns == [n for n, _ in expected] and rates == pytest.approx([x for _, x in expected])


def test_gemm_from_a_file_without_gemms_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"peak": {"flops": 1e9, "bandwidth": 1e9}, "results": []}))
    rc = main(["model", "scaling", "alexnet", "--gemm-from", str(bad)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "two or more N" in err and "Received:" in err, err


# --- the measured layers scaled to the whole network (the default of --compute-from) ---

NET_F, NET_B = (2e-3, 5e-3), (4e-3, 12e-3)  # the whole network's forward and backward at batches 4 and 16


def _scaled(**kw):
    import dataclasses

    return dataclasses.replace(_measured(), network_forward=NET_F, network_backward=NET_B, **kw)


def _expected_factors(batch_index, batch):
    """The factors computed by hand: (whole - per-call cost - the roofline fc layer) / (conv + relu as measured)."""
    m = _measured()
    (cf, cb), (rf, rb) = m.layers["conv"], m.layers["relu"]
    fc = MODEL.layers[2]
    kf = (NET_F[batch_index] - 7e-6 - scaling.layer_time(fc, batch, ACC)) / (cf[batch_index] + rf[batch_index])
    kb = (NET_B[batch_index] - 9e-6 - scaling.layer_time(fc, batch, ACC, backward=True)) / (cb[batch_index]
                                                                                            + rb[batch_index])
    return kf, kb


@pytest.mark.parametrize("index, batch", [(0, 4), (1, 16)])
def test_scaled_layers_add_up_to_the_whole_network_at_each_measured_batch(index, batch):
    m = _scaled()
    assert m.mode == "network"
    fwd, bwd, _ = scaling.compute_times(MODEL, batch, ACC, measured=m)
    assert sum(fwd) == pytest.approx(NET_F[index], rel=1e-12)
    assert sum(bwd) == pytest.approx(NET_B[index], rel=1e-12)
    kf, kb = _expected_factors(index, batch)
    assert scaling.network_factors(MODEL, ACC, m)[0][index] == pytest.approx(kf, rel=1e-12)
    (cf, cb), (rf, rb) = m.layers["conv"], m.layers["relu"]
    # the measured split is kept: each measured layer times the same factor; the roofline layer untouched
    fc = MODEL.layers[2]
    assert fwd == pytest.approx([kf * cf[index] + 7e-6, kf * rf[index], scaling.layer_time(fc, batch, ACC)], rel=1e-12)
    assert bwd == pytest.approx([kb * cb[index] + 9e-6, kb * rb[index],
                                 scaling.layer_time(fc, batch, ACC, backward=True)], rel=1e-12)


def test_factors_are_interpolated_log_log_between_batches_and_held_outside():
    m = _scaled()
    (kf4, kb4), (kf16, kb16) = _expected_factors(0, 4), _expected_factors(1, 16)
    fwd, bwd, _ = scaling.compute_times(MODEL, 8, ACC, measured=m)
    conv8 = math.sqrt(1e-3 * 3e-3)  # the layer itself, log-log between 1 ms and 3 ms
    assert fwd[0] - 7e-6 == pytest.approx(conv8 * math.sqrt(kf4 * kf16), rel=1e-12)
    assert bwd[0] - 9e-6 == pytest.approx(math.sqrt(2e-3 * 5e-3) * math.sqrt(kb4 * kb16), rel=1e-12)
    fwd64, _, _ = scaling.compute_times(MODEL, 64, ACC, measured=m)
    conv = MODEL.layers[0]
    roof = 3e-3 * scaling.layer_time(conv, 64, ACC) / scaling.layer_time(conv, 16, ACC)
    assert fwd64[0] - 7e-6 == pytest.approx(roof * kf16, rel=1e-12)  # beyond the last batch: its factor


def test_layer_sum_reproduces_the_layers_as_measured():
    raw = scaling.compute_times(MODEL, 8, ACC, measured=_measured())
    assert _measured().mode == "layer-sum"
    m = _scaled(layer_sum=True)
    assert m.mode == "layer-sum"
    assert scaling.compute_times(MODEL, 8, ACC, measured=m) == raw
    step = scaling.predict_step(scaling.ScalingSetup(MODEL, sn.interconnect("none"), ACC, measured=m), 1, 8).step
    assert step == pytest.approx(sum(raw[0]) + sum(raw[1]) + raw[2], rel=1e-12)


def test_from_layer_times_derives_the_network_backward_from_its_step():
    data = {"batches": [4, 16], "overhead": {"forward": 1e-6, "backward": 2e-6}, "model": "toy",
            "layers": [{"name": "conv", "status": "measured", "forward": [1e-3, 2e-3], "backward": [3e-3, 4e-3]}],
            "network": {"forward": [2e-3, None], "step": [7e-3, 9e-3]}}
    m = scaling.MeasuredCompute.from_layer_times(data)
    assert m.network_forward == (2e-3, None) and m.network_backward == (pytest.approx(5e-3), None)
    assert m.mode == "network" and scaling.MeasuredCompute.from_layer_times(data, layer_sum=True).mode == "layer-sum"


def test_model_scaling_compute_from_scales_to_the_whole_network_by_default(tmp_path, capsys):
    desc = _lenet_layers_json(tmp_path / "layers.json", network=[(3e-3, 10e-3), (9e-3, 30e-3)])
    out = tmp_path / "pred.json"
    rc = main(["model", "scaling", "digits_lenet", "--nodes", "1", "--batch", "16", "--network", "none",
               "--accelerator", "1e12,1e11", "--compute-from", str(tmp_path / "layers.json"), "--json", str(out)])
    text = capsys.readouterr().out
    n = len(desc.layers)
    kf, kb = (3e-3 - 1e-4) / (n * 1e-3), (7e-3 - 2e-4) / (n * 2e-3)
    assert rc == 0 and f"16: {kf:.3g} / {kb:.3g}" in text and "scaled to the whole network" in text, text
    got = json.loads(out.read_text())
    update = desc.params * 20 / 1e11 + 10e-6
    assert got["rows"][0]["step"] == pytest.approx(3e-3 + 7e-3 + update, rel=1e-9)
    cf = got["compute_from"]
    assert cf["mode"] == "network" and cf["factors"]["forward"][0] == pytest.approx(kf)
    assert cf["factors"]["backward"][1] == pytest.approx((21e-3 - 2e-4) / (n * 8e-3))


def test_layer_sum_without_compute_from_exits_2(capsys):
    rc = main(["model", "scaling", "digits_lenet", "--nodes", "1", "--layer-sum"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "give it with --compute-from" in err, err
    assert err.endswith("Received: --layer-sum without --compute-from")


def test_a_whole_network_faster_than_its_fixed_costs_exits_2_pointing_at_layer_sum(tmp_path, capsys):
    _lenet_layers_json(tmp_path / "layers.json")  # whole network 0 s at every batch: nothing left to scale to
    rc = main(["model", "scaling", "digits_lenet", "--nodes", "1", "--network", "none", "--compute-from",
               str(tmp_path / "layers.json")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "--layer-sum" in err and "Received: whole-network" in err, err
