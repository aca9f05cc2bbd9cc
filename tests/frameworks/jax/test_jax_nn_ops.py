"""The JAX converters of the neural-network operators (conv, pooling, Resize, normalization,
Dropout, recurrent) against onnx.reference on one-node models: traced under ``jax.jit`` and with
numpy inputs; gradients against finite differences or torch.autograd; training-mode
BatchNormalization against numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from deep500lite.frameworks.jax.ops import conv as conv_ops  # noqa: E402
from deep500lite.frameworks.jax.ops import normalization as norm_ops  # noqa: E402
from deep500lite.frameworks.jax.ops import recurrent as rnn_ops  # noqa: E402
from deep500lite.frameworks.jax.ops._common import NodeContext  # noqa: E402

pytestmark = pytest.mark.requires("jax")

CONVERTERS = {**conv_ops.CONVERTERS, **norm_ops.CONVERTERS, **rnn_ops.CONVERTERS}


def _reference(node, inputs, opset):
    """onnx.reference's outputs of the one-node model ``node`` on ``inputs`` (None for absent ones)."""
    names = [n for n in node.input if n]
    feeds = {n: v for n, v in zip(node.input, inputs) if n}
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(feeds[n].dtype), feeds[n].shape)
         for n in names],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in node.output if n])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, feeds)


def _convert(node, inputs, opset, static=(), jit=True, training=False, key=None, assign=None):
    """The converter's outputs as a list of numpy arrays (absent outputs dropped).

    Inputs at the indices in ``static`` stay numpy (values the converter needs while tracing);
    with ``jit`` the others are traced arguments of ``jax.jit``, else plain numpy too.
    """
    fn = CONVERTERS[node.op_type]
    ctx = NodeContext(node, opset, training=training, key=key, assign=assign)
    dynamic = [i for i, v in enumerate(inputs) if v is not None and i not in static]

    def call(*traced):
        args = list(inputs)
        for i, t in zip(dynamic, traced):
            args[i] = t
        out = fn(ctx, *args)
        return out if isinstance(out, tuple) else (out,)

    outs = jax.jit(call)(*[inputs[i] for i in dynamic]) if jit else call(*[inputs[i] for i in dynamic])
    return [np.asarray(o) for o, name in zip(outs, node.output) if name and o is not None]


def _check(node, inputs, opset=21, static=(), rtol=1e-5, atol=1e-5):
    """The converter (jitted and eager with numpy inputs) equals onnx.reference."""
    expected = _reference(node, inputs, opset)
    for jit in (True, False):
        got = _convert(node, inputs, opset, static=static, jit=jit)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.shape == e.shape, (g.shape, e.shape)
            np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol)


def _rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# ------------------------------------------------------------------------- Conv / ConvTranspose

