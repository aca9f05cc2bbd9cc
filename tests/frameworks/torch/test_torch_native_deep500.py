"""PyTorchNativeGraphExecutor (Deep500's native executor) and the native network's descriptors."""

import numpy as np
import pytest

import deep500lite as d5

torch = pytest.importorskip("torch")
from deep500lite.frameworks import torch as d5fw  # noqa: E402


class _Recorder:
    def __init__(self):
        self.calls = []

    def before_executor(self, feeds):
        self.calls.append(("before", sorted(feeds)))

    def after_inference(self, outputs):
        self.calls.append(("inference", sorted(outputs)))

    def after_backprop(self, outputs):
        self.calls.append(("backprop", sorted(outputs)))


def test_deep500_signature_modes_events_and_gradients():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Dropout(0.5), torch.nn.Linear(4, 2))
    events = [_Recorder()]
    ex = d5fw.PyTorchNativeGraphExecutor(module, torch.nn.CrossEntropyLoss(), 'x', 'logits', 'y', 'xent',
                                         events, d5.CPUDevice(), with_outputs=True)
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    y = np.array([0, 1, 1, 0, 1], np.int32)  # int32 labels become int64 class indices
    out = ex.inference({'x': x, 'y': y, 'unused': x})  # Deep500 ignored other feeds
    assert not module.training
    with torch.no_grad():
        logits = module(torch.from_numpy(x))
        expected = torch.nn.functional.cross_entropy(logits, torch.from_numpy(y).long()).item()
    np.testing.assert_allclose(out['logits'], logits.numpy(), rtol=1e-6)
    assert out['xent'] == pytest.approx(expected, rel=1e-6)
    out = ex.inference_and_backprop({'x': x, 'y': y})
    assert module.training and 'xent' in out and '0.weight_grad' in out  # with_outputs
    np.testing.assert_array_equal(out['0.weight_grad'], ex.network.fetch_tensors(['0.weight_grad'])[0])
    assert [c[0] for c in events[0].calls] == ['before', 'inference', 'before', 'backprop']
    assert ex.network.gradient('xent')[0] == ('0.weight', '0.weight_grad')
    assert ex.network.input_descriptors() == {'x': None, 'y': None}
    assert ex.network.get_output_nodes() == ['logits', 'xent']


def test_float_labels_take_the_outputs_dtype_and_defaults():
    module = torch.nn.Linear(2, 1).double()
    ex = d5fw.PyTorchNativeGraphExecutor(module, torch.nn.MSELoss())
    assert (ex.innode, ex.outnode, ex.labelnode, ex.lossnode) == ('0', 'output', 'label', 'loss')
    x = np.ones((3, 2))
    out = ex.inference_and_backprop({'0': x, 'label': np.zeros((3, 1), np.float32)})
    assert out['loss'] > 0 and ex.network.fetch_tensors(['weight_grad'])[0].shape == (1, 2)


def test_native_executor_without_loss_infers_only():
    ex = d5fw.PyTorchNativeGraphExecutor(torch.nn.Identity(), None, input_node_name='input')
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(ex.inference({'input': x})['output'], x)
    assert ex.network.inputs == ['input'] and ex.network.outputs == ['output']


def test_from_onnx_and_deep500_names(tmp_path):
    from deep500lite import networks

    path = networks.export_network('lenet', 2, file_path=str(tmp_path / 'l.onnx'))
    ex = d5fw.from_onnx(path, d5.CPUDevice())
    assert isinstance(ex, d5fw.PyTorchGraphExecutor)
    assert ex.inference({'input': np.zeros((2, 1, 28, 28), np.float32)})['output'].shape == (2, 10)
    import deep500lite.frameworks.pytorch as alias
    assert alias is d5fw
