"""Fuzz tests of the ONNX loader and of running what it accepts (issue #20, part A).

Each test feeds hypothesis-made input to :func:`deep500lite.load_model` (random bytes, valid model
bytes flipped, cut or grown, and models built with ``onnx.helper`` from random operators,
attributes, dimensions and element types) and asserts that the input either loads (and runs on
the reference executor) or raises a :class:`~deep500lite.errors.Deep500Error` with a clean
one-line message: never another exception type, never a hang. Sizes are bounded (dimensions up
to 4, a few hundred bytes), so nothing allocates more than a few kB. The "ci" profile of
tests/conftest.py runs each test on a fixed, seeded set of examples; ``--fuzz-long`` runs longer.
"""

import os
import tempfile

import numpy as np
import onnx
from hypothesis import example, given
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import deep500lite as d5
from deep500lite.errors import Deep500Error
from catalog_support import assert_clean_message



def _valid_bytes() -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["h"], name="add"),
                               helper.make_node("Relu", ["h"], ["y"], name="relu")], "g", [x], [y], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


VALID = _valid_bytes()


def _loads_or_clean_error(data) -> d5.Network | None:
    try:
        return d5.load_model(data)
    except Deep500Error as exc:
        assert_clean_message(str(exc))
        assert "\n" not in str(exc), str(exc)
        return None


@given(st.binary(max_size=300))
@example(b"\x0a\x80")  # a string field's length running past the end
@example(b"\x08\x08\x3a\x02\x0a\xff")  # a graph whose name is not UTF-8
def test_fuzz_random_bytes_load_or_raise_model_error(data):
    _loads_or_clean_error(data)


@st.composite
def _mutated(draw):
    data = bytearray(VALID)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del data[pos:]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif data:
            del data[pos:pos + draw(st.integers(1, 8))]
    return bytes(data)


@given(_mutated())
def test_fuzz_mutated_model_bytes_load_or_raise_model_error(data):
    net = _loads_or_clean_error(data)
    if net is not None:
        _run_or_clean_error(net)


def _run_or_clean_error(net):
    try:
        feeds = net.random_feeds()
        d5.executor(net, "reference").inference(feeds)
    except Deep500Error as exc:
        assert_clean_message(str(exc))


_ELEM_TYPES = [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL,
               TensorProto.FLOAT16, TensorProto.STRING, TensorProto.UINT8, 0, 17, 99, -1]
_OPS = {  # op type -> number of inputs
    "Relu": 1, "Sin": 1, "Softmax": 1, "Transpose": 1, "Flatten": 1, "Add": 2, "MatMul": 2, "Gather": 2,
    "Reshape": 2, "Concat": 2, "Conv": 2, "ReduceSum": 1, "Cast": 1, "Relue": 1, "Split": 1,
}
_ATTRS = {
    "Softmax": ["axis"], "Flatten": ["axis"], "Concat": ["axis"], "Gather": ["axis"], "Split": ["axis"],
    "Transpose": ["perm"], "Conv": ["strides", "pads", "dilations", "group"], "ReduceSum": ["keepdims"],
    "Cast": ["to"], "Reshape": ["allowzero"],
}


