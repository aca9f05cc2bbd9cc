"""The JAX executor: ONNX graphs traced into one JAX function and compiled with XLA (``jax.jit``).

Importing this package turns on ``jax_enable_x64`` (see :mod:`deep500lite.frameworks.jax.dtypes`):
float64 and int64 graphs compute exactly as on the other executors; float32 models stay float32.

Device placement: ``device="cpu"`` or ``"gpu:N"`` (the N-th device of ``jax.devices("gpu")``).
Asking for a GPU when JAX has no GPU backend (or N is out of range) raises ``DeviceError``. The
floating-point initializers (the parameters) are put on that device once with
``jax.device_put`` and stay there between calls as arguments of the compiled function;
``network.feed_tensor`` replaces them without recompiling.

Compilation: the graph is traced and compiled (``jax.jit(...).lower(...).compile()``) once per
feed signature (shapes and dtypes) and per kind of call (inference, training, optimizer step);
``executor.compile_seconds`` adds up the seconds this took and ``executor.options`` records
``{"jit": True, "platform": "cpu"|"gpu", "matmul_precision": "highest"}``. Shape arithmetic
(``Shape -> Gather -> Concat -> Reshape``) folds while tracing, so XLA sees static shapes.

Synchronization: JAX dispatches asynchronously. ``inference`` returns numpy arrays, so it waits
for its own results; ``executor.synchronize()`` waits for the parameters' pending updates.

Copies at the boundary: feeds are handed to the compiled executable as numpy arrays, which it
copies to its device; outputs are numpy arrays copied from JAX's buffers, never sharing memory
with the executor's state.

Training: ``inference_and_backprop`` is one compiled function computing the outputs, the loss
and the gradients of every parameter ``network.gradient(y)`` lists (``jax.value_and_grad``) in
training mode (BatchNormalization with batch statistics, running statistics written back after
the step; Dropout with keys derived from ``seed`` and the step count); the gradients stay on the
device until fetched as ``"<param>_grad"``. The native optimizers (``GradientDescent``,
``MomentumOptimizer``, ``NesterovOptimizer``, ``AdaGradOptimizer``, ``RMSPropOptimizer``,
``AdamOptimizer``; see :mod:`deep500lite.frameworks.jax.optimizers`) fuse forward, backward and
the optax update into one compiled training step.

Registered custom operators run on the host through ``jax.pure_callback``, differentiable through
their ``backward``.

Role modules (the same names in every framework package; see ``docs/architecture.md``):

- ``executor.py``: :class:`JaxExecutor`, ``from_model``, ``from_onnx`` and ``jax_device``.
- ``ops/``: the ONNX-to-JAX operator converters, one module per operator family, and
  ``SUPPORTED_OPS``; ``dtypes.py``: ONNX and numpy dtypes to JAX's and back (and the x64 switch).
- ``optimizers.py``: the native optimizers (optax, or ``jax.numpy`` where optax's formula differs).
- ``custom.py``: ``custom_op``, a deep500lite custom operator as a JAX function (``jax.pure_callback``).
- ``bench.py``: this framework's benchmark runners; ``models.py``: ``lenet``, ``resnet20`` and ``export_onnx``.
- ``spec.py``: the framework's declaration (roles and capabilities), read through the entry point.
"""

# Light on purpose: deep500lite.registry imports this package to read SPEC, so the framework itself
# is imported only when one of the names below is first used (lazy_exports).
from deep500lite.frameworkspec import lazy_exports
from deep500lite.frameworks.jax.spec import SPEC

_EXPORTS = {
    "JaxExecutor": "executor",
    "from_model": "executor",
    "from_onnx": "executor",
    "jax_device": "executor",
    "SUPPORTED_OPS": "ops",
    "executor_class": "executor:JaxExecutor",
    "GradientDescent": "optimizers",
    "MomentumOptimizer": "optimizers",
    "NesterovOptimizer": "optimizers",
    "AdamOptimizer": "optimizers",
    "AdaGradOptimizer": "optimizers",
    "RMSPropOptimizer": "optimizers",
}

__all__ = ["JaxExecutor", "from_model", "from_onnx", "jax_device", "SUPPORTED_OPS", "executor_class", "GradientDescent",
           "MomentumOptimizer", "NesterovOptimizer", "AdamOptimizer", "AdaGradOptimizer", "RMSPropOptimizer"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, SPEC)
