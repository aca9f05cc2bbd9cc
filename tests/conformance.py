"""ONNX's own backend test suite (node tests), run through a deep500lite executor.

``node_test_cases(framework, expected_failures, module)`` returns unittest TestCase classes for
every node test of the installed onnx package whose operators the executor declares
(``executor_class.check_supported``). Expected failures are strict: a test listed there that
passes fails the run, so the list cannot go stale. Each entry maps a test name, or a regular expression
matching whole test names (without the ``_cpu`` suffix), to the reason. A reason wrapped in
:class:`MachineDependent` marks a test whose outcome depends on the machine (CPU features, library
builds): it is a non-strict expected failure, which may pass without failing the run.
"""

from __future__ import annotations

import functools
import re

import onnx.backend.test
import pytest
from onnx.backend.test.loader import load_model_tests

from deep500lite.lv1.backend import backend_for

__all__ = ["MachineDependent", "declared_node_tests", "node_test_cases"]


class MachineDependent(str):
    """The reason of an expected failure that fails on some machines and passes on others (non-strict)."""


@functools.lru_cache(maxsize=None)
def _node_test_models() -> dict:
    return {case.name: case.model for case in load_model_tests(kind="node") if case.model is not None}


def declared_node_tests(framework: str) -> list[str]:
    """Names of the node tests whose every operator the executor declares (``check_supported``)."""
    backend = backend_for(framework)
    return sorted(name for name, model in _node_test_models().items() if backend.is_compatible(model))


def node_test_cases(framework: str, expected_failures: dict[str, str], module: str, tolerances=None):
    """TestCase classes for the declared node tests (see module docstring)."""
    names = set(declared_node_tests(framework))
    stale = [p for p in expected_failures if not any(re.fullmatch(p, n) for n in names)]
    assert not stale, f"expected failures that match no declared node test: {stale}"
    runner = onnx.backend.test.BackendTest(backend_for(framework), module, test_kwargs=tolerances or {})
    for pattern, reason in expected_failures.items():
        if not isinstance(reason, MachineDependent):
            runner.xfail(f"^(?:{pattern})_(cpu|cuda)$")
    machine_dependent = {p: r for p, r in expected_failures.items() if isinstance(r, MachineDependent)}
    cases = runner.test_cases
    node_case = cases["OnnxBackendNodeModelTest"]
    for attr in list(vars(node_case)):
        if attr.startswith("test_") and attr.rsplit("_", 1)[0] not in names:
            delattr(node_case, attr)
            continue
        reason = next((r for p, r in machine_dependent.items() if re.fullmatch(f"(?:{p})_(cpu|cuda)", attr)), None)
        if reason is not None:
            setattr(node_case, attr, pytest.mark.xfail(reason=str(reason), strict=False)(getattr(node_case, attr)))
    node_case.__name__ = f"OnnxNodeTests_{framework}"
    return {node_case.__name__: node_case}
