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
    "EXECUTOR_VARIANTS",
    "canonical_framework",
    "split_executor_spelling",
    "canonical_executor_spelling",
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
    "jax": ("deep500lite.frameworks.jax", "jax", "jax", "jax"),
}

FRAMEWORK_ALIASES = {"pytorch": "torch", "tf": "tensorflow", "ort": "onnxruntime", "numpy": "reference"}

#: Executor variants, spelled ``FRAMEWORK:VARIANT`` (the CLI's ``--frameworks``, a recipe's
#: ``executor``, ``d5.executor``): spelling -> (framework key, keyword arguments of its executor).
#: The framework part may be an alias (``tf:xla``); the variant part is matched without regard to case.
EXECUTOR_VARIANTS: dict[str, tuple[str, dict]] = {
    "torch:compile": ("torch", {"compile": True}),
    "torch:max-autotune": ("torch", {"compile": True, "compile_mode": "max-autotune"}),
    "tensorflow:xla": ("tensorflow", {"jit_compile": True}),
    "onnxruntime:O0": ("onnxruntime", {"graph_optimization_level": "disabled"}),
    "onnxruntime:O1": ("onnxruntime", {"graph_optimization_level": "basic"}),
    "onnxruntime:O2": ("onnxruntime", {"graph_optimization_level": "extended"}),
    "onnxruntime:O3": ("onnxruntime", {"graph_optimization_level": "all"}),
}


def canonical_framework(name: str) -> str:
    """The framework key for ``name`` (aliases such as ``pytorch`` resolved).

    Variant spellings (``torch:compile``) are refused rather than silently run as their plain
    framework: :func:`split_executor_spelling` takes them.

    Raises:
        UserError: the name is not a known framework (or is a variant spelling).
    """
    if not isinstance(name, str):
        raise UserTypeError(f"A framework is named by a string, such as 'torch'. Received: {type(name).__name__}")
    if ":" in name:
        raise UserError(f"{name!r} is an executor variant spelling (FRAMEWORK:VARIANT); here a plain framework "
                        f"name is needed: {format_choices(FRAMEWORKS)}. Variants are taken by d5.executor, recipes' "
                        f"'executor', compare and infer. Received: {name!r}")
    key = name.strip().lower()
    key = FRAMEWORK_ALIASES.get(key, key)
    if key not in FRAMEWORKS:
        raise UserError(
            f"Unknown framework {name!r}. Known frameworks: {format_choices(FRAMEWORKS)} "
            f"(aliases: {format_choices(FRAMEWORK_ALIASES)}). Received: {name!r}"
        )
    return key


def _variant_entry(name: str) -> tuple[str, tuple[str, dict]]:
    """``(canonical spelling, (key, kwargs))`` of a ``FRAMEWORK:VARIANT`` spelling."""
    framework, _, variant = name.strip().partition(":")
    key = canonical_framework(framework)
    wanted = f"{key}:{variant.strip()}".lower()
    for spelling, entry in EXECUTOR_VARIANTS.items():
        if spelling.lower() == wanted:
            return spelling, entry
    known = [s for s in EXECUTOR_VARIANTS if s.startswith(key + ":")]
    raise UserError(f"Unknown executor variant {name!r}. Variants of {key}: "
                    f"{format_choices(known) if known else 'none'}; all variants: {format_choices(EXECUTOR_VARIANTS)} "
                    f"(or a plain framework name). Received: {name!r}")


def split_executor_spelling(name: str) -> tuple[str, dict]:
    """Split a framework or variant spelling into the framework key and its executor's keyword arguments.

    Args:
        name: a framework name or alias (``torch``, ``tf``), or ``FRAMEWORK:VARIANT`` from
            :data:`EXECUTOR_VARIANTS` (``torch:compile``, ``tf:xla``, ``onnxruntime:O0``).

    Returns:
        ``(key, kwargs)``: ``("torch", {"compile": True})``; ``(key, {})`` for a plain name. The
        dict is a fresh copy.

    Raises:
        UserError: an unknown framework or variant (the message lists the known variants).

    >>> split_executor_spelling("tf:xla")
    ('tensorflow', {'jit_compile': True})
    """
    if not isinstance(name, str):
        raise UserTypeError(f"A framework is named by a string, such as 'torch'. Received: {type(name).__name__}")
    if ":" not in name:
        return canonical_framework(name), {}
    _, (key, kwargs) = _variant_entry(name)
    return key, dict(kwargs)


def canonical_executor_spelling(name: str) -> str:
    """The canonical spelling of a framework or variant (``tf:XLA`` -> ``tensorflow:xla``, ``pytorch`` -> ``torch``).

    Raises:
        UserError: an unknown framework or variant.
    """
    if not isinstance(name, str):
        raise UserTypeError(f"A framework is named by a string, such as 'torch'. Received: {type(name).__name__}")
    if ":" not in name:
        return canonical_framework(name)
    return _variant_entry(name)[0]


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
        framework: ``reference``, ``torch`` (alias ``pytorch``), ``tensorflow``, ``onnxruntime``,
            ``jax``, or a variant spelling from :data:`EXECUTOR_VARIANTS` (``torch:compile``,
            ``tensorflow:xla``, ``onnxruntime:O0``), whose keyword arguments come first.
        device: ``None``/``"cpu"``, ``"gpu:N"`` or a :class:`~deep500lite.Device`.
        **kwargs: passed to the framework's ``from_model`` (they win over a variant's).

    Returns:
        A :class:`~deep500lite.GraphExecutor`.

    >>> import deep500lite as d5
    >>> ex = d5.executor(d5.load_model("model.onnx"), "reference")  # doctest: +SKIP
    """
    key, variant_kwargs = split_executor_spelling(framework)
    return import_framework(key).from_model(network, device=device, **{**variant_kwargs, **kwargs})


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