CONV_CASES = [
    dict(x=(2, 3, 7, 7), w=(4, 3, 3, 3), attrs={}),
    dict(x=(1, 4, 8, 9), w=(6, 2, 3, 2), attrs=dict(group=2, strides=[2, 1], pads=[1, 0, 2, 1])),
    dict(x=(1, 2, 9, 9), w=(2, 2, 3, 3), attrs=dict(dilations=[2, 2], auto_pad="SAME_UPPER")),
    dict(x=(1, 2, 8, 7), w=(3, 2, 2, 3), attrs=dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    dict(x=(2, 3, 10), w=(4, 3, 3), attrs=dict(strides=[3], pads=[2, 1]), bias=True),
    dict(x=(1, 2, 4, 5, 5), w=(2, 2, 2, 3, 3), attrs=dict(auto_pad="VALID"), bias=True),
    dict(x=(1, 4, 6, 6), w=(4, 1, 3, 3), attrs=dict(group=4, pads=[1, 1, 1, 1]), bias=True),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=range(len(CONV_CASES)))
def test_conv_matches_reference(case, rng):
    inputs = [_rand(rng, *case["x"]), _rand(rng, *case["w"])]
    names = ["x", "w"]
    if case.get("bias"):
        inputs.append(_rand(rng, case["w"][0]))
        names.append("b")
    _check(helper.make_node("Conv", names, ["y"], **case["attrs"]), inputs, rtol=1e-4, atol=1e-4)


CONV_T_CASES = [
    dict(x=(1, 2, 3, 3), w=(2, 3, 3, 3), attrs={}),
    dict(x=(2, 4, 3, 4), w=(4, 2, 3, 2), attrs=dict(strides=[2, 3], pads=[1, 0, 0, 1]), bias=True),
    dict(x=(1, 1, 3, 3), w=(1, 2, 3, 3), attrs=dict(strides=[3, 2], output_padding=[1, 1])),
    dict(x=(1, 1, 3, 3), w=(1, 2, 3, 3), attrs=dict(strides=[3, 2], output_shape=[10, 8])),
    dict(x=(1, 1, 3, 3), w=(1, 2, 3, 3), attrs=dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    dict(x=(1, 1, 4, 3), w=(1, 2, 2, 3), attrs=dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    dict(x=(1, 2, 5), w=(2, 3, 3), attrs=dict(dilations=[2], strides=[2], pads=[2, 3]), bias=True),
    dict(x=(1, 2, 2, 3, 2), w=(2, 2, 2, 2, 2), attrs=dict(strides=[2, 1, 2])),
]


@pytest.mark.parametrize("case", CONV_T_CASES, ids=range(len(CONV_T_CASES)))
def test_conv_transpose_matches_reference(case, rng):
    inputs = [_rand(rng, *case["x"]), _rand(rng, *case["w"])]
    names = ["x", "w"]
    if case.get("bias"):
        group = case["attrs"].get("group", 1)
        inputs.append(_rand(rng, case["w"][1] * group))
        names.append("b")
    _check(helper.make_node("ConvTranspose", names, ["y"], **case["attrs"]), inputs, rtol=1e-4, atol=1e-4)


def test_grouped_conv_transpose_matches_torch(rng):
    # onnx.reference mishandles groups with several output channels each; torch is the oracle here.
    torch = pytest.importorskip("torch")
    x, w, b = _rand(rng, 2, 6, 4, 5), _rand(rng, 6, 2, 3, 3), _rand(rng, 6)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], group=3, strides=[2, 1], pads=[1, 0, 0, 1],
                            output_padding=[1, 0])
    got = _convert(node, [x, w, b], 21)[0]
    full = torch.nn.functional.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b),
                                                stride=(2, 1), output_padding=(1, 0), groups=3).numpy()
    np.testing.assert_allclose(got, full[:, :, 1:, :-1], rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------- pooling

POOL_CASES = [
    dict(x=(2, 3, 7, 7), attrs=dict(kernel_shape=[3, 3])),
    dict(x=(1, 2, 8, 9), attrs=dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 2, 1])),
    dict(x=(1, 2, 7, 8), attrs=dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    dict(x=(1, 2, 6, 7), attrs=dict(kernel_shape=[3, 3], strides=[2, 3], pads=[1, 1, 1, 1], ceil_mode=1)),
    dict(x=(1, 1, 9, 9), attrs=dict(kernel_shape=[2, 2], dilations=[2, 3], strides=[1, 2])),
    dict(x=(1, 2, 7, 6), attrs=dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_UPPER")),
    dict(x=(1, 2, 7, 6), attrs=dict(kernel_shape=[3, 2], strides=[2, 1], auto_pad="SAME_LOWER")),
    dict(x=(2, 3, 11), attrs=dict(kernel_shape=[4], strides=[3], pads=[2, 1])),
    dict(x=(1, 2, 4, 5, 6), attrs=dict(kernel_shape=[2, 2, 3], strides=[2, 1, 2], auto_pad="VALID")),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=range(len(POOL_CASES)))
def test_max_pool_matches_reference(case, rng):
    if case["attrs"].get("auto_pad") == "SAME_LOWER":
        case = dict(case, attrs=dict(case["attrs"], strides=[1, 1]))
    _check(helper.make_node("MaxPool", ["x"], ["y"], **case["attrs"]), [_rand(rng, *case["x"])])


# onnx.reference's MaxPool with unit strides and dilations takes an older path that reads 2-D pads
# as (top, bottom, left, right) and computes Indices wrongly, so those cases are checked against
# torch; its strided path uses floor(size / stride) outputs for SAME_LOWER where the ONNX spec (and
# this converter) use ceil, so SAME_LOWER is checked against the spec's explicit pads.

@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("case", [1, 3, 4], ids=str)
def test_max_pool_indices_match_reference(case, storage_order, rng):
    attrs = dict(POOL_CASES[case]["attrs"], storage_order=storage_order)
    _check(helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs), [_rand(rng, *POOL_CASES[case]["x"])], opset=12)


@pytest.mark.parametrize("pads", [[0, 0, 0, 0], [1, 0, 1, 1]])
def test_max_pool_unit_stride_indices_match_torch(pads, rng):
    torch = pytest.importorskip("torch")
    x = _rand(rng, 2, 3, 6, 5)
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 2], pads=pads)
    y, idx = _convert(node, [x], 12)
    padded = np.pad(x, [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])], constant_values=-np.inf)
    ty, tidx = torch.nn.functional.max_pool2d(torch.from_numpy(padded), (3, 2), 1, return_indices=True)
    # torch's indices address the padded plane: map them back to the input's flattened (N, C, H, W) position
    rows, cols = tidx.numpy() // padded.shape[3] - pads[0], tidx.numpy() % padded.shape[3] - pads[1]
    plane = np.arange(x.shape[0] * x.shape[1]).reshape(x.shape[0], x.shape[1], 1, 1) * x.shape[2] * x.shape[3]
    np.testing.assert_array_equal(y, ty.numpy())
    np.testing.assert_array_equal(idx, plane + rows * x.shape[3] + cols)


