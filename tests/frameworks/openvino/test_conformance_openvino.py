"""ONNX backend node tests on the OpenVINO executor of the plugin in plugins/deep500lite-openvino.

The operators it declares are those OpenVINO's ONNX frontend reads (``deep500lite_openvino/ops.py``,
measured); every node test whose operators are all declared runs here. The failures below are
OpenVINO's, each with its reason. Skipped when the plugin is not installed.
"""

import pytest

pytest.importorskip("deep500lite_openvino", reason="needs the OpenVINO plugin: pip install -e plugins/deep500lite-openvino")
pytest.importorskip("openvino", reason="needs openvino")

from conformance import node_test_cases  # noqa: E402

_OV = "openvino 2026.4 "

# test name (or a regular expression over whole test names) -> why it fails on this executor
EXPECTED_FAILURES: dict[str, str] = {}

globals().update(node_test_cases("openvino", EXPECTED_FAILURES, __name__))