@st.composite
def _built_model(draw):
    op = draw(st.sampled_from(sorted(_OPS)))
    # Mostly well-formed (float inputs, opset 17, IR 8), so that many models get as far as running.
    elem = draw(st.one_of(st.just(TensorProto.FLOAT), st.sampled_from(_ELEM_TYPES)))
    dims = draw(st.lists(st.one_of(st.integers(1, 4), st.integers(-2, 4), st.just("N")), min_size=0, max_size=4))
    attrs = {}
    for name in _ATTRS.get(op, []):
        if draw(st.booleans()):
            if name in ("perm", "strides", "pads", "dilations"):
                attrs[name] = draw(st.lists(st.integers(-3, 5), min_size=1, max_size=4))
            else:
                attrs[name] = draw(st.integers(-5, 30))
    x = helper.make_tensor_value_info("x", elem, dims)
    inputs, inits = ["x"], []
    if _OPS[op] == 2:
        second = draw(st.lists(st.integers(-6, 6), min_size=1, max_size=4))
        if op in ("Gather", "Reshape"):
            inits.append(numpy_helper.from_array(np.array(second, np.int64), "k"))
        else:
            inits.append(numpy_helper.from_array(np.ones(second and [abs(d) for d in second[:2]], np.float32), "k"))
        inputs.append("k")
    same_rank = [f"d{i}" for i in range(len(dims))]
    out_dims = draw(st.one_of(st.just(same_rank), st.none(), st.lists(st.integers(0, 4), max_size=4)))
    y = helper.make_tensor_value_info("y", draw(st.one_of(st.just(elem), st.sampled_from(_ELEM_TYPES[:4]))), out_dims)
    node = helper.make_node(op, inputs, ["y"], name=draw(st.text(max_size=8)), **attrs)
    graph = helper.make_graph([node], draw(st.text(max_size=8)), [x], [y], inits)
    opset = draw(st.one_of(st.just(17), st.sampled_from([1, 7, 13, 21, 28, 29, 999])))
    ir = draw(st.one_of(st.just(8), st.sampled_from([3, 10, 14, 15, 99])))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)


def _concat_opset1():
    graph = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["y"], name="c")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 1)], ir_version=3)


@given(_built_model())
@example(_concat_opset1())  # found: onnx.reference raised a raw RuntimeError building Concat-1 without axis
def test_fuzz_built_models_load_and_run_or_raise_clean_errors(model):
    net = _loads_or_clean_error(model.SerializeToString())
    if net is not None:
        _run_or_clean_error(net)


@given(st.one_of(st.text(max_size=12), st.binary(max_size=12)))
@example(b"\xff\xfe")  # an attribute name that is not UTF-8
@example("alpha\x1b[2J\n")
def test_fuzz_attribute_names_load_or_raise_model_error(name):
    model = onnx.load_from_string(VALID)
    attr = model.graph.node[1].attribute.add()
    # protobuf keeps str fields as UTF-8: raw bytes go in over a placeholder of the same length
    placeholder = "\u00a7" * len(name) if isinstance(name, bytes) else None
    attr.name = name if placeholder is None else "Q" * len(name)
    attr.type = onnx.AttributeProto.FLOAT
    attr.f = 1.0
    data = model.SerializeToString()
    if placeholder is not None and name:
        data = data.replace(b"\x0a" + bytes([len(name)]) + b"Q" * len(name), b"\x0a" + bytes([len(name)]) + name, 1)
    net = _loads_or_clean_error(data)
    if net is not None:
        assert "\x1b" not in str(getattr(net, "name", ""))


@given(st.dictionaries(st.sampled_from(["location", "offset", "length", "checksum", "other"]),
                       st.text(max_size=12), min_size=1, max_size=4))
@example({"location": "w.bin", "offset": "abc"})
@example({"location": "a\x00b"})
@example({"location": "../../../etc/passwd"})
@example({"location": "/dev/zero", "length": "99999999999"})
def test_fuzz_external_data_fields_load_or_raise_model_error(fields):
    model = onnx.load_from_string(VALID)
    init = model.graph.initializer[0]
    init.data_location = TensorProto.EXTERNAL
    init.ClearField("raw_data")
    init.ClearField("float_data")
    for key, value in fields.items():
        entry = init.external_data.add()
        entry.key, entry.value = key, value
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "w.bin"), "wb") as f:
            f.write(np.arange(6, dtype=np.float32).tobytes())
        path = os.path.join(folder, "m.onnx")
        with open(path, "wb") as f:
            f.write(model.SerializeToString())
        try:
            d5.load_model(path)
        except Deep500Error as exc:
            assert_clean_message(str(exc))
            assert "\n" not in str(exc), str(exc)
