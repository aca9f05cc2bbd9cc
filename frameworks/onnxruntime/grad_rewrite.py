"""ONNX Runtime-only rewrites of the autodiff's training graph into forms its CPU kernels run fast.

deep500lite's autodiff (:mod:`deep500lite.lv1.autodiff`) writes every gradient in standard ONNX
operators, shared by the reference and ONNX Runtime executors. Some of those forms are correct but
slow on ONNX Runtime's CPU kernels. :func:`rewrite_training_model` replaces them, in a copy of the
training model that only ONNX Runtime's training sessions run (the fused step and the host path),
by equal computations that ONNX Runtime runs faster; the shared autodiff is untouched.

Rewrites (each applies where its pattern and static shapes allow, and leaves the node alone
otherwise):

- ``weight_gradient``: the autodiff writes a convolution's weight gradient as
  ``Transpose(Slice(Conv(Transpose(x), Transpose(dy))))``, a Conv whose "kernel" is the whole
  output gradient (32x32 for ResNet-20's first stage) and whose output is the 3x3 kernel. ONNX
  Runtime runs that as a GEMM with 9 columns, about 5x slower than the forward Conv of the same
  layer. The rewrite unfolds ``x`` with a grouped Conv whose weight is one-hot (one output channel
  per input channel and kernel position: an im2col in one ONNX Runtime kernel), then contracts it
  with ``dy`` in one batched ``MatMul`` and sums over the batch:
  ``dW = ReduceSum_n(dy[n] @ cols[n]^T)``. A strided 1x1 kernel (ResNet's stride-2 shortcuts,
  where the autodiff's form also computes the 3 of 4 positions it then cuts away) needs no
  im2col: the columns are a strided ``Slice`` of ``x``. Group 1, any stride, dilation and pads;
  at least :data:`MIN_CHANNELS` input and output channels or :data:`MIN_POSITIONS` output
  positions, and a kernel of two taps or more; or a 1x1 kernel with a stride above 1, no pads and
  any channels. Stride-1 1x1 kernels keep the autodiff's form: with ``nchwc_conv`` it is faster
  on MobileNetV2's small late layers.
- ``input_gradient``: a ``ConvTranspose`` with stride 1 (the input gradient of a stride-1 Conv)
  becomes the ``Conv`` of the same input with the kernel flipped in space and its two channel axes
  swapped, padded by ``dilation * (kernel - 1) - pad``: ONNX Runtime runs ConvTranspose as a GEMM
  followed by a col2im scatter, and Conv directly (in NCHWc with ``nchwc_conv``). Group 1, float32,
  no ``output_shape``, zero ``output_padding``, :data:`MIN_CHANNELS` channels or more, a kernel
  of two taps or more.
- ``relu_mask``: ``Where(Greater(x, 0), dy, 0)`` (the ReLU backward) becomes
  ``Mul(dy, Cast(Greater(x, 0)))``, float32 only. Where ``dy`` is not finite and the mask is 0 the
  result is NaN instead of 0 (a step that already has a non-finite gradient).
- ``nchwc_conv``: ONNX Runtime runs a ``Conv`` with its blocked-layout (NCHWc) kernels only when
  the weight is a constant, which it reorders once; in a training graph the weights are inputs,
  so every Conv took the slower im2col + GEMM kernel. The rewrite reorders the weight in the graph
  (``Reshape`` + ``Transpose`` into ONNX Runtime's ``OIHWBiBo`` filter layout, a few kB per step)
  and calls ONNX Runtime's own ``com.microsoft.nchwc`` ``ReorderInput`` -> ``Conv`` ->
  ``ReorderOutput``, the nodes its optimizer writes for constant weights. 2-D, group 1, float32,
  input and output channels multiples of the CPU's block size (16 with AVX-512, 8 with AVX2),
  which :func:`nchwc_block_size` reads from ONNX Runtime itself, and a kernel of two taps or more
  (a 1x1 Conv is memory-bound, and the two reorders cost more than the blocked kernel saves) and
  at most 7 wide (a layer's kernel, not the activation-sized one of a weight-gradient Conv);
  CPU only.

:func:`rewrites_for` picks the rewrites for an executor: ``executor.grad_rewrites`` if set, else
all of :data:`REWRITES` on CPU and none on a GPU (where they were not measured).
"""

