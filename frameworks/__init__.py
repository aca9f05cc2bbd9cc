"""Framework bindings, imported as ``deep500lite.frameworks.<key>`` only when asked for.

Every framework package offers the same names: ``from_model(network, device=None)`` returning a
:class:`~deep500lite.GraphExecutor`, ``SUPPORTED_OPS`` (the ONNX operators it declares) and the
executor class itself. See :mod:`deep500lite.registry` for the table of keys.
"""
