"""ONNX's own backend test suite (node tests), run through a deep500lite executor.

``node_test_cases(framework, expected_failures, module)`` returns unittest TestCase classes for
every node test of the installed onnx package whose model uses only operators the executor
declares (``SUPPORTED_OPS``). Expected failures are strict: a test listed there that passes fails
the run, so the list cannot go stale. Each entry maps a test name to the reason.
"""

from __future__ import annotations

import functools
import os

import onnx
import onnx.backend.test
from onnx.backend.test.loader import load_model_tests

from deep500lite.lv1.backend import backend_for
from deep500lite.lv1.network import iter_nodes


@functools.lru_cache(maxsize=None)
def _node_test_ops() -> dict[str, frozenset]:
    ops = {}
    for case in load_model_tests(kind="node"):
        model = case.model if case.model is not None else onnx.load(
            os.path.join(case.model_dir, "model.onnx"), load_external_data=False)
        ops[case.name] = frozenset(
            n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}" for n in iter_nodes(model.graph))
    return ops


def declared_node_tests(supported_ops) -> list[str]:
    """Names of the node tests that use only ``supported_ops``."""
    return sorted(name for name, ops in _node_test_ops().items() if ops and ops <= set(supported_ops))


def node_test_cases(framework: str, expected_failures: dict[str, str], module: str, tolerances=None):
    """TestCase classes for the declared node tests (see module docstring)."""
    from deep500lite.registry import import_framework

    names = set(declared_node_tests(import_framework(framework).SUPPORTED_OPS))
    unknown = set(expected_failures) - names
    assert not unknown, f"expected failures that are not declared node tests: {sorted(unknown)}"
    runner = onnx.backend.test.BackendTest(backend_for(framework), module, test_kwargs=tolerances or {})
    for name in expected_failures:
        runner.xfail(f"^{name}_(cpu|cuda)$")
    cases = runner.test_cases
    node_case = cases["OnnxBackendNodeModelTest"]
    for attr in list(vars(node_case)):
        if attr.startswith("test_") and attr.rsplit("_", 1)[0] not in names:
            delattr(node_case, attr)
    node_case.__name__ = f"OnnxNodeTests_{framework}"
    return {node_case.__name__: node_case}
