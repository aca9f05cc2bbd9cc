"""The frameworks, discovered through the ``deep500lite.frameworks`` entry-point group.

Each installed distribution (deep500lite itself for the built-in frameworks, a plugin in
``plugins/`` for its own) registers one :class:`~deep500lite.frameworkspec.FrameworkSpec` per
framework in the group; the registry reads the group with :mod:`importlib.metadata` once and loads
the specs, which import nothing heavy. ``d5.executor(network, "torch")`` imports
``deep500lite.frameworks.torch`` (and so torch) only then. Core code asks specs what a framework can
do (:func:`frameworks_with`, :func:`spec`), never its name, and reaches a framework's role module
(its benchmark runners, say) with :meth:`FrameworkSpec.role` at run time.
"""

from __future__ import annotations

import functools
import importlib.metadata
import types
import warnings
from collections.abc import Mapping, Sequence

from deep500lite.errors import Deep500Error, UserError, UserTypeError, format_choices
from deep500lite.frameworkspec import CAPABILITIES, ROLES, FrameworkSpec

__all__ = [
    "ENTRY_POINT_GROUP",
    "FRAMEWORKS",
    "FRAMEWORK_ALIASES",
    "EXECUTOR_VARIANTS",
    "FrameworkSpec",
    "spec",
    "specs",
    "frameworks_with",
    "FrameworkNames",
    "spec_of",
    "baseline",
    "seed_frameworks",
    "broken_frameworks",
    "capability_table",
    "refresh",
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

#: The entry-point group frameworks register in (``[project.entry-points."deep500lite.frameworks"]``).
ENTRY_POINT_GROUP = "deep500lite.frameworks"


@functools.lru_cache(maxsize=None)
def _discover() -> tuple[dict, dict]:
    """``({name: spec}, {name: error})`` of the entry points, loaded once (see :func:`refresh`)."""
    found, broken = {}, {}
    for ep in _entry_points():
        where = f"{ep.value} (from {ep.dist.name if ep.dist else 'an unknown distribution'})"
        try:
            value = ep.load()
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not take the other frameworks down
            broken[ep.name] = f"{where}: {type(exc).__name__}: {exc}"
            continue
        if not isinstance(value, FrameworkSpec) or value.name != ep.name or ep.name in found:
            broken[ep.name] = (f"{where}: not a FrameworkSpec named {ep.name!r}, or a second one of that name. "
                               f"Received: {type(value).__name__}")
            continue
        found[ep.name] = value
    found = dict(sorted(found.items(), key=lambda item: (item[1].order, item[0])))
    for name, error in broken.items():
        warnings.warn(f"The framework {name!r} is registered but could not be loaded: {error}", RuntimeWarning,
                      stacklevel=3)
    if not found:
        raise Deep500Error(f"No framework is registered in the {ENTRY_POINT_GROUP!r} entry-point group: deep500lite's "
                           "installation metadata is missing or older than its entry points. Reinstall it: "
                           "pip install -e . (from a checkout) or pip install deep500lite. "
                           f"Received: {len(broken)} broken entries")
    return found, broken


def _entry_points() -> list:
    """The group's entry points, the first of each name along ``sys.path``.

    Every distribution's metadata is read, not only the first of each name that
    :func:`importlib.metadata.entry_points` keeps: a stale ``deep500lite.egg-info`` left in a
    source checkout (the current directory is on ``sys.path``) must not hide the installed
    distribution's entry points.
    """
    seen = {}
    for dist in importlib.metadata.distributions():
        for ep in dist.entry_points:
            if ep.group == ENTRY_POINT_GROUP and ep.name not in seen:
                seen[ep.name] = ep
    return [seen[name] for name in sorted(seen)]


def refresh() -> None:
    """Read the entry points again (after installing or removing a plugin in this process)."""
    _discover.cache_clear()


class _LiveMapping(Mapping):
    """A read-only mapping computed from the discovered specs on first use (so importing is free)."""

    def __init__(self, build):
        self._build = build

    def __getitem__(self, key):
        return self._build()[key]

    def __iter__(self):
        return iter(self._build())

    def __len__(self):
        return len(self._build())

    def __repr__(self):
        return repr(dict(self._build()))


def specs() -> dict[str, FrameworkSpec]:
    """Every registered framework's spec, by name."""
    return dict(_discover()[0])


def broken_frameworks() -> dict[str, str]:
    """Registered entry points that failed to load: name -> what went wrong."""
    return dict(_discover()[1])


#: name -> :class:`FrameworkSpec` of every registered framework.
FRAMEWORKS: Mapping[str, FrameworkSpec] = _LiveMapping(lambda: _discover()[0])
#: alias -> name (``pytorch`` -> ``torch``), from the specs' aliases.
FRAMEWORK_ALIASES: Mapping[str, str] = _LiveMapping(
    lambda: {alias: s.name for s in _discover()[0].values() for alias in s.aliases})
#: Executor variants, spelled ``FRAMEWORK:VARIANT`` (the CLI's ``--frameworks``, a recipe's
#: ``executor``, ``d5.executor``): spelling -> (framework key, keyword arguments of its executor),
#: from the specs' ``variants``. The framework part may be an alias (``tf:xla``); the variant part
#: is matched without regard to case.
EXECUTOR_VARIANTS: Mapping[str, tuple[str, dict]] = _LiveMapping(
    lambda: {f"{s.name}:{v}": (s.name, dict(kw)) for s in _discover()[0].values() for v, kw in s.variants.items()})


def spec(name: str) -> FrameworkSpec:
    """The spec of a framework name or alias.

    Raises:
        UserError: not a registered framework (the message lists them).
    """
    return FRAMEWORKS[canonical_framework(name)]


def frameworks_with(*, available: bool = False, **capabilities) -> list[str]:
    """Names of the frameworks whose spec has every capability asked for, in name order.

    A boolean capability must be true (``training=True``); a collection one must contain the value
    (``devices="gpu"``, ``bench="op"``, ``roles="zoo"``); anything else must be equal
    (``gradients="autodiff"``).

    Args:
        available: only the frameworks whose packages are installed.
        **capabilities: fields of :class:`FrameworkSpec`.

    >>> frameworks_with(training=True, devices="gpu")  # doctest: +SKIP
    ['jax', 'torch']
    """
    out = []
    for name, s in _discover()[0].items():
        ok = True
        for field, wanted in capabilities.items():
            have = getattr(s, field)
            if isinstance(have, bool):
                ok = have is bool(wanted)
            elif isinstance(have, (tuple, frozenset, set, list, Mapping)):
                ok = wanted in have
            else:
                ok = have == wanted
            if not ok:
                break
        if ok and (not available or s.is_available()):
            out.append(name)
    return out


class FrameworkNames(Sequence):
    """The names :func:`frameworks_with` returns for some capabilities, computed when first read.

    A module constant such as ``deep500lite.bench.op.OP_FRAMEWORKS`` is one, so that importing the
    module reads no entry point, and a plugin installed later is in it. It compares equal to a
    tuple of the same names.
    """

    def __init__(self, **capabilities):
        self._capabilities = capabilities

    def _names(self) -> tuple:
        return tuple(frameworks_with(**self._capabilities))

    def __getitem__(self, index):
        return self._names()[index]

    def __len__(self):
        return len(self._names())

    def __iter__(self):
        return iter(self._names())

    def __contains__(self, name):
        return name in self._names()

    def __eq__(self, other):
        return tuple(self) == tuple(other) if isinstance(other, Sequence) else NotImplemented

    def __hash__(self):
        return hash(self._names())

    def __repr__(self):
        return repr(self._names())


def baseline() -> FrameworkSpec:
    """The spec of the yardstick framework (``baseline=True``: the reference executor), whose
    optimizers run on every executor and whose outputs the others are compared with."""
    names = frameworks_with(baseline=True)
    if not names:
        raise UserError(f"No registered framework is the baseline (baseline=True). Registered: "
                        f"{format_choices(FRAMEWORKS)}. Received: none")
    return FRAMEWORKS[names[0]]


def spec_of(obj) -> FrameworkSpec | None:
    """The spec of the framework whose package defines ``obj``'s class (an executor, an optimizer), or None."""
    for s in _discover()[0].values():
        if s.owns(obj):
            return s
    return None


def seed_frameworks(seed: int) -> list[str]:
    """Seed every imported framework's global generators (:meth:`FrameworkSpec.seed`); returns their names."""
    return [name for name, s in _discover()[0].items() if s.seed(seed)]


def capability_table() -> tuple[list[str], list[list[str]]]:
    """``(headers, rows)``: one row per registered framework, its roles and capabilities, generated from
    the specs (``deep500lite list frameworks --capabilities``; docs/architecture.md shows it)."""
    headers = ["framework", "distribution"] + list(CAPABILITIES) + ["roles"]
    rows = []
    for name, s in _discover()[0].items():
        cells = [name + (f" ({', '.join(s.aliases)})" if s.aliases else ""), _distribution_of(name)]
        for field in CAPABILITIES:
            value = getattr(s, field)
            if isinstance(value, bool):
                cells.append("yes" if value else "-")
            elif isinstance(value, Mapping):
                cells.append(", ".join(value) or "-")
            elif isinstance(value, (tuple, frozenset)):
                cells.append(", ".join(sorted(value) if isinstance(value, frozenset) else value) or "-")
            else:
                cells.append(str(value))
        cells.append(", ".join(r for r in ROLES if r in s.roles))
        rows.append(cells)
    return headers, rows


def _distribution_of(name: str) -> str:
    for ep in _entry_points():
        if ep.name == name:
            return ep.dist.name if ep.dist else "?"
    return "?"


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
    """Whether the framework's packages are installed (checked without importing them)."""
    return spec(name).is_available()


def framework_version(name: str) -> str | None:
    """The installed version of the framework's package, or None."""
    return spec(name).version()


def import_framework(name: str) -> types.ModuleType:
    """Import the framework's package (``deep500lite.frameworks.<name>``, or a plugin's).

    Raises:
        UserError: unknown framework.
        FrameworkNotAvailableError: its package is not installed (the message names the install command).
    """
    return spec(name).load()


def framework_module(name: str, module: str | None = None) -> types.ModuleType:
    """Import one module of a framework package, such as ``deep500lite.frameworks.torch.bench``.

    For users and tests that name a framework; core code asks a spec for a role module instead
    (:meth:`FrameworkSpec.role`), at run time, so that importing the core imports no framework.

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
        framework: a registered framework (``reference``, ``torch`` (alias ``pytorch``), ``tensorflow``,
            ``onnxruntime``, ``jax``, or a plugin's), or a variant spelling from :data:`EXECUTOR_VARIANTS` (``torch:compile``,
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
        if not FRAMEWORKS[key].inference or not is_framework_available(key):
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
