"""Built-in descriptions for the scaling model: DNNs layer by layer, interconnects and accelerators.

DNNs (:data:`MODELS`) are built from their layer shapes by a small shape tracker (:class:`_Shapes`),
so parameter counts and multiply-accumulates (MACs) are *computed*, not typed in; the tests
compare the totals with the published figures in :data:`PUBLISHED`. The papers' "FLOPs" for
these networks count one multiply-accumulate as one operation, so ``macs`` is compared with
them; the roofline uses ``2 * macs`` FLOP.

Interconnects (:data:`INTERCONNECTS`) and accelerators (:data:`ACCELERATORS`) carry the public
figures they come from in their ``source`` field (docs/scaling.md lists them).
"""

from __future__ import annotations

import dataclasses
import math

from deep500lite.errors import UserError, format_choices

__all__ = ["Layer", "ModelDescription", "Interconnect", "Accelerator", "MODELS", "PUBLISHED", "INTERCONNECTS",
           "ACCELERATORS", "model_description", "interconnect", "accelerator", "describe_onnx", "fit_gemm_efficiency",
           "measure_gemm_rates", "gemm_rates_from_bench", "accelerator_from_gemm_bench"]

_F32 = 4


@dataclasses.dataclass(frozen=True)
class Layer:
    """One layer of a network, per sample.

    Attributes:
        name: the layer's name.
        kind: ``conv``, ``fc``, ``pool``, ``norm`` or ``other`` (element-wise work).
        params: trainable parameters.
        macs: multiply-accumulates of the forward pass for one sample.
        in_elems, out_elems: activations read and written for one sample (elements).
        gemm_m: the GEMM dimension that grows with the batch, per sample (1 for a fully connected
            layer: ``b x I * I x O``; output pixels for a convolution, batched as one GEMM). The
            smaller the product with the batch, the skinnier the GEMM.
        aux: part of a training-only branch (GoogLeNet's auxiliary classifiers): trained and
            communicated, not part of the inference network's published counts.
    """

    name: str
    kind: str
    params: int
    macs: int
    in_elems: int
    out_elems: int
    gemm_m: int = 1
    aux: bool = False


@dataclasses.dataclass(frozen=True)
class ModelDescription:
    """A network as the scaling model sees it.

    Attributes:
        name: its name.
        layers: the :class:`Layer` list in forward order.
        sample_bytes: bytes of one input sample on disk (for the I/O model; an ImageNet JPEG
            averages about 110 kB).
        source: where the architecture comes from.
    """

    name: str
    layers: tuple
    sample_bytes: int = 110_000
    source: str = ""

    @property
    def params(self) -> int:
        """Total trainable parameters."""
        return sum(layer.params for layer in self.layers)

    @property
    def macs(self) -> int:
        """Forward multiply-accumulates (or element operations) per sample, every layer, as trained."""
        return sum(layer.macs for layer in self.layers)

    @property
    def inference_params(self) -> int:
        """Parameters of the inference network (without training-only branches): the published count."""
        return sum(layer.params for layer in self.layers if not layer.aux)

    @property
    def inference_gemm_macs(self) -> int:
        """Multiply-accumulates of the convolutions and fully connected layers of the inference network
        per sample: what the papers call the network's "FLOPs"."""
        return sum(layer.macs for layer in self.layers if not layer.aux and layer.kind in ("conv", "fc"))

    @property
    def gradient_bytes(self) -> int:
        """Bytes of the float32 gradient (the allreduce volume per step)."""
        return self.params * _F32


