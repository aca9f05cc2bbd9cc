"""The Level 0-3 interfaces: abstract bases with documented contracts, devices, descriptors."""

import inspect

import numpy as np
import pytest

import deep500lite as d5

BASES = [d5.Operator, d5.CustomOp, d5.GraphExecutor, d5.Dataset, d5.Sampler, d5.Optimizer,
         d5.ThreeStepOptimizer, d5.UpdateRuleOptimizer, d5.TestMetric,
         d5.distributed.CommunicationNetwork, d5.distributed.DistributedOptimizer]


@pytest.mark.parametrize("cls", BASES, ids=lambda c: c.__name__)
def test_abstract_methods_state_their_contract(cls):
    assert inspect.isabstract(cls)
    assert cls.__doc__ and len(cls.__doc__.strip()) > 20
    for name in cls.__abstractmethods__:
        doc = inspect.getdoc(getattr(cls, name))
        assert doc and len(doc) > 20, f"{cls.__name__}.{name} has no contract in its docstring"
    with pytest.raises(TypeError):
        cls.__new__(cls) if cls is d5.TestMetric else cls()


def test_expected_abstract_methods():
    assert d5.GraphExecutor.__abstractmethods__ == {"inference", "inference_and_backprop"}
    assert d5.ThreeStepOptimizer.__abstractmethods__ == {"update_rule"}  # new_input, prepare_param: no-ops
    assert d5.UpdateRuleOptimizer.__abstractmethods__ == {"update_rule"}
    assert {"forward", "backward"} <= d5.CustomOp.__abstractmethods__
    assert {"allreduce", "broadcast", "gather", "allgather", "reduce_scatter", "send", "recv"} <= \
        d5.distributed.CommunicationNetwork.__abstractmethods__


def test_devices():
    assert str(d5.CPUDevice()) == "cpu"
    assert str(d5.GPUDevice(1)) == "gpu:1"
    from deep500lite.lv1.device import as_device

    assert as_device("gpu:2") == d5.GPUDevice(2)
    assert as_device("cuda:0") == d5.GPUDevice(0)
    assert as_device(None) == d5.CPUDevice()
    with pytest.raises(d5.DeviceError, match=r"Device must be 'cpu', 'gpu' or 'gpu:N'.*Received: 'tpu:0'"):
        as_device("tpu:0")
    with pytest.raises(TypeError, match="Received: int"):
        as_device(3)


def test_gpu_on_cpu_only_executor_is_clear(lenet_file):
    with pytest.raises(d5.DeviceError, match="reference executor cannot run on gpu:0"):
        d5.executor(d5.load_model(lenet_file), "reference", device="gpu:0")


def test_tensordesc():
    d = d5.tensordesc(np.float32, [2, 3])
    assert d == d5.TensorDescriptor(np.dtype("float32"), (2, 3))
    assert d.matches(np.zeros((2, 3), np.float32)) and not d.matches(np.zeros((3, 2), np.float32))
    assert not d.matches(np.zeros((2, 3), np.float64))
    r = d5.tensordesc.runtime_shape(np.int64)
    assert r.shape is None and r.matches(np.zeros((5, 1, 2), np.int64))
    with pytest.raises(ValueError, match="Received: shape=\\[2, -1\\]"):
        d5.tensordesc(np.float32, [2, -1])


class Square(d5.CustomPythonOp):
    def forward(self, x):
        return x * x

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return 2 * fwd_inputs[0] * grads[0]


def test_python_op_checks_inputs():
    op = Square([d5.tensordesc(np.float32, [3])], [d5.tensordesc(np.float32, [3])])
    (y,) = op(np.array([1, 2, 3], np.float32))
    np.testing.assert_array_equal(y, [1, 4, 9])
    with pytest.raises(ValueError, match=r"input 0 must be float32\[3\]. Received: float64\[3\]"):
        op(np.array([1, 2, 3], np.float64))


def test_samplers_cover_dataset_once_per_epoch():
    data = np.arange(10, dtype=np.float32)[:, None]
    ds = d5.NumpyDataset(data, "x", np.arange(10), "y")
    batches = list(d5.ShuffleSampler(ds, 3, seed=0, drop_last_batch=False))
    seen = np.concatenate([b["x"][:, 0] for b in batches])
    assert sorted(seen.tolist()) == list(range(10)) and [len(b["x"]) for b in batches] == [3, 3, 3, 1]
    again = np.concatenate([b["x"][:, 0] for b in d5.ShuffleSampler(ds, 3, seed=0, drop_last_batch=False)])
    np.testing.assert_array_equal(seen, again)
    ordered = list(d5.OrderedSampler(ds, 4))
    assert len(ordered) == 2 and ordered[1]["y"].tolist() == [4, 5, 6, 7]
