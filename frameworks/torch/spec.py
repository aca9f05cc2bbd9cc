"""The declaration of the torch framework package (read by deep500lite.registry; imports nothing heavy)."""

from deep500lite.frameworkspec import FrameworkSpec

__all__ = ["SPEC"]

SPEC = FrameworkSpec(
    name="torch",
    module="deep500lite.frameworks.torch",
    title="PyTorch",
    aliases=("pytorch",),
    requires=("torch",),
    distributions=("torch",),
    install="pip install 'deep500lite[torch]'",
    roles={"executor", "ops", "custom", "optimizers", "bench", "dtypes", "native", "models", "zoo", "zoo_graphs",
           "op_validation", "distributed", "state"},
    training=True,
    custom_ops=True,
    devices=("cpu", "gpu"),
    variants={"compile": {"compile": True}, "max-autotune": {"compile": True, "compile_mode": "max-autotune"}},
    native_optimizers=True,
    distributed=("communicator: torch.distributed", "optimizer: Horovod"),
    bench={"op", "inference", "training", "custom_op", "peak", "gpu", "data_parallel"},
    zoo_export=True,
    seed_hook="deep500lite.frameworks.torch.state:seed",
    state_hook="deep500lite.frameworks.torch.state",
    order=1,
)
