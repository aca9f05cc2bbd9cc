"""Bad-input catalog, part A (issue #20): ONNX models, feeds, executors at run time, ``infer``,
``list``, ``env`` and ``compare``'s model argument.

Each case is one mistake a user could make. CLI cases assert exit status 2 and one clean error
line naming the field, node or argument and the received value (:func:`catalog_support.cli_error`);
API cases assert the documented exception and the same kind of message (:func:`api_error`).
"""

import os
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import deep500lite as d5
from catalog_support import api_error, cli_error
from deep500lite.errors import ExecutionError, FeedError, ModelError, UserTypeError

F = TensorProto.FLOAT


def _vi(name, dims, elem=F):
    return helper.make_tensor_value_info(name, elem, dims)


def _model(nodes, inputs, outputs, inits=(), opset=17, ir=8):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)


def _relu(opset=17, ir=8, name="relu", dims=(2, 3), out=(2, 3)):
    return _model([helper.make_node("Relu", ["x"], ["y"], name=name)], [_vi("x", list(dims))], [_vi("y", list(out))],
                  opset=opset, ir=ir)


def _const(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.array(values, dtype), name)


def _one(op, attrs=None, inits=(), x=(2, 3), y=None, elem=F, extra=(), opset=17):
    node = helper.make_node(op, ["x", *[t.name for t in inits], *extra], ["y"], name="bad", **(attrs or {}))
    return _model([node], [_vi("x", list(x), elem)], [_vi("y", y, elem)], inits, opset=opset)


def _external(tmp_path, location, write=True):
    model = _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [_vi("x", [2, 3])], [_vi("y", [2, 3])],
                   [numpy_helper.from_array(np.ones((2, 3), np.float32), "w")])
    t = model.graph.initializer[0]
    raw = numpy_helper.to_array(t).tobytes()
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value=location)
    folder = tmp_path / "model"
    folder.mkdir()
    if write:
        (tmp_path / "weights.bin").write_bytes(raw)
    (folder / "m.onnx").write_bytes(model.SerializeToString())
    return folder / "m.onnx"


def _cycle():
    nodes = [helper.make_node("Add", ["x", "z"], ["h"], name="first"), helper.make_node("Relu", ["h"], ["z"], name="second"),
             helper.make_node("Relu", ["h"], ["y"], name="out")]
    return _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 3])])


def _two_writers():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Neg", ["x"], ["y"], name="b")]
    return _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 3])])


def _short_initializer():
    t = numpy_helper.from_array(np.ones(6, np.float32), "w")
    t.dims[:] = [2, 30]  # 60 values declared, 6 stored
    return _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [_vi("x", [2, 30])], [_vi("y", [2, 30])],
                  [t])


def _unknown_elem_type():
    m = _relu()
    m.graph.input[0].type.tensor_type.elem_type = 77
    return m