def test_max_pool_same_lower_strided_uses_spec_pads(rng):
    x = _rand(rng, 1, 2, 7, 6)
    # ceil(7 / 2) = 4 rows need 2 pad rows (1 before, 1 after); ceil(6 / 1) = 6 columns need 1 (before)
    got = _convert(helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 1],
                                    auto_pad="SAME_LOWER"), [x], 12)[0]
    expected = _reference(helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 1],
                                           pads=[1, 1, 1, 0]), [x], 12)[0]
    np.testing.assert_array_equal(got, expected)


def test_max_pool_integers(rng):
    x = rng.integers(0, 255, (1, 2, 5, 5)).astype(np.uint8)
    _check(helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2], pads=[1, 0, 0, 1]), [x],
           opset=12)


@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("case", POOL_CASES, ids=range(len(POOL_CASES)))
def test_average_pool_matches_reference(case, include_pad, rng):
    attrs = dict(case["attrs"], count_include_pad=include_pad)
    _check(helper.make_node("AveragePool", ["x"], ["y"], **attrs), [_rand(rng, *case["x"])])


@pytest.mark.parametrize("p", [2, 3])
@pytest.mark.parametrize("case", [0, 1, 4, 5], ids=str)
def test_lp_pool_matches_reference(case, p, rng):
    attrs = dict(POOL_CASES[case]["attrs"], p=p)
    _check(helper.make_node("LpPool", ["x"], ["y"], **attrs), [_rand(rng, *POOL_CASES[case]["x"])], rtol=1e-4)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools_match_reference(op, rng):
    _check(helper.make_node(op, ["x"], ["y"]), [_rand(rng, 2, 3, 5, 4)], rtol=1e-4)


@pytest.mark.parametrize("p", [2, 3])
def test_global_lp_pool_matches_numpy(p, rng):
    x = _rand(rng, 2, 3, 5, 4)
    got = _convert(helper.make_node("GlobalLpPool", ["x"], ["y"], p=p), [x], 21)[0]
    expected = (np.abs(x.astype(np.float64)) ** p).sum(axis=(2, 3), keepdims=True) ** (1 / p)
    np.testing.assert_allclose(got, expected, rtol=1e-5)


# ------------------------------------------------------------------------- Resize

RESIZE_CASES = [
    dict(attrs=dict(mode="nearest"), scales=[1, 1, 2, 3]),
    dict(attrs=dict(mode="nearest", nearest_mode="round_prefer_ceil", coordinate_transformation_mode="asymmetric"),
         scales=[1, 1, 0.6, 1.7]),
    dict(attrs=dict(mode="nearest", nearest_mode="floor", coordinate_transformation_mode="align_corners"),
         sizes=[2, 3, 7, 3]),
    dict(attrs=dict(mode="nearest", nearest_mode="ceil", coordinate_transformation_mode="half_pixel_symmetric"),
         scales=[1, 1, 1.5, 0.7]),
    dict(attrs=dict(mode="linear"), scales=[1, 1, 2, 1.5]),
    dict(attrs=dict(mode="linear", coordinate_transformation_mode="align_corners"), sizes=[2, 3, 3, 9]),
    dict(attrs=dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"), sizes=[2, 3, 1, 8]),
    dict(attrs=dict(mode="linear", antialias=1), scales=[1, 1, 0.5, 0.6]),
    dict(attrs=dict(mode="cubic"), scales=[1, 1, 1.6, 2]),
    dict(attrs=dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1, coordinate_transformation_mode="asymmetric"),
         scales=[1, 1, 0.8, 2.5]),
    dict(attrs=dict(mode="cubic", antialias=1), sizes=[2, 3, 3, 2]),
    dict(attrs=dict(mode="linear", axes=[3, 2], keep_aspect_ratio_policy="not_larger"), sizes=[9, 4]),
    dict(attrs=dict(mode="nearest", axes=[2, 3], keep_aspect_ratio_policy="not_smaller"), sizes=[9, 4]),
    dict(attrs=dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-3.0),
         sizes=[2, 3, 6, 5], roi=[0, 0, 0.2, -0.3, 1, 1, 0.9, 1.2]),
    dict(attrs=dict(mode="nearest", coordinate_transformation_mode="tf_crop_and_resize", axes=[3]),
         scales=[1.5], roi=[0.1, 0.8]),
]


@pytest.mark.parametrize("case", RESIZE_CASES, ids=range(len(RESIZE_CASES)))
def test_resize_matches_reference(case, rng):
    x = _rand(rng, 2, 3, 5, 6)
    roi = None if "roi" not in case else np.array(case["roi"], np.float32)
    scales = None if "scales" not in case else np.array(case["scales"], np.float32)
    sizes = None if "sizes" not in case else np.array(case["sizes"], np.int64)
    names = ["x", "roi" if roi is not None else "", "scales" if scales is not None else "",
             "sizes" if sizes is not None else ""]
    while not names[-1]:
        names.pop()
    node = helper.make_node("Resize", names, ["y"], **case["attrs"])
    _check(node, [x, roi, scales, sizes][:len(names)], opset=19, static=(1, 2, 3))


