"""ONNX Runtime executor (arrives with the executors issue)."""
try:
    import onnxruntime  # noqa: F401
except ImportError as exc:
    from deep500lite.errors import FrameworkNotAvailableError
    raise FrameworkNotAvailableError(
        "Framework 'onnxruntime' needs ONNX Runtime: pip install 'deep500lite[onnxruntime]'") from exc