# case id -> (model or a function of tmp_path returning a file path, needles)
MODEL_FILES = {
    "empty-file": (b"", ["empty", "0 bytes"]),
    "truncated-file": (lambda: _relu().SerializeToString()[:25], ["cannot be decoded", "25 bytes"]),
    "text-not-onnx": (b"name,value\n1,2\n", ["cannot be decoded", "name,val"]),
    "model-without-graph": (lambda: onnx.ModelProto(ir_version=8).SerializeToString(), ["no onnx graph"]),
    "ir-version-too-new": (lambda: _relu(ir=99), ["IR version 99", "3 to", "ir_version 99"]),
    "ir-version-too-old": (lambda: _relu(ir=2), ["IR version 2", "ir_version 2"]),
    "opset-too-new": (lambda: _relu(opset=999), ["opset 999", "opsets 1 to"]),
    "opset-zero": (lambda: _relu(opset=0), ["opset 0", "opsets 1 to"]),
    "operator-misspelt": (lambda: _one("Relue", y=[2, 3]), ["'bad'", "Relue", "did you mean 'Relu'"]),
    "operator-invented": (lambda: _one("Frobnicate", y=[2, 3]), ["'bad'", "not an ONNX operator", "Frobnicate"]),
    "operator-newer-than-opset": (lambda: _one("Gelu", y=[2, 3], opset=13), ["'bad' (Gelu)", "opset 20", "opset 13"]),
    "initializer-missing": (lambda: _one("Add", extra=["w"], y=[2, 3]), ["input 'w'", "node 'bad' (Add)", "initializer"]),
    "cycle": (lambda: _cycle(), ["'first'", "'second'", "cycle"]),
    "duplicate-output-name": (lambda: _two_writers(), ["'y'", "multiple times"]),
    "initializer-data-short": (lambda: _short_initializer(), ["tensor name: w", "240 bytes"]),
    "unknown-element-type": (lambda: _unknown_elem_type(), ["input 'x'", "elem_type 77"]),
    "negative-input-dimension": (lambda: _relu(dims=(-2, 3), out=("a", "b")), ["input 'x'", "negative", "[-2, 3]"]),
    "softmax-axis-out-of-range": (lambda: _one("Softmax", {"axis": 99}, y=[2, 3]),
                                  ["'bad' (Softmax)", "axis", "99"]),
    "conv-stride-zero": (lambda: _one("Conv", {"strides": [0, 0]}, [numpy_helper.from_array(np.ones((1, 1, 3, 3),
                                                                                                     np.float32), "w")],
                                      x=(1, 1, 5, 5), y=[1, 1, "h", "w"]),
                         ["'bad' (Conv)", "strides", "positive"]),
    "gather-index-out-of-range": (lambda: _one("Gather", {"axis": 0}, [_const("i", [7])], y=[1, 3]),
                                  ["'bad' (Gather)", "index 7", "[-2, 1]"]),
    "reshape-impossible": (lambda: _one("Reshape", inits=[_const("s", [5])], y=[5]),
                           ["'bad' (Reshape)", "[2, 3]", "shape [5]"]),
    "reshape-two-minus-ones": (lambda: _one("Reshape", inits=[_const("s", [-1, -1])], y=[2, 3]),
                               ["'bad' (Reshape)", "multiple -1"]),
    "sin-on-int64": (lambda: _one("Sin", x=(2, 3), y=[2, 3], elem=TensorProto.INT64),
                     ["'bad' (Sin)", "tensor(int64)"]),
    "concat-axis-out-of-range": (lambda: _one("Concat", {"axis": 5}, extra=["x"], y=[4, 3]),
                                 ["'bad' (Concat)", "axis", "5"]),
    "transpose-perm-wrong-length": (lambda: _one("Transpose", {"perm": [0, 1, 2]}, y=[3, 2]),
                                    ["'bad' (Transpose)", "perm"]),
}


def _write(tmp_path, spec) -> str:
    value = spec() if callable(spec) else spec
    if isinstance(value, onnx.ModelProto):
        value = value.SerializeToString()
    path = tmp_path / "bad.onnx"
    path.write_bytes(value)
    return str(path)


@pytest.mark.parametrize("case", [pytest.param(k, id=k) for k in MODEL_FILES])
def test_catalog_infer_refuses_bad_model_files(tmp_path, case):
    spec, needles = MODEL_FILES[case]
    path = _write(tmp_path, spec)
    cli_error("infer", path, "--max-time", "0.01", needles=["bad.onnx", *needles])


@pytest.mark.parametrize("case", [pytest.param(k, id=k) for k in ["softmax-axis-out-of-range", "cycle",
                                                                  "opset-too-new", "initializer-data-short"]])
def test_catalog_api_load_model_raises_model_error(tmp_path, case):
    spec, needles = MODEL_FILES[case]
    value = spec()
    api_error(d5.load_model, value, expected=ModelError, needles=needles)


def test_catalog_model_path_is_a_folder(tmp_path):
    cli_error("infer", tmp_path, needles=["is a folder", str(tmp_path)])


def test_catalog_model_path_missing(tmp_path):
    cli_error("infer", tmp_path / "nope.onnx", needles=["does not exist", "nope.onnx"])


def test_catalog_model_path_is_a_fifo(tmp_path):
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)  # opening it for reading would block until a writer came: it must not be opened
    cli_error("infer", fifo, needles=["not a regular file", "pipe.onnx"])


def test_catalog_feeds_path_is_a_fifo(tmp_path, relu_file):
    fifo = tmp_path / "pipe.npz"
    os.mkfifo(fifo)
    cli_error("infer", relu_file, "--inputs", fifo, needles=["pipe.npz", "not a regular file"])


def test_catalog_external_data_outside_model_folder(tmp_path):
    path = _external(tmp_path, "../weights.bin")
    cli_error("infer", path, needles=["tensor 'w'", "outside", "location='../weights.bin'"])


def test_catalog_external_data_absolute_path(tmp_path):
    path = _external(tmp_path, str(tmp_path / "weights.bin"))
    cli_error("infer", path, needles=["tensor 'w'", "absolute", "weights.bin"])