from __future__ import annotations

import functools
import os
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from deep500lite.errors import UserError

__all__ = ["MIN_CHANNELS", "MIN_POSITIONS", "REWRITES", "nchwc_block_size", "rewrite_training_model",
           "rewrites_for"]

REWRITES = ("weight_gradient", "input_gradient", "relu_mask", "nchwc_conv")
"""The names of the rewrites :func:`rewrite_training_model` knows, in the order it applies them."""

_NCHWC = "com.microsoft.nchwc"

MIN_CHANNELS = 16
"""``input_gradient`` applies to convolutions with at least this many input and output channels
and more than one kernel tap, and ``weight_gradient``'s one-hot form to those with this many
channels or :data:`MIN_POSITIONS` output positions. Measured on this project's 2-core Xeon,
rewriting every layer made LeNet (1-16 channels, 5x5) slower and ResNet-20 (16-64 channels, 3x3)
faster."""

MIN_POSITIONS = 256
"""``weight_gradient`` also applies to convolutions of fewer than :data:`MIN_CHANNELS` channels
when the output gradient has at least this many positions per sample (16x16): there the
autodiff's form, a Conv whose kernel is the whole output gradient, is the slow one (ResNet-20's
stem, 3 -> 16 channels on 32x32: 4.2 ms against 1.0 ms rewritten on a 2-core AMD EPYC; LeNet's
first layer, 1 -> 6 on 24x24: 0.65 against 0.52 ms; its second, 6 -> 16 on 8x8: 0.43 against 0.48
ms, so left alone)."""


