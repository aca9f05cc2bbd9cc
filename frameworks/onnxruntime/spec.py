"""The declaration of the onnxruntime framework package (read by deep500lite.registry; imports nothing heavy)."""

from deep500lite.frameworkspec import FrameworkSpec

__all__ = ["SPEC"]

SPEC = FrameworkSpec(
    name="onnxruntime",
    module="deep500lite.frameworks.onnxruntime",
    title="ONNX Runtime",
    aliases=("ort",),
    requires=("onnxruntime",),
    distributions=("onnxruntime", "onnxruntime-gpu"),
    install="pip install 'deep500lite[onnxruntime]'",
    roles={"executor", "ops", "custom", "optimizers", "bench"},
    training=True,
    gradients="autodiff",
    custom_ops=True,
    devices=("cpu", "gpu"),
    variants={"O0": {"graph_optimization_level": "disabled"}, "O1": {"graph_optimization_level": "basic"},
              "O2": {"graph_optimization_level": "extended"}, "O3": {"graph_optimization_level": "all"}},
    bench={"op", "inference", "training", "custom_op"},
    order=3,
)
