"""The version of deep500lite (a leaf module, so that any module can read it without importing the package root)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
