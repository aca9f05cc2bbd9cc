"""What a producer hands the real-model zoo: one exported model with its producer's answers.

A *producer* is a framework that wrote the model (torch through its TorchScript or dynamo ONNX
exporter, Keras through tf2onnx). ``frameworks/<fw>/zoo.py`` builds each zoo model from a public
model library with random weights and returns a :class:`ZooModel`; :mod:`deep500lite.bench.zoo`
then runs it on every executor and compares the answers with the producer's.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx

__all__ = ["ZooModel", "GraphModel", "ParameterMap", "map_parameters"]

#: producer parameter name -> the ONNX initializers that hold it, each with the axis permutation
#: that turns the producer's array into the initializer (``initializer = param.transpose(perm)``).
#: A parameter the exporter copied (a weight and its transposed copy) has several entries; its
#: gradient is the sum of theirs.
ParameterMap = dict[str, list[tuple[str, tuple[int, ...]]]]


@dataclasses.dataclass
class ZooModel:
    """One model of the zoo, exported to ONNX, with the producer's float64 (and float32) answers.

    Attributes:
        name: the zoo's name for the architecture (``"bert"``, ``"keras_mobilenet_v2"``).
        source: the library it came from (``"transformers"``, ``"keras.applications"``, ``"torch.nn"``).
        exporter: ``"torchscript"``, ``"dynamo"`` or ``"tf2onnx"``.
        proto: the exported model, logits as the single output ``output``.
        feeds: one array per graph input (float32 images, int64 token ids).
        output: the graph output holding the logits, ``[batch, classes]``.
        labels: int64 ``[batch]`` class labels in ``[0, classes)`` for the training check.
        logits64: the producer's logits for ``feeds`` computed in float64 (inference mode).
        logits32: the producer's own float32 logits, to show its round-off beside the executors'.
        parameters: producer parameter -> the ONNX initializers that hold it (see ``ParameterMap``).
        gradients64: producer parameter -> d(mean softmax cross-entropy)/d(parameter), float64,
            in the producer's layout, computed in the semantics deep500lite trains with
            (BatchNormalization with batch statistics where the graph has BatchNormalization
            nodes, no active dropout). ``None`` when the producer cannot give them.
        gradients32: the same gradients from the producer in float32 (its own round-off).
        unmapped: producer parameters found in no initializer (the exporter folded them into
            constants); their gradients cannot be compared.
        notes: anything the matrix should say about this model (sizes, exporter options).
    """

    name: str
    source: str
    exporter: str
    proto: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    output: str
    labels: np.ndarray
    logits64: np.ndarray
    logits32: np.ndarray
    parameters: ParameterMap = dataclasses.field(default_factory=dict)
    gradients64: dict[str, np.ndarray] | None = None
    gradients32: dict[str, np.ndarray] | None = None
    unmapped: list[str] = dataclasses.field(default_factory=list)
    notes: str = ""


@dataclasses.dataclass
class GraphModel:
    """A zoo graph beyond a classifier (control flow, data-dependent shapes, dynamic axes, a decoder).

    Its answers come from the reference executor in float64, as ``deep500lite verify``'s do
    (:class:`deep500lite.lv1.verify.GroundTruth`): every executor is judged by the same rule.

    Attributes:
        name, source, exporter: as in :class:`ZooModel`.
        proto: the exported model.
        feeds: one or more sets of feeds; with several (a model exported with dynamic axes), one
            executor runs them all in turn, and the compile time each new shape costs is reported.
        train: check gradients (on the first set of feeds) with ``loss``.
        loss: the loss, in ``verify``'s spelling (``"cross_entropy"``, ``"mse:logits"``).
        no_training: why gradients are not checked, when ``train`` is False.
        generate: a decoder with a key/value cache: how many tokens to generate, feeding each step
            the previous step's ``present`` as ``past`` (see :mod:`deep500lite.bench.zoo_graphs`).
        notes: what the matrix should say about the model.
    """

    name: str
    source: str
    exporter: str
    proto: onnx.ModelProto
    feeds: list
    train: bool = False
    loss: str | None = None
    no_training: str = ""
    generate: int = 0
    notes: str = ""


def map_parameters(params: dict[str, np.ndarray], proto: onnx.ModelProto) -> tuple[ParameterMap, list[str]]:
    """Find where each producer parameter ended up among the ONNX initializers.

    Exporters rename parameters (tf2onnx: ``model/conv1/Conv2D/ReadVariableOp:0``), transpose
    them (Keras's HWIO kernels become OIHW, torch's Linear weights are pre-transposed for MatMul)
    and sometimes keep two copies. With random weights every parameter's values are unique, so an
    initializer holds a parameter when it equals the parameter under some permutation of its
    axes. A name match is tried first; the values decide.

    Args:
        params: producer parameter name -> its float value (any float dtype).
        proto: the exported model.

    Returns:
        ``(parameters, unmapped)``: the map (see :data:`ParameterMap`) and the producer
        parameters found in no initializer.
    """
    import itertools

    from onnx import numpy_helper

    inits = {}
    for init in proto.graph.initializer:
        if init.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16):
            inits[init.name] = numpy_helper.to_array(init).astype(np.float64)
    by_signature: dict[tuple, list[str]] = {}
    for name, value in inits.items():
        by_signature.setdefault((value.size, tuple(sorted(value.shape))), []).append(name)

    mapping: ParameterMap = {}
    unmapped: list[str] = []
    for pname, pvalue in params.items():
        p = np.asarray(pvalue, dtype=np.float64)
        found: list[tuple[str, tuple[int, ...]]] = []
        for iname in by_signature.get((p.size, tuple(sorted(p.shape))), []):
            ivalue = inits[iname]
            if p.ndim == 0 or p.size == 1:
                perms = [tuple(range(p.ndim))] if ivalue.shape == p.shape else []
            else:
                perms = [perm for perm in itertools.permutations(range(p.ndim))
                         if tuple(p.shape[i] for i in perm) == ivalue.shape]
            for perm in perms:
                # Exporters store float32; the producer may hold float64 copies of the same values.
                if np.allclose(p.transpose(perm), ivalue, rtol=1e-6, atol=0):
                    found.append((iname, perm))
                    break
        if found and p.size == 1:
            # A scalar's value alone is no fingerprint: keep it only when the name says so too.
            found = [f for f in found if f[0] == pname or f[0].endswith(pname)]
        if found:
            mapping[pname] = found
        else:
            unmapped.append(pname)
    return mapping, unmapped