def test_resize_integers_and_old_opsets(rng):
    x = rng.integers(0, 255, (1, 2, 4, 5)).astype(np.uint8)
    scales = np.array([1, 1, 1.5, 0.8], np.float32)
    _check(helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear"), [x, None, scales], opset=13,
           static=(2,), atol=1.0)
    xf = _rand(rng, 1, 2, 4, 5)
    # Resize-10 takes (X, scales) and uses asymmetric coordinates; onnx.reference runs only the later form
    old = _convert(helper.make_node("Resize", ["x", "scales"], ["y"], mode="linear"), [xf, scales], 10, static=(1,))
    expected = _reference(helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear",
                                           coordinate_transformation_mode="asymmetric"), [xf, None, scales], 13)
    np.testing.assert_allclose(old[0], expected[0], rtol=1e-5, atol=1e-6)
    _check(helper.make_node("Upsample", ["x", "scales"], ["y"], mode="nearest"),
           [xf, np.array([1, 1, 2, 3], np.float32)], opset=9, static=(1,))
    up = np.array([1, 1, 2, 1.5], np.float32)
    got = _convert(helper.make_node("Upsample", ["x", "scales"], ["y"], mode="linear"), [xf, up], 9, static=(1,))
    expected = _reference(helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear",
                                           coordinate_transformation_mode="asymmetric"), [xf, None, up], 13)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-6)


def test_resize_scales_must_be_constant(rng):
    from deep500lite.errors import ModelError

    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")
    with pytest.raises(ModelError, match="constant"):
        _convert(node, [_rand(rng, 1, 1, 2, 2), None, np.array([1, 1, 2, 2], np.float32)], 19)


# ------------------------------------------------------------------------- normalization


def _bn_inputs(rng, shape):
    c = shape[1]
    return [_rand(rng, *shape), _rand(rng, c), _rand(rng, c), _rand(rng, c),
            rng.uniform(0.5, 2.0, c).astype(np.float32)]


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 5)], ids=str)
@pytest.mark.parametrize("opset", [9, 15])
def test_batch_norm_inference_matches_reference(shape, opset, rng):
    # onnx.reference's BatchNormalization-9 normalizes with momentum-blended statistics whenever
    # momentum is set (its default included); the spec's inference form is opset 15's training_mode=0.
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)
    inputs = _bn_inputs(rng, shape)
    expected = _reference(node, inputs, 15)[0]
    for jit in (True, False):
        np.testing.assert_allclose(_convert(node, inputs, opset, jit=jit)[0], expected, rtol=1e-4, atol=1e-5)


def test_batch_norm_training_mode_attribute_matches_reference(rng):
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1,
                            momentum=0.8)
    _check(node, _bn_inputs(rng, (3, 4, 2, 3)), opset=15, rtol=1e-4, atol=1e-5)


def test_batch_norm_training_trace_updates_running_stats(rng):
    x, s, b, m, v = _bn_inputs(rng, (5, 3, 4, 2))
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], momentum=0.7, epsilon=1e-4)
    recorded = {}
    y = _convert(node, [x, s, b, m, v], 15, training=True, jit=False,
                 assign=lambda i, value: recorded.__setitem__(i, np.asarray(value)))[0]
    xd = x.astype(np.float64)
    bm, bv = xd.mean(axis=(0, 2, 3)), xd.var(axis=(0, 2, 3))
    expected = (xd - bm[:, None, None]) / np.sqrt(bv[:, None, None] + 1e-4) * s[:, None, None] + b[:, None, None]
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)
    assert sorted(recorded) == [3, 4]
    np.testing.assert_allclose(recorded[3], m * 0.7 + bm * 0.3, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(recorded[4], v * 0.7 + bv * 0.3, rtol=1e-5, atol=1e-6)


def test_instance_norm_matches_reference(rng):
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-3)
    _check(node, [_rand(rng, 2, 3, 4, 5), _rand(rng, 3), _rand(rng, 3)], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axis,outputs", [(-1, ["y"]), (1, ["y", "mean", "inv"]), (-2, ["y", "mean"])])
def test_layer_norm_matches_reference(axis, outputs, rng):
    x = _rand(rng, 2, 3, 4, 5)
    tail = x.shape[axis % 4:]
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], outputs, axis=axis, epsilon=1e-3)
    _check(node, [x, _rand(rng, *tail), _rand(rng, *tail)], opset=17, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset", [18, 21])
def test_group_norm_matches_reference(opset, rng):
    groups = 2
    n_affine = groups if opset < 21 else 4
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=groups, epsilon=1e-3)
    _check(node, [_rand(rng, 2, 4, 3, 3), _rand(rng, n_affine), _rand(rng, n_affine)], opset=opset,
           rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("size", [3, 4])
def test_lrn_matches_reference(size, rng):
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=0.01, beta=0.6, bias=1.5)
    # onnx.reference loops over range(batch) where it means channels: batch == channels keeps it right
    _check(node, [_rand(rng, 5, 5, 3, 3)], rtol=1e-4, atol=1e-5)