class _Shapes:
    """Tracks a CHW shape while layers are appended; computes parameters and MACs."""

    def __init__(self, c, h, w):
        self.c, self.h, self.w = c, h, w
        self.layers: list[Layer] = []

    def _elems(self):
        return self.c * self.h * self.w

    def conv(self, name, out, k, stride=1, pad=0, groups=1, bias=True, at=None):
        c, h, w = at or (self.c, self.h, self.w)
        kh, kw = (k, k) if isinstance(k, int) else k
        ph, pw = (pad, pad) if isinstance(pad, int) else pad
        oh = (h + 2 * ph - kh) // stride + 1
        ow = (w + 2 * pw - kw) // stride + 1
        per_out = (c // groups) * kh * kw
        params = out * per_out + (out if bias else 0)
        self.layers.append(Layer(name, "conv", params, out * oh * ow * per_out, c * h * w, out * oh * ow, oh * ow))
        self.c, self.h, self.w = out, oh, ow
        return out, oh, ow

    def bn(self, name):
        self.layers.append(Layer(name, "norm", 2 * self.c, 2 * self._elems(), self._elems(), self._elems()))

    def pool(self, name, k, stride, pad=0, ceil=False):
        rnd = math.ceil if ceil else math.floor
        oh = int(rnd((self.h + 2 * pad - k) / stride)) + 1
        ow = int(rnd((self.w + 2 * pad - k) / stride)) + 1
        inp = self._elems()
        self.h, self.w = oh, ow
        self.layers.append(Layer(name, "pool", 0, self._elems() * k * k, inp, self._elems()))

    def global_pool(self, name):
        inp = self._elems()
        self.h = self.w = 1
        self.layers.append(Layer(name, "pool", 0, inp, inp, self.c))

    def fc(self, name, out):
        inp = self._elems()
        self.layers.append(Layer(name, "fc", inp * out + out, inp * out, inp, out, 1))
        self.c, self.h, self.w = out, 1, 1

    def other(self, name, elems_in, elems_out):
        self.layers.append(Layer(name, "other", 0, elems_out, elems_in, elems_out))


def _alexnet():
    """Krizhevsky, Sutskever, Hinton, NIPS 2012 (two-tower: conv2, 4, 5 in two groups)."""
    s = _Shapes(3, 227, 227)
    s.conv("conv1", 96, 11, 4)
    s.pool("pool1", 3, 2)
    s.conv("conv2", 256, 5, 1, 2, groups=2)
    s.pool("pool2", 3, 2)
    s.conv("conv3", 384, 3, 1, 1)
    s.conv("conv4", 384, 3, 1, 1, groups=2)
    s.conv("conv5", 256, 3, 1, 1, groups=2)
    s.pool("pool5", 3, 2)
    s.fc("fc6", 4096)
    s.fc("fc7", 4096)
    s.fc("fc8", 1000)
    return ModelDescription("alexnet", tuple(s.layers), source="Krizhevsky et al., NIPS 2012")


def _vgg16():
    """Simonyan and Zisserman, ICLR 2015, configuration D."""
    s = _Shapes(3, 224, 224)
    for block, (width, reps) in enumerate([(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)], 1):
        for i in range(1, reps + 1):
            s.conv(f"conv{block}_{i}", width, 3, 1, 1)
        s.pool(f"pool{block}", 2, 2)
    s.fc("fc6", 4096)
    s.fc("fc7", 4096)
    s.fc("fc8", 1000)
    return ModelDescription("vgg16", tuple(s.layers), source="Simonyan & Zisserman, ICLR 2015 (config D)")


def _resnet(depth_blocks, name):
    """He et al., CVPR 2016, bottleneck ResNets (the stride in the 3x3 convolution, as torchvision)."""
    s = _Shapes(3, 224, 224)
    s.conv("conv1", 64, 7, 2, 3, bias=False)
    s.bn("bn1")
    s.pool("pool1", 3, 2, 1)
    for stage, (width, blocks) in enumerate(zip((64, 128, 256, 512), depth_blocks), 2):
        for b in range(blocks):
            stride = 2 if stage > 2 and b == 0 else 1
            c_in, h_in, w_in = s.c, s.h, s.w
            pre = f"res{stage}.{b}"
            s.conv(pre + ".conv1", width, 1, bias=False)
            s.bn(pre + ".bn1")
            s.conv(pre + ".conv2", width, 3, stride, 1, bias=False)
            s.bn(pre + ".bn2")
            s.conv(pre + ".conv3", 4 * width, 1, bias=False)
            s.bn(pre + ".bn3")
            out = (s.c, s.h, s.w)
            if b == 0:
                s.conv(pre + ".downsample", 4 * width, 1, stride, bias=False, at=(c_in, h_in, w_in))
                s.bn(pre + ".downsample_bn")
            s.c, s.h, s.w = out
            s.other(pre + ".add_relu", 2 * s._elems(), s._elems())
    s.global_pool("avgpool")
    s.fc("fc", 1000)
    return ModelDescription(name, tuple(s.layers), source="He et al., CVPR 2016 (torchvision layout)")


def _googlenet():
    """Szegedy et al., CVPR 2015 (Table 1), with the two auxiliary classifiers it is trained with
    (after 4a and 4d: 5x5/3 average pool, 1x1 conv 128, fc 1024, fc 1000), as in Caffe's
    bvlc_googlenet: about 13M parameters trained (the seed's "~50 MB"), 6.8M without them."""
    s = _Shapes(3, 224, 224)
    s.conv("conv1", 64, 7, 2, 3)
    s.pool("pool1", 3, 2, ceil=True)
    s.conv("conv2_reduce", 64, 1)
    s.conv("conv2", 192, 3, 1, 1)
    s.pool("pool2", 3, 2, ceil=True)
    table = {"3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
             "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64), "4c": (128, 128, 256, 24, 64, 64),
             "4d": (112, 144, 288, 32, 64, 64), "4e": (256, 160, 320, 32, 128, 128),
             "5a": (256, 160, 320, 32, 128, 128), "5b": (384, 192, 384, 48, 128, 128)}
    for name, (c1, r3, c3, r5, c5, pp) in table.items():
        if name in ("4a", "5a"):
            s.pool(f"pool_{name}", 3, 2, ceil=True)
        here = (s.c, s.h, s.w)
        s.conv(f"{name}.1x1", c1, 1, at=here)
        s.conv(f"{name}.3x3_reduce", r3, 1, at=here)
        s.conv(f"{name}.3x3", c3, 3, 1, 1)
        s.conv(f"{name}.5x5_reduce", r5, 1, at=here)
        s.conv(f"{name}.5x5", c5, 5, 1, 2)
        s.c, s.h, s.w = here
        s.pool(f"{name}.pool", 3, 1, 1)
        s.conv(f"{name}.pool_proj", pp, 1)
        s.c = c1 + c3 + c5 + pp
        if name in ("4a", "4d"):
            here, start = (s.c, s.h, s.w), len(s.layers)
            s.pool(f"aux_{name}.pool", 5, 3)
            s.conv(f"aux_{name}.conv", 128, 1)
            s.fc(f"aux_{name}.fc1", 1024)
            s.fc(f"aux_{name}.fc2", 1000)
            s.layers[start:] = [dataclasses.replace(layer, aux=True) for layer in s.layers[start:]]
            s.c, s.h, s.w = here
    s.global_pool("avgpool")
    s.fc("fc", 1000)
    return ModelDescription("googlenet", tuple(s.layers), source="Szegedy et al., CVPR 2015, Table 1")


_BUILDERS = {"alexnet": _alexnet, "googlenet": _googlenet, "resnet50": lambda: _resnet((3, 4, 6, 3), "resnet50"),
             "resnet101": lambda: _resnet((3, 4, 23, 3), "resnet101"), "vgg16": _vgg16}
#: Names of the built-in networks.
MODELS = tuple(_BUILDERS)
#: Published totals: name -> (parameters, forward GMACs ("GFLOPs" in the papers), source).
PUBLISHED = {
    "alexnet": (61.0e6, 0.72, "Krizhevsky 2012; 0.72 GMACs as counted by e.g. torchvision/ptflops (one-tower: 0.71)"),
    "googlenet": (6.8e6, 1.5, "Szegedy et al. 2015: 'about 6.8M parameters' and '1.5 billion multiply-adds'"),
    "resnet50": (25.6e6, 4.1, "He et al. 2016, Table 1: 3.8e9 FLOPs (v1); torchvision v1.5: 25.6M, 4.1 GMACs"),
    "resnet101": (44.5e6, 7.8, "He et al. 2016, Table 1: 7.6e9 FLOPs (v1); torchvision v1.5: 44.5M, 7.8 GMACs"),
    "vgg16": (138.4e6, 15.5, "Simonyan & Zisserman 2015 (138M parameters); 15.5 GMACs (widely quoted)"),
}


def model_description(name: str) -> ModelDescription:
    """The built-in :class:`ModelDescription` called ``name`` (one of :data:`MODELS`)."""
    key = str(name).lower().replace("-", "").replace("_", "")
    if key not in _BUILDERS:
        raise UserError(f"Unknown built-in network. Allowed values are {format_choices(MODELS)} (or an ONNX file or "
                        f"a recipe). Received: {name!r}")
    return _BUILDERS[key]()


def describe_onnx(model, name: str = "onnx") -> ModelDescription:
    """A :class:`ModelDescription` of an ONNX ``ModelProto`` (Conv, Gemm and MatMul with static shapes).

    Parameters are the initializers; MACs are counted for Conv (from the weight shape and the
    inferred output shape), Gemm and MatMul; every other node counts its output elements.
    Shapes come from ``onnx.shape_inference`` with the batch dimension taken as 1.
    """
    import numpy as np
    import onnx
    from onnx import numpy_helper, shape_inference

    model = onnx.ModelProto.FromString(model.SerializeToString())
    init = {t.name: tuple(numpy_helper.to_array(t).shape) for t in model.graph.initializer}
    for vi in model.graph.input:
        for d in vi.type.tensor_type.shape.dim:
            if not d.HasField("dim_value"):
                d.Clear()
                d.dim_value = 1
    inferred = shape_inference.infer_shapes(model)
    shapes = dict(init)
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = tuple(d.dim_value for d in dims)

    def elems(name):
        return int(np.prod(shapes.get(name, (0,)))) if name in shapes else 0

    layers, seen = [], set()
    for i, node in enumerate(model.graph.node):
        out = node.output[0] if node.output else ""
        out_e, in_e = elems(out), sum(elems(x) for x in node.input if x and x not in init)
        params = sum(int(np.prod(init[x])) for x in node.input if x in init and x not in seen)
        seen.update(x for x in node.input if x in init)
        label = node.name or f"{node.op_type}_{i}"
        if node.op_type == "Conv" and len(node.input) > 1 and node.input[1] in init and out in shapes:
            w = init[node.input[1]]
            per_out = int(np.prod(w[1:]))
            spatial = int(np.prod(shapes[out][2:])) if len(shapes[out]) > 2 else 1
            layers.append(Layer(label, "conv", params, out_e * per_out, in_e, out_e, spatial))
        elif node.op_type in ("Gemm", "MatMul") and len(node.input) > 1 and node.input[1] in init:
            k = init[node.input[1]][0] if node.op_type == "MatMul" or not any(
                a.name == "transB" and a.i for a in node.attribute) else init[node.input[1]][-1]
            layers.append(Layer(label, "fc", params, out_e * int(k), in_e, out_e, 1))
        else:
            layers.append(Layer(label, "other", params, out_e, in_e, out_e))
    first = model.graph.input[0] if model.graph.input else None
    sample = elems(first.name) * _F32 if first is not None else 0
    return ModelDescription(name, tuple(layers), sample_bytes=max(sample, 1), source="ONNX graph")


@dataclasses.dataclass(frozen=True)
class Interconnect:
    """A network between nodes.

    Attributes:
        name: its name.
        alpha: seconds of latency per message (MPI-level, small messages).
        bandwidth: bytes per second one node can send (and receive) at once.
        source: where the figures come from.
    """

    name: str
    alpha: float
    bandwidth: float
    source: str = ""

    @property
    def beta(self) -> float:
        """Seconds per byte (0 for an infinite bandwidth)."""
        return 0.0 if math.isinf(self.bandwidth) else 1.0 / self.bandwidth


#: Named interconnects (per-node figures; see docs/scaling.md for the sources).
INTERCONNECTS = {
    "fdr-ib": Interconnect("fdr-ib", 0.7e-6, 56e9 * 64 / 66 / 8,
                           "InfiniBand FDR 4x: 56 Gb/s signalling, 64b/66b coding -> 6.8 GB/s; 0.7 us MPI latency "
                           "(Mellanox ConnectX-3 product brief)"),
    "edr-ib": Interconnect("edr-ib", 0.6e-6, 100e9 * 64 / 66 / 8,
                           "InfiniBand EDR 4x: 100 Gb/s, 64b/66b -> 12.1 GB/s; 0.6 us (Mellanox ConnectX-4 brief)"),
    "25gbe": Interconnect("25gbe", 15e-6, 25e9 / 8,
                          "25 Gigabit Ethernet: 3.125 GB/s line rate; ~15 us TCP/MPI latency (typical kernel TCP)"),
    "100gbe": Interconnect("100gbe", 10e-6, 100e9 / 8,
                           "100 Gigabit Ethernet: 12.5 GB/s line rate; ~10 us TCP/MPI latency"),
    "nvlink": Interconnect("nvlink", 3e-6, 150e9,
                           "NVLink 2.0 (V100 SXM2): 6 links x 25 GB/s per direction = 150 GB/s; ~3 us NCCL "
                           "launch latency"),
    "pcie3": Interconnect("pcie3", 5e-6, 12e9,
                          "PCIe 3.0 x16: 15.75 GB/s theoretical, ~12 GB/s achieved; ~5 us"),
    "none": Interconnect("none", 0.0, math.inf, "free communication (the seed's 'assuming free communication')"),
}


def interconnect(spec: str) -> Interconnect:
    """A named interconnect (:data:`INTERCONNECTS`) or ``ALPHA,BANDWIDTH`` (seconds, bytes/s: ``2e-6,12.5e9``)."""
    text = str(spec).strip().lower()
    if text in INTERCONNECTS:
        return INTERCONNECTS[text]
    parts = text.split(",")
    try:
        alpha, bw = (float(x) for x in parts)
        if alpha < 0 or not bw > 0:
            raise ValueError
    except ValueError:
        raise UserError(f"--network must be a name or ALPHA_SECONDS,BANDWIDTH_BYTES_PER_S (e.g. 2e-6,12.5e9). "
                        f"Allowed values are {format_choices(INTERCONNECTS)}. Received: {spec!r}") from None
    return Interconnect(f"alpha={alpha:g}s,bw={bw:g}B/s", alpha, bw, "given on the command line")


@dataclasses.dataclass(frozen=True)
class Accelerator:
    """One compute device per node (a "node" in the scaling model holds ``per_node`` of them).

    Attributes:
        name: its name.
        flops: peak float32 FLOP/s.
        bandwidth: peak memory bandwidth, bytes/s.
        efficiency: the fraction of ``flops`` a large GEMM reaches.
        m_half: the GEMM's batch-dependent dimension at which half of ``efficiency`` is reached
            (the skinny-GEMM effect: efficiency = efficiency * m / (m + m_half)).
        launch: seconds of fixed cost per layer and pass (kernel launch, framework dispatch):
            work that does not shrink with the per-node batch.
        source: where the figures come from.
    """

    name: str
    flops: float
    bandwidth: float
    efficiency: float = 0.7
    m_half: float = 64.0
    launch: float = 10e-6
    source: str = ""


#: Named accelerators (float32 peaks from the vendors' data sheets).
ACCELERATORS = {
    "k80": Accelerator("k80", 4.37e12, 240e9, 0.6, 128, 10e-6,
                       "one GK210 of a Tesla K80: 8.73 TFLOPS (boost) and 480 GB/s per board of two (NVIDIA data sheet)"),
    "p100": Accelerator("p100", 9.3e12, 732e9, 0.7, 256, 10e-6, "Tesla P100 PCIe: 9.3 TFLOPS, 732 GB/s (NVIDIA)"),
    "v100": Accelerator("v100", 15.7e12, 900e9, 0.7, 256, 8e-6, "Tesla V100 SXM2: 15.7 TFLOPS, 900 GB/s (NVIDIA)"),
    "a100": Accelerator("a100", 19.5e12, 1555e9, 0.7, 512, 8e-6,
                        "A100 40GB: 19.5 TFLOPS FP32 (no TF32), 1,555 GB/s (NVIDIA)"),
    "h100": Accelerator("h100", 67e12, 3.35e12, 0.6, 1024, 6e-6, "H100 SXM: 67 TFLOPS FP32, 3.35 TB/s (NVIDIA)"),
    "xeon-e5-2680v3": Accelerator("xeon-e5-2680v3", 0.96e12, 68e9, 0.7, 16, 5e-6,
                                  "12 cores x 2.5 GHz x 32 FLOP/cycle (AVX2 FMA), 4x DDR4-2133 = 68 GB/s (Intel ARK)"),
}


def accelerator(spec: str) -> Accelerator:
    """A named accelerator (:data:`ACCELERATORS`), ``this`` (this machine's measured peak via
    :func:`deep500lite.perfmodel.peak.measure_peak`, a few seconds) or ``FLOPS,BANDWIDTH`` (``9.3e12,732e9``)."""
    text = str(spec).strip().lower()
    if text in ACCELERATORS:
        return ACCELERATORS[text]
    if text == "this":
        from deep500lite.perfmodel.peak import measure_peak

        peak = measure_peak("cpu")
        batches, rates = measure_gemm_rates()
        eff, m_half = fit_gemm_efficiency(batches, rates, peak.flops)
        return Accelerator("this", peak.flops, peak.bandwidth, eff, m_half, 5e-6,
                           f"measured here: {peak.flops_method}; {peak.bandwidth_method}; skinny GEMMs "
                           f"b x 2048 * 2048 x 2048 at b = {', '.join(map(str, batches))}: "
                           f"{', '.join(f'{r / 1e9:.3g}' for r in rates)} GFLOP/s")
    try:
        flops, bw = (float(x) for x in text.split(","))
        if not (flops > 0 and bw > 0):
            raise ValueError
    except ValueError:
        raise UserError(f"--accelerator must be a name, 'this' or PEAK_FLOPS,BANDWIDTH_BYTES_PER_S (e.g. 9.3e12,732e9). "
                        f"Allowed values are {format_choices(list(ACCELERATORS) + ['this'])}. Received: {spec!r}") from None
    return Accelerator(f"flops={flops:g},bw={bw:g}", flops, bw, source="given on the command line")


def measure_gemm_rates(batches=(1, 4, 16, 64, 256), k: int = 2048, max_time: float = 0.15):
    """FLOP/s of numpy float32 GEMMs ``b x k * k x k`` (a fully connected layer on a batch of ``b``).

    Each is the fastest of repeated calls within about ``max_time`` seconds (at least 3).

    Returns:
        ``(batches, rates)``.
    """
    import time

    import numpy as np

    rng = np.random.default_rng(0)
    w = rng.standard_normal((k, k), dtype=np.float32)
    rates = []
    for b in batches:
        x = rng.standard_normal((b, k), dtype=np.float32)
        np.matmul(x, w)
        best, spent, reps = math.inf, 0.0, 0
        while reps < 3 or spent < max_time:
            t0 = time.perf_counter()
            np.matmul(x, w)
            dt = time.perf_counter() - t0
            best, spent, reps = min(best, dt), spent + dt, reps + 1
        rates.append(2.0 * b * k * k / best)
    return list(batches), rates


def fit_gemm_efficiency(batches, rates, peak: float) -> tuple[float, float]:
    """Fit ``rate(b) = peak * efficiency * b / (b + m_half)`` to measured GEMM rates (least squares).

    ``1 / rate`` is linear in ``1 / b``: ``1/rate = (1 + m_half / b) / (peak * efficiency)``.

    Returns:
        ``(efficiency, m_half)``, the efficiency capped at 1.
    """
    import numpy as np

    b = np.asarray(batches, float)
    r = np.asarray(rates, float)
    if b.size < 2 or np.any(b <= 0) or np.any(r <= 0) or not peak > 0:
        raise UserError(f"Fitting GEMM efficiency needs two or more positive batches and rates and a positive peak. "
                        f"Received: batches={list(batches)}, rates={list(rates)}, peak={peak}")
    a = np.stack([np.ones_like(b), 1 / b], axis=1)
    (inv_top, slope), *_ = np.linalg.lstsq(a / (1 / r)[:, None], np.ones_like(b), rcond=None)
    top = 1 / inv_top if inv_top > 0 else float(r.max())
    return float(min(1.0, top / peak)), float(max(0.0, float(slope) * top))


def gemm_rates_from_bench(data: dict, what: str = "bench op JSON") -> tuple[str, list, list, dict]:
    """``(framework, N values, FLOP/s, peak)`` of the GEMMs in the JSON of ``bench op --json``.

    The ``skinny-*`` cases (``--suite skinny``) are used if there are any, else every GEMM; of the
    frameworks measured, the one with the highest mean rate. ``N`` is the GEMM dimension that grows
    with the batch (what the efficiency curve's ``m`` counts).

    Raises:
        UserError: not such a file, or fewer than two GEMM results of one framework.
    """
    try:
        peak = {"flops": float(data["peak"]["flops"]), "bandwidth": float(data["peak"]["bandwidth"]),
                "device": str(data["peak"].get("device", ""))}
        results = [r for r in data["results"] if "N" in r["case"] and "K" in r["case"]]
        rates = [(r["framework"], r["case"]["name"], int(r["case"]["N"]), float(r["flops"]) / float(r["median_s"]))
                 for r in results]
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise UserError(f"{what} is not the JSON of 'deep500lite bench op --json' (missing or bad {exc}). Received: "
                        f"{format_choices(sorted(map(str, data))) if isinstance(data, dict) else type(data).__name__}"
                        ) from None
    skinny = [r for r in rates if r[1].startswith("skinny-")]
    rates = skinny or rates
    by_fw = {}
    for fw, _, n, rate in rates:
        by_fw.setdefault(fw, []).append((n, rate))
    usable = {fw: pts for fw, pts in by_fw.items() if len({n for n, _ in pts}) >= 2}
    if not usable:
        raise UserError(f"{what} needs GEMM results at two or more N (run 'bench op --suite skinny'). Received: "
                        f"{len(rates)} GEMM results")
    fw = max(usable, key=lambda f: sum(r for _, r in usable[f]) / len(usable[f]))
    pts = sorted(usable[fw])
    return fw, [n for n, _ in pts], [r for _, r in pts], peak


def accelerator_from_gemm_bench(data: dict, base: Accelerator | None = None, what: str = "bench op JSON"):
    """An :class:`Accelerator` whose ``efficiency`` and ``m_half`` are fitted (:func:`fit_gemm_efficiency`)
    to the GEMM rates of a ``bench op --json`` file against the peak measured in that file.

    Args:
        data: the parsed JSON.
        base: the accelerator to refit (its peak and bandwidth kept); None: one built from the
            file's measured peak and bandwidth (named ``this``).
        what: the file, for messages.
    """
    fw, ns, rates, peak = gemm_rates_from_bench(data, what)
    eff, m_half = fit_gemm_efficiency(ns, rates, peak["flops"])
    source = (f"GEMM efficiency {eff:.3g} and m_half {m_half:.3g} fitted to {len(ns)} {fw} GEMMs of {what} "
              f"(N = {ns[0]}..{ns[-1]}) against its measured peak {peak['flops'] / 1e9:.4g} GFLOP/s")
    if base is None:
        return Accelerator("this", peak["flops"], peak["bandwidth"], eff, m_half, 5e-6, source)
    return dataclasses.replace(base, efficiency=eff, m_half=m_half, source=f"{base.source}; {source}")
