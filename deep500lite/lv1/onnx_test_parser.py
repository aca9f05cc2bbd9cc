"""Deep500's ``OnnxTestParser``: the test cases of ONNX's backend test suite, as files and arrays.

>>> parser = OnnxTestParser()  # doctest: +SKIP
>>> test = parser.get_test("test_relu")  # doctest: +SKIP
>>> model = d5.parser.load_and_parse_model(test.model)  # doctest: +SKIP
>>> d5.test_executor_inference(executor, inputs=test.data_sets[0].inputs,
...                            reference_outputs=test.data_sets[0].outputs)  # doctest: +SKIP

Test kinds are Deep500's: ``'Node'`` (one operator each), ``'Simple'``, ``'PyTorchConverted'``,
``'PyTorchOperator'`` and ``'Real'``. The installed ``onnx`` package supplies them: the
Simple/PyTorch tests as the folders it ships (``model.onnx``, ``test_data_set_*``); the Node
tests as the cases it generates in memory, which :meth:`OnnxTestParser.get_test` writes to a
temporary folder, so that ``test.model`` is a file path, as in Deep500. ``'Real'`` tests
(whole models) are listed but need files from the internet, which deep500lite never downloads:
``get_test`` raises :class:`~deep500lite.errors.MissingDatasetError` for them.
"""

from __future__ import annotations

import atexit
import io
import functools
import glob
import os
import shutil
import tempfile
from collections import namedtuple

import numpy as np
import onnx
from onnx import numpy_helper

from deep500lite.input_files import read_input_bytes
from deep500lite.errors import MissingDatasetError

__all__ = ["OnnxTestParser", "OnnxTest", "OnnxTestData"]

OnnxTestData = namedtuple("OnnxTestData", ["inputs", "outputs"])
OnnxTestData.__doc__ = "One data set of a test: ``inputs`` and ``outputs``, dicts of tensor name to numpy array."
OnnxTest = namedtuple("OnnxTest", ["model", "data_sets"])
OnnxTest.__doc__ = "A test: ``model``, the path of its ONNX file, and ``data_sets``, a list of :class:`OnnxTestData`."

# Deep500's test kind -> onnx's loader kind.
_KINDS = {"Node": "node", "Real": "real", "Simple": "simple", "PyTorchConverted": "pytorch-converted",
          "PyTorchOperator": "pytorch-operator"}


@functools.lru_cache(maxsize=None)
def _cases(kind: str) -> tuple:
    from onnx.backend.test.loader import load_model_tests

    return tuple(load_model_tests(kind=kind))


class OnnxTestParser:
    """The ONNX backend tests of the installed ``onnx`` package, by Deep500's test kinds.

    Attributes:
        tests: test kind -> the ``onnx`` test cases of that kind.
    """

    __test__ = False  # not a pytest test class

    def __init__(self):
        self.tests = {kind: list(_cases(onnx_kind)) for kind, onnx_kind in _KINDS.items()}
        self._folder = None

    @property
    def all_tests(self) -> dict[str, list[str]]:
        """Test kind -> the names of its tests (e.g. ``all_tests['Node']``)."""
        return {kind: [case.name for case in cases] for kind, cases in self.tests.items()}

    def get_test(self, name: str) -> OnnxTest | None:
        """The test named ``name`` (its model file and data sets), or ``None`` if there is none.

        Raises:
            MissingDatasetError: the test's model is not on this machine (a ``'Real'`` test).
        """
        for cases in self.tests.values():
            for case in cases:
                if case.name == name:
                    return self._load(case)
        return None

    # ------------------------------------------------------------------------------ loading
    def _load(self, case) -> OnnxTest:
        if case.model_dir is not None:
            model_dir = case.model_dir
            model_file = os.path.join(model_dir, "model.onnx")
            graph = onnx.load_model(model_file, load_external_data=False).graph
            names = _io_names(graph)
            data_sets = _numpy_data_sets(model_dir) + _protobuf_data_sets(model_dir, names)
            return OnnxTest(model_file, data_sets)
        if case.model is None:
            raise MissingDatasetError(
                f"ONNX test '{case.name}' needs a whole model and its data from {case.url}, which the onnx "
                "package does not ship and deep500lite does not download. Choose a Node, Simple, PyTorchConverted or PyTorchOperator test. "
                f"Received: {case.name!r}")
        model_file = os.path.join(self._scratch(), f"{case.name}.onnx")
        if not os.path.exists(model_file):
            onnx.save_model(case.model, model_file)
        in_names, out_names = _io_names(case.model.graph)
        data_sets = [OnnxTestData(dict(zip(in_names, map(_value, ins))), dict(zip(out_names, map(_value, outs))))
                     for ins, outs in case.data_sets or ()]
        return OnnxTest(model_file, data_sets)

    def _scratch(self) -> str:
        if self._folder is None:
            self._folder = _process_scratch()
        return self._folder


@functools.lru_cache(maxsize=None)
def _process_scratch() -> str:
    """One folder per process for the Node tests' model files, removed when the process exits.

    It outlives every parser, so ``OnnxTestParser().get_test(name).model`` stays a file as long
    as the script runs, as Deep500's test paths did.
    """
    folder = tempfile.mkdtemp(prefix="d5_onnxtests_")
    atexit.register(shutil.rmtree, folder, True)
    return folder


def _value(value):
    """A generated test's value as an array (onnx keeps some as TensorProtos); sequences stay lists."""
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else value


def _io_names(graph) -> tuple[list[str], list[str]]:
    """The graph's fed input names (initializers left out) and output names, in order."""
    initialized = {t.name for t in graph.initializer}
    return [vi.name for vi in graph.input if vi.name not in initialized], [vi.name for vi in graph.output]


def _numpy_data_sets(model_dir: str) -> list[OnnxTestData]:
    """Older test folders: ``test_data_*.npz`` with positional ``inputs`` and ``outputs``."""
    sets = []
    for path in sorted(glob.glob(os.path.join(model_dir, "test_data_*.npz"))):
        with np.load(io.BytesIO(read_input_bytes(path, "ONNX test data file")), encoding="bytes",
                     allow_pickle=False) as data:
            sets.append(OnnxTestData({str(i): v for i, v in enumerate(data["inputs"])},
                                     {str(i): v for i, v in enumerate(data["outputs"])}))
    return sets


def _read_tensor(path: str) -> onnx.TensorProto:
    tensor = onnx.TensorProto()
    tensor.ParseFromString(read_input_bytes(path, "ONNX test tensor file"))
    return tensor


def _protobuf_data_sets(model_dir: str, names: tuple[list[str], list[str]]) -> list[OnnxTestData]:
    """Test folders ``test_data_set_N`` with ``input_K.pb`` and ``output_K.pb`` tensors.

    A tensor saved without a name (the PyTorch-exported tests) takes the name of the graph's
    input or output at its position.
    """
    sets = []
    for folder in sorted(glob.glob(os.path.join(model_dir, "test_data_set*"))):
        data = []
        for prefix, graph_names in zip(("input", "output"), names):
            count = len(glob.glob(os.path.join(folder, f"{prefix}_*.pb")))
            tensors = [_read_tensor(os.path.join(folder, f"{prefix}_{i}.pb")) for i in range(count)]
            data.append({(t.name or (graph_names[i] if i < len(graph_names) else str(i))): numpy_helper.to_array(t)
                         for i, t in enumerate(tensors)})
        sets.append(OnnxTestData(*data))
    return sets
