"""The declaration of the reference framework package (read by deep500lite.registry; imports nothing heavy)."""

from deep500lite.frameworkspec import FrameworkSpec

__all__ = ["SPEC"]

SPEC = FrameworkSpec(
    name="reference",
    module="deep500lite.frameworks.reference",
    title="reference (onnx.reference and numpy)",
    aliases=("numpy",),
    distributions=("onnx",),
    install="pip install deep500lite",
    roles={"executor", "ops", "custom", "optimizers", "bench"},
    training=True,
    gradients="autodiff",
    custom_ops=True,
    bench={"op", "training", "custom_op"},
    baseline=True,
    order=0,
)