class _Graph:
    """Indexes of a graph: producers, consumers, constants and inferred types/shapes."""

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.graph = model.graph
        self.producer = {o: n for n in self.graph.node for o in n.output}
        self.consumers: dict = {}
        for n in self.graph.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.outputs = {o.name for o in self.graph.output}
        self.inits = {t.name: t for t in self.graph.initializer}
        self.info = {}
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
        except Exception:  # noqa: BLE001 - without shapes every rewrite that needs one is skipped
            inferred = model
        for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
            t = v.type.tensor_type
            shape = ([d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
                     if t.HasField("shape") else None)
            self.info[v.name] = (t.elem_type, shape)
        self.nchwc_block = 0
        self.taken = (set(self.producer) | set(self.inits) | {i.name for i in self.graph.input} | self.outputs
                      | {n.name for n in self.graph.node})
        self.count = 0

    def const(self, name):
        """The numpy value of a constant (initializer or Constant node), or None."""
        if name in self.inits:
            return numpy_helper.to_array(self.inits[name])
        node = self.producer.get(name)
        if node is not None and node.op_type == "Constant" and node.attribute:
            return numpy_helper.to_array(node.attribute[0].t) if node.attribute[0].name == "value" else None
        return None

    def only_consumer(self, name):
        """The single node reading ``name``, or None (several readers, or a graph output)."""
        readers = self.consumers.get(name, [])
        return readers[0] if len(readers) == 1 and name not in self.outputs else None

    def fresh(self, hint: str) -> str:
        while True:
            self.count += 1
            name = f"{hint}__ortg{self.count}"
            if name not in self.taken:
                self.taken.add(name)
                return name

    def add_init(self, hint: str, array: np.ndarray) -> str:
        name = self.fresh(hint)
        self.graph.initializer.append(numpy_helper.from_array(array, name))
        return name

    def node(self, op_type: str, inputs: list, output: str | None = None, **attrs) -> tuple:
        out = output or self.fresh(op_type.lower())
        return helper.make_node(op_type, inputs, [out], name=self.fresh(f"n_{op_type}"), **attrs), out


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _perm_swap01(node, rank: int) -> bool:
    return node is not None and node.op_type == "Transpose" and list(_attr(node, "perm", [])) == [1, 0] + list(
        range(2, rank))


def _opset(model) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _weight_gradient(g: _Graph, conv) -> tuple | None:
    """The replacement of one autodiff weight-gradient chain ending at Conv ``conv``, or None.

    Returns:
        ``(nodes to remove, new nodes)``.
    """
    if len(conv.input) != 2 or _attr(conv, "group", 1) != 1 or _attr(conv, "auto_pad", b"NOTSET") not in (
            b"NOTSET", "NOTSET"):
        return None
    tx, tdy = g.producer.get(conv.input[0]), g.producer.get(conv.input[1])
    xtype, xshape = g.info.get(tx.input[0], (None, None)) if tx is not None else (None, None)
    if xshape is None or xtype != TensorProto.FLOAT or len(xshape) < 3:
        return None
    rank = len(xshape)
    n = rank - 2
    if not (_perm_swap01(tx, rank) and _perm_swap01(tdy, rank)):
        return None
    cut = g.only_consumer(conv.output[0])
    if cut is None or cut.op_type != "Slice" or len(cut.input) < 4:
        return None
    starts, ends, axes = (g.const(i) for i in cut.input[1:4])
    steps = g.const(cut.input[4]) if len(cut.input) > 4 and cut.input[4] else None
    if (starts is None or ends is None or axes is None or list(axes) != list(range(2, rank)) or any(starts)
            or (steps is not None and any(s != 1 for s in steps))):
        return None
    back = g.only_consumer(cut.output[0])
    if not _perm_swap01(back, rank):
        return None
    kernel = [int(k) for k in ends]
    channels = xshape[1]
    dyshape = g.info.get(tdy.input[0], (None, None))[1]
    if (channels is None or dyshape is None or len(dyshape) != rank or dyshape[1] is None
            or any(d is None for d in dyshape[2:])):
        return None
    taps = int(np.prod(kernel))
    few_channels = channels < MIN_CHANNELS or dyshape[1] < MIN_CHANNELS
    if taps >= 2 and few_channels and int(np.prod(dyshape[2:])) < MIN_POSITIONS:
        return None
    # the forward convolution's geometry: the autodiff swapped its strides and dilations
    strides = list(_attr(conv, "dilations", [1] * n))
    dil = list(_attr(conv, "strides", [1] * n))
    pads = list(_attr(conv, "pads", [0] * (2 * n)))
    for i in range(n):
        size = xshape[2 + i]
        if size is None or dyshape[2 + i] is None:
            return None
        out = (size + pads[i] + pads[i + n] - dil[i] * (kernel[i] - 1) - 1) // strides[i] + 1
        if out != dyshape[2 + i]:
            return None
    x, dy, dw = tx.input[0], tdy.input[0], back.output[0]
    new = []
    if taps == 1:  # a strided 1x1 kernel: the columns are every stride-th pixel of x
        if any(pads) or all(st == 1 for st in strides) or _opset(g.model) < 10:  # Slice takes steps from 10
            return None
        node, cols = g.node("Slice", [x, g.add_init("starts", np.zeros(n, np.int64)),
                                      g.add_init("ends", np.array(xshape[2:], np.int64)),
                                      g.add_init("axes", np.arange(2, rank, dtype=np.int64)),
                                      g.add_init("steps", np.array(strides, np.int64))])
        new.append(node)
    else:
        onehot = np.zeros((channels * taps, 1, *kernel), np.float32)
        eye = np.eye(taps, dtype=np.float32).reshape(taps, *kernel)
        for c in range(channels):
            onehot[c * taps:(c + 1) * taps, 0] = eye
        w = g.add_init("onehot", onehot)
        node, cols = g.node("Conv", [x, w], group=channels, kernel_shape=kernel, strides=strides, dilations=dil,
                            pads=pads)
        new.append(node)
    flat = g.add_init("shape", np.array([0, 0, -1], np.int64))
    node, cols = g.node("Reshape", [cols, flat])
    new.append(node)
    node, cols_t = g.node("Transpose", [cols], perm=[0, 2, 1])
    new.append(node)
    node, dy2 = g.node("Reshape", [dy, flat])
    new.append(node)
    node, per_sample = g.node("MatMul", [dy2, cols_t])  # [N, O, C*taps]
    new.append(node)
    if _opset(g.model) >= 13:
        node, summed = g.node("ReduceSum", [per_sample, g.add_init("axes", np.array([0], np.int64))], keepdims=0)
    else:
        node, summed = g.node("ReduceSum", [per_sample], axes=[0], keepdims=0)
    new.append(node)
    node, _ = g.node("Reshape", [summed, g.add_init("shape", np.array([0, channels, *kernel], np.int64))], dw)
    new.append(node)
    removed = [conv, cut, back]
    # the two Transposes go too unless something else reads them
    removed += [t for t in (tx, tdy) if g.only_consumer(t.output[0]) is conv]
    return removed, new


def _relu_mask(g: _Graph, where) -> tuple | None:
    """``Where(Greater(x, 0), dy, 0)`` -> ``Mul(dy, Cast(Greater(x, 0)))``, or None."""
    if len(where.input) != 3:
        return None
    cond = g.producer.get(where.input[0])
    zero = g.const(where.input[2])
    if cond is None or cond.op_type != "Greater" or zero is None or zero.size != 1 or float(zero.reshape(-1)[0]) != 0:
        return None
    rhs = g.const(cond.input[1])
    if rhs is None or rhs.size != 1 or float(rhs.reshape(-1)[0]) != 0:
        return None
    dtype, dshape = g.info.get(where.input[1], (None, None))
    if dtype != TensorProto.FLOAT or dshape is None or g.info.get(where.output[0], (None, None))[1] != dshape:
        return None  # Where could broadcast dy to a larger shape; Mul would too, but keep it exact
    cast, mask = g.node("Cast", [where.input[0]], to=TensorProto.FLOAT)
    mul, _ = g.node("Mul", [where.input[1], mask], where.output[0])
    return [where], [cast, mul]


def _input_gradient(g: _Graph, node) -> tuple | None:
    """A stride-1 ``ConvTranspose`` -> ``Conv`` with the flipped, channel-swapped kernel, or None."""
    if len(node.input) > 2 and node.input[2]:
        return None  # a bias is never in an autodiff input gradient; keep the node as it is
    wtype, wshape = g.info.get(node.input[1], (None, None))
    if wtype != TensorProto.FLOAT or wshape is None or len(wshape) < 3 or any(d is None for d in wshape):
        return None
    n = len(wshape) - 2
    kernel = list(_attr(node, "kernel_shape", wshape[2:]))
    strides = list(_attr(node, "strides", [1] * n))
    dil = list(_attr(node, "dilations", [1] * n))
    pads = list(_attr(node, "pads", [0] * (2 * n)))
    outpad = list(_attr(node, "output_padding", [0] * n))
    auto = _attr(node, "auto_pad", b"NOTSET")
    if (_attr(node, "group", 1) != 1 or any(s != 1 for s in strides) or any(outpad)
            or _attr(node, "output_shape") is not None or auto not in (b"NOTSET", "NOTSET")
            or kernel != list(wshape[2:]) or min(wshape[:2]) < MIN_CHANNELS or int(np.prod(kernel)) < 2):
        return None
    new_pads = [dil[i % n] * (kernel[i % n] - 1) - pads[i] for i in range(2 * n)]
    if any(p < 0 for p in new_pads):
        return None
    spatial = list(range(2, n + 2))
    flip, flipped = g.node("Slice", [node.input[1], g.add_init("starts", np.full(n, -1, np.int64)),
                                     g.add_init("ends", np.full(n, np.iinfo(np.int64).min, np.int64)),
                                     g.add_init("axes", np.array(spatial, np.int64)),
                                     g.add_init("steps", np.full(n, -1, np.int64))])
    swap, kernel_t = g.node("Transpose", [flipped], perm=[1, 0] + spatial)
    conv, _ = g.node("Conv", [node.input[0], kernel_t], node.output[0], kernel_shape=kernel, dilations=dil,
                     pads=new_pads)
    return [node], [flip, swap, conv]


def _blocked_filter(g: _Graph, w: str, out_ch: int, in_ch: int, kernel: list, block: int) -> tuple:
    """Nodes that write weight ``w`` [O, I, kh, kw] in ONNX Runtime's OIHWBiBo layout (same shape)."""
    six, w6 = g.node("Reshape", [w, g.add_init("shape", np.array(
        [out_ch // block, block, in_ch // block, block, *kernel], np.int64))])
    swap, w6t = g.node("Transpose", [w6], perm=[0, 2, 4, 5, 3, 1])
    four, wb = g.node("Reshape", [w6t, g.add_init("shape", np.array([out_ch, in_ch, *kernel], np.int64))])
    return [six, swap, four], wb


def _nchwc_conv(g: _Graph, node) -> tuple | None:
    """A 2-D group-1 ``Conv`` -> ReorderInput, NCHWc ``Conv`` with the reordered weight, ReorderOutput."""
    block = g.nchwc_block
    if not block or node.domain not in ("", "ai.onnx") or _attr(node, "group", 1) != 1:
        return None
    xtype, xshape = g.info.get(node.input[0], (None, None))
    wtype, wshape = g.info.get(node.input[1], (None, None))
    if (xtype != TensorProto.FLOAT or wtype != TensorProto.FLOAT or xshape is None or len(xshape) != 4
            or wshape is None or len(wshape) != 4 or any(d is None for d in wshape)):
        return None
    out_ch, in_ch = wshape[:2]
    if (out_ch % block or in_ch % block or xshape[1] != in_ch or wshape[2] * wshape[3] < 2
            or max(wshape[2:]) > _NCHWC_MAX_KERNEL):
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute
             if a.name in ("auto_pad", "dilations", "pads", "strides")}
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
        return None  # SAME_* is resolved by the autodiff already; keep anything else as it is
    new, wb = _blocked_filter(g, node.input[1], out_ch, in_ch, list(wshape[2:]), block)
    into, xb = g.node("ReorderInput", [node.input[0]], domain=_NCHWC)
    inputs = [xb, wb] + ([node.input[2]] if len(node.input) > 2 and node.input[2] else [])
    conv, yb = g.node("Conv", inputs, domain=_NCHWC, kernel_shape=list(wshape[2:]), **attrs)
    back, _ = g.node("ReorderOutput", [yb], node.output[0], domain=_NCHWC, channels=out_ch)
    return [node], new + [into, conv, back]


# A layer's kernel, not the activation-sized "kernel" of the autodiff's own weight-gradient Conv
# (the ones weight_gradient leaves, such as the stem's): its 64x32x32 sums were not measured here.
_NCHWC_MAX_KERNEL = 7


@functools.lru_cache(maxsize=1)
def nchwc_block_size() -> int:
    """The channel block of ONNX Runtime's NCHWc kernels on this CPU, or 0 where it has none.

    Read from ONNX Runtime itself: a 32-channel Conv with a constant weight is optimized by
    ONNX Runtime, and the block size is the one whose OIHWBiBo reorder gives the filter it wrote.
    """
    import onnxruntime as ort

    channels = 32
    w = np.arange(channels * channels * 9, dtype=np.float32).reshape(channels, channels, 3, 3)
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.optimized_model_filepath = os.path.join(tmp, "probe.onnx")
        try:
            ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            optimized = onnx.load(options.optimized_model_filepath)
        except Exception:  # noqa: BLE001 - no NCHWc kernels: the rewrite is skipped
            return 0
    conv = next((n for n in optimized.graph.node if n.domain == _NCHWC and n.op_type == "Conv"), None)
    if conv is None:
        return 0
    written = next((numpy_helper.to_array(t) for t in optimized.graph.initializer if t.name == conv.input[1]), None)
    for block in (16, 8, 4):
        mine = w.reshape(channels // block, block, channels // block, block, 3, 3).transpose(0, 2, 4, 5, 3, 1)
        if written is not None and written.size == mine.size and np.array_equal(written.reshape(-1), mine.reshape(-1)):
            return block
    return 0


def rewrites_for(executor) -> tuple:
    """The rewrites an ONNX Runtime executor's training sessions apply.

    ``executor.grad_rewrites`` where set (a tuple of :data:`REWRITES` names; ``()``: none);
    otherwise all of :data:`REWRITES` on CPU and none on a GPU, where they were not measured.
    """
    chosen = getattr(executor, "grad_rewrites", None)
    if chosen is not None:
        return tuple(chosen)
    device = getattr(executor, "devname", None)
    return () if device is not None and device.is_gpu else REWRITES


_MATCHERS = {"weight_gradient": ("Conv", _weight_gradient), "input_gradient": ("ConvTranspose", _input_gradient),
             "relu_mask": ("Where", _relu_mask), "nchwc_conv": ("Conv", _nchwc_conv)}


def rewrite_training_model(model: onnx.ModelProto, rewrites=REWRITES) -> tuple:
    """A copy of ``model`` with ONNX Runtime-friendly forms of the autodiff's slow gradients.

    Args:
        model: a training model from :func:`deep500lite.lv1.autodiff.build_training_model` (or the
            fused model built on it); not changed.
        rewrites: names from :data:`REWRITES` to apply.

    Returns:
        ``(new model, counts)``: counts maps each rewrite name to the number of places it changed.
        Nodes a rewrite does not recognize (grouped convolutions, dynamic spatial shapes, other
        element types) are left as they are.

    Raises:
        UserError: a name in ``rewrites`` is not one of :data:`REWRITES`.
    """
    unknown = [r for r in rewrites if r not in REWRITES]
    if unknown:
        raise UserError(f"Unknown ONNX Runtime gradient rewrite: allowed {', '.join(REWRITES)}. "
                        f"Received: {unknown}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    counts = {}
    for name in REWRITES:
        if name not in rewrites:
            continue
        op_type, match = _MATCHERS[name]
        g = _Graph(out)
        if name == "nchwc_conv":
            g.nchwc_block = nchwc_block_size()
        removed, added, count = set(), {}, 0
        for node in list(g.graph.node):
            if node.op_type != op_type or id(node) in removed:
                continue
            found = match(g, node)
            if found is None:
                continue
            old, new = found
            count += 1
            removed.update(id(n) for n in old)
            added[id(node)] = new
        if count:
            nodes = []
            # new nodes go where the matched node stood, whose inputs are computed by then
            for node in g.graph.node:
                nodes.extend(added.get(id(node), []))
                if id(node) not in removed:
                    nodes.append(node)
            del g.graph.node[:]
            g.graph.node.extend(nodes)
        counts[name] = count
    if counts.get("nchwc_conv") and not any(o.domain == _NCHWC for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(_NCHWC, 1))
    _drop_unused_initializers(out.graph)
    return out, counts


def _drop_unused_initializers(graph) -> None:
    """Remove initializers no node reads (the constants of replaced nodes) that are not graph inputs."""
    used = {i for n in graph.node for i in n.input} | {i.name for i in graph.input} | {o.name for o in graph.output}
    keep = [t for t in graph.initializer if t.name in used]
    if len(keep) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(keep)
