"""Models from real exporters run on the reference executor and through ``deep500lite infer``."""

import numpy as np
import pytest

import deep500lite as d5
from support import run_cli


@pytest.mark.parametrize("name", [
    pytest.param("torch", marks=pytest.mark.requires("torch")),
    pytest.param("torch_dynamo", marks=pytest.mark.requires("torch")),
    pytest.param("keras", marks=pytest.mark.requires("tensorflow", "tf2onnx")),
])
def test_reference_matches_producer(exported, name):
    path, feeds, expected = exported[name]
    net = d5.load_model(path)
    ops = set(net.operators())
    if name == "torch":
        assert {"Shape", "Gather", "Concat", "Reshape"} <= ops
    if name == "keras":
        assert {"Transpose", "Pad"} <= ops or {"Transpose", "Conv"} <= ops
    out = d5.executor(net, "reference").inference(feeds)
    for k, v in expected.items():
        np.testing.assert_allclose(out[k], v, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", [
    pytest.param("torch", marks=pytest.mark.requires("torch")),
    pytest.param("keras", marks=pytest.mark.requires("tensorflow", "tf2onnx")),
])
def test_cli_infer_runs_exported_model(exported, name, tmp_path):
    path, feeds, expected = exported[name]
    np.savez(tmp_path / "feeds.npz", **feeds)
    proc = run_cli("infer", path, "--framework", "reference", "--inputs", tmp_path / "feeds.npz", "--max-time", "0.2")
    assert proc.returncode == 0, proc.stderr
    for k, v in expected.items():
        assert f"output {k}: float32{list(v.shape)}" in proc.stdout


# ------------------------------------------- the frameworks' models modules: same names, same models
def _public_functions(module):
    import inspect

    return {n for n in module.__all__ if inspect.isfunction(getattr(module, n))}


@pytest.mark.requires("torch")
@pytest.mark.requires("tensorflow")
def test_torch_and_keras_models_have_the_same_functions():
    import inspect

    from deep500lite.frameworks.tensorflow import models as keras_models
    from deep500lite.frameworks.torch import models as torch_models

    assert _public_functions(torch_models) == _public_functions(keras_models) == {"lenet", "resnet20",
                                                                                     "export_onnx"}
    for name in ("lenet", "resnet20"):
        args = [list(inspect.signature(getattr(m, name)).parameters) for m in (torch_models, keras_models)]
        assert args[0] == args[1] == ["classes", "input_shape"], name
    # The same layers: the same number of parameters (torch input_shape is CHW, Keras HWC).
    for name, chw in (("lenet", (1, 28, 28)), ("lenet", (1, 8, 8)), ("resnet20", (3, 32, 32))):
        module = getattr(torch_models, name)(classes=7, input_shape=chw)
        model = getattr(keras_models, name)(classes=7, input_shape=(chw[1], chw[2], chw[0]))
        # BatchNormalization: torch counts weight and bias as parameters, Keras also its two statistics.
        stats = sum(b.numel() for n, b in module.named_buffers() if n.endswith(("running_mean", "running_var")))
        assert sum(p.numel() for p in module.parameters()) + stats == model.count_params(), (name, chw)


@pytest.mark.requires("torch")
@pytest.mark.requires("tensorflow")
@pytest.mark.requires("tf2onnx")
def test_export_onnx_of_lenet_loads_with_the_same_output_shape():
    import torch

    from deep500lite.frameworks.tensorflow import models as keras_models
    from deep500lite.frameworks.torch import models as torch_models

    x = np.random.default_rng(3).standard_normal((3, 1, 28, 28)).astype(np.float32)
    module = torch_models.lenet()
    torch_net = d5.load_model(torch_models.export_onnx(module))
    with torch.no_grad():
        torch_expected = module.eval()(torch.from_numpy(x)).numpy()
    model = keras_models.lenet()
    keras_net = d5.load_model(keras_models.export_onnx(model))
    x_nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    keras_expected = model(x_nhwc).numpy()

    outputs = []
    for net, feed, expected in ((torch_net, x, torch_expected), (keras_net, x_nhwc, keras_expected)):
        (name,) = net.inputs
        (out,) = d5.executor(net, "reference").inference({name: feed}).values()
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
        outputs.append(out.shape)
    assert outputs[0] == outputs[1] == (3, 10)


@pytest.mark.requires("torch")
def test_torch_export_onnx_batch_and_errors():
    import torch

    from deep500lite.errors import UserError
    from deep500lite.frameworks.torch import models as torch_models

    module = torch_models.resnet20(classes=5, input_shape=(3, 8, 8))
    net = d5.load_model(torch_models.export_onnx(module, batch_size=2))
    x = np.random.default_rng(4).standard_normal((2, 3, 8, 8)).astype(np.float32)
    (out,) = d5.executor(net, "reference").inference({"input": x}).values()
    with torch.no_grad():
        np.testing.assert_allclose(out, module.eval()(torch.from_numpy(x)).numpy(), rtol=1e-4, atol=1e-4)
    with pytest.raises(UserError, match=r"channels first: \(C, H, W\).*Received: input_shape=\(28, 28\)"):
        torch_models.lenet(input_shape=(28, 28))
    with pytest.raises(UserError, match=r"square inputs.*Received: input_shape=\(1, 28, 32\)"):
        torch_models.lenet(input_shape=(1, 28, 32))
    with pytest.raises(UserError, match="needs an example input batch.*Received: example=None for Linear"):
        torch_models.export_onnx(torch.nn.Linear(3, 2))
    with pytest.raises(UserError, match=r"batch_size must match.*Received: batch_size=3, example shape \[2, 3, 8, 8\]"):
        torch_models.export_onnx(module, torch.from_numpy(x), batch_size=3)
