"""Deep500's ``samples/network_inference.py``: time an ONNX file's inference on a framework named at run time.

The sample's path: the framework module found by name with ``pydoc.locate('deep500lite.frameworks.'
+ name)`` (``None`` for an unknown name), ``load_and_parse_model(path)``, ``from_model(model)``,
and ``d5.test_executor_inference(executor)`` with Deep500's default metric, ``WallclockTime()``
(100 runs on random inputs, 10 averages, their median printed per output), or with
``metrics=[WallclockTime(reruns=5, avg_over=1)]`` as the sample does for the slow reference
framework. The outputs must be those of the PyTorch module the file was exported from.
"""

from pydoc import locate

import numpy as np
import pytest

import deep500lite as d5
from deep500lite.registry import is_framework_available

torch = pytest.importorskip("torch")


class TwoHeads(torch.nn.Module):
    """A small CNN with two outputs: class scores and a pooled feature."""

    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.Tanh(),
                                            torch.nn.AvgPool2d(2))
        self.classify = torch.nn.Linear(4 * 8 * 8, 6)

    def forward(self, image):
        f = self.features(image)
        return self.classify(f.flatten(1)), f.mean(dim=(2, 3))


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory):
    torch.manual_seed(1)
    module = TwoHeads().eval()
    path = str(tmp_path_factory.mktemp("inference") / "two_heads.onnx")
    torch.onnx.export(module, (torch.zeros(2, 3, 16, 16),), path, input_names=["image"],
                      output_names=["scores", "pooled"], dynamo=False)
    return module, path


@pytest.mark.parametrize("name,key", [("pytorch", "torch"), ("tensorflow", "tensorflow"), ("reference", "reference"),
                                      ("onnxruntime", "onnxruntime")])
def test_inference_is_timed_as_deep500_and_matches_torch(onnx_file, name, key, capsys):
    if not is_framework_available(key):
        pytest.skip(f"needs {key}")
    module, path = onnx_file
    fw = locate("deep500lite.frameworks." + name)
    ex = fw.from_model(d5.parser.load_and_parse_model(path))
    np.random.seed(2)
    if name == "reference":
        results = d5.test_executor_inference(ex, metrics=[d5.WallclockTime(reruns=5, avg_over=1)])
        per_output = 5
    else:
        results = d5.test_executor_inference(ex)
        per_output = 10  # WallclockTime(): 100 runs averaged 10 at a time
    assert len(results) == 2 and all(len(t) == per_output and min(t) > 0 for t in results)
    printed = capsys.readouterr().out
    assert printed.count("WallclockTime on inference for output") == 2
    image = results.inputs["image"]
    assert image.shape == (2, 3, 16, 16) and image.dtype == np.float32 and 0 <= image.min() <= image.max() < 1
    with torch.no_grad():
        scores, pooled = module(torch.from_numpy(image))
    np.testing.assert_allclose(results.outputs["scores"], scores.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(results.outputs["pooled"], pooled.numpy(), rtol=1e-4, atol=1e-5)


def test_an_unknown_framework_name_locates_nothing():
    assert locate("deep500lite.frameworks.caffe2") is None