def test_catalog_external_data_file_missing(tmp_path):
    path = _external(tmp_path, "weights.bin", write=False)
    cli_error("infer", path, needles=["tensor 'w'", "missing", "location='weights.bin'"])


def test_catalog_model_bytes_of_wrong_type():
    api_error(d5.load_model, 12345, expected=UserTypeError, needles=["load_model", "Received: int"])


def test_catalog_executor_refuses_unchecked_opset_999():
    net = d5.load_model(_relu(opset=999), check=False)
    api_error(d5.executor, net, "reference", expected=ModelError, needles=["reference", "opset 999", "1 to"])


# ------------------------------------------------------------------------- sizes
def test_catalog_input_dims_too_large_for_memory(tmp_path):
    path = _write(tmp_path, _relu(dims=(10**6, 10**6), out=(10**6, 10**6)))
    cli_error("infer", path, needles=["input 'x'", "[1000000, 1000000]", "bytes"])


def test_catalog_batch_size_too_large_for_memory(tmp_path):
    path = _write(tmp_path, _relu(dims=("N", 3), out=("N", 3)))
    cli_error("infer", path, "--batch-size", str(10**12), needles=["input 'x'", "1000000000000", "bytes"])


def test_catalog_api_random_feeds_too_large():
    net = d5.load_model(_relu(dims=("N", 3), out=("N", 3)))
    api_error(net.random_feeds, 10**13, expected=FeedError, needles=["input 'x'", "10000000000000"])


# ------------------------------------------------------------------------- feeds
@pytest.fixture
def relu_file(tmp_path):
    return _write(tmp_path, _relu())


def _npz(tmp_path, **arrays):
    path = tmp_path / "feeds.npz"
    np.savez(path, **arrays)
    return path


X = np.ones((2, 3), np.float32)
FEEDS = {
    "npy-not-npz": (lambda p: (np.save(p / "x.npy", X), p / "x.npy")[1], ["x.npy", ".npy"]),
    "wrong-input-name": (lambda p: _npz(p, q=X), ["'q'", "['x']"]),
    "wrong-shape": (lambda p: _npz(p, x=np.ones((4, 3), np.float32)), ["input 'x'", "[2, 3]", "[4, 3]"]),
    "wrong-dtype": (lambda p: _npz(p, x=X.astype(np.float64)), ["input 'x'", "float32", "float64"]),
    "npz-without-the-input": (lambda p: _npz(p), ["missing input", "['x']"]),
    "object-array-needs-pickle": (lambda p: _npz(p, x=np.array([{"a": 1}], dtype=object)),
                                  ["'x'", "pickle", "object array"]),
    "text-file": (lambda p: ((p / "x.txt").write_text("1 2 3\n"), p / "x.txt")[1], ["x.txt", "not a readable .npz", "1 2 3"]),
    "damaged-zip": (lambda p: ((p / "d.npz").write_bytes(b"PK\x03\x04garbage"), p / "d.npz")[1], ["d.npz", "damaged"]),
    "missing-file": (lambda p: p / "none.npz", ["none.npz", "does not exist"]),
    "folder": (lambda p: p, ["is a folder"]),
}


@pytest.mark.parametrize("case", [pytest.param(k, id=k) for k in FEEDS])
def test_catalog_infer_refuses_bad_feeds(tmp_path, relu_file, case):
    make, needles = FEEDS[case]
    cli_error("infer", relu_file, "--inputs", make(tmp_path), "--max-time", "0.01", needles=needles)


def test_catalog_api_feeds_not_a_dict():
    net = d5.load_model(_relu())
    api_error(net.check_feeds, [X], expected=FeedError, needles=["dict", "Received: list"])


def test_catalog_api_feed_tensor_wrong_shape():
    model = _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [_vi("x", [2, 3])], [_vi("y", [2, 3])],
                   [numpy_helper.from_array(np.ones((2, 3), np.float32), "w")])
    ex = d5.executor(model, "reference")
    api_error(ex.feed_tensor, "w", np.ones((3, 3), np.float32), expected=FeedError,
              needles=["'w'", "float32[2, 3]", "float32[3, 3]"])


