"""The declaration deep500lite reads through the entry point (imports nothing but deep500lite's spec class)."""

from deep500lite.frameworkspec import FrameworkSpec

__all__ = ["SPEC"]

SPEC = FrameworkSpec(
    name="openvino",
    module="deep500lite_openvino",
    title="OpenVINO",
    aliases=("ov",),
    requires=("openvino",),
    distributions=("openvino",),
    install="pip install deep500lite-openvino (from plugins/deep500lite-openvino; it installs openvino)",
    roles={"executor", "ops", "optimizers", "bench"},
    training=True,
    gradients="autodiff",
    runtime_checks=False,
    devices=("cpu",),
    bench={"op", "inference", "training"},
)
