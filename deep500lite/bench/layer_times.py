"""Moved to :mod:`deep500lite.perfmodel.layers`; this name stays so that existing imports keep working
(the same module object)."""

import sys

from deep500lite.perfmodel import layers as _moved

__all__ = list(_moved.__all__)

sys.modules[__name__] = _moved