def test_dropout_inference_is_identity_and_ratio_zero_keeps_all(rng):
    x = _rand(rng, 3, 4)
    node = helper.make_node("Dropout", ["x", "r"], ["y", "mask"])
    _check(node, [x, np.array(0.3, np.float32)], opset=13, static=(1,))
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"])
    _check(node, [x, np.array(0.0, np.float32), np.array(True)], opset=13, static=(1, 2))


def test_dropout_training_masks_with_the_key(rng):
    x = rng.uniform(1, 2, (200, 50)).astype(np.float32)
    node = helper.make_node("Dropout", ["x", "r"], ["y", "mask"])
    key = jax.random.PRNGKey(3)
    y, mask = _convert(node, [x, np.array(0.25, np.float32)], 13, static=(1,), training=True, key=key)
    assert mask.dtype == np.bool_ and 0.7 < mask.mean() < 0.8
    np.testing.assert_allclose(y, np.where(mask, x / 0.75, 0), rtol=1e-6)
    again = _convert(node, [x, np.array(0.25, np.float32)], 13, static=(1,), training=True, key=key)[1]
    np.testing.assert_array_equal(mask, again)
    other = _convert(node, [x, np.array(0.25, np.float32)], 13, static=(1,), training=True,
                     key=jax.random.PRNGKey(4))[1]
    assert (mask != other).any()
    # training_mode=False in the graph overrides the training trace
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y"])
    y = _convert(node, [x, np.array(0.25, np.float32), np.array(False)], 13, static=(1, 2), training=True, key=key)
    np.testing.assert_array_equal(y[0], x)


# ------------------------------------------------------------------------- recurrent

RNN_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
RNN_CASES = [
    ("RNN", dict(), dict()),
    ("RNN", dict(direction="bidirectional"), dict(bias=True, h0=True)),
    ("GRU", dict(), dict(bias=True)),
    ("GRU", dict(linear_before_reset=1, direction="bidirectional"), dict(bias=True, h0=True)),
    ("LSTM", dict(), dict(bias=True)),
    ("LSTM", dict(direction="bidirectional"), dict(bias=True, h0=True, peephole=True)),
    ("LSTM", dict(layout=1), dict(bias=True, h0=True)),
    ("GRU", dict(layout=1, direction="bidirectional"), dict(h0=True)),
]
# onnx.reference ignores clip, the activation attributes of GRU and LSTM, input_forget and
# sequence_lens: these cases are checked against the step-by-step numpy form of the ONNX equations.
RNN_NUMPY_CASES = [
    ("RNN", dict(direction="bidirectional", activations=["Relu", "LeakyRelu"], activation_alpha=[0.0, 0.2]),
     dict(bias=True, h0=True)),
    ("RNN", dict(direction="reverse", clip=0.8), dict(bias=True)),
    ("GRU", dict(activations=["HardSigmoid", "Softsign"], activation_alpha=[0.3], activation_beta=[0.4]),
     dict(h0=True)),
    ("GRU", dict(linear_before_reset=1, clip=0.5, direction="reverse"), dict(bias=True)),
    ("LSTM", dict(input_forget=1, clip=1.5, direction="reverse"), dict(bias=True)),
    ("LSTM", dict(activations=["Sigmoid", "Elu", "ScaledTanh", "HardSigmoid", "Tanh", "Affine"],
                  activation_alpha=[0.0, 1.2, 0.8, 0.3, 0.0, 0.5], activation_beta=[0.0, 0.0, 1.1, 0.4, 0.0, 0.1],
                  direction="bidirectional"), dict(bias=True, h0=True, peephole=True)),
    ("LSTM", dict(), dict(bias=True, h0=True, peephole=True)),  # also in reach of onnx.reference: checks the oracle
]

_NP_ACTS = {
    "sigmoid": lambda v, a, b: 1 / (1 + np.exp(-v)), "tanh": lambda v, a, b: np.tanh(v),
    "relu": lambda v, a, b: np.maximum(v, 0), "leakyrelu": lambda v, a, b: np.where(v >= 0, v, a * v),
    "hardsigmoid": lambda v, a, b: np.clip(a * v + b, 0, 1), "softsign": lambda v, a, b: v / (1 + np.abs(v)),
    "elu": lambda v, a, b: np.where(v >= 0, v, a * (np.exp(v) - 1)), "scaledtanh": lambda v, a, b: a * np.tanh(b * v),
    "affine": lambda v, a, b: a * v + b,
}


