"""Moved to :mod:`deep500lite.lv2.augmentation` (data augmentation is level 2, not a framework role); this
name stays so that existing imports keep working (the same module object)."""

import sys

from deep500lite.lv2 import augmentation as _moved

__all__ = list(_moved.__all__)

sys.modules[__name__] = _moved
