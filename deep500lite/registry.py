"""The table of frameworks, resolved with importlib on first use.

Listing frameworks imports nothing; ``d5.executor(network, "torch")`` imports
``deep500lite.frameworks.torch`` (and so torch) only then. Core modules that need a framework's
role module (its benchmark runners, say) get it with :func:`framework_module`, also at run time.
"""

from __future__ import annotations

import importlib
import types

from deep500lite.errors import FrameworkNotAvailableError, UserError, UserTypeError, format_choices
from deep500lite.utils import is_package_available, package_version

__all__ = [
    "FRAMEWORKS",
    "FRAMEWORK_ALIASES",
    "canonical_framework",
    "is_framework_available",
    "framework_version",
    "import_framework",
    "framework_module",
    "executor",
    "executors_supporting",
]

# key -> (module, the Python package it needs, the pip distribution, the extra that installs it)
FRAMEWORKS: dict[str, tuple[str, str | None, str | None, str | None]] = {
    "reference": ("deep500lite.frameworks.reference", None, "onnx", None),
    "torch": ("deep500lite.frameworks.torch", "torch", "torch", "torch"),
    "tensorflow": ("deep500lite.frameworks.tensorflow", "tensorflow", "tensorflow", "tensorflow"),
    "onnxruntime": ("deep500lite.frameworks.onnxruntime", "onnxruntime", "onnxruntime", "onnxruntime"),
}

FRAMEWORK_ALIASES = {"pytorch": "torch", "tf": "tensorflow", "ort": "onnxruntime", "numpy": "reference"}


def canonical_framework(name: str) -> str:
    """The framework key for ``name`` (aliases such as ``pytorch`` resolved).

    Raises:
        UserError: the name is not a known framework.
    """
    if not isinstance(name, str):
        raise UserTypeError(f"A framework is named by a string, such as 'torch'. Received: {type(name).__name__}")
    key = name.strip().lower()
    key = FRAMEWORK_ALIASES.get(key, key)
    if key not in FRAMEWORKS:
        raise UserError(
            f"Unknown framework {name!r}. Known frameworks: {format_choices(FRAMEWORKS)} "
            f"(aliases: {format_choices(FRAMEWORK_ALIASES)}). Received: {name!r}"
        )
    return key


def is_framework_available(name: str) -> bool:
    """Whether the framework's package is installed (checked without importing it)."""
    key = canonical_framework(name)
    pkg = FRAMEWORKS[key][1]
    return pkg is None or is_package_available(pkg)


def framework_version(name: str) -> str | None:
    """The installed version of the framework's package, or None."""
    key = canonical_framework(name)
    dist = FRAMEWORKS[key][2]
    if key == "tensorflow":
        return package_version("tensorflow") or package_version("tensorflow-cpu")
    return package_version(dist) if dist else None


def _install_hint(key: str) -> str:
    extra = FRAMEWORKS[key][3]
    return f"pip install 'deep500lite[{extra}]'" if extra else "pip install deep500lite"


def import_framework(name: str) -> types.ModuleType:
    """Import ``deep500lite.frameworks.<name>``.

    Raises:
        UserError: unknown framework.
        FrameworkNotAvailableError: its package is not installed (the message names the extra).
    """
    key = canonical_framework(name)
    module, pkg, _, _ = FRAMEWORKS[key]
    if pkg is not None and not is_package_available(pkg):
        raise FrameworkNotAvailableError(
            f"Framework '{key}' needs the Python package '{pkg}', which is not installed: "
            f"{_install_hint(key)}"
        )
    return importlib.import_module(module)


def framework_module(name: str, module: str | None = None) -> types.ModuleType:
    """Import one role module of a framework package, such as ``deep500lite.frameworks.torch.bench``.

    Core code reaches framework-specific code only through this function (or
    :func:`import_framework`), at run time, so that importing the core imports no framework.

    Args:
        name: the framework's key or alias (``torch``, ``pytorch``, ``tensorflow``, ...).
        module: the module inside the framework package (``"bench"``, ``"models"``, ``"ops.linalg"``);
            None for the package itself, as :func:`import_framework` gives it.

    Returns:
        The imported module.

    Raises:
        UserError: unknown framework, or a module name that is not a dotted Python name.
        UserTypeError: ``module`` is not a string.
        FrameworkNotAvailableError: the framework's package is not installed (the message names the extra).
        ModuleNotFoundError: the framework package has no such module.

    >>> from deep500lite.registry import framework_module
    >>> framework_module("pytorch", "bench").op_runner  # doctest: +SKIP
    """
    key = canonical_framework(name)
    if module is not None:
        if not isinstance(module, str):
            raise UserTypeError(f"A framework module is named by a string, such as 'bench'. "
                                f"Received: {type(module).__name__}")
        if not all(part.isidentifier() for part in module.split(".")):
            raise UserError(f"A framework module is named by a dotted Python name, such as 'bench'. "
                            f"Received: {module!r}")
    package = import_framework(key)
    return package if module is None else importlib.import_module(f"{package.__name__}.{module}")


def executor(network, framework: str, device=None, **kwargs):
    """Build a graph executor for ``network`` on ``framework``.

    Args:
        network: a :class:`~deep500lite.Network`, an ONNX file path or an ``onnx.ModelProto``.
        framework: ``reference``, ``torch`` (alias ``pytorch``), ``tensorflow`` or ``onnxruntime``.
        device: ``None``/``"cpu"``, ``"gpu:N"`` or a :class:`~deep500lite.Device`.
        **kwargs: passed to the framework's ``from_model``.

    Returns:
        A :class:`~deep500lite.GraphExecutor`.

    >>> import deep500lite as d5
    >>> ex = d5.executor(d5.load_model("model.onnx"), "reference")  # doctest: +SKIP
    """
    return import_framework(framework).from_model(network, device=device, **kwargs)


def executors_supporting(op_type: str) -> str:
    """A human-readable list of the installed frameworks that declare support for ``op_type``."""
    supported, missing = [], []
    for key in FRAMEWORKS:
        if not is_framework_available(key):
            missing.append(key)
            continue
        try:
            mod = import_framework(key)
        except Exception:  # noqa: BLE001 - a broken framework install must not hide the real error
            missing.append(key)
            continue
        if op_type in getattr(mod, "SUPPORTED_OPS", ()):
            supported.append(key)
    text = ", ".join(supported) or "none of the installed ones"
    return text + (f" (not checked, as they do not import: {', '.join(missing)})" if missing else "")