def _np_recurrent(op, attrs, inputs):
    """Y and Y_h (and Y_c) of layout-0 RNN/GRU/LSTM computed step by step in float64 from ONNX's equations."""
    x, w, r, b, _, h0, c0, p = ([None if v is None else v.astype(np.float64) for v in inputs] + [None] * 8)[:8]
    g = RNN_GATES[op]
    direction = attrs.get("direction", "forward")
    num_dir, hidden = w.shape[0], r.shape[-1]
    names = attrs.get("activations") or {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"],
                                         "LSTM": ["Sigmoid", "Tanh", "Tanh"]}[op] * num_dir
    alphas, betas = attrs.get("activation_alpha", []), attrs.get("activation_beta", [])
    acts = [(lambda v, k=n.lower(), a=(alphas[i] if i < len(alphas) else 0.0),
             bb=(betas[i] if i < len(betas) else 0.0): _NP_ACTS[k](v, a, bb)) for i, n in enumerate(names)]
    clip = attrs.get("clip")
    cl = (lambda v: np.clip(v, -clip, clip)) if clip is not None else (lambda v: v)
    seq, batch = x.shape[0], x.shape[1]
    ys, hs, cs = np.zeros((seq, num_dir, batch, hidden)), [], []
    for d in range(num_dir):
        f, gg, hh = (acts[d * (len(names) // num_dir):] + [None, None])[:3]
        wd, rd = w[d], r[d]
        wb, rb = (b[d, :g * hidden], b[d, g * hidden:]) if b is not None else (0.0, 0.0)
        h = h0[d] if h0 is not None else np.zeros((batch, hidden))
        c = c0[d] if c0 is not None else np.zeros((batch, hidden))
        order = range(seq - 1, -1, -1) if direction == "reverse" or d == 1 else range(seq)
        for t in order:
            xw, hr = x[t] @ wd.T + wb, h @ rd.T + rb
            if op == "RNN":
                h = f(cl(xw + hr))
            elif op == "GRU":
                xz, xr, xh = np.split(xw, 3, axis=-1)
                z = f(cl(xz + np.split(hr, 3, axis=-1)[0]))
                rg = f(cl(xr + np.split(hr, 3, axis=-1)[1]))
                rh, bh = rd[2 * hidden:], (rb[2 * hidden:] if b is not None else 0.0)
                if attrs.get("linear_before_reset"):
                    cand = xh + rg * (h @ rh.T + bh)
                else:
                    cand = xh + (rg * h) @ rh.T + bh
                h = (1 - z) * gg(cl(cand)) + z * h
            else:
                i, o, fg, cc = np.split(cl(xw + hr), 4, axis=-1)
                pi, po, pf = np.split(p[d], 3) if p is not None else (0.0, 0.0, 0.0)
                i = f(i + pi * c)
                fg = 1 - i if attrs.get("input_forget") else f(fg + pf * c)
                c = fg * c + i * gg(cc)
                h = f(o + po * c) * hh(c)
            ys[t, d] = h
        hs.append(h)
        cs.append(c)
    out = [ys, np.stack(hs)]
    return out + [np.stack(cs)] if op == "LSTM" else out


def _rnn_node_inputs(rng, op, attrs, parts, seq=5, batch=3, inp=4, hidden=6):
    num_dir = 2 if attrs.get("direction") == "bidirectional" else 1
    g = RNN_GATES[op]
    layout = attrs.get("layout", 0)
    x = _rand(rng, *((batch, seq, inp) if layout else (seq, batch, inp)))
    w, r = _rand(rng, num_dir, g * hidden, inp) * 0.5, _rand(rng, num_dir, g * hidden, hidden) * 0.5
    inputs = [x, w, r, _rand(rng, num_dir, 2 * g * hidden) if parts.get("bias") else None,
              parts.get("lens"), None]
    state_shape = (batch, num_dir, hidden) if layout else (num_dir, batch, hidden)
    if parts.get("h0"):
        inputs[5] = _rand(rng, *state_shape)
    if op == "LSTM":
        inputs += [_rand(rng, *state_shape) if parts.get("h0") else None,
                   _rand(rng, num_dir, 3 * hidden) if parts.get("peephole") else None]
    while inputs[-1] is None:
        inputs.pop()
    names = [n if v is not None else "" for n, v in zip(["x", "w", "r", "b", "lens", "h0", "c0", "p"], inputs)]
    outputs = ["y", "yh", "yc"] if op == "LSTM" else ["y", "yh"]
    return helper.make_node(op, names, outputs, hidden_size=hidden, **attrs), inputs


@pytest.mark.parametrize("op,attrs,parts", RNN_CASES, ids=range(len(RNN_CASES)))
def test_recurrent_matches_reference(op, attrs, parts, rng):
    node, inputs = _rnn_node_inputs(rng, op, attrs, parts)
    _check(node, inputs, opset=14, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_recurrent_sequence_lens_match_per_sequence_runs(op, direction, rng):
    # onnx.reference ignores sequence_lens: each sequence run alone on its own length is the oracle
    lens = np.array([5, 2, 4], np.int32)
    node, inputs = _rnn_node_inputs(rng, op, dict(direction=direction), dict(bias=True, h0=True, lens=lens))
    got = _convert(node, inputs, 14)
    plain = helper.make_node(op, [n if n != "lens" else "" for n in node.input], node.output,
                             hidden_size=6, direction=direction)
    for i, n in enumerate(lens):
        one = [v if v is None or k in (1, 2, 3, 4, 7) else (v[:n, i:i + 1] if k == 0 else v[:, i:i + 1])
               for k, v in enumerate(inputs)]
        one[4] = None
        expected = _reference(plain, one, 14)
        np.testing.assert_allclose(got[0][:n, :, i:i + 1], expected[0], rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(got[0][n:, :, i], 0)
        for g, e in zip(got[1:], expected[1:]):
            np.testing.assert_allclose(g[:, i:i + 1], e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op,attrs,parts", RNN_NUMPY_CASES, ids=range(len(RNN_NUMPY_CASES)))
def test_recurrent_matches_numpy_equations(op, attrs, parts, rng):
    node, inputs = _rnn_node_inputs(rng, op, attrs, parts)
    expected = _np_recurrent(op, attrs, inputs)
    if not attrs:
        for e, ref in zip(expected, _reference(node, inputs, 14)):
            np.testing.assert_allclose(e, ref, rtol=1e-4, atol=1e-5)
    for jit in (True, False):
        for g, e in zip(_convert(node, inputs, 14, jit=jit), expected):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------- gradients


def _jax_grads(node, inputs, opset, wrt, cotangent, static=(), training=False):
    """Gradients of ``sum(output0 * cotangent)`` with respect to the inputs at indices ``wrt``."""
    fn = CONVERTERS[node.op_type]
    ctx = NodeContext(node, opset, training=training)

    def loss(*diff):
        args = list(inputs)
        for i, v in zip(wrt, diff):
            args[i] = v
        out = fn(ctx, *args)
        out = out[0] if isinstance(out, tuple) else out
        return jnp.sum(out * cotangent)

    grads = jax.jit(jax.grad(loss, argnums=tuple(range(len(wrt)))))(*[jnp.asarray(inputs[i]) for i in wrt])
    return [np.asarray(g) for g in grads]


def _torch_grads(fn, inputs, cotangent):
    torch = pytest.importorskip("torch")
    leaves = [torch.tensor(v, requires_grad=True) for v in inputs]
    out = fn(*leaves)
    (out * torch.from_numpy(cotangent)).sum().backward()
    return [leaf.grad.numpy() for leaf in leaves]


def _assert_grads(got, expected):
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)


def test_conv_gradients_match_torch(rng):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x, w, b = _rand(rng, 2, 4, 7, 6), _rand(rng, 6, 2, 3, 2), _rand(rng, 6)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=2, strides=[2, 1], pads=[1, 0, 2, 1],
                            dilations=[1, 2])
    ct = _rand(rng, 2, 6, 4, 5)
    got = _jax_grads(node, [x, w, b], 21, (0, 1, 2), ct)
    expected = _torch_grads(lambda x, w, b: F.conv2d(F.pad(x, (0, 1, 1, 2)), w, b, stride=(2, 1), dilation=(1, 2),
                                                     groups=2), [x, w, b], ct)
    _assert_grads(got, expected)


def test_conv_transpose_gradients_match_torch(rng):
    torch = pytest.importorskip("torch")
    x, w, b = _rand(rng, 2, 4, 3, 4), _rand(rng, 4, 3, 3, 2), _rand(rng, 6)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], group=2, strides=[2, 2], pads=[1, 0, 1, 0],
                            output_padding=[1, 1], dilations=[1, 2])
    ct = _rand(rng, 2, 6, 6, 10)
    got = _jax_grads(node, [x, w, b], 21, (0, 1, 2), ct)
    expected = _torch_grads(lambda x, w, b: torch.nn.functional.conv_transpose2d(
        x, w, b, stride=2, padding=(1, 0), output_padding=1, groups=2, dilation=(1, 2)), [x, w, b], ct)
    _assert_grads(got, expected)


@pytest.mark.parametrize("dilations", [[1, 1], [2, 1]])
def test_max_pool_gradients_match_torch(dilations, rng):
    torch = pytest.importorskip("torch")
    x = _rand(rng, 2, 3, 9, 8)
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 1],
                            dilations=dilations, ceil_mode=1)
    y = torch.nn.functional.max_pool2d(torch.from_numpy(x), (3, 2), 2, 1, dilations, ceil_mode=True)
    ct = _rand(rng, *y.shape)
    got = _jax_grads(node, [x], 21, (0,), ct)
    expected = _torch_grads(lambda x: torch.nn.functional.max_pool2d(x, (3, 2), 2, 1, dilations, ceil_mode=True),
                            [x], ct)
    _assert_grads(got, expected)


