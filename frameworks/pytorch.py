"""Deep500's name of the PyTorch framework package: ``deep500lite.frameworks.pytorch`` is
``deep500lite.frameworks.torch`` (the same module object), so Deep500's
``import deep500.frameworks.pytorch as d5fw`` and ``locate('deep500.frameworks.' + 'pytorch')``
port by changing ``deep500`` to ``deep500lite`` only."""

import sys

from deep500lite.frameworks import torch as _torch_package

__all__ = list(_torch_package.__all__)

sys.modules[__name__] = _torch_package
