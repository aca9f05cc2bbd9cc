"""Deep500's samples/network_inference.py (time a model's inference on one framework) on deep500lite.

The sample takes ``<ONNX FILE> <FRAMEWORK>`` on its command line; here ``main(argv)`` is that
script with ``import deep500`` -> ``import deep500lite`` and ``'deep500.frameworks.'`` ->
``'deep500lite.frameworks.'``, nothing else, and the ONNX file is a real PyTorch model the test
exports (nothing is downloaded). ``main`` returns what the sample's last call returns so the test
can check it: the metrics' results, and the outputs, which must equal PyTorch's own on the same
(random) inputs.
"""

import sys
from pydoc import locate

import numpy as np
import pytest

import deep500lite as d5
from deep500lite.registry import is_framework_available

torch = pytest.importorskip("torch")


def main(argv):
    """samples/network_inference.py, as a function of ``sys.argv``."""
    if len(argv) != 3:
        print('USAGE: network_inference.py <ONNX FILE> <FRAMEWORK>')
        sys.exit(1)

    # The framework module, found from its name at run time
    fwname = argv[2]
    d5fw = locate('deep500lite.frameworks.' + fwname)
    if d5fw is None:
        raise ValueError('Unrecognized framework ' + fwname)

    model = d5.parser.load_and_parse_model(argv[1])
    executor = d5fw.from_model(model)

    # The reference framework is slow: fewer reruns
    if fwname == 'reference':
        metrics = [d5.WallclockTime(reruns=5, avg_over=1)]
        return d5.test_executor_inference(executor, metrics=metrics)
    else:
        return d5.test_executor_inference(executor)


class SmallNet(torch.nn.Module):
    """A CNN as a user would write it: convolution, pooling, two dense layers."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 6, 5)
        self.fc1 = torch.nn.Linear(6 * 12 * 12, 32)
        self.fc2 = torch.nn.Linear(32, 10)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch.manual_seed(0)
    module = SmallNet().eval()
    path = str(tmp_path_factory.mktemp("model") / "smallnet.onnx")
    torch.onnx.export(module, (torch.zeros(4, 1, 28, 28),), path, input_names=["image"], output_names=["scores"],
                      dynamo=False, opset_version=17)
    return module, path


# Deep500's framework names (pytorch, tensorflow, reference) and deep500lite's onnxruntime
@pytest.mark.parametrize("fwname,key", [("pytorch", "torch"), ("tensorflow", "tensorflow"),
                                        ("reference", "reference"), ("onnxruntime", "onnxruntime")])
def test_network_inference_sample(exported, fwname, key, capsys):
    if not is_framework_available(key):
        pytest.skip(f"needs {key}")
    module, path = exported
    np.random.seed(0)
    results = main(['network_inference.py', path, fwname])

    printed = capsys.readouterr().out
    assert "WallclockTime on inference for output 'scores'" in printed
    times = results[0] if fwname == 'reference' else [results[0]]
    assert len(times) == (5 if fwname == 'reference' else 1) and all(t > 0 for t in times)

    # The outputs are the producer's: PyTorch's on the same random inputs
    image = results.inputs['image']
    assert image.shape == (4, 1, 28, 28) and image.dtype == np.float32 and 0 <= image.min() < image.max() < 1
    with torch.no_grad():
        expected = module(torch.from_numpy(image)).numpy()
    np.testing.assert_allclose(results.outputs['scores'], expected, rtol=1e-4, atol=1e-5)


def test_unknown_framework_is_the_samples_error(exported):
    with pytest.raises(ValueError, match="Unrecognized framework caffe2"):
        main(['network_inference.py', exported[1], 'caffe2'])