@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool_gradients_match_torch(include_pad, rng):
    torch = pytest.importorskip("torch")
    x = _rand(rng, 2, 3, 8, 7)
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                            count_include_pad=include_pad, ceil_mode=1)

    def pool(x):
        return torch.nn.functional.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=bool(include_pad))
    ct = _rand(rng, *pool(torch.from_numpy(x)).shape)
    _assert_grads(_jax_grads(node, [x], 21, (0,), ct), _torch_grads(pool, [x], ct))


def test_global_pool_and_resize_gradients_match_torch(rng):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = _rand(rng, 2, 3, 5, 4)
    ct = _rand(rng, 2, 3, 1, 1)
    for op, fn in (("GlobalAveragePool", lambda x: x.mean(dim=(2, 3), keepdim=True)),
                   ("GlobalMaxPool", lambda x: x.amax(dim=(2, 3), keepdim=True))):
        _assert_grads(_jax_grads(helper.make_node(op, ["x"], ["y"]), [x], 21, (0,), ct), _torch_grads(fn, [x], ct))
    scales = np.array([1, 1, 2, 1.5], np.float32)
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")
    ct = _rand(rng, 2, 3, 10, 6)
    got = _jax_grads(node, [x, None, scales], 19, (0,), ct)
    expected = _torch_grads(lambda x: F.interpolate(x, size=(10, 6), mode="bilinear", align_corners=False), [x], ct)
    _assert_grads(got, expected)


