"""Deep500's ONNX parser module, ``d5.parser``: ONNX files and protos into :class:`~deep500lite.Network`.

Deep500 parsed an ONNX file into its own model object; here the parsed model is a
:class:`~deep500lite.Network`, which every executor's ``from_model`` takes and which has the
methods Deep500's model had (``get_input_nodes()``, ``get_output_nodes()``, ``add_operation``):

>>> import deep500lite as d5
>>> model = d5.parser.load_and_parse_model("mnist_cnn.onnx")  # doctest: +SKIP
>>> input_name = model.get_input_nodes()[0].name  # doctest: +SKIP

As in Deep500, loading a file or bytes drops graph inputs that no node reads (older exporters
listed every initializer as an input), printing how many it dropped.
"""

from __future__ import annotations

import os

import onnx

from deep500lite.errors import UserTypeError
from deep500lite.lv1.network import Network, iter_nodes, load_model

__all__ = ["parse_model", "load_and_parse_model", "load_and_parse_binary", "clean_model", "load_model_only",
           "save_onnxdef"]


def parse_model(onnx_model: onnx.ModelProto) -> Network:
    """A :class:`Network` of an ``onnx.ModelProto`` (the proto is only read).

    Raises:
        ModelError: the proto is not a valid ONNX model.
        UserTypeError: ``onnx_model`` is not a ModelProto.
    """
    if not isinstance(onnx_model, onnx.ModelProto):
        raise UserTypeError(f"parse_model expects an onnx.ModelProto. Received: {type(onnx_model).__name__}")
    return load_model(onnx_model)


def load_and_parse_model(path: str | os.PathLike) -> Network:
    """Read an ONNX file into a :class:`Network`, dropping graph inputs no node reads.

    Args:
        path: the ``.onnx`` file (external data is read relative to its folder).

    Raises:
        ModelError: the file is missing, not ONNX, damaged or invalid.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise UserTypeError(f"load_and_parse_model expects the path of an .onnx file. "
                            f"Received: {type(path).__name__}")
    return clean_model(load_model(path))


def load_and_parse_binary(binary: bytes) -> Network:
    """A :class:`Network` of a serialized ONNX model, dropping graph inputs no node reads.

    Raises:
        ModelError: the bytes are not a valid ONNX model.
    """
    if not isinstance(binary, (bytes, bytearray, memoryview)):
        raise UserTypeError(f"load_and_parse_binary expects the bytes of a serialized ONNX model. "
                            f"Received: {type(binary).__name__}")
    return clean_model(load_model(bytes(binary)))


def clean_model(model: Network) -> Network:
    """Remove the graph inputs that no node (and no graph output) uses; returns the same network.

    Prints how many it removed, as Deep500 did, when it removed any.
    """
    if not isinstance(model, Network):
        raise UserTypeError(f"clean_model expects a d5.Network. Received: {type(model).__name__}")
    used = {name for node in iter_nodes(model.graph) for name in node.input}
    used.update(o.name for o in model.graph.output)
    kept = [vi for vi in model.graph.input if vi.name in used]
    removed = len(model.graph.input) - len(kept)
    if removed:
        del model.graph.input[:]
        model.graph.input.extend(kept)
        model._changed()
        print(f"Removed {removed} superfluous nodes in graph")
    return model


def load_model_only(path: str | os.PathLike) -> onnx.ModelProto:
    """The ``onnx.ModelProto`` of an ONNX file, unparsed and unchecked.

    Raises:
        ModelError: the file is missing or cannot be decoded.
    """
    return load_model(path, check=False).to_onnx()


def save_onnxdef(onnx_model, path: str | os.PathLike) -> None:
    """Write an ``onnx.ModelProto`` (or a :class:`Network`, with its current values) to ``path``."""
    if isinstance(onnx_model, Network):
        onnx_model.save(path)
        return
    if not isinstance(onnx_model, onnx.ModelProto):
        raise UserTypeError(f"save_onnxdef expects an onnx.ModelProto or a d5.Network. "
                            f"Received: {type(onnx_model).__name__}")
    from deep500lite.utils import atomic_write_bytes

    atomic_write_bytes(path, onnx_model.SerializeToString())
