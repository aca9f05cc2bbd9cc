"""TensorFlow executor (arrives with the executors issue)."""
try:
    import tensorflow  # noqa: F401
except ImportError as exc:
    from deep500lite.errors import FrameworkNotAvailableError
    raise FrameworkNotAvailableError(
        "Framework 'tensorflow' needs TensorFlow: pip install 'deep500lite[tensorflow]'") from exc