def test_batch_norm_training_gradients_match_torch(rng):
    torch = pytest.importorskip("torch")
    x, s, b, m, v = _bn_inputs(rng, (4, 3, 3, 2))
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)
    ct = _rand(rng, *x.shape)
    got = _jax_grads(node, [x, s, b, m, v], 15, (0, 1, 2), ct, training=True)
    expected = _torch_grads(lambda x, s, b: torch.nn.functional.batch_norm(
        x, torch.from_numpy(m.copy()), torch.from_numpy(v.copy()), s, b, True, 0.1, 1e-3), [x, s, b], ct)
    _assert_grads(got, expected)


def test_layer_and_group_norm_gradients_match_torch(rng):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x, s, b = _rand(rng, 2, 3, 4, 5), _rand(rng, 4, 5), _rand(rng, 4, 5)
    ct = _rand(rng, *x.shape)
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=2, epsilon=1e-3)
    _assert_grads(_jax_grads(node, [x, s, b], 17, (0, 1, 2), ct),
                  _torch_grads(lambda x, s, b: F.layer_norm(x, (4, 5), s, b, 1e-3), [x, s, b], ct))
    x, s, b = _rand(rng, 2, 4, 3, 3), _rand(rng, 4), _rand(rng, 4)
    ct = _rand(rng, *x.shape)
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2, epsilon=1e-3)
    _assert_grads(_jax_grads(node, [x, s, b], 21, (0, 1, 2), ct),
                  _torch_grads(lambda x, s, b: F.group_norm(x, 2, s, b, 1e-3), [x, s, b], ct))


def test_lstm_gradients_match_torch(rng):
    torch = pytest.importorskip("torch")
    # ONNX gates are (i, o, f, c), torch's (i, f, c, o); biases are split the same way
    node, inputs = _rnn_node_inputs(rng, "LSTM", dict(direction="bidirectional"), dict(bias=True, h0=True))
    x, w, r, b, _, h0, c0 = inputs
    ct = _rand(rng, 5, 2, 3, 6)
    got = _jax_grads(node, inputs, 14, (0, 1, 2, 3), ct)

    def reorder(t, axis):
        i, o, f, c = torch.chunk(t, 4, dim=axis)
        return torch.cat([i, f, c, o], dim=axis)

    def run(x, w, r, b):
        lstm = torch.nn.LSTM(4, 6, bidirectional=True)
        params = {}
        for d, sfx in enumerate(["", "_reverse"]):
            params[f"weight_ih_l0{sfx}"] = reorder(w[d], 0)
            params[f"weight_hh_l0{sfx}"] = reorder(r[d], 0)
            params[f"bias_ih_l0{sfx}"] = reorder(b[d, :24], 0)
            params[f"bias_hh_l0{sfx}"] = reorder(b[d, 24:], 0)
        y, _ = torch.func.functional_call(lstm, params, (x, (torch.from_numpy(h0), torch.from_numpy(c0))))
        return y.reshape(5, 3, 2, 6).transpose(1, 2)
    _assert_grads(got, _torch_grads(run, [x, w, r, b], ct))


def test_dropout_reads_ratio_only_when_dropping_and_needs_a_constant_training_mode(rng):
    from deep500lite.errors import ModelError

    x = _rand(rng, 3, 4)
    node = helper.make_node("Dropout", ["x", "r"], ["y"])
    # inference: a traced ratio is never read
    np.testing.assert_array_equal(_convert(node, [x, np.array(0.5, np.float32)], 13)[0], x)
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y"])
    with pytest.raises(ModelError, match="training_mode"):
        _convert(node, [x, np.array(0.5, np.float32), np.array(True)], 13, static=(1,))
