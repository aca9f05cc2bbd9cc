"""The declaration of the jax framework package (read by deep500lite.registry; imports nothing heavy)."""

from deep500lite.frameworkspec import FrameworkSpec

__all__ = ["SPEC"]

SPEC = FrameworkSpec(
    name="jax",
    module="deep500lite.frameworks.jax",
    title="JAX",
    requires=("jax", "optax"),
    distributions=("jax",),
    install="pip install 'deep500lite[jax]'",
    roles={"executor", "ops", "custom", "optimizers", "bench", "dtypes", "models"},
    training=True,
    custom_ops=True,
    devices=("cpu", "gpu"),
    native_optimizers=True,
    bench={"op", "inference", "training", "custom_op", "gpu"},
    zoo_cells=False,
    first=("dtypes",),
    order=4,
)
