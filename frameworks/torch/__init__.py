"""PyTorch executor (arrives with the executors issue)."""
try:
    import torch  # noqa: F401
except ImportError as exc:
    from deep500lite.errors import FrameworkNotAvailableError
    raise FrameworkNotAvailableError("Framework 'torch' needs PyTorch: pip install 'deep500lite[torch]'") from exc
