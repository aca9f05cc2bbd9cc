"""The torch converters real models need (#14): GatherND, ScatterND, ScatterElements,
GroupNormalization, Resize (added), and Gelu, HardSwish, HardSigmoid, Mish, LayerNormalization,
InstanceNormalization, Einsum, Trilu, CumSum, TopK, DepthToSpace/SpaceToDepth, GatherElements —
values against onnx.reference beyond ONNX's node tests, gradients by ``torch.autograd.gradcheck``
in float64, opset differences, refusals named when the node is built, and training through them
against torch autograd."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch")

from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import deep500lite as d5  # noqa: E402
from deep500lite.errors import UnsupportedOperatorError  # noqa: E402
from deep500lite.frameworks.torch.ops import NodeSpec, build_node  # noqa: E402

_ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
         np.dtype(np.int64): TensorProto.INT64, np.dtype(np.uint8): TensorProto.UINT8}


def _node(op, inputs, **attrs):
    return helper.make_node(op, list(inputs), ["y"], **attrs)


def _function(node, opset=21, consts=None):
    return build_node(NodeSpec(node, opset, consts or [None] * len(node.input), torch.device("cpu")))


def _reference(node, feeds, opset=21):
    """``node`` on ``feeds`` (name -> array, in input order) by onnx.reference."""
    inputs = [helper.make_tensor_value_info(n, _ELEM[v.dtype], v.shape) for n, v in feeds.items()]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, feeds)[0]


def _torch_run(node, feeds, opset=21):
    return _function(node, opset)(*[torch.from_numpy(v) for v in feeds.values()]).numpy()


def _gradcheck(node, feeds, differentiable, opset=21):
    """gradcheck of ``node`` with respect to the named float64 inputs."""
    fn = _function(node, opset)
    tensors = {n: torch.from_numpy(np.array(v)) for n, v in feeds.items()}
    names = list(feeds)

    def f(*xs):
        args = dict(tensors)
        args.update(zip(differentiable, xs))
        return fn(*[args[n] for n in names])
    leaves = [tensors[n].clone().requires_grad_(True) for n in differentiable]
    assert torch.autograd.gradcheck(f, leaves, eps=1e-6, atol=1e-5)


# ----------------------------------------------------------------- gather/scatter
def test_gather_elements_with_many_indices_matches_numpy(rng):
    x = rng.standard_normal((40, 50)).astype(np.float32)
    idx = rng.integers(-40, 40, size=(300, 50)).astype(np.int64)
    got = _torch_run(_node("GatherElements", ["x", "i"], axis=0), {"x": x, "i": idx})
    np.testing.assert_array_equal(got, np.take_along_axis(x, np.where(idx < 0, idx + 40, idx), axis=0))


@pytest.mark.parametrize("batch_dims", [0, 1, 2])
def test_gather_nd_matches_reference_and_differentiates(rng, batch_dims):
    x = rng.standard_normal((2, 3, 4, 5))
    k = 4 - batch_dims - 1
    dims = x.shape[batch_dims:batch_dims + k]
    idx = np.stack([rng.integers(-d, d, size=(*x.shape[:batch_dims], 6)) for d in dims], axis=-1).astype(np.int64)
    node = _node("GatherND", ["x", "i"], batch_dims=batch_dims)
    feeds = {"x": x, "i": idx}
    np.testing.assert_allclose(_torch_run(node, feeds), _reference(node, feeds), rtol=1e-12)
    _gradcheck(node, feeds, ["x"])


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_reductions_match_reference_and_differentiate(rng, reduction):
    x = rng.standard_normal((5, 4, 3))
    # Distinct indices: with repeats, 'none' is undefined and max/min gradients pick one of the ties.
    idx = np.array([[[1, 2]], [[4, 0]], [[-1, 3]], [[0, 0]]], np.int64)
    updates = rng.standard_normal((4, 1, 3))
    node = _node("ScatterND", ["x", "i", "u"], reduction=reduction)
    feeds = {"x": x, "i": idx, "u": updates}
    np.testing.assert_allclose(_torch_run(node, feeds, 18), _reference(node, feeds, 18), rtol=1e-12)
    _gradcheck(node, feeds, ["x", "u"], 18)


def test_scatter_nd_add_accumulates_repeated_indices(rng):
    x = rng.standard_normal((4, 3))
    idx = np.array([[1], [1], [3], [1]], np.int64)
    updates = rng.standard_normal((4, 3))
    node = _node("ScatterND", ["x", "i", "u"], reduction="add")
    feeds = {"x": x, "i": idx, "u": updates}
    np.testing.assert_allclose(_torch_run(node, feeds, 18), _reference(node, feeds, 18), rtol=1e-12)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, -1])
def test_scatter_elements_matches_reference_and_differentiates(rng, reduction, axis):
    x = rng.standard_normal((4, 5))
    idx = np.stack([rng.permutation(5)[:3] - 2 for _ in range(4)]) if axis == -1 else \
        np.stack([rng.permutation(4)[:2] for _ in range(5)], axis=1)
    updates = rng.standard_normal(idx.shape)
    node = _node("ScatterElements", ["x", "i", "u"], axis=axis, reduction=reduction)
    feeds = {"x": x, "i": idx.astype(np.int64), "u": updates}
    np.testing.assert_allclose(_torch_run(node, feeds, 18), _reference(node, feeds, 18), rtol=1e-12)
    _gradcheck(node, feeds, ["x", "u"], 18)


def test_unknown_scatter_reduction_is_refused_when_built():
    with pytest.raises(UnsupportedOperatorError, match="reduction 'none'.*Received: reduction='mean'"):
        _function(_node("ScatterND", ["x", "i", "u"], reduction="mean"), 18)


# ------------------------------------------------------------ GroupNormalization
def test_group_normalization_opset18_scales_per_group_and_opset21_per_channel(rng):
    x = rng.standard_normal((2, 6, 3, 2))
    scale_g, bias_g = rng.standard_normal(3), rng.standard_normal(3)
    node = _node("GroupNormalization", ["x", "s", "b"], num_groups=3, epsilon=1e-3)
    per_group = _torch_run(node, {"x": x, "s": scale_g, "b": bias_g}, 18)
    per_channel = _torch_run(node, {"x": x, "s": np.repeat(scale_g, 2), "b": np.repeat(bias_g, 2)}, 21)
    np.testing.assert_allclose(per_group, per_channel, rtol=1e-12)
    feeds = {"x": x, "s": np.repeat(scale_g, 2), "b": np.repeat(bias_g, 2)}
    # onnx.reference runs GroupNormalization as its function body, which computes in float32 (stash_type=1).
    np.testing.assert_allclose(per_channel, _reference(node, feeds, 21), rtol=1e-5, atol=1e-6)
    _gradcheck(node, feeds, ["x", "s", "b"], 21)
    _gradcheck(node, {"x": x, "s": scale_g, "b": bias_g}, ["x", "s", "b"], 18)


# ------------------------------------------------------------------------ Resize
_RESIZE_CASES = [
    dict(mode="nearest", coordinate_transformation_mode=c, nearest_mode=m)
    for c in ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric")
    for m in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
] + [
    dict(mode=m, coordinate_transformation_mode=c)
    for m in ("linear", "cubic")
    for c in ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric")
] + [
    dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1),
    dict(mode="linear", antialias=1),
    dict(mode="cubic", antialias=1),
]


@pytest.mark.parametrize("scales", [(1.0, 1.0, 1.7, 0.6), (1.0, 1.0, 0.45, 2.5)], ids=["mixed", "mixed2"])
@pytest.mark.parametrize("attrs", _RESIZE_CASES, ids=lambda a: "-".join(str(v) for v in a.values()))
def test_resize_matches_reference_and_differentiates(rng, attrs, scales):
    x = rng.standard_normal((1, 2, 7, 5))
    node = _node("Resize", ["x", "", "scales"], **attrs)
    feeds = {"x": x, "scales": np.array(scales, np.float32)}
    fn = _function(node, 19)
    got = fn(torch.from_numpy(x), None, torch.from_numpy(feeds["scales"])).numpy()
    expected = _reference(node, feeds, 19)
    assert got.shape == expected.shape
    # onnx.reference rounds its cubic coefficients through float32 (cubic_coeff_a is a numpy float32 there);
    # the torch weights are float64 throughout.
    tol = dict(rtol=1e-5, atol=1e-5) if attrs["mode"] == "cubic" else dict(rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got, expected, **tol)
    leaf = torch.from_numpy(x).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: fn(t, None, torch.from_numpy(feeds["scales"])), [leaf], atol=1e-5)


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize_sizes_with_axes_and_policy_match_reference(rng, policy):
    x = rng.standard_normal((2, 3, 6, 4)).astype(np.float32)
    node = _node("Resize", ["x", "", "", "sizes"], mode="linear", axes=[3, 2], keep_aspect_ratio_policy=policy)
    feeds = {"x": x, "sizes": np.array([7, 9], np.int64)}
    got = _function(node, 19)(torch.from_numpy(x), None, None, torch.from_numpy(feeds["sizes"])).numpy()
    np.testing.assert_allclose(got, _reference(node, feeds, 19), rtol=1e-5, atol=1e-6)


def test_resize_tf_crop_and_resize_extrapolates_and_differentiates(rng):
    x = rng.standard_normal((1, 1, 5, 6))
    node = _node("Resize", ["x", "roi", "", "sizes"], mode="linear",
                 coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=2.5)
    roi = np.array([0, 0, -0.2, 0.3, 1, 1, 0.9, 1.4], np.float32)
    sizes = np.array([1, 1, 4, 7], np.int64)
    fn = _function(node, 19)
    got = fn(torch.from_numpy(x), torch.from_numpy(roi), None, torch.from_numpy(sizes)).numpy()
    # onnx.reference maps coordinates through the float32 roi in float32 arithmetic.
    expected = _reference(node, {"x": x, "roi": roi, "sizes": sizes}, 19)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got == 2.5, expected == 2.5)
    assert (got == 2.5).any()
    leaf = torch.from_numpy(x).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: fn(t, torch.from_numpy(roi), None, torch.from_numpy(sizes)), [leaf])


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_of_integers_matches_reference(rng, mode):
    x = rng.integers(0, 256, size=(1, 1, 4, 5)).astype(np.uint8)
    node = _node("Resize", ["x", "", "scales"], mode=mode)
    feeds = {"x": x, "scales": np.array([1, 1, 1.5, 0.8], np.float32)}
    got = _function(node, 19)(torch.from_numpy(x), None, torch.from_numpy(feeds["scales"])).numpy()
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, _reference(node, feeds, 19))


@pytest.mark.parametrize("attrs,named", [
    (dict(mode="bicubic"), "mode='bicubic'"),
    (dict(coordinate_transformation_mode="tf_half_pixel_for_nn"), "tf_half_pixel_for_nn"),
    (dict(mode="nearest", antialias=1), "antialias=1"),
])
def test_resize_refuses_undefined_attributes_when_built(attrs, named):
    with pytest.raises(UnsupportedOperatorError, match=f"{named}.*Received|Received.*{named}"):
        _function(_node("Resize", ["x", "", "scales"], **attrs), 19)


def test_resize_in_a_model_with_constant_scales_matches_reference(rng):
    """Upsampling after a convolution, its scales an initializer: inference against onnx.reference."""
    w = rng.standard_normal((2, 1, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c", "", "s"], ["y"], mode="linear")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.reshape(-1)),
                     helper.make_tensor("s", TensorProto.FLOAT, [4], [1, 1, 2, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    x = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    got = d5.executor(d5.Network(model), "torch").inference({"x": x})["y"]
    np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert got.shape == (1, 2, 8, 8)


# ----------------------------------- the other operators real models use: values and gradients
def _other_ops(rng):
    x = rng.standard_normal((2, 4, 3, 2))
    return {
        "gelu": (_node("Gelu", ["x"]), {"x": x}, 20),
        "gelu_tanh": (_node("Gelu", ["x"], approximate="tanh"), {"x": x}, 20),
        "hardswish": (_node("HardSwish", ["x"]), {"x": x * 4}, 21),
        "hardsigmoid": (_node("HardSigmoid", ["x"], alpha=0.3, beta=0.4), {"x": x}, 21),
        "mish": (_node("Mish", ["x"]), {"x": x}, 21),
        "layer_norm": (_node("LayerNormalization", ["x", "s", "b"], axis=-2),
                       {"x": x, "s": rng.standard_normal((3, 2)), "b": rng.standard_normal((3, 2))}, 21),
        "instance_norm": (_node("InstanceNormalization", ["x", "s", "b"]),
                          {"x": x, "s": rng.standard_normal(4), "b": rng.standard_normal(4)}, 21),
        "einsum": (_node("Einsum", ["x", "w"], equation="bchw,wk->bkch"),
                   {"x": x, "w": rng.standard_normal((2, 5))}, 21),
        "trilu": (_node("Trilu", ["x", "k"], upper=0), {"x": x, "k": np.array(-1, np.int64)}, 21),
        "cumsum": (_node("CumSum", ["x", "a"], exclusive=1, reverse=1), {"x": x, "a": np.array(1, np.int64)}, 21),
        "topk": (helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=1, largest=0),
                 {"x": x, "k": np.array([3], np.int64)}, 21),
        "depth_to_space": (_node("DepthToSpace", ["x"], blocksize=2, mode="CRD"), {"x": x}, 21),
        "space_to_depth": (_node("SpaceToDepth", ["x"], blocksize=2), {"x": rng.standard_normal((1, 2, 4, 6))}, 21),
    }


@pytest.mark.parametrize("name", sorted(_other_ops(np.random.default_rng(0))))
def test_other_model_operators_match_reference_and_differentiate(rng, name):
    node, feeds, opset = _other_ops(rng)[name]
    fn = _function(node, opset)
    got = fn(*[torch.from_numpy(np.array(v)) for v in feeds.values()])
    got = got[0] if isinstance(got, tuple) else got
    inputs = [helper.make_tensor_value_info(n, _ELEM[v.dtype], v.shape) for n, v in feeds.items()]
    outputs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in node.output]
    model = helper.make_model(helper.make_graph([node], "g", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", opset)])
    np.testing.assert_allclose(got.numpy(), ReferenceEvaluator(model).run(None, feeds)[0], rtol=1e-6, atol=1e-7)
    floats = [n for n, v in feeds.items() if v.dtype == np.float64]
    tensors = {n: torch.from_numpy(np.array(v)) for n, v in feeds.items()}

    def first_output(*xs):
        args = dict(tensors, **dict(zip(floats, xs)))
        out = fn(*[args[n] for n in feeds])
        return out[0] if isinstance(out, tuple) else out
    leaves = [tensors[n].clone().requires_grad_(True) for n in floats]
    assert torch.autograd.gradcheck(first_output, leaves, eps=1e-6, atol=1e-5)


def test_training_through_resize_group_norm_and_scatter_matches_torch_autograd(rng):
    """inference_and_backprop on Conv -> Resize -> GroupNormalization -> ScatterND -> GatherND -> loss:
    every parameter gradient against torch autograd of the same computation written with torch.nn.functional."""
    w = rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
    gamma, beta = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    fc = (rng.standard_normal((4 * 6 * 4, 3)) * 0.1).astype(np.float32)
    patch = rng.standard_normal((2, 4)).astype(np.float32)
    rows = np.array([[0, 1, 2], [1, 3, 5]], np.int64)  # (batch, channel, row) of the two patched rows
    init = {"w": w, "gamma": gamma, "beta": beta, "fc": fc, "patch": patch, "rows": rows,
            "scales": np.array([1, 1, 2, 2], np.float32), "flat": np.array([2, -1], np.int64)}
    nodes = [helper.make_node("Conv", ["input", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c", "", "scales"], ["r"], mode="linear"),
             helper.make_node("GroupNormalization", ["r", "gamma", "beta"], ["g"], num_groups=2),
             helper.make_node("Slice", ["g", "zero", "four", "three"], ["gs"]),
             helper.make_node("ScatterND", ["gs", "rows", "patch"], ["s"]),
             helper.make_node("GatherND", ["s", "first"], ["t"], batch_dims=1),
             helper.make_node("Reshape", ["t", "flat"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["logits"])]
    init.update(zero=np.array([0], np.int64), four=np.array([4], np.int64), three=np.array([3], np.int64),
                first=np.zeros((2, 4, 1), np.int64) + np.arange(4).reshape(1, 4, 1))
    # GatherND with batch_dims=1 and indices (2, 4, 1) picks every channel back in order: identity, differentiably.
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, 1, 3, 3]),
                     helper.make_tensor_value_info("label", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)],
        initializer=[helper.make_tensor(k, TensorProto.FLOAT if v.dtype == np.float32 else TensorProto.INT64,
                                        v.shape, v.reshape(-1)) for k, v in init.items()])
    net = d5.Network(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    net.add_operation(helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "label"], ["loss"]))
    feeds = {"input": rng.standard_normal((2, 1, 3, 3)).astype(np.float32), "label": np.array([2, 0], np.int64)}

    params = {k: torch.from_numpy(init[k]).requires_grad_(True) for k in ("w", "gamma", "beta", "fc", "patch")}
    c = torch.nn.functional.conv2d(torch.from_numpy(feeds["input"]), params["w"], padding=1)
    r = torch.nn.functional.interpolate(c, scale_factor=2, mode="bilinear", align_corners=False)
    g = torch.nn.functional.group_norm(r, 2, params["gamma"], params["beta"], eps=1e-5)[:, :, :, :4]
    s = g.clone()
    s[0, 1, 2] = params["patch"][0]
    s[1, 3, 5] = params["patch"][1]
    loss = torch.nn.functional.cross_entropy(s.reshape(2, -1) @ params["fc"], torch.from_numpy(feeds["label"]))
    loss.backward()

    ex = d5.executor(net, "torch")
    out = ex.inference_and_backprop(feeds, "loss")
    np.testing.assert_allclose(out["loss"], float(loss), rtol=1e-5)
    pairs = dict(ex.network.gradient("loss"))
    for name, p in params.items():
        got = ex.network.fetch_tensor(pairs[name])
        np.testing.assert_allclose(got, p.grad.numpy(), rtol=1e-4, atol=1e-5 * float(p.grad.abs().max()))
