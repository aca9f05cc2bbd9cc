"""The scaling model: built-in networks against published totals, and predictions that move the way they must."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from deep500lite.perfmodel import scaling as sc
from deep500lite.perfmodel import scaling_networks as sn
from deep500lite.errors import UserError
from deep500lite.lv3 import allreduce as ar


@pytest.mark.parametrize("name", sn.MODELS)
def test_built_in_networks_match_published_totals(name):
    m = sn.model_description(name)
    params, gmacs, _ = sn.PUBLISHED[name]
    # GoogLeNet's paper rounds ("about 6.8M", "1.5 billion"); the others are exact to the rounding shown.
    tol = 0.06 if name == "googlenet" else 0.01
    assert m.inference_params == pytest.approx(params, rel=tol)
    assert m.inference_gemm_macs / 1e9 == pytest.approx(gmacs, rel=tol)


def test_known_exact_parameter_counts_and_the_seeds_gradient_sizes():
    # exact counts from the layer shapes (torchvision's resnet50/vgg16 and the two-tower AlexNet)
    assert sn.model_description("resnet50").params == 25_557_032
    assert sn.model_description("vgg16").params == 138_357_544
    assert sn.model_description("alexnet").params == 60_965_224
    # seed 000, Table II: model size ~250 MB (AlexNet) and ~50 MB (GoogLeNet, trained with its
    # auxiliary classifiers); ~55M of AlexNet's weights in the FC layers
    assert sn.model_description("alexnet").gradient_bytes / 1e6 == pytest.approx(250, rel=0.05)
    assert sn.model_description("googlenet").gradient_bytes / 1e6 == pytest.approx(50, rel=0.08)
    fc = sum(layer.params for layer in sn.model_description("alexnet").layers if layer.kind == "fc")
    assert fc / 1e6 == pytest.approx(55, rel=0.08)  # 58.6M: the seed rounds down


def test_onnx_description_counts_a_conv_and_gemm_like_the_builder():
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.zeros((8, 3, 3, 3), np.float32), "w")
    b = numpy_helper.from_array(np.zeros(8, np.float32), "b")
    fw = numpy_helper.from_array(np.zeros((8 * 30 * 30, 10), np.float32), "fw")
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
         helper.make_node("Flatten", ["c"], ["f"], name="flat"),
         helper.make_node("MatMul", ["f", "fw"], ["y"], name="fc")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], [w, b, fw])
    d = sn.describe_onnx(helper.make_model(g), "tiny")
    s = sn._Shapes(3, 32, 32)
    s.conv("conv", 8, 3)
    assert d.layers[0].macs == s.layers[0].macs == 8 * 30 * 30 * 27 and d.layers[0].params == 8 * 27 + 8
    assert d.layers[2].macs == 8 * 30 * 30 * 10 and d.params == 8 * 27 + 8 + 7200 * 10
    assert d.sample_bytes == 3 * 32 * 32 * 4
    assert onnx.checker.check_model(helper.make_model(g)) is None


def setup(name="alexnet", network="fdr-ib", acc="k80", **kw):
    return sc.ScalingSetup(sn.model_description(name), sn.interconnect(network), sn.accelerator(acc), **kw)


def test_compute_is_a_roofline_with_a_skinny_gemm_efficiency():
    acc = sn.accelerator("k80")
    fc6 = next(layer for layer in sn.model_description("alexnet").layers if layer.name == "fc6")
    per_sample = [(sc.layer_time(fc6, b, acc) - acc.launch) / b for b in (1, 4, 16, 64, 256, 1024)]
    assert per_sample == sorted(per_sample, reverse=True)  # skinnier GEMM, more time per sample
    big = sc.layer_time(fc6, 4096, acc) - acc.launch
    flops = 2 * fc6.macs * 4096
    eff = acc.efficiency * 4096 / (4096 + acc.m_half)
    assert big == pytest.approx(max(flops / (acc.flops * eff), (fc6.in_elems + fc6.out_elems) * 4096 * 4 / acc.bandwidth
                                    + fc6.params * 4 / acc.bandwidth))
    # the backward pass of a layer with weights does twice the forward FLOP
    conv = sn.model_description("vgg16").layers[2]
    assert sc.layer_time(conv, 64, acc, backward=True) - acc.launch == pytest.approx(
        2 * (sc.layer_time(conv, 64, acc) - acc.launch), rel=0.01)


def test_communication_matches_the_alpha_beta_formulas_without_overlap():
    s = setup("vgg16", "edr-ib", "v100", overlap=False, fusion_bytes=1 << 40, algorithm="ring")
    p = sc.predict_step(s, 16, 32)
    n = s.model.gradient_bytes
    gamma = 3 / s.accelerator.bandwidth
    expected = ar.allreduce_cost("ring", n, 16, ar.AlphaBeta(s.network.alpha, s.network.beta, gamma))
    assert p.buckets == 1 and p.comm == pytest.approx(expected) and p.comm_exposed == pytest.approx(expected)
    assert p.step == pytest.approx(p.forward + p.backward + p.update + expected)


def test_overlap_and_fusion_hide_communication_and_free_communication_costs_nothing():
    base = setup("alexnet")
    over = sc.predict_step(base, 8, 32)
    serial = sc.predict_step(dataclasses.replace(base, overlap=False), 8, 32)
    assert 0 <= over.comm_exposed < serial.comm_exposed and over.step < serial.step
    per_layer = sc.predict_step(dataclasses.replace(base, fusion_bytes=0), 8, 32)
    assert per_layer.buckets == sum(1 for layer in base.model.layers if layer.params) > over.buckets
    free = sc.predict_step(setup("alexnet", "none"), 8, 32)
    assert free.comm == 0 and free.step == pytest.approx(free.compute)


def test_predictions_are_monotone_where_they_must_be():
    nodes = sc.parse_nodes("1..1024")
    weak = sc.scaling_sweep(setup("resnet50", "25gbe", "v100"), nodes, 64, "weak", min_efficiency=0)
    comm = [r.comm for r in weak.rows]
    assert comm == sorted(comm) and [r.step for r in weak.rows] == sorted(r.step for r in weak.rows)
    eff = [weak.efficiency(r) for r in weak.rows]
    assert all(a >= b - 1e-12 for a, b in zip(eff, eff[1:])) and eff[0] == pytest.approx(1.0)
    # faster networks never make a step slower
    for n in (2, 64, 1024):
        times = [sc.predict_step(setup("resnet50", net, "v100"), n, 64).step for net in ("25gbe", "100gbe", "none")]
        assert times == sorted(times, reverse=True)
    # strong scaling: compute per step shrinks with more nodes, never below the batch-1 limit
    strong = sc.scaling_sweep(setup("googlenet", "none"), nodes, 32, "strong", min_efficiency=0, min_gain=1.0)
    compute = [r.compute for r in strong.rows]
    assert compute == sorted(compute, reverse=True)
    assert [r.nodes for r in strong.rows] == [1, 2, 4, 8, 16, 32] and strong.infeasible == [64, 128, 256, 512, 1024]


@pytest.mark.parametrize("name,batch", [("googlenet", 32), ("alexnet", 256)])
def test_seed_hard_limit_of_strong_scaling_with_free_communication(name, batch):
    # seed 000: "GoogLeNet: no scaling beyond 32 nodes, AlexNet: limit at 256 nodes" (b > 0)
    r = sc.scaling_sweep(setup(name, "none"), sc.parse_nodes("1..4096"), batch, "strong", min_efficiency=0,
                         min_gain=1.0)
    assert r.stop == batch and "below one sample" in r.reason


def test_alexnet_is_communication_bound_long_before_googlenet_on_fdr():
    nodes = sc.parse_nodes("1..256")
    stops = {}
    for name in ("alexnet", "googlenet"):
        r = sc.scaling_sweep(setup(name, "fdr-ib", overlap=False), nodes, 256, "strong")
        stops[name] = r
    assert "communication-bound" in stops["alexnet"].reason
    assert stops["alexnet"].stop * 4 <= stops["googlenet"].stop


def test_io_small_files_and_a_shared_file_system_limit_scaling():
    io = sc.IOModel(sample_bytes=110_000, pattern="small-files", fs_bandwidth=10e9)
    assert io.seconds(32, 1) == pytest.approx(32 * (1e-3 + 110_000 / 10e9))
    assert io.seconds(32, 1000) == pytest.approx(32 * (1e-3 + 110_000 / 10e6))
    packed = sc.IOModel(pattern="packed", fs_bandwidth=10e9)
    assert packed.seconds(32, 8) < io.seconds(32, 8)
    s = setup("resnet50", "none", "v100", io=io)
    r = sc.scaling_sweep(s, sc.parse_nodes("1..4096"), 64, "weak")
    assert r.stop is not None and r.stop < 4096 and "I/O-bound" in r.reason


def test_hierarchical_allreduce_and_bad_input():
    s = setup("resnet50", "25gbe", "p100", per_node=4, intra=sn.interconnect("pcie3"))
    one = sc.predict_step(s, 1, 64)
    assert one.accelerators == 4 and one.comm > 0  # the intra-node reduce-scatter and allgather
    assert sc.predict_step(s, 128, 64).comm > one.comm
    with pytest.raises(UserError, match="Allowed values are 'auto'.*Received: 'fast'"):
        setup(algorithm="fast")
    with pytest.raises(UserError, match="Allowed values are 'strong', 'weak'. Received: 'medium'"):
        sc.scaling_sweep(setup(), [1], 8, "medium")
    with pytest.raises(UserError, match=r"Received: '4\.\.1'"):
        sc.parse_nodes("4..1")
    assert sc.parse_nodes("1..4096")[-1] == 4096 and sc.parse_nodes("3,1") == [1, 3] and sc.parse_nodes("6") == [6]
    assert sc.parse_nodes("1..12") == [1, 2, 4, 8, 12]
    with pytest.raises(UserError, match="Allowed values are 'fdr-ib'.*Received: 'token-ring'"):
        sn.interconnect("token-ring")
    assert sn.interconnect("2e-6,12.5e9").beta == pytest.approx(1 / 12.5e9)
    with pytest.raises(UserError, match="Received: 'abacus'"):
        sn.accelerator("abacus")
    with pytest.raises(UserError, match="Allowed values are 'alexnet'.*Received: 'lenet5'"):
        sn.model_description("lenet5")
    assert math.isinf(sn.interconnect("none").bandwidth)


def test_io_model_from_a_bench_dataset_measurement():
    data = {"samples": 1000, "bytes": {"files": 4_000_000, "shard": 3_200_000},
            "throughput_samples_per_s": {"files": {"median": 2000.0}, "shard": {"median": 40000.0}}}
    io = sc.IOModel.from_dataset_bench(data, "small-files")
    assert io.node_bandwidth == pytest.approx(3200 * 40000) and io.file_latency == pytest.approx(1 / 2000 - 1 / 40000)
    # reading b samples as small files takes what the benchmark measured per sample
    assert io.seconds(64, 1) == pytest.approx(64 / 2000)
    assert sc.IOModel.from_dataset_bench(data, "packed").seconds(64, 1) == pytest.approx(64 / 40000)
    with pytest.raises(UserError, match="bench dataset --json.*Received:"):
        sc.IOModel.from_dataset_bench({"samples": 3}, "packed")


def test_gemm_efficiency_fit_recovers_a_known_curve_and_measures_this_machine():
    peak = 100e9
    batches = [1, 4, 16, 64, 256]
    rates = [peak * 0.8 * b / (b + 12.0) for b in batches]
    eff, m_half = sn.fit_gemm_efficiency(batches, rates, peak)
    assert eff == pytest.approx(0.8) and m_half == pytest.approx(12.0)
    got_b, got_r = sn.measure_gemm_rates((1, 64), k=256, max_time=0.01)
    # rates only: which is faster depends on the caches and on the other programs of a shared machine
    assert got_b == [1, 64] and len(got_r) == 2 and min(got_r) > 0
    with pytest.raises(UserError, match="Received: batches"):
        sn.fit_gemm_efficiency([1], [1.0], peak)


def test_ranks_beyond_the_host_cores_time_share_them():
    s = setup("resnet50", "none", "v100", host_cores=2)
    one, two, four = (sc.predict_step(s, n, 8) for n in (1, 2, 4))
    assert one.compute == pytest.approx(two.compute) and four.compute == pytest.approx(2 * two.compute)