# ------------------------------------------------------------ command arguments
ARGUMENTS = {
    "unknown-framework": (["--framework", "caffe"], ["'caffe'", "reference"]),
    "framework-and-frameworks": (["--framework", "torch", "--frameworks", "jax"], ["--framework torch"]),
    "empty-frameworks-list": (["--frameworks", ","], ["--frameworks", "','"]),
    "max-time-negative": (["--max-time", "-1"], ["--max-time", "'-1'"]),
    "max-time-nan": (["--max-time", "nan"], ["--max-time", "'nan'"]),
    "batch-size-zero": (["--batch-size", "0"], ["--batch-size", "'0'"]),
    "device-absent": (["--device", "gpu:7"], ["gpu:7"]),
    "device-malformed": (["--device", "tpu"], ["tpu"]),
}


@pytest.mark.parametrize("case", [pytest.param(k, id=k) for k in ARGUMENTS])
def test_catalog_infer_refuses_bad_arguments(relu_file, case):
    argv, needles = ARGUMENTS[case]
    cli_error("infer", relu_file, *argv, needles=needles)


def test_catalog_list_unknown_kind():
    cli_error("list", "models", needles=["'models'", "frameworks"])


def test_catalog_env_unknown_option():
    cli_error("env", "--yaml", needles=["--yaml"])


def test_catalog_compare_given_an_onnx_model(relu_file):
    cli_error("compare", relu_file, needles=["bad.onnx", ".py"])


# ------------------------------------------------------- executors at run time
def _unchecked(model):
    return d5.load_model(model, check=False)


RUNTIME = {
    "softmax-axis": (lambda: _one("Softmax", {"axis": 99}, y=[2, 3]), {}, "Softmax"),
    "gather-fed-index": (lambda: _model([helper.make_node("Gather", ["x", "i"], ["y"], name="bad", axis=0)],
                                        [_vi("x", [2, 3]), _vi("i", [1], TensorProto.INT64)], [_vi("y", [1, 3])]),
                         {"i": np.array([9], np.int64)}, "Gather"),
    "reshape-fed-shape": (lambda: _model([helper.make_node("Reshape", ["x", "s"], ["y"], name="bad")],
                                         [_vi("x", [2, 3]), _vi("s", [1], TensorProto.INT64)], [_vi("y", ["n"])]),
                          {"s": np.array([5], np.int64)}, "Reshape"),
}


@pytest.mark.parametrize("framework", ["reference", "torch", "tensorflow", "onnxruntime", "jax"])
@pytest.mark.parametrize("case", [pytest.param(k, id=k) for k in RUNTIME])
def test_catalog_executor_failure_names_the_node(framework, case):
    make, feeds, op_type = RUNTIME[case]
    net = _unchecked(make())
    feeds = {"x": X, **feeds}

    def run():
        d5.executor(net, framework).inference(feeds)

    error = api_error(run, expected=ExecutionError, needles=[framework, "node 'bad'", f"({op_type})"])
    assert error.node == "bad" and error.op_type == op_type


HALVE = """#include <deep500lite/deep500lite.h>
struct Halve : deep500lite::CustomOperator {
    int count;
    explicit Halve(int count) : count(count) {}
    void forward(const float *in, float *out) { for (int k = 0; k < count; ++k) out[k] = in[k] * 0.5f; }
};
D500_EXPORTED void *create_new_op(deep500lite::tensor_t *in, int, deep500lite::tensor_t *, int) {
    return new Halve(in[0].sizes[0]);
}
D500_REGISTER_OP(Halve)
"""


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="needs a C++ compiler")
def test_catalog_300_character_operator_name_builds(tmp_path):
    # Before: "<name>-<key>.so" exceeded the file system's 255-byte limit ("File name too long").
    name = "halve_" + "x" * 294
    desc = [d5.tensordesc(np.float32, [5])]
    op = d5.compile_custom_cppop_inline(name, HALVE, desc, desc, build_dir=tmp_path)
    x = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(op.forward(x), x * 0.5)
    assert len(os.path.basename(op.library_path)) < 255
    other = d5.compile_custom_cppop_inline(name[:-1] + "y", HALVE, desc, desc, build_dir=tmp_path)
    assert other.library_path != op.library_path  # shortened names stay distinct (a hash suffix)


def test_catalog_file_stem_keeps_names_distinct_and_safe():
    from deep500lite.utils import file_stem

    long_a, long_b = "op" * 150, "op" * 149 + "oq"
    assert file_stem(long_a) != file_stem(long_b) and max(len(file_stem(long_a)), len(file_stem(long_b))) < 100
    assert file_stem("relu") == "relu"
    assert "/" not in file_stem("../../etc/passwd") and not file_stem("../x").startswith(".")
