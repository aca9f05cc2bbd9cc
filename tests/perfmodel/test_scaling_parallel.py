"""The scaling model of pipeline, spatial and tensor parallelism (deep500lite.perfmodel.scaling_parallel)."""

from __future__ import annotations

import pytest

from deep500lite.perfmodel.scaling_parallel import predict_pipeline, predict_spatial, predict_tensor
from deep500lite.lv3.allreduce import AlphaBeta

FREE = AlphaBeta(0.0, 0.0)


@pytest.mark.parametrize("p,m", [(2, 1), (2, 4), (3, 4), (4, 8)])
def test_pipeline_with_free_messages_has_the_gpipe_bubble(p, m):
    pred = predict_pipeline(1.2, p, m, 4096, FREE)
    assert pred.idle_fraction == pytest.approx((p - 1) / (m + p - 1))
    assert pred.step == pytest.approx(1.2 / (p * m) * (m + p - 1))
    assert pred.compute == pytest.approx(1.2 / p)


def test_pipeline_messages_cost_alpha_plus_beta_per_micro_batch_each_way():
    link = AlphaBeta(1e-5, 1e-9)
    pred = predict_pipeline(0.0, 3, 4, 8000, link)
    # 6 slots, each a send of a quarter of the activation and a receive of its gradient
    assert pred.step == pytest.approx(6 * 2 * (1e-5 + 1e-9 * 2000))
    assert pred.bytes_per_rank == 8000
    assert predict_pipeline(0.5, 1, 4, 8000, link).step == pytest.approx(0.5)


def test_spatial_adds_halo_messages_allreduce_and_gather():
    link = AlphaBeta(2e-6, 1e-9)
    pred = predict_spatial(0.8, 2, [1000, 500], 0, 4000, link)
    halo = 4 * (2e-6 + 1e-9 * 1000) + 4 * (2e-6 + 1e-9 * 500)
    gather = 1 * (2e-6 + 1e-9 * 2000)
    assert pred.communication == pytest.approx(halo + gather)
    assert pred.step == pytest.approx(0.4 + halo + gather)
    assert pred.bytes_per_rank == pytest.approx(4 * 1500 + 2000)
    assert predict_spatial(0.8, 1, [1000], 100, 4000, link).step == 0.8


def test_tensor_bytes_are_two_allreduces_per_pair():
    pred = predict_tensor(0.9, 0.1, 4, 16, [(64, 10), (10, 8)], FREE)
    sizes = [16 * f * 4 for f in (64, 10, 10, 8)]
    assert pred.bytes_per_rank == sum(2 * 3 * n // 4 for n in sizes)
    assert pred.step == pytest.approx(0.9 / 4 + 0.1)


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match="micro_batches must be an integer >= 1. Received: micro_batches=0"):
        predict_pipeline(1.0, 2, 0, 10, FREE)
    with pytest.raises(ValueError, match="ranks must be an integer >= 1. Received: ranks=0"):
        predict_tensor(1.0, 0.0, 0, 8, [(4, 4)], FREE)
    with pytest.raises(ValueError, match=r"halo_bytes\[1\] must be a number >= 0"):
        predict_spatial(1.0, 2, [10, -1], 0, 0, FREE)


# ------------------------------------------------------------------ a network of the scaling model
def test_balanced_cuts_split_the_time_evenly_and_keep_a_layer_per_stage():
    from deep500lite.perfmodel.scaling_parallel import balanced_cuts

    assert balanced_cuts([1, 1, 1, 1], 2) == [1]
    assert balanced_cuts([1, 1, 1, 1], 4) == [0, 1, 2]
    assert balanced_cuts([10, 1, 1, 1], 3) == [0, 1]  # the heavy layer alone, then one layer at least each
    assert balanced_cuts([1, 1, 1, 10], 3) == [1, 2]
    assert balanced_cuts([3.0], 1) == []


def test_predict_model_pipeline_uses_the_cut_layers_outputs():
    from deep500lite.perfmodel import scaling_networks as sn
    from deep500lite.perfmodel.scaling import compute_times
    from deep500lite.perfmodel.scaling_parallel import balanced_cuts, predict_model

    model, acc = sn.model_description("alexnet"), sn.accelerator("v100")
    fwd, bwd, update = compute_times(model, 32, acc)
    per_layer = [f + b for f, b in zip(fwd, bwd)]
    cuts = balanced_cuts(per_layer, 3)
    act = sum(model.layers[c].out_elems for c in cuts) / 2 * 4 * 32
    got = predict_model(model, "pipeline", 3, 32, acc, FREE, micro_batches=2)
    want = predict_pipeline(sum(per_layer) + update, 3, 2, act, FREE)
    assert got == want and got.idle_fraction == pytest.approx(2 / 4)
    with pytest.raises(ValueError, match="at most one stage per layer"):
        predict_model(model, "pipeline", 12, 32, acc, FREE)
    with pytest.raises(ValueError, match="needs halo_bytes"):
        predict_model(model, "spatial", 2, 32, acc, FREE)
    with pytest.raises(ValueError, match="scheme must be one of"):
        predict_model(model, "data", 2, 32, acc, FREE)
