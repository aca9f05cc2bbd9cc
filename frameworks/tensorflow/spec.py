"""The declaration of the tensorflow framework package (read by deep500lite.registry; imports nothing heavy)."""

from deep500lite.frameworkspec import FrameworkSpec

__all__ = ["SPEC"]

SPEC = FrameworkSpec(
    name="tensorflow",
    module="deep500lite.frameworks.tensorflow",
    title="TensorFlow",
    aliases=("tf",),
    requires=("tensorflow",),
    distributions=("tensorflow", "tensorflow-cpu"),
    install="pip install 'deep500lite[tensorflow]'",
    roles={"executor", "ops", "custom", "optimizers", "bench", "dtypes", "native", "models", "zoo", "zoo_graphs",
           "op_validation", "distributed", "state"},
    training=True,
    custom_ops=True,
    devices=("cpu", "gpu"),
    variants={"xla": {"jit_compile": True}},
    native_optimizers=True,
    distributed=("optimizer: Horovod",),
    bench={"op", "inference", "training", "custom_op"},
    zoo_export=True,
    seed_hook="deep500lite.frameworks.tensorflow.state:seed",
    state_hook="deep500lite.frameworks.tensorflow.state",
    order=2,
)
